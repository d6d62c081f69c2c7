/* kl_model_int.h - private to coordinator/models: what the graph parser
 * hands to task extraction beyond the read-only graph of kl_graph.h. */
#ifndef KL_MODEL_INT_H
#define KL_MODEL_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_model.h"

#include "kl_graph.h"

/* The float op a q-op has the shapes of (op itself for the others). */
kl_mop kl_mop_base(kl_mop op);
/* The one node that reads node i, or -1 (none, several, or an output). */
int kl_mgraph_sole_reader(const kl_mgraph_t *g, int i);
/* Whether node i is a dequantize (not fused) of u8 / s8 codes. */
bool kl_mgraph_code_deq(const kl_mgraph_t *g, int i);
/* Max pool i as a pool over codes: a dequantize of u8 / s8 codes into it,
 * and one quantize with the same scale, zero point and type alone reading
 * it; returns that quantize, or -1 (also when the environment has
 * KILN_EXPORT_NO_QFUSE). */
int kl_mgraph_code_pool(const kl_mgraph_t *g, int i);

/* kl_model_dims.c, the input dimensions of kl_model_opts_t: whether
 * opts' batch and seq are valid (KL_ERR_INVAL "SRC: --batch -1: ..."),
 * and opts applied to the n dims d of input `name` (written `shape` in
 * its model, for the error; `where` is "SRC" or "SRC:LINE"). NULL opts
 * change nothing. */
int kl_model_dims_check(const kl_model_opts_t *opts, const char *src,
                        char *err);
int kl_model_dims_apply(const kl_model_opts_t *opts, const char *where,
                        const char *name, const char *shape, int64_t *d, int n,
                        char *err);

/* kl_model_params.c: the values layer nd's weight and bias need (0: it
 * has none; a q-op's are s8 and s32), and whether ps holds exactly the
 * parameters text's layers need, with their sizes and types
 * (KL_ERR_INTERNAL naming the first that differs: the import's text and
 * parameters must agree). */
void kl_model_param_sizes(const kl_mgraph_t *g, const kl_mnode_t *nd,
                          int64_t *w, int64_t *b);
int kl_model_params_check(const char *text, const char *src,
                          const kl_model_params_t *ps, char *err);

/* Generated at build time from graphs/ (embed_graphs.py). */
typedef struct {
    const char *name;
    const char *text;
} kl_model_builtin_t;
extern const kl_model_builtin_t kl_model_builtins[];

#endif
