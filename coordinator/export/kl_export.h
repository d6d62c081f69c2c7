/* kl_export.h - use the results: the best record of a workload on a target,
 * replayed to source, and whole models exported as one shared library
 * (docs/cli.md, "kiln export" and "kiln run").
 *
 * Records are keyed by (workload key, exact target string). A user's "cpu"
 * means this machine's exact CPU target (kl_cpu_target); a record of any
 * other target string is never used, even when it is faster.
 *
 * A model export writes into one directory:
 *   task_NN.c            the kernel of task NN, entry kiln_task_NN (one
 *                        translation unit each, so kernels link together),
 *                        and kiln_task_NN_prepare when it lays its
 *                        constant inputs out once (kl_abi.h);
 *                        task_NN.cu for CUDA targets
 *   kiln_model.c / .h    the layer graph (CPU targets): every layer in
 *                        graph order, each computing layer calling its
 *                        task's kernel with its own weights; quantized
 *                        graphs (ONNX QDQ) keep u8 / s8 / s32 tensors
 *                        between layers, and their quantize / dequantize
 *                        layers are C of kiln_model.c (docs/cli.md,
 *                        "Quantized models")
 *   kiln_model.weights   (CPU targets) the value of every parameter that
 *                        is not an input: the model's own (kl_model_params)
 *                        when it has them, else seeded random ones
 *                        (KL_EXPORT_WEIGHT_SEED); raw little-endian in
 *                        each parameter's type (f32; a q-op's weight s8,
 *                        its bias s32), in parameter order, each at a
 *                        multiple of 64 bytes (kiln_model.c's s_offset
 *                        says where, in bytes)
 *   kiln_weights.S       embeds kiln_model.weights (.incbin, absolute
 *                        path) into the library, which never reads the
 *                        file at run time
 *   libkiln_model.so     (CPU targets) built with the system cc, -O3
 *                        -march=native -fopenmp -shared -fPIC
 *   manifest.json        per task: workload, key, record (with its
 *                        measurement condition), latency, launch,
 *                        "prepare" (true when the kernel has a prepare
 *                        step)
 * The model's API is documented in the generated kiln_model.h: besides
 * kiln_model_run(params, output), the embedded weights
 * (kiln_model_param_data, kiln_model_trained), kiln_model_infer(input,
 * output) and kiln_model_infer_n on them, the shapes, and the layers
 * (kiln_model_nlayers, _layer_name, _layer_task) with
 * kiln_model_run_profiled, which times each layer.
 */
#ifndef KL_EXPORT_H
#define KL_EXPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln.pb-c.h"
#include "kl_codegen.h"
#include "kl_ir.h"
#include "kl_model.h"
#include "kl_store.h"
#include "kl_target.h" /* kl_cpu_target, kl_target_kind_of */

/* The target a user means (kl_target_resolve): "cpu" is kl_cpu_target(),
 * anything else is itself. Static or borrowed string. */
const char *kl_export_target(const char *user_target);

/* The best valid record (kl_record_valid: measured, verified, not
 * simulated) of w on exactly `target` (after kl_export_target) among the
 * records of measurement condition cond (kl_record.h: warm and cold never
 * compete). KL_ERR_NOTFOUND with a message naming the workload, its key,
 * the condition and the target, and saying what the store holds for it
 * instead (records on other targets, of the other condition, simulated,
 * unverified or failed ones); KL_ERR_INVAL for a simulated target
 * ("sim/..."). On success *out is the caller's
 * (kiln__tuning_record__free_unpacked). */
int kl_export_best(kl_store_t *store, const kl_workload_t *w,
                   const char *target, kl_cond_t cond, Kiln__TuningRecord **out,
                   char *err);

/* Replays rec's trace for w on rec's target into source with function
 * name `entry`: C for CPU targets, CUDA for cuda/ targets (with launch
 * dimensions), through kl_codegen_replay_proto (kl_codegen.h), as the
 * tuner replays it. A record of another workload is KL_ERR_INVAL; a trace
 * that does not replay is the replay's error, naming the step. *out is the
 * caller's (kl_kernel_free). */
int kl_export_replay(const kl_workload_t *w, const Kiln__TuningRecord *rec,
                     const char *entry, kl_kernel_t *out, char *err);

/* ---- whole models ------------------------------------------------------ */

/* The random weights of a model without its own (built-ins, graph files):
 * uniform in [-SCALE, SCALE), kl_rng seeded with SEED, drawn parameter
 * after parameter in parameter order. */
#define KL_EXPORT_WEIGHT_SEED 1
#define KL_EXPORT_WEIGHT_SCALE 0.1

typedef struct {
    const char *model;  /* built-in, graph file or ONNX model (kl_model_load) */
    const char *target; /* user target ("cpu" allowed) */
    /* The records' condition: warm (0), cold, or auto, each task's own
     * (kl_model_task_cold). */
    kl_model_cond_t cond;
    const char *out_dir;
    bool fallback_naive; /* reference kernels where a record is missing */
    bool build;          /* build libkiln_model.so (CPU targets) */
    const char *cc;      /* compiler; NULL: $CC, else "cc" */
    /* The model's precision (kl_model.h, "Precision"): KL_DT_F32 (0, the
     * default) or KL_DT_BF16, whose conv2d / dense / matmul /
     * batch_matmul layers run their in=bf16 tasks' records; their kernels
     * take f32 buffers (weights stay f32 in kiln_model.weights, converted
     * by the kernel's prepare step), so the library's interface is the
     * f32 one. CPU targets only; the manifest says "precision": "bf16". */
    kl_dtype precision;
    /* The model's inputs resized (kl_model_opts_t: batch replaces dim 0
     * of every input, seq dim 1 of every 2-D or 3-D one); 0 keeps the
     * model's own. The manifest says "batch" / "seq" when set. */
    int64_t batch, seq;
} kl_export_cfg_t;

typedef struct {
    int ntasks;
    int nmissing;   /* tasks without a record (fallback used when set) */
    char **missing; /* one line per missing task: "N NAME (workload)" */
    double tuned_s; /* sum over tasks of weight * record latency */
    int ncold;      /* tasks whose records were picked cold */
    int nprepare;   /* tasks whose kernel has a prepare step (kl_abi.h) */
    char *lib_path; /* the library when built, else NULL */
    char *model;    /* the model's name */
    /* CPU targets: whether the weights are the model's own (else seeded
     * random), and how many parameters kl_model_params gave. */
    bool trained;
    int nmodel_params;
    /* The model could not be read or parsed (a usage error of the
     * caller's: kiln export exits 2). */
    bool bad_model;
} kl_export_result_t;

void kl_export_result_free(kl_export_result_t *r);

/* Exports a model (see the top of this file). On CPU targets the weights
 * come from kl_model_params(cfg->model) when it gives any: every
 * parameter of the graph that is not an input must be there (else
 * KL_ERR_INTERNAL naming it; a size mismatch names both sizes). Every task
 * needs a valid record of its condition (cfg->cond) on the exact
 * target (a simulated target is KL_ERR_INVAL): when some have none and
 * fallback_naive is off, nothing is written, res->missing lists each of them
 * and the error is KL_ERR_NOTFOUND naming them all. With fallback_naive, those
 * tasks get their reference kernel and res->missing still lists them (the
 * caller warns); reference kernels are C, so on a CUDA target the fallback does
 * not apply and missing tasks stay an error. A compiler failure is
 * KL_ERR_COMPILE with the log's tail. res is the caller's
 * (kl_export_result_free). */
int kl_export_model(kl_store_t *store, const kl_export_cfg_t *cfg,
                    kl_export_result_t *res, char *err);

/* Writes the naive build of a model into dir (every task's reference
 * kernel, the same graph code, the same weights as kl_export_model) and
 * builds dir/libkiln_model.so; `kiln run` checks an export against it. cc
 * as in kl_export_cfg_t. */
int kl_export_naive(const char *model, const char *dir, const char *cc,
                    char *err);
/* kl_export_naive of the model resized by dims' batch and seq
 * (kl_model_opts_t; NULL: as it is). The naive build is f32 whatever
 * dims->prec says. */
int kl_export_naive_opts(const char *model, const kl_model_opts_t *dims,
                         const char *dir, const char *cc, char *err);

/* ---- the generated graph code (export_graph.c) ------------------------- */

/* Writes task_NN.c, kiln_model.c, kiln_model.h, kiln_model.weights and
 * kiln_weights.S of model text `text` (source names it in errors) into
 * dir, with the given C kernels (in kl_model task order, entries
 * kiln_task_NN), and builds libkiln_model.so when build is set. The
 * weights are params' when it holds any (each parameter that is not an
 * input found by name, else KL_ERR_INTERNAL naming it; the sizes must
 * agree, else KL_ERR_INTERNAL naming both), else seeded random
 * (KL_EXPORT_WEIGHT_SEED); params may be NULL. A kernel with `prepare` defines
 * kiln_task_NN_prepare (kl_abi.h): every layer of its task keeps a block of its
 * own, prepared from its weight and bias (which must be parameters of the
 * model, else KL_ERR_INTERNAL) and passed after its tensors (kiln_model.h,
 * "Constant inputs"). amx: a kernel uses the CPU's AMX tiles (its record's
 * target has "+amx"): the library asks Linux for the tile state before
 * its first prepare step and refuses to run without it (kiln_model.h,
 * "AMX", written only then, with kiln_model_amx_error). */
int kl_export_write_graph(const char *text, const char *source,
                          const kl_model_t *m, const kl_kernel_t *kernels,
                          bool amx, const kl_model_params_t *params,
                          const char *dir, bool build, const char *cc,
                          char *err);

/* Compiles sources (paths) into the shared library `lib` with cc -O3
 * -march=native -fopenmp -shared -fPIC -Wl,-z,nodelete (dlclose leaves it
 * mapped: OpenMP's idle threads outlive it), spawned without a shell; the
 * compiler's output goes to lib + ".log". KL_ERR_COMPILE with the log's
 * tail when it fails. */
int kl_export_cc(const char *cc, char *const *srcs, int n, const char *lib,
                 char *err);

/* ---- oneDNN baseline (export_dnnl.c) ---------------------------------- */

/* The model's layer graph (fused as kiln fuses it) built from oneDNN's C
 * API primitives, as a framework user of oneDNN builds it, with the
 * parameters of kiln_model_run (same order, same plain layouts; the net
 * keeps the pointers, which must outlive it):
 * - convolutions, pooling and inner products choose their layouts
 *   (dnnl_format_tag_any) and pass them on; eltwise, binary add and
 *   pooling take their producer's. A reorder runs only at the graph's
 *   input, at its output (back to plain), and between two layers whose
 *   layouts differ (a flatten, reshape or transpose of a blocked tensor,
 *   softmax and layer_norm read plain tensors).
 * - convolutions use dnnl_convolution_auto;
 * - a fused residual add is a sum post-op: the convolution writes into the
 *   residual's buffer when it is the residual's last reader (and the
 *   residual is no graph input or output), else one copy of the residual
 *   per run, or one reorder when the residual's layout is not the one the
 *   convolution chose for its output;
 * - weights are reordered once, here, into the layout each primitive
 *   chose.
 * KL_ERR_UNSUPPORTED when kiln was built without libdnnl or when oneDNN
 * cannot express a layer (the message names every such layer); graph
 * errors as kl_model_load. *net is the caller's (kl_export_dnnl_close). */
typedef struct kl_dnnl_net_s kl_dnnl_net_t;
int kl_export_dnnl_open(const char *model, float *const *params, int nparams,
                        kl_dnnl_net_t **net, char *err);
/* kl_export_dnnl_open of the model resized by dims' batch and seq
 * (kl_model_opts_t; NULL: as it is; the net is f32). */
int kl_export_dnnl_open_opts(const char *model, const kl_model_opts_t *dims,
                             float *const *params, int nparams,
                             kl_dnnl_net_t **net, char *err);

/* The number of floats of the net's output (the graph's first output). */
long long kl_export_dnnl_numel(const kl_dnnl_net_t *net);

/* One run of the net into out (plain layout, kl_export_dnnl_numel floats).
 * KL_ERR_RUNTIME naming the primitive that failed. */
int kl_export_dnnl_run(kl_dnnl_net_t *net, float *out, char *err);

/* One run of the net, checked against `expect` (the reference output,
 * numel floats): KL_ERR_RUNTIME naming the element with the largest
 * difference and both values when that difference exceeds rtol times the
 * reference's largest magnitude (KL_ERR_INVAL when numel is not the net's).
 * *rel (may be NULL) is the largest difference relative to that magnitude. */
int kl_export_dnnl_check(kl_dnnl_net_t *net, const float *expect,
                         long long numel, double rtol, double *rel, char *err);

/* Prints one line per primitive that runs, in order: each layer's kind,
 * oneDNN implementation (dnnl_query_impl_info_str) and source and
 * destination layouts (oneDNN's notation: "aBcd16b"), and how its residual
 * sum gets its operand; each reorder with its reason ("input", "between
 * layers", "output", "residual copy", "residual reorder"); then one line
 * of totals. */
void kl_export_dnnl_describe(const kl_dnnl_net_t *net, FILE *f);

void kl_export_dnnl_close(kl_dnnl_net_t *net);

#endif
