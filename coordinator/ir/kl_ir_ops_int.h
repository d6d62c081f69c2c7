/* kl_ir_ops_int.h - private to the named operators (kl_ir_spec.c,
 * kl_ir_ops.c, kl_ir_ops_conv.c): the parsed "op K=V ..." spec, the
 * readers of its parameters and the text pieces the builders share. Each
 * reader marks what it reads used; kl_ir__spec_finish refuses a parameter
 * nobody read. Errors go to s->err, prefixed with the op's name. */
#ifndef KL_IR_OPS_INT_H
#define KL_IR_OPS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_ir_int.h"
#include "kl_util.h"

#define KL_IR__MAX_KV 24

typedef struct {
    char key[32];
    char val[64];
    bool used;
} kl_ir__kv_t;

typedef struct {
    char op[KL_IR_MAX_NAME];
    kl_ir__kv_t kv[KL_IR__MAX_KV];
    int n;
    char *err;
} kl_ir__spec_t;

/* The activation of a layer's epilogue: relu=1, or clip=LO,HI (a clamp
 * to [LO, HI], as ReLU6 is clip=0,6), or act=NAME (a kl_act; with
 * hard_sigmoid its alpha= and beta=); at most one of them. */
typedef struct {
    int64_t relu;
    bool clip;
    double lo, hi;
    bool smooth; /* act= */
    kl_act act;
    double alpha, beta; /* hard_sigmoid */
} kl_ir__act_t;

/* The quantization of a q-op (kl_ir.h, "Integer workloads"): activation
 * zero point za, output zero point zo, output dtype, scale per channel
 * (a const f32 tensor `scale`) or per tensor (a number), and the
 * activation as integer bounds on the quantized output. */
typedef struct {
    bool on; /* a q-op */
    int64_t za, zo;
    kl_dtype out;
    bool per_channel;
    double scale;
} kl_ir__quant_t;

/* A named operator's builder: the workload of spec s, or an error. */
typedef int kl_ir__build_fn(kl_ir__spec_t *s, kl_workload_t **out);

/* Splits "op K=V K=V ..." into s. */
int kl_ir__spec_split(const char *spec, kl_ir__spec_t *s);
/* Parameter key (marked used), or NULL. */
kl_ir__kv_t *kl_ir__spec_find(kl_ir__spec_t *s, const char *key);
/* Integer parameter key in min..2^40; def < 0 means required. */
int kl_ir__spec_int(kl_ir__spec_t *s, const char *key, int64_t def, int64_t min,
                    int64_t *out);
/* A 0 / 1 parameter. */
int kl_ir__spec_flag(kl_ir__spec_t *s, const char *key, int64_t def,
                     int64_t *out);
/* Required number parameter key (a finite double). */
int kl_ir__spec_num(kl_ir__spec_t *s, const char *key, double *out);
/* relu=, clip= and act= (alpha=, beta=) into a. */
int kl_ir__spec_act(kl_ir__spec_t *s, kl_ir__act_t *a);
/* in=f32|f16|bf16 (default f32). */
int kl_ir__spec_in_dtype(kl_ir__spec_t *s, const char **out);
/* A q-op's za=, zo=, out=, scale= (and act's bounds checked as codes). */
int kl_ir__spec_quant(kl_ir__spec_t *s, kl_ir__quant_t *q,
                      const kl_ir__act_t *act);
/* Refuses unused parameters, parses text (taken) and names the result
 * kind / name (taken). */
int kl_ir__spec_finish(kl_ir__spec_t *s, char *text, const char *kind,
                       char *name, kl_workload_t **out);
/* Output extent of a window of k (dilation dil) over in (padded by pad on
 * both sides) at stride; an error naming `what` when it does not fit. */
int kl_ir__spec_outsize(kl_ir__spec_t *s, const char *what, int64_t in,
                        int64_t k, int64_t stride, int64_t pad, int64_t dil,
                        int64_t *out);

/* Shortest of %.15g / %.17g that reads back to the same double. */
void kl_ir__num_text(char out[40], double v);
/* The activation's epilogue text (" | relu", " | clip(0, 6)" or ""). */
void kl_ir__act_epilogue(kl_buf_t *b, const kl_ir__act_t *a);
/* The activation's part of a name ("_relu", "_clip0_6" or ""). */
void kl_ir__act_name(kl_buf_t *b, const kl_ir__act_t *a);
/* "y*2+r*1-3": the input row read by output row it and kernel row kt;
 * heap string. */
char *kl_ir__window(const char *it, int64_t stride, const char *kt, int64_t dil,
                    int64_t pad);
/* "(X[idx] - za)" or "X[idx]". */
void kl_ir__qinput(kl_buf_t *b, const kl_ir__quant_t *q, const char *access);
/* Epilogue of a q-op: [+ bias[ch]], requant, the activation as bounds. */
void kl_ir__qepilogue(kl_buf_t *b, const kl_ir__quant_t *q,
                      const kl_ir__act_t *act, bool bias, const char *ch);
/* The declarations after X and W: bias, scale and the output. */
void kl_ir__qdecls(kl_buf_t *b, const kl_ir__quant_t *q, bool bias, int64_t O,
                   const char *yname, const char *yshape);
/* The quantization's part of a name ("_za3_zo5_s8"). */
void kl_ir__qname(kl_buf_t *b, const kl_ir__quant_t *q);

/* kl_ir_ops_conv.c: conv2d / qconv2d, depthwise_conv2d /
 * qdepthwise_conv2d, conv2d_transpose. */
int kl_ir__conv2d(kl_ir__spec_t *s, kl_workload_t **out);
int kl_ir__depthwise(kl_ir__spec_t *s, kl_workload_t **out);
int kl_ir__conv2d_transpose(kl_ir__spec_t *s, kl_workload_t **out);

#endif
