/* bench_membound - how close an exported model's memory-bound layers come
 * to the machine's memory bandwidth.
 *
 * Reads DIR/manifest.json of a `kiln export` (every task's workload text,
 * its C file and entry) and, for each task whose arithmetic intensity is
 * below --max-intensity FLOP per byte (default 8: 1x1 convolutions over
 * few channels, depthwise convolutions, pools, small-C stems), compiles
 * its kernel as the agent does (cc -O3 -march=native -fopenmp), prepares
 * its constant inputs once (outside the timing) and times it against the
 * baseline this benchmark names: a copy of the same bytes, made by the
 * same threads (OpenMP, OMP_NUM_THREADS), reading as many bytes as the
 * layer's inputs hold (activations and weights) and writing as many as
 * its output holds, in one parallel region (a vectorized read stream and
 * a vectorized write stream over buffers of those sizes). Both are timed warm
 * (back to back after a warm-up: the working set of an inference, which the
 * previous layer left in the caches) and cold (caches flushed before every
 * sample), interleaved, --rounds samples each; printed per task: the medians,
 * the layer's bytes, its effective GB/s, the copy's GB/s and the ratio copy /
 * kernel (1.0: the layer moves its bytes as fast as a copy; it may exceed 1
 * when the copy's extra read of the output line costs more than the kernel's
 * compute). Then the medians of that ratio over the tasks, weighted by each
 * task's weight (layers of the model).
 *
 * Usage: bench_membound --lib-dir DIR [--max-intensity F] [--rounds N]
 *                       [--workdir DIR]
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tune_util.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_util.h"

static void s_die(const char *what, const char *why)
{
    fprintf(stderr, "bench_membound: %s: %s\n", what, why);
    exit(2);
}

/* Compiles DIR/file into workdir and returns entry and its prepare step. */
static bt_kernel_t s_load(const char *dir, const char *file, const char *entry,
                          const char *workdir)
{
    char *c = kl_xasprintf("%s/%s", dir, file);
    bt_kernel_t k = bt_load_entry(c, workdir, entry);
    free(c);
    return k;
}

typedef struct {
    bt_kernel_t k;
    void **args;
} kctx_t;

static void s_run_kernel(void *p)
{
    kctx_t *c = p;
    c->k.fn(c->args);
}

/* The copy baseline, compiled like the kernels (the same flags, the same
 * OpenMP runtime): the threads read nin floats (their bits OR-ed, which
 * vectorizes, unlike a float sum without -ffast-math) and write nout, each
 * thread its share of both, in one parallel region. */
static const char s_copy_src[] =
    "#include <stddef.h>\n"
    "#include <stdint.h>\n"
    "void kl_copy(void *const *args)\n"
    "{\n"
    "    const uint32_t *in = args[0];\n"
    "    float *out = args[1];\n"
    "    const size_t *n = args[2];\n"
    "    size_t nin = n[0], nout = n[1];\n"
    "    uint32_t acc = 0;\n"
    "    #pragma omp parallel reduction(|:acc)\n"
    "    {\n"
    "        #pragma omp for schedule(static) nowait\n"
    "        for (size_t i = 0; i < nin; i++)\n"
    "            acc |= in[i];\n"
    "        #pragma omp for schedule(static)\n"
    "        for (size_t i = 0; i < nout; i++)\n"
    "            out[i] = (float)i;\n"
    "    }\n"
    "    out[0] = (float)(acc & 1u);\n"
    "}\n";

static double s_num(json_object *o, const char *key)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_double(v)
                                                 : 0.0;
}

static const char *s_str(json_object *o, const char *key)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v)
                                                 : NULL;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *workdir = "/tmp/kiln-bench-membound";
    double max_int = 8.0;
    int rounds = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--lib-dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--max-intensity") && i + 1 < argc)
            max_int = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workdir") && i + 1 < argc)
            workdir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_membound --lib-dir DIR "
                            "[--max-intensity F] [--rounds N] [--workdir "
                            "DIR]\n");
            return 2;
        }
    }
    if (!dir || rounds < 3 || !(max_int > 0)) {
        fprintf(stderr, "bench_membound: --lib-dir DIR is required (rounds "
                        ">= 3, intensity > 0)\n");
        return 2;
    }
    char err[KL_ERRMSG_LEN];
    if (kl_mkdirs(workdir, err))
        s_die(workdir, err);
    char *cpath = kl_xasprintf("%s/kl_copy.c", workdir);
    FILE *cf = fopen(cpath, "w");
    if (!cf || fputs(s_copy_src, cf) < 0 || fclose(cf))
        s_die(cpath, "cannot write");
    bt_kernel_t copy = s_load(workdir, "kl_copy.c", "kl_copy", workdir);
    free(cpath);
    char *mp = kl_xasprintf("%s/manifest.json", dir);
    json_object *m = json_object_from_file(mp), *tasks = NULL;
    if (!m || !json_object_object_get_ex(m, "tasks", &tasks))
        s_die(mp, "not a kiln export manifest (no tasks)");
    const char *th = getenv("OMP_NUM_THREADS");
    printf("# bench_membound %s: tasks below %.3g FLOP/byte, "
           "OMP_NUM_THREADS %s, %d rounds each side\n",
           dir, max_int, th ? th : "(unset)", rounds);
    bt_print_load();
    printf("%-48s %6s %9s %9s %8s %8s %7s %9s %9s %7s\n", "task (weight)",
           "F/B", "MB", "warm us", "GB/s", "copy", "ratio", "cold us", "copy",
           "ratio");
    size_t nt = json_object_array_length(tasks), nr = 0;
    double *rw = kl_xcalloc(nt * 64 + 1, sizeof(double));
    double *rc = kl_xcalloc(nt * 64 + 1, sizeof(double));
    for (size_t i = 0; i < nt; i++) {
        json_object *t = json_object_array_get_idx(tasks, i);
        const char *wt = s_str(t, "workload"), *file = s_str(t, "file"),
                   *entry = s_str(t, "entry"), *name = s_str(t, "name");
        int weight = (int)s_num(t, "weight");
        kl_workload_t *w = NULL;
        if (!wt || !file || !entry || kl_workload_from_op(wt, &w, err))
            continue; /* a general layer without a named op: none */
        size_t bin = 0, bout = 0;
        for (int k = 0; k < w->ntensors; k++) {
            size_t b = (size_t)kl_tensor_numel(&w->tensors[k]) * 4;
            if (k == kl_workload_output(w))
                bout += b;
            else
                bin += b;
        }
        double fpb = w->flop / (double)(bin + bout);
        if (fpb >= max_int) {
            kl_workload_free(&w);
            continue;
        }
        kctx_t kc = {.k = s_load(dir, file, entry, workdir)};
        float **bufs = bt_alloc_bufs(w, 1);
        kc.args = bt_kernel_args(&kc.k, w, bufs);
        size_t cn[2] = {bin / 4, bout / 4};
        float *cin = kl_xcalloc(cn[0] + 1, sizeof(float));
        float *cout = kl_xcalloc(cn[1] + 1, sizeof(float));
        void *cargs[3] = {cin, cout, cn};
        kctx_t cp = {.k = copy, .args = cargs};
        bt_stat_t kw, cw, kcold, ccold;
        bt_set_flush(false);
        bt_interleave(s_run_kernel, &kc, s_run_kernel, &cp, rounds, &kw, &cw);
        bt_set_flush(true);
        bt_interleave(s_run_kernel, &kc, s_run_kernel, &cp, rounds, &kcold,
                      &ccold);
        double mb = (double)(bin + bout) / 1e6;
        char label[64];
        snprintf(label, sizeof label, "%.40s (%d)", name ? name : wt, weight);
        printf("%-48s %6.2f %9.2f %9.1f %8.1f %8.1f %7.3f %9.1f %9.1f %7.3f\n",
               label, fpb, mb, kw.med * 1e6, mb / 1e3 / kw.med,
               mb / 1e3 / cw.med, cw.med / kw.med, kcold.med * 1e6,
               ccold.med * 1e6, ccold.med / kcold.med);
        for (int k = 0; k < weight && nr < nt * 64; k++, nr++) {
            rw[nr] = cw.med / kw.med;
            rc[nr] = ccold.med / kcold.med;
        }
        bt_args_free(w, kc.args);
        bt_free_bufs(w, bufs);
        free(cin);
        free(cout);
        kl_workload_free(&w);
    }
    if (nr) {
        qsort(rw, nr, sizeof(double), s_cmp);
        qsort(rc, nr, sizeof(double), s_cmp);
        printf("copy / kernel over %zu layers (weighted): warm median %.3f "
               "(p10 %.3f .. p90 %.3f), cold median %.3f (p10 %.3f .. p90 "
               "%.3f)\n",
               nr, rw[nr / 2], rw[nr / 10], rw[nr * 9 / 10], rc[nr / 2],
               rc[nr / 10], rc[nr * 9 / 10]);
    } else {
        printf("no task below %.3g FLOP/byte\n", max_int);
    }
    free(rw);
    free(rc);
    json_object_put(m);
    free(mp);
    return 0;
}
