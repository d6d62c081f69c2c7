/* export_int.h - shared between the files of coordinator/export. */
#ifndef KL_EXPORT_INT_H
#define KL_EXPORT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_ir.h"
#include "kl_model_int.h"

/* The perm= of transpose layer nd, read again from its line of the graph
 * text (the parsed graph keeps only the output shape). */
int kl_export_perm(const char *text, const kl_mnode_t *nd, int *perm,
                   char *err);

/* A parameter of an exported model: a graph input, or a layer's weight,
 * bias or requant scale (whose values go into kiln_model.weights). */
typedef struct {
    char *name;
    int64_t numel;
    int ndim;
    int64_t shape[KL_IR_MAX_DIMS];
    bool input;
    kl_dtype dt;    /* f32; a q-op's weight s8, its bias s32 */
    int64_t offset; /* bytes into the weights; -1 for an input */
} kl_export_param_t;

/* The C type of an element of dt ("float", "uint8_t", "int8_t",
 * "int32_t"). */
const char *kl_export_ctype(kl_dtype dt);

/* Lays the weights out (each at a multiple of 64 bytes, setting every
 * non-input's offset) and checks the model's own parameters ps, when it
 * has any (*trained), against the graph's: each found by name, with the
 * same count and element type (else KL_ERR_INTERNAL naming it). */
int kl_export_weights_plan(kl_export_param_t *params, int n,
                           const kl_model_params_t *ps, const char *src,
                           bool *trained, char *err);

/* Writes DIR/kiln_model.weights (the model's own values when trained,
 * else seeded random ones, kiln_model.h "Weights") and DIR/kiln_weights.S,
 * whose path is appended to *paths. */
int kl_export_weights_write(const kl_export_param_t *params, int n,
                            const kl_model_params_t *ps, bool trained,
                            const char *dir, char ***paths, int *np, char *err);

#endif
