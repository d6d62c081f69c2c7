/* export_int.h - shared between the files of coordinator/export. */
#ifndef KL_EXPORT_INT_H
#define KL_EXPORT_INT_H

#include "kl_model_int.h"

/* Fuses relu and residual adds into their producers exactly as task
 * extraction does (kl_model.h): sets uses, owner, fused, relu, res and
 * res_from of g's nodes. */
void kl_export_fuse(kl_mgraph_t *g);

/* The perm= of transpose layer nd, read again from its line of the graph
 * text (the parsed graph keeps only the output shape). */
int kl_export_perm(const char *text, const kl_mnode_t *nd, int *perm,
                   char *err);

#endif
