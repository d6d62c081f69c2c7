/* cg_int.h - what the integer reference C (codegen_int.c) shares with the
 * tensorized generators (codegen_tensorize*.c), which run the same
 * epilogue. Not part of the public contract. */
#ifndef CG_INT_H
#define CG_INT_H

#include "kl_codegen.h"
#include "kl_util.h"

/* The integer prelude (kl_requant, kl_clampi...) every integer kernel
 * starts with. */
const char *kl_codegen__int_prelude(void);
/* The epilogue + saturating store of the int64_t x at the point named by
 * the variables i<iterator>, each line at indentation ind; 0, or an error
 * into err. */
int kl_codegen__int_epilogue(kl_buf_t *b, const kl_workload_t *w, char *ind,
                             char *err);

#endif
