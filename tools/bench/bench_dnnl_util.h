/* bench_dnnl_util.h - what the benchmarks against oneDNN share
 * (bench_int8.c, bench_int8_conv.c, bench_tune_conv2d.c): checked oneDNN
 * calls, a kernel and a oneDNN primitive as the two sides of
 * bt_interleave, inputs reordered once into the layouts a primitive
 * prefers, its output reordered back, and typed int8 buffers. */
#ifndef BENCH_DNNL_UTIL_H
#define BENCH_DNNL_UTIL_H

#include <dnnl.h>
#include <stdint.h>

#include "bench_tune_util.h"
#include "kl_ir.h"

/* The program's name in bd_check's messages; set it first in main. */
extern const char *bd_prog;

/* Exits (status 1) saying "PROG: CALL failed (oneDNN status N)" when st
 * is not dnnl_success. */
void bd_check(dnnl_status_t st, const char *call);
#define BD_CK(x) bd_check((x), #x)

/* A kiln kernel and its args (bt_kernel_args): one side of
 * bt_interleave, run by bd_kiln. */
typedef struct {
    bt_kernel_t k;
    void **args; /* the tensors, then the prepared block */
} bd_kctx_t;
void bd_kiln(void *ctx);

/* A oneDNN primitive with its 3 args (src, weights, dst): the other side,
 * run by bd_dnnl (execute, wait). dst is in the primitive's layout and
 * user_dst the user's buffer (bd_output) when the two differ; impl is the
 * implementation's name. */
typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[3];
    dnnl_memory_t dst, user_dst;
    const char *impl;
} bd_ctx_t;
void bd_dnnl(void *ctx);

/* A memory in the layout pd wants for `what`, filled from the user's
 * plain buffer (nd dims, type dt, format tag) through a reorder, once. */
dnnl_memory_t bd_prep(bd_ctx_t *d, const_dnnl_primitive_desc_t pd,
                      dnnl_query_t what, int nd, const dnnl_dims_t dims,
                      dnnl_data_type_t dt, dnnl_format_tag_t tag, void *user);

/* d's dst reordered into user_dst. */
void bd_output(bd_ctx_t *d);

/* Typed buffers of w (u8 x s8 -> s32): u8 / s8 inputs random from seed,
 * the output zeroed. */
void **bd_int8_bufs(const kl_workload_t *w, uint64_t seed);

#endif
