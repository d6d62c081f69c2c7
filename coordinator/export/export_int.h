/* export_int.h - shared between the files of coordinator/export. */
#ifndef KL_EXPORT_INT_H
#define KL_EXPORT_INT_H

#include "kl_model_int.h"

/* The perm= of transpose layer nd, read again from its line of the graph
 * text (the parsed graph keeps only the output shape). */
int kl_export_perm(const char *text, const kl_mnode_t *nd, int *perm,
                   char *err);

#endif
