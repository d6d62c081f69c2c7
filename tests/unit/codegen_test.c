/* Unit tests of the C code generator: reference kernels and random CPU
 * schedules of every named operator are compiled with the real compiler,
 * run, and compared with the interpreter (kl_check.h).
 *
 * `codegen_test` runs the default sweep (a few samples per shape);
 * `codegen_test --sweep OP|INDEX [N]` runs N (default 50) random traces
 * for every shape of one operator, or for the shape at INDEX (the 'slow'
 * suite registers one test per shape). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_check.h"
#include "kl_codegen.h"
#include "kl_codegen_cuda.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_trace.h"
#include "kl_test_tmp.h"
#include "kl_util.h"
#include "wl_fx.h"

static char s_dir[256];

/* Shapes per operator; odd sizes included. */
static const char *const s_shapes[] = {
    "matmul M=64 N=64 K=64",
    "matmul M=7 N=7 K=7",
    "matmul M=1000 N=16 K=12 bias=1 relu=1",
    "matmul M=50 N=48 K=33",
    /* B and the bias const: packed once in the prepare step */
    "matmul M=50 N=48 K=33 const_b=1 bias=1",
    /* a B of 1 MiB or more: its row tiles sampled whole in S2 */
    "matmul M=20 N=1024 K=272 const_b=1 bias=1",
    "batch_matmul B=2 M=12 N=32 K=24",
    "dense N=8 I=64 O=100 bias=1 relu=1",
    "conv2d N=1 C=8 H=14 W=14 K=16 R=3 S=3 stride=1 pad=1",
    "conv2d N=1 C=3 H=15 W=15 K=8 R=7 S=7 stride=2 pad=3 bias=1 relu=1",
    "conv2d N=1 C=8 H=7 W=7 K=16 R=3 S=3 pad=1 layout=NHWC residual=1",
    /* channel vectors with blocks of input channels */
    "conv2d N=1 C=128 H=7 W=7 K=32 R=3 S=3 pad=1 bias=1",
    "depthwise_conv2d N=1 C=16 H=14 W=14 R=3 S=3 pad=1",
    "conv2d_transpose N=1 C=8 H=7 W=7 K=4 R=3 S=3 stride=2 pad=1",
    "max_pool2d N=1 C=8 H=14 W=14 R=3 S=3 stride=2 pad=1",
    "avg_pool2d N=1 C=4 H=12 W=12 R=2 S=2",
    "add shape=4x7x9",
    "relu shape=1000",
    /* clip epilogues: both bounds reached by inputs in [-1, 1) */
    "clip shape=4x7x9 lo=-0.25 hi=0.5",
    "depthwise_conv2d N=1 C=16 H=14 W=14 R=3 S=3 pad=1 bias=1 clip=0,0.5",
    /* epilogues in vector instructions: a residual read along the
     * vector (NCHW), a bias read along it (channel vectors), a tensor
     * gathered across it (R transposed), a product, constants and an
     * activation */
    "conv2d N=1 C=24 H=14 W=14 K=40 R=1 S=1 bias=1 residual=1 relu=1",
    "Y[i,j] += A[i,k] * B[k,j] | + R[j,i] | * S[i,j] | + 0.5 | * 2 | silu "
    "| clip(-1, 1) where i=20, j=48, k=16; A: f32[20,16], B: f32[16,48], "
    "R: f32[48,20], S: f32[20,48], Y: f32[20,48]",
    /* less than a vector a core: a squeeze-excite 1x1 conv on one pixel
     * and its dense form (their spaces had no sample at all) */
    "conv2d N=1 C=32 H=1 W=1 K=8 R=1 S=1 bias=1",
    "dense N=1 I=32 O=8 bias=1",
    NULL,
};

static int s_setup(void **state)
{
    (void)state;
    return kl_test_mkdtemp(s_dir, sizeof s_dir, "kiln-codegen-test-XXXXXX")
               ? 0
               : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Builds and checks n kernels of w in one compile. */
static void s_check_many(const kl_workload_t *w, char **srcs, char **entries,
                         int n, const char *what)
{
    char err[KL_ERRMSG_LEN], *so = NULL;
    int rc = kl_check_build_many((const char *const *)srcs, n, s_dir, &so, err);
    if (rc)
        fail_msg("%s: %s: build: %s", w->name, what, err);
    int *rcs = kl_xcalloc((size_t)n, sizeof(int));
    rc = kl_check_run_many(so, (const char *const *)entries, n, w, 7, 1e-4,
                           1e-4, NULL, rcs, err);
    if (rc)
        fail_msg("%s: %s: %s", w->name, what, err);
    unlink(so);
    free(so);
    free(rcs);
}

static void test_reference_all_ops(void **state)
{
    (void)state;
    for (int i = 0; s_shapes[i]; i++) {
        kl_workload_t *w = fx_wl(s_shapes[i]);
        kl_kernel_t k;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_codegen_reference(w, NULL, &k, err), KL_OK);
        assert_string_equal(k.entry, "kl_ref");
        /* The reference is plain serial C: no vectors, no OpenMP. */
        const char *body = strstr(k.source, "void kl_ref(");
        assert_non_null(body);
        assert_null(strstr(body, "#pragma omp"));
        assert_null(strstr(body, "kl_ld"));
        char *srcs[1] = {k.source}, *ents[1] = {k.entry};
        s_check_many(w, srcs, ents, 1, "reference");
        kl_kernel_free(&k);
        kl_workload_free(&w);
    }
}

/* Samples n CPU schedules of spec, generates C and checks them all; also
 * checks that replaying each trace gives byte-identical source. Returns
 * how many had a prepare step. */
static int s_sweep(const char *spec, int n, uint64_t seed)
{
    int prepared = 0;
    kl_workload_t *w = fx_wl(spec);
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    if (kl_space_for_target("cpu", w, &sp, err))
        fail_msg("%s: %s", spec, err);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    char **srcs = kl_xcalloc((size_t)n, sizeof(char *));
    char **ents = kl_xcalloc((size_t)n, sizeof(char *));
    for (int i = 0; i < n; i++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("%s: sample %d: %s", spec, i, err);
        char entry[32];
        snprintf(entry, sizeof entry, "kl_c%d", i);
        kl_kernel_t k;
        if (kl_codegen_c(s, kl_space_target(sp), entry, &k, err)) {
            char *txt = kl_trace_to_text(tr);
            fail_msg("%s: codegen %d: %s\n%s", spec, i, err, txt);
        }
        /* Replay gives the same bytes. */
        kl_sched_t *s2 = NULL;
        kl_kernel_t k2;
        assert_int_equal(kl_space_replay(sp, tr, &s2, err), KL_OK);
        assert_int_equal(kl_codegen_c(s2, kl_space_target(sp), entry, &k2, err),
                         KL_OK);
        assert_string_equal(k.source, k2.source);
        kl_kernel_free(&k2);
        kl_sched_destroy(&s2);
        srcs[i] = k.source;
        ents[i] = k.entry;
        prepared += k.prepare;
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    s_check_many(w, srcs, ents, n, "random schedules");
    for (int i = 0; i < n; i++) {
        free(srcs[i]);
        free(ents[i]);
    }
    free(srcs);
    free(ents);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
    return prepared;
}

static void test_random_small_sweep(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    int n = 2;
#else
    int n = 4;
#endif
    int prepared = 0;
    for (int i = 0; s_shapes[i]; i++)
        prepared += s_sweep(s_shapes[i], n, 100 + (uint64_t)i);
    /* The conv2d and dense spaces pack their constant weights once in
     * some samples: those kernels were checked through their prepare. */
    assert_true(prepared > 0);
}

/* A hand-written trace with the structure of docs/benchmarking.md's fast
 * kernel: 12 x 32 register tile (imperfect rows), packed A and B panels. */
static const char s_blas_trace[] =
    "l0, l1, l2 = get_loops()\n"
    "l3, l4 = split(l0, ?, 12)\n"
    "l5, l6 = split(l1, ?, 32)\n"
    "l7, l8 = split(l2, ?, 32)\n"
    "reorder(l3, l5, l7, l4, l8, l6)\n"
    "b9 = cache_write(scope=\"local\")\n"
    "reverse_compute_at(b9, l7)\n"
    "parallel(l3)\n"
    "unroll(l4)\n"
    "vectorize(l6)\n"
    "b10 = cache_read(tensor=\"A\", scope=\"packed\")\n"
    "compute_at(b10, l7)\n"
    "b11 = cache_read(tensor=\"B\", scope=\"packed\")\n"
    "compute_at(b11, l7)\n";

static void test_register_tile_structure(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=100 N=64 K=96 bias=1 relu=1");
    kl_trace_t *tr = NULL;
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_trace_from_text(s_blas_trace, &tr, err), KL_OK);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    bool rej = true;
    if (kl_trace_apply(tr, s, NULL, NULL, &rej, err))
        fail_msg("%s", err);
    assert_false(rej);
    kl_target_t t;
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512", &t, err), KL_OK);
    assert_int_equal(kl_postproc_cpu(&t, s, err), KL_OK);
    kl_kernel_t k;
    if (kl_codegen_c(s, &t, "kl_blas", &k, err))
        fail_msg("%s", err);
    /* 24 named vector accumulators, per-thread packed panels, OpenMP. */
    assert_non_null(strstr(k.source, "kl_v16 acc23 = "));
    assert_null(strstr(k.source, "acc24"));
    assert_non_null(strstr(k.source, "#pragma omp parallel\n"));
    assert_non_null(strstr(k.source, "float *pk_A = kl_alloc(384);"));
    assert_non_null(strstr(k.source, "float *pk_B = kl_alloc(1024);"));
    char *srcs[1] = {k.source}, *ents[1] = {k.entry};
    s_check_many(w, srcs, ents, 1, "12x32 packed");
    kl_kernel_free(&k);
    kl_sched_destroy(&s);
    kl_trace_free(&tr);
    /* The same with a prefetch 512 floats ahead on the inner reduction
     * loop (here inside each of the 12 unrolled rows): B's panel step (32
     * floats) is 2 lines, A's (one float of the row) 1 line. */
    char text[1024];
    snprintf(text, sizeof text, "%sannotate(l8, key=\"prefetch\", value=512)\n",
             s_blas_trace);
    assert_int_equal(kl_trace_from_text(text, &tr, err), KL_OK);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    if (kl_trace_apply(tr, s, NULL, NULL, &rej, err))
        fail_msg("%s", err);
    assert_int_equal(kl_postproc_cpu(&t, s, err), KL_OK);
    if (kl_codegen_c(s, &t, "kl_blas_pf", &k, err))
        fail_msg("%s", err);
    const char *pf = strstr(k.source, "__builtin_prefetch(pk_B + (");
    assert_non_null(pf);
    assert_non_null(strstr(pf, ") + 512, 0, 3);"));
    assert_non_null(strstr(pf, ") + 528, 0, 3);"));
    assert_null(strstr(k.source, ") + 544, 0, 3);"));
    assert_non_null(strstr(k.source, "__builtin_prefetch(pk_A + ("));
    srcs[0] = k.source;
    ents[0] = k.entry;
    s_check_many(w, srcs, ents, 1, "12x32 packed, prefetched");
    kl_kernel_free(&k);
    kl_sched_destroy(&s);
    kl_trace_free(&tr);
    kl_workload_free(&w);
}

/* The same 12 x 32 tile on a dense layer (W constant) and a matmul (B
 * not), with the second operand packed whole before the parallel loop:
 * the constant one is packed once by ENTRY_prepare, the other on every
 * call; both compute the right thing (kl_check_run calls the prepare step
 * as kl_abi.h says). */
static const char s_root_trace[] =
    "l0, l1, l2 = get_loops()\n"
    "l3, l4 = split(l0, ?, 4)\n"
    "l5, l6 = split(l1, ?, 32)\n"
    "l7, l8 = split(l2, ?, 32)\n"
    "reorder(l3, l5, l7, l4, l8, l6)\n"
    "l9 = fuse(l3, l5)\n"
    "b10 = cache_write(scope=\"local\")\n"
    "reverse_compute_at(b10, l7)\n"
    "parallel(l9)\n"
    "unroll(l4)\n"
    "vectorize(l6)\n"
    "b11 = cache_read(tensor=\"%s\", scope=\"packed\")\n";

static kl_kernel_t s_root_kernel(const kl_workload_t *w, const char *tensor)
{
    char text[1024], err[KL_ERRMSG_LEN];
    snprintf(text, sizeof text, s_root_trace, tensor);
    kl_trace_t *tr = NULL;
    kl_sched_t *s = NULL;
    assert_int_equal(kl_trace_from_text(text, &tr, err), KL_OK);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    bool rej = true;
    if (kl_trace_apply(tr, s, NULL, NULL, &rej, err))
        fail_msg("%s", err);
    kl_target_t t;
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512", &t, err), KL_OK);
    assert_int_equal(kl_postproc_cpu(&t, s, err), KL_OK);
    kl_kernel_t k;
    if (kl_codegen_c(s, &t, "kl_root", &k, err))
        fail_msg("%s", err);
    char *srcs[1] = {k.source}, *ents[1] = {k.entry};
    s_check_many(w, srcs, ents, 1, "packed before the parallel loop");
    kl_sched_destroy(&s);
    kl_trace_free(&tr);
    return k;
}

static void test_constant_prepared_once(void **state)
{
    (void)state;
    /* dense: Y[n,o] += X[n,i] * W[o,i]; W const [64,96]. */
    kl_workload_t *w = fx_wl("dense N=8 I=96 O=64 bias=1 relu=1");
    assert_true(w->tensors[1].is_const);
    kl_kernel_t k = s_root_kernel(w, "W");
    assert_true(k.prepare);
    const char *prep = strstr(k.source, "void *kl_root_prepare(void *const "
                                        "*args)");
    const char *main_fn = strstr(k.source, "void kl_root(void *const *args)");
    assert_non_null(prep);
    assert_non_null(main_fn);
    assert_true(prep < main_fn);
    /* The prepare step packs W (2 chunks x 32 columns: no copy per row
     * tile of the fused parallel loop) and reads nothing else. */
    assert_non_null(strstr(prep, "kl_alloc_block(24576)"));
    assert_non_null(strstr(prep, "/* pack W */"));
    assert_true(strstr(prep, "args[0]") == NULL ||
                strstr(prep, "args[0]") > main_fn);
    /* The kernel reads the block and packs nothing of W itself. */
    assert_non_null(strstr(main_fn, "float *pk_W = (float *)args[4] + 0;"));
    assert_null(strstr(main_fn, "/* pack W */"));
    assert_null(strstr(main_fn, "free(pk_W)"));
    kl_kernel_free(&k);
    kl_workload_free(&w);
    /* matmul's B is not constant: packed in the kernel, every call. */
    w = fx_wl("matmul M=8 N=64 K=96");
    assert_false(w->tensors[1].is_const);
    k = s_root_kernel(w, "B");
    assert_false(k.prepare);
    assert_null(strstr(k.source, "_prepare"));
    assert_non_null(strstr(k.source, "/* pack B */"));
    assert_non_null(strstr(k.source, "free(pk_B)"));
    kl_kernel_free(&k);
    kl_workload_free(&w);
}

/* Samples schedules of workload spec in the avx512 space (seeded with
 * seed, at most tries of them), keeps the kernels whose source keep
 * accepts until want are kept (exactly want must be), and builds and
 * checks those against the reference; tag names their entries and the
 * check. */
static void s_sample_check(const char *spec, uint64_t seed, int tries, int want,
                           bool (*keep)(const char *), const char *tag)
{
    kl_workload_t *w = fx_wl(spec);
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                     KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    char *srcs[8], *ents[8];
    int nb = 0;
    assert_true(want <= 8);
    for (int i = 0; i < tries && nb < want; i++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("sample %d: %s", i, err);
        char entry[32];
        snprintf(entry, sizeof entry, "kl_%s%d", tag, i);
        kl_kernel_t k;
        if (kl_codegen_c(s, kl_space_target(sp), entry, &k, err))
            fail_msg("codegen %d: %s", i, err);
        if (keep(k.source)) {
            srcs[nb] = k.source;
            ents[nb++] = k.entry;
        } else {
            kl_kernel_free(&k);
        }
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    assert_int_equal(nb, want);
    s_check_many(w, srcs, ents, nb, tag);
    for (int i = 0; i < nb; i++) {
        free(srcs[i]);
        free(ents[i]);
    }
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* A kernel that walks a block of input channels innermost. */
static bool s_blocked(const char *src)
{
    if (!strstr(src, "channel blocks innermost"))
        return false;
    assert_non_null(strstr(src, "for (int64_t qb = 0; qb < "));
    return true;
}

/* Channel vectors with blocks of input channels: some samples of a
 * conv2d whose channels fill vectors lay the input out [c / b][h][w][c %
 * b] and walk the block innermost; six of them are built and checked
 * (40% of a 3x3 convolution's samples are direct, rules_cpu.c). */
static void test_channel_blocks(void **state)
{
    (void)state;
    s_sample_check("conv2d N=1 C=128 H=7 W=7 K=32 R=3 S=3 pad=1", 11, 120, 6,
                   s_blocked, "b");
}

/* Whether the nest of source src has a loop (l...) over the whole
 * reduction of 576 channels, or over 576 / b of them with a channel block
 * b of 4, 8 or 16 innermost; such a nest never reloads its accumulators
 * (no "if (!(" guard). */
static bool s_any(const char *src)
{
    return src != NULL;
}

static bool s_whole_576(const char *src)
{
    for (const char *p = strstr(src, "for (int64_t l"); p;
         p = strstr(p + 1, "for (int64_t l")) {
        const char *lt = strstr(p, " < ");
        long n = lt ? strtol(lt + 3, NULL, 10) : 0;
        if (n == 576 || n == 144 || n == 72 || n == 36) {
            assert_null(strstr(src, "if (!("));
            return true;
        }
    }
    return false;
}

/* Channel vectors over a reduction of 576 (MobileNetV2's 1x1
 * projection): besides tiles of 32 and 64, the whole reduction may stay
 * in the register tile, whose accumulators are then never loaded back;
 * three such samples are built and checked. */
static void test_channel_whole_reduction(void **state)
{
    (void)state;
    s_sample_check("conv2d N=1 C=576 H=7 W=7 K=32 R=1 S=1 bias=1", 5, 200, 3,
                   s_whole_576, "w");
}

/* A 1x1 convolution's input packed in the loop layout (its panels in
 * the register tile's order), as the "loop_layout_0" annotation asks. */
static bool s_x_loop_layout(const char *src)
{
    return strstr(src, "/* pack X */") != NULL;
}

/* The same input packed in its own layout: traces without the
 * annotation, a record's from before it among them. */
static bool s_x_window(const char *src)
{
    return strstr(src, "/* pack X (window") != NULL;
}

/* The threads split a fused (rows, columns) parallel loop, both parts
 * longer than 1, by rows (its last part varies fastest: cols false) or
 * (KL_ANNOT_PARALLEL_ORDER) by columns (its first part fastest). */
static bool s_split(const char *src, bool cols)
{
    long long in[2], ext[2];
    for (int q = 0; q < 2; q++) {
        char needle[32];
        snprintf(needle, sizeof needle, "l0_%d = l0 / ", q);
        const char *p = strstr(src, needle);
        if (!p ||
            sscanf(p + strlen(needle), "%lld %% %lld", &in[q], &ext[q]) != 2 ||
            ext[q] < 2)
            return false;
    }
    return cols ? in[0] == 1 && in[1] == ext[0] : in[1] == 1 && in[0] == ext[1];
}

static bool s_split_rows(const char *src)
{
    return s_split(src, false);
}

static bool s_split_cols(const char *src)
{
    return s_split(src, true);
}

/* How many of n samples of spec (AVX2, seed) have needle in their trace. */
static int s_count_traces(const char *spec, int n, uint64_t seed,
                          const char *needle)
{
    kl_workload_t *w = fx_wl(spec);
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_space_for_target("cpu/x86_64-avx2", w, &sp, err),
                     KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    int found = 0;
    for (int i = 0; i < n; i++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("sample %d: %s", i, err);
        char *text = kl_trace_to_text(tr);
        found += strstr(text, needle) != NULL;
        free(text);
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    kl_space_destroy(&sp);
    kl_workload_free(&w);
    return found;
}

/* How many of n samples of spec carry the "loop_layout" annotation. */
static int s_count_loop_layout(const char *spec, int n)
{
    return s_count_traces(spec, n, 9, "key=\"loop_layout_0\", value=1)");
}

/* A 1x1 convolution reads its input through a trivial window (r and s
 * of extent 1): the space samples its pack's layout, and both layouts
 * build and match the reference; a 3x3 window never gets the choice. */
static void test_trivial_window_layout(void **state)
{
    (void)state;
    const char *spec = "conv2d N=1 C=64 H=7 W=7 K=32 R=1 S=1 bias=1";
    s_sample_check(spec, 3, 200, 4, s_x_loop_layout, "ll");
    s_sample_check(spec, 3, 200, 3, s_x_window, "lw");
    s_sample_check("conv2d N=1 C=16 H=14 W=14 K=24 R=1 S=1 bias=1 "
                   "residual=1 relu=1",
                   4, 200, 3, s_x_loop_layout, "ls");
    assert_true(s_count_loop_layout(spec, 40) > 0);
    assert_int_equal(s_count_loop_layout("conv2d N=1 C=64 H=7 W=7 K=32 R=3 "
                                         "S=3 pad=1 bias=1",
                                         40),
                     0);
}

/* A model's matmul samples both splits of its parallel tiles between the
 * threads, and both kinds of kernel match the reference. */
static void test_parallel_order(void **state)
{
    (void)state;
    const char *spec = "matmul M=50 N=48 K=33 const_b=1 bias=1";
    s_sample_check(spec, 9, 200, 3, s_split_rows, "pr");
    s_sample_check(spec, 9, 200, 3, s_split_cols, "pc");
}

/* How many of n samples of spec offer row tiles up to the whole 7-wide
 * row. */
static int s_count_row7(const char *spec, int n)
{
    return s_count_traces(spec, n, 4, "values=[1, 2, 3, 4, 6, 7]");
}

/* A float NHWC convolution vectorizes its output channels, which its
 * input does not index: a channel product (rules_cpu.c), so a 7x7 image's
 * rows are tiled up to whole (they were 1 pixel, 7 being prime) and the
 * reduction may stay whole; its kernels match the reference. The NCHW
 * form's spatial vectors are unchanged. */
static void test_nhwc_channel_product(void **state)
{
    (void)state;
    const char *spec = "conv2d N=1 C=576 H=7 W=7 K=32 R=1 S=1 bias=1 "
                       "layout=NHWC";
    assert_int_equal(s_count_row7(spec, 20), 20);
    assert_int_equal(s_count_row7("conv2d N=1 C=96 H=7 W=7 K=64 R=1 S=1 "
                                  "bias=1 residual=1 layout=NHWC",
                                  20),
                     20);
    s_sample_check(spec, 5, 200, 3, s_whole_576, "nw");
    s_sample_check("conv2d N=1 C=96 H=7 W=7 K=64 R=1 S=1 bias=1 residual=1 "
                   "relu=1 layout=NHWC",
                   6, 200, 4, s_any, "nr");
}

static void test_codegen_errors(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=16 N=16 K=16");
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    kl_kernel_t k;
    kl_target_t cpu, gpu;
    assert_int_equal(kl_target_parse("cpu/x86_64-avx2", &cpu, err), KL_OK);
    assert_int_equal(kl_target_parse("cuda/sm_90", &gpu, err), KL_OK);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_codegen_c(s, &gpu, NULL, &k, err), KL_ERR_INVAL);
    int id = kl_sched_loop(s, 0)->id;
    assert_int_equal(kl_sched_bind(s, id, KL_LOOP_BLOCK_X, err), KL_OK);
    assert_int_equal(kl_codegen_c(s, &cpu, NULL, &k, err), KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "blockIdx.x"));
    kl_sched_destroy(&s);
    /* A write cache over a serial spatial loop cannot keep accumulators. */
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int b;
    assert_int_equal(kl_sched_cache_write(s, KL_SCOPE_LOCAL, &b, err), KL_OK);
    assert_int_equal(
        kl_sched_reverse_compute_at(s, b, kl_sched_loop(s, 0)->id, err), KL_OK);
    assert_int_equal(kl_codegen_c(s, &cpu, NULL, &k, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not unrolled"));
    assert_int_equal(kl_postproc_cpu(&cpu, s, err), KL_ERR_INVAL);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

/* kl_codegen_kernel and kl_codegen_reference_kernel pick the generator of
 * the target's kind and give the same bytes as calling it directly. */
static void test_codegen_by_kind(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=16 N=16 K=16");
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    kl_target_t t[2];
    assert_int_equal(kl_target_parse("cpu/x86_64-avx2", &t[0], err), KL_OK);
    assert_int_equal(kl_target_parse("cuda/sm_90", &t[1], err), KL_OK);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    for (int i = 0; i < 2; i++) {
        kl_kernel_t a, b, ra, rb;
        assert_int_equal(kl_codegen_reference_kernel(w, &t[i], NULL, &ra, err),
                         KL_OK);
        if (i == 0) {
            assert_string_equal(kl_codegen_source_ext(t[i].kind), "c");
            assert_int_equal(kl_codegen_c(s, &t[i], "k", &a, err), KL_OK);
            assert_int_equal(kl_codegen_reference(w, NULL, &rb, err), KL_OK);
        } else {
            assert_string_equal(kl_codegen_source_ext(t[i].kind), "cu");
            assert_int_equal(kl_codegen_cuda(s, &t[i], "k", &a, err), KL_OK);
            assert_int_equal(
                kl_codegen_cuda_reference(w, &t[i], NULL, &rb, err), KL_OK);
        }
        assert_int_equal(kl_codegen_kernel(s, &t[i], "k", &b, err), KL_OK);
        assert_string_equal(a.source, b.source);
        assert_string_equal(ra.source, rb.source);
        assert_string_equal(ra.entry, "kl_ref");
        /* Only a GPU kernel carries a launch. */
        assert_int_equal(b.launched, i == 1);
        assert_int_equal(ra.launched, i == 1);
        kl_kernel_free(&a);
        kl_kernel_free(&b);
        kl_kernel_free(&ra);
        kl_kernel_free(&rb);
    }
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

/* Sweeps the shapes of one operator (op a name) or one shape (op its
 * index in s_shapes). */
static int s_sweep_main(const char *op, int n)
{
    if (s_setup(NULL))
        return 1;
    int count = 0, nshapes = 0;
    while (s_shapes[nshapes])
        nshapes++;
    char *end;
    long only = strtol(op, &end, 10);
    bool by_index = *op && !*end;
    if (by_index && (only < 0 || only >= nshapes)) {
        fprintf(stderr, "shape index %ld out of range (0..%d)\n", only,
                nshapes - 1);
        return 2;
    }
    for (int i = 0; s_shapes[i]; i++) {
        size_t l = strlen(op);
        if (by_index ? i != only
                     : (strncmp(s_shapes[i], op, l) || s_shapes[i][l] != ' '))
            continue;
        s_sweep(s_shapes[i], n, 1000 + (uint64_t)i);
        printf("ok %d random schedules: %s\n", n, s_shapes[i]);
        count++;
    }
    s_teardown(NULL);
    if (!count) {
        fprintf(stderr, "no shapes for operator '%s'\n", op);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--sweep"))
        return s_sweep_main(argv[2], argc >= 4 ? atoi(argv[3]) : 50);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codegen_errors),
        cmocka_unit_test(test_codegen_by_kind),
        cmocka_unit_test(test_reference_all_ops),
        cmocka_unit_test(test_register_tile_structure),
        cmocka_unit_test(test_random_small_sweep),
        cmocka_unit_test(test_constant_prepared_once),
        cmocka_unit_test(test_channel_blocks),
        cmocka_unit_test(test_channel_whole_reduction),
        cmocka_unit_test(test_trivial_window_layout),
        cmocka_unit_test(test_parallel_order),
        cmocka_unit_test(test_nhwc_channel_product),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
