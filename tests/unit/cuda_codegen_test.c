/* Unit tests of the GPU half of the compiler: GPU rules, postprocessors and
 * CUDA codegen. Without a GPU: sampled kernels are compiled with NVRTC for
 * sm_80 and sm_90 (skipped when NVRTC is missing) and run on the CPU
 * through cuda_emu (the CUDA built-ins mapped onto pthreads), against the
 * reference interpreter. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cuda_check.h"
#include "cuda_emu.h"
#include "kl_codegen_cuda.h"
#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_space.h"
#include "kl_test_tmp.h"

/* NVRTC is outside what the sanitizers check and costs most of the time:
 * the sanitizer build compiles fewer samples per operator. */
#if defined(__SANITIZE_ADDRESS__)
#define NSAMPLES 6
#else
#define NSAMPLES 20
#endif
#define NEMU 3

static const char *s_ops[] = {
    "matmul M=64 N=48 K=40",
    "batch_matmul B=2 M=32 N=24 K=16",
    "dense N=16 I=64 O=40",
    "conv2d N=1 C=8 H=14 W=14 K=16 R=3 S=3 stride=1 pad=1 bias=1 relu=1",
    "depthwise_conv2d N=1 C=16 H=15 W=15 R=3 S=3 stride=2 pad=1",
    "max_pool2d N=1 C=8 H=15 W=15 R=3 S=3 stride=2 pad=1",
};
#define NOPS ((int)(sizeof s_ops / sizeof s_ops[0]))

static char s_workdir[512];

static kl_workload_t *s_load(const char *op)
{
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    int rc = kl_workload_from_string(op, &w, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", op, err);
    assert_int_equal(rc, KL_OK);
    return w;
}

/* Samples n kernels of op (seeded), checking that each trace replays to a
 * byte-identical source. ks and the plans are the caller's. */
static void s_sample(const kl_workload_t *w, int op, int n, kl_kernel_t *ks,
                     kl_cuda_plan_t *plans)
{
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cuda/sm_90", w, &sp, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 1000 + (uint64_t)op);
    for (int i = 0; i < n; i++) {
        kl_trace_t *t = NULL;
        kl_sched_t *s = NULL;
        int rc = kl_space_sample(sp, &rng, &t, &s, 0, NULL, err);
        if (rc)
            fprintf(stderr, "%s: %s\n", w->name, err);
        assert_int_equal(rc, KL_OK);
        char entry[32];
        snprintf(entry, sizeof entry, "k%d_%d", op, i);
        assert_int_equal(
            kl_codegen_cuda(s, kl_space_target(sp), entry, &ks[i], err), KL_OK);
        assert_int_equal(kl_cuda_plan(s, kl_space_target(sp), &plans[i], err),
                         KL_OK);
        /* Same trace, same bytes. */
        kl_sched_t *s2 = NULL;
        kl_kernel_t k2;
        assert_int_equal(kl_space_replay(sp, t, &s2, err), KL_OK);
        assert_int_equal(
            kl_codegen_cuda(s2, kl_space_target(sp), entry, &k2, err), KL_OK);
        assert_string_equal(ks[i].source, k2.source);
        kl_kernel_free(&k2);
        kl_sched_destroy(&s2);
        kl_sched_destroy(&s);
        kl_trace_free(&t);
    }
    kl_space_destroy(&sp);
}

/* One arch's compilation of a batch, run on its own thread so that the two
 * archs use both cores (cmocka asserts stay on the main thread). */
typedef struct {
    kl_nvrtc_t *nv;
    const kl_kernel_t *ks;
    const char *arch;
    int rc;
    int rcs[NSAMPLES];
    char why[NSAMPLES][KL_ERRMSG_LEN];
    kl_nvrtc_kernel_t res[NSAMPLES];
    char err[KL_ERRMSG_LEN];
    double seconds;
} s_batch_t;

static void *s_compile_batch(void *arg)
{
    s_batch_t *b = arg;
    double t0 = kl_now_s();
    b->rc = kl_cuda_check_many(b->nv, b->ks, NSAMPLES, b->arch, b->rcs, b->why,
                               b->res, b->err);
    b->seconds = kl_now_s() - t0;
    return NULL;
}

static void test_nvrtc_sampled(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_nvrtc_t *nv = kl_nvrtc_default(err);
    if (!nv) {
        printf("SKIP: %s\n", err);
        skip();
    }
    static s_batch_t b[2];
    const char *archs[] = {"sm_80", "sm_90"};
    for (int op = 0; op < NOPS; op++) {
        kl_workload_t *w = s_load(s_ops[op]);
        kl_kernel_t ks[NSAMPLES];
        kl_cuda_plan_t plans[NSAMPLES];
        s_sample(w, op, NSAMPLES, ks, plans);
        pthread_t th;
        for (int a = 0; a < 2; a++) {
            b[a].nv = nv;
            b[a].ks = ks;
            b[a].arch = archs[a];
        }
        assert_int_equal(pthread_create(&th, NULL, s_compile_batch, &b[0]), 0);
        s_compile_batch(&b[1]);
        pthread_join(th, NULL);
        int refused = 0;
        for (int a = 0; a < 2; a++) {
            if (b[a].rc)
                fprintf(stderr, "%s %s: %s\n", w->name, archs[a], b[a].err);
            assert_int_equal(b[a].rc, KL_OK);
            printf("%s %s: %d kernels compiled in %.2f s\n", w->name, archs[a],
                   NSAMPLES, b[a].seconds);
            for (int i = 0; i < NSAMPLES; i++) {
                int64_t threads =
                    ks[i].block[0] * ks[i].block[1] * ks[i].block[2];
                const kl_nvrtc_kernel_t *r = &b[a].res[i];
                /* Spills are the optional check's business: report them,
                 * and require that they stay rare. */
                if (b[a].rcs[i]) {
                    printf("refused: %s\n", b[a].why[i]);
                    assert_non_null(strstr(b[a].why[i], "spills"));
                    refused++;
                }
                assert_in_range(r->registers, 1, 255);
                assert_true(r->registers * threads <= KL_CUDA_REGFILE);
                /* ptxas sees exactly the shared memory the plan made. */
                if (!plans[i].smem_dynamic)
                    assert_int_equal(r->smem_static, plans[i].smem_bytes);
                assert_true(r->smem_static <= KL_CUDA_STATIC_SMEM);
            }
        }
        assert_true(refused <= 2);
        for (int i = 0; i < NSAMPLES; i++)
            kl_kernel_free(&ks[i]);
        kl_workload_free(&w);
    }
}

static void test_naive(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    kl_workload_t *ws[NOPS];
    kl_kernel_t ks[NOPS];
    for (int op = 0; op < NOPS; op++) {
        ws[op] = s_load(s_ops[op]);
        kl_sched_t *s = NULL;
        assert_int_equal(kl_sched_create(&s, ws[op], err), KL_OK);
        /* The naive schedule passes the postprocessors. */
        assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_OK);
        char entry[32];
        snprintf(entry, sizeof entry, "naive%d", op);
        assert_int_equal(kl_codegen_cuda(s, &tg, entry, &ks[op], err), KL_OK);
        assert_non_null(strstr(ks[op].source, "extern \"C\" __global__"));
        assert_int_equal(ks[op].shared_bytes, 0);
        assert_true(ks[op].block[0] >= 1 && ks[op].block[0] <= 256);
        kl_sched_destroy(&s);
    }
    kl_nvrtc_t *nv = kl_nvrtc_default(NULL);
    for (int a = 0; nv && a < 2; a++) {
        int rcs[NOPS];
        assert_int_equal(kl_cuda_check_many(nv, ks, NOPS, a ? "sm_90" : "sm_80",
                                            rcs, NULL, NULL, err),
                         KL_OK);
        for (int op = 0; op < NOPS; op++)
            assert_int_equal(rcs[op], KL_OK);
    }
    assert_int_equal(kl_emu_check_all(ks, NOPS,
                                      (const kl_workload_t *const *)ws,
                                      s_workdir, 7, 1e-4, 1e-4, err),
                     KL_OK);
    for (int op = 0; op < NOPS; op++) {
        kl_kernel_free(&ks[op]);
        kl_workload_free(&ws[op]);
    }
}

/* More shapes for the emulation only: odd sizes, a strided gather, an
 * average, an elementwise op. */
static const char *s_more[] = {
    "matmul M=7 N=100 K=7",
    "conv2d_transpose N=1 C=4 H=5 W=5 K=4 R=3 S=3 stride=2 pad=1",
    "avg_pool2d N=1 C=8 H=14 W=14 R=2 S=2",
    "conv2d N=1 C=3 H=15 W=15 K=8 R=7 S=7 stride=2 pad=3",
    "add shape=3x50",
};
#define NMORE ((int)(sizeof s_more / sizeof s_more[0]))

/* Sampled kernels, run on the CPU emulation, match the interpreter. All
 * of them go through one compiler run. */
static void test_emulated_sampled(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    int nvec = 0, npad = 0, n = 0;
    enum { NALL = (NOPS + NMORE) * NEMU };
    kl_workload_t *ws[NOPS + NMORE];
    const kl_workload_t *wk[NALL];
    kl_kernel_t ks[NALL];
    kl_cuda_plan_t plans[NALL];
    for (int op = 0; op < NOPS + NMORE; op++) {
        ws[op] = s_load(op < NOPS ? s_ops[op] : s_more[op - NOPS]);
        s_sample(ws[op], op, NEMU, &ks[n], &plans[n]);
        for (int i = 0; i < NEMU; i++)
            wk[n++] = ws[op];
    }
    for (int i = 0; i < NALL; i++) {
        nvec += strstr(ks[i].source, "float4") != NULL;
        npad += strstr(ks[i].source, " + f % ") != NULL;
        assert_false(plans[i].smem_dynamic);
    }
    assert_int_equal(
        kl_emu_check_all(ks, NALL, wk, s_workdir, 11, 1e-4, 1e-4, err), KL_OK);
    for (int i = 0; i < NALL; i++)
        kl_kernel_free(&ks[i]);
    for (int op = 0; op < NOPS + NMORE; op++)
        kl_workload_free(&ws[op]);
    /* The 16-byte copies were among what ran. */
    printf("%d emulated kernels use 16-byte copies, %d padded rows\n", nvec,
           npad);
    assert_true(nvec > 0);
    assert_true(npad > 0);
}

static kl_sched_t *s_bound(const kl_workload_t *w, int64_t threads)
{
    /* i split into (blocks, threads); j and k stay serial. */
    char err[KL_ERRMSG_LEN];
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int64_t f[2] = {w->iters[0].extent / threads, threads};
    int ids[2];
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 0)->id, f, 2, ids, err),
                     KL_OK);
    assert_int_equal(kl_sched_bind(s, ids[0], KL_LOOP_BLOCK_X, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, ids[1], KL_LOOP_THREAD_X, err), KL_OK);
    return s;
}

static void test_postproc_rejects(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    kl_workload_t *w = s_load("matmul M=4096 N=64 K=4096");

    kl_sched_t *s = s_bound(w, 2048);
    assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "2048 threads per block"));
    kl_sched_destroy(&s);

    s = s_bound(w, 16);
    assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "fewer than a warp"));
    kl_sched_destroy(&s);

    /* A shared copy of all of A per block: 64 MiB. */
    s = s_bound(w, 128);
    int st;
    assert_int_equal(kl_sched_cache_read(s, 0, KL_SCOPE_SHARED, &st, err),
                     KL_OK);
    assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "shared memory"));
    kl_sched_destroy(&s);

    /* A loop bound to threads inside a serial loop. */
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(
        kl_sched_bind(s, kl_sched_loop(s, 1)->id, KL_LOOP_THREAD_X, err),
        KL_OK);
    assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "inside the unbound loop"));
    kl_sched_destroy(&s);

    /* parallel is a CPU binding. */
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_sched_parallel(s, kl_sched_loop(s, 0)->id, err), KL_OK);
    assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "parallel"));
    kl_kernel_t k;
    assert_int_equal(kl_codegen_cuda(s, &tg, NULL, &k, err),
                     KL_ERR_UNSUPPORTED);
    kl_sched_destroy(&s);
    kl_workload_free(&w);

    /* f16 is outside the CUDA space. */
    w = s_load("C[i,j] += A[i,k] * B[k,j] where i=32, j=32, k=32; "
               "A: f16[32,32], B: f16[32,32], C: f16[32,32]");
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cuda/sm_90", w, &sp, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "f16"));
    kl_workload_free(&w);
}

static void test_sampled_within_limits(void **state)
{
    (void)state;
    /* Every sample of a bigger conv2d respects the plan's limits. */
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w =
        s_load("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1");
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cuda/sm_90", w, &sp, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 5);
    for (int i = 0; i < 50; i++) {
        kl_trace_t *t = NULL;
        kl_sched_t *s = NULL;
        assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err),
                         KL_OK);
        kl_cuda_plan_t p;
        assert_int_equal(kl_cuda_plan(s, kl_space_target(sp), &p, err), KL_OK);
        assert_in_range(p.threads, 32, 1024);
        assert_true(p.nacc <= KL_CUDA_MAX_ACC);
        assert_true(p.vthreads <= 8);
        assert_true(p.smem_bytes <= kl_space_target(sp)->max_shared_bytes);
        assert_int_equal(p.nsmem, 2); /* X and W staged in shared memory */
        kl_sched_destroy(&s);
        kl_trace_free(&t);
    }
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* Builds, generates and emulates one hand-made schedule of w. */
static void s_emulate_sched(const kl_workload_t *w, kl_sched_t *s,
                            const char *entry)
{
    char err[KL_ERRMSG_LEN];
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    int rc = kl_postproc_cuda(&tg, s, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, KL_OK);
    kl_kernel_t k;
    assert_int_equal(kl_codegen_cuda(s, &tg, entry, &k, err), KL_OK);
    assert_int_equal(kl_emu_check_all(&k, 1, &w, s_workdir, 5, 1e-4, 1e-4, err),
                     KL_OK);
    kl_kernel_free(&k);
}

/* Shapes the rules never make: imperfect splits (guards on spatial and
 * reduction loops), blockIdx.y / threadIdx.y, a vthread of two fused parts,
 * a shared box at the root, max with padding. */
static void test_emulated_handmade(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = s_load("matmul M=30 N=20 K=13");
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int64_t fi[2] = {4, 8}, fj[2] = {3, 7}, fk[2] = {2, 7};
    int i[2], j[2], k[2], a, b, c;
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 0)->id, fi, 2, i, err),
                     KL_OK);
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 2)->id, fj, 2, j, err),
                     KL_OK);
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 4)->id, fk, 2, k, err),
                     KL_OK);
    assert_int_equal(
        kl_sched_reorder(s, (int[]){i[0], j[0], i[1], j[1]}, 4, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, i[0], KL_LOOP_BLOCK_X, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, j[0], KL_LOOP_BLOCK_Y, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, i[1], KL_LOOP_THREAD_X, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, j[1], KL_LOOP_THREAD_Y, err), KL_OK);
    assert_int_equal(kl_sched_cache_read(s, 0, KL_SCOPE_SHARED, &a, err),
                     KL_OK);
    assert_int_equal(kl_sched_cache_read(s, 1, KL_SCOPE_SHARED, &b, err),
                     KL_OK);
    assert_int_equal(kl_sched_cache_write(s, KL_SCOPE_LOCAL, &c, err), KL_OK);
    assert_int_equal(kl_sched_compute_at(s, a, k[0], err), KL_OK);
    assert_int_equal(kl_sched_compute_at(s, b, k[0], err), KL_OK);
    assert_int_equal(kl_sched_reverse_compute_at(s, c, j[1], err), KL_OK);
    assert_true(kl_sched_nguards(s) == 3);
    s_emulate_sched(w, s, "guarded");
    kl_sched_destroy(&s);
    kl_workload_free(&w);

    w = s_load("max_pool2d N=1 C=6 H=13 W=13 R=3 S=3 stride=2 pad=1");
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int64_t fc[2] = {2, 3};
    int cc[2], vt, yx;
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 1)->id, fc, 2, cc, err),
                     KL_OK);
    int n = kl_sched_loop(s, 0)->id;
    assert_int_equal(kl_sched_reorder(s, (int[]){cc[0], n, cc[1]}, 3, err),
                     KL_OK);
    assert_int_equal(kl_sched_fuse(s, (int[]){n, cc[1]}, 2, &vt, err), KL_OK);
    assert_int_equal(
        kl_sched_fuse(s,
                      (int[]){kl_sched_loop(s, 2)->id, kl_sched_loop(s, 3)->id},
                      2, &yx, err),
        KL_OK);
    assert_int_equal(kl_sched_bind(s, cc[0], KL_LOOP_BLOCK_X, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, vt, KL_LOOP_VTHREAD, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, yx, KL_LOOP_THREAD_X, err), KL_OK);
    assert_int_equal(kl_sched_cache_read(s, 0, KL_SCOPE_SHARED, &a, err),
                     KL_OK);
    s_emulate_sched(w, s, "pooled");
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

/* Over 48 KiB the shared boxes become dynamic shared memory, which the
 * launch must ask for (kl_kernel_t.shared_bytes). */
static void test_dynamic_smem(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    kl_workload_t *w = s_load("matmul M=256 N=64 K=128");
    kl_sched_t *s = s_bound(w, 128);
    int st;
    assert_int_equal(kl_sched_cache_read(s, 0, KL_SCOPE_SHARED, &st, err),
                     KL_OK);
    assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_OK);
    kl_kernel_t k;
    assert_int_equal(kl_codegen_cuda(s, &tg, "dyn", &k, err), KL_OK);
    assert_int_equal(k.shared_bytes, 128 * 128 * 4);
    assert_non_null(strstr(k.source, "extern __shared__"));
    kl_nvrtc_t *nv = kl_nvrtc_default(NULL);
    if (nv) {
        int rc1 = -1;
        kl_nvrtc_kernel_t res;
        assert_int_equal(
            kl_cuda_check_many(nv, &k, 1, "sm_90", &rc1, NULL, &res, err),
            KL_OK);
        assert_int_equal(rc1, KL_OK);
        assert_int_equal(res.smem_static, 0);
    }
    kl_kernel_free(&k);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

/* The optional NVRTC check inside kl_postproc_cuda. */
static void test_resource_hook(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    if (kl_cuda_enable_resource_check(err)) {
        printf("SKIP: %s\n", err);
        skip();
    }
    kl_workload_t *w = s_load("dense N=8 I=32 O=32");
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cuda/sm_90", w, &sp, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 3);
    kl_trace_t *t = NULL;
    kl_sched_t *s = NULL;
    assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err), KL_OK);
    /* A block of 1024 threads with 32 accumulators each cannot fit the
     * register file without spilling: the static checks pass it, the
     * compiled one does not. */
    kl_workload_t *big = s_load("matmul M=1024 N=512 K=64");
    kl_sched_t *b = NULL;
    assert_int_equal(kl_sched_create(&b, big, err), KL_OK);
    int64_t fi[3] = {16, 64, 1}, fj[3] = {1, 16, 32};
    int li[3], lj[3], tx, blk;
    assert_int_equal(kl_sched_split(b, kl_sched_loop(b, 0)->id, fi, 3, li, err),
                     KL_OK);
    assert_int_equal(kl_sched_split(b, kl_sched_loop(b, 3)->id, fj, 3, lj, err),
                     KL_OK);
    int order[6] = {li[0], lj[0], li[1], lj[1], li[2], lj[2]};
    assert_int_equal(kl_sched_reorder(b, order, 6, err), KL_OK);
    assert_int_equal(kl_sched_fuse(b, (int[]){li[0], lj[0]}, 2, &blk, err),
                     KL_OK);
    assert_int_equal(kl_sched_fuse(b, (int[]){li[1], lj[1]}, 2, &tx, err),
                     KL_OK);
    assert_int_equal(kl_sched_bind(b, blk, KL_LOOP_BLOCK_X, err), KL_OK);
    assert_int_equal(kl_sched_bind(b, tx, KL_LOOP_THREAD_X, err), KL_OK);
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    kl_cuda_disable_resource_check();
    assert_int_equal(kl_postproc_cuda(&tg, b, err), KL_OK);
    assert_int_equal(kl_cuda_enable_resource_check(err), KL_OK);
    int rc = kl_postproc_cuda(&tg, b, err);
    printf("1024 threads x 32 accumulators: %s\n", rc ? err : "accepted");
    assert_int_equal(rc, KL_ERR_INVAL);
    assert_true(strstr(err, "spills") || strstr(err, "registers"));
    kl_cuda_disable_resource_check();
    kl_sched_destroy(&b);
    kl_workload_free(&big);
    kl_sched_destroy(&s);
    kl_trace_free(&t);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* Each fused activation (kl_act) in the epilogue: the naive schedule and
 * a sampled one of a conv2d per activation compile with NVRTC (where
 * there is one) and match the interpreter on the CPU emulation. */
static void test_activations(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], spec[160];
    enum { N = KL_ACT_COUNT * 2 };
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    kl_workload_t *ws[KL_ACT_COUNT];
    const kl_workload_t *wk[N];
    kl_kernel_t ks[N];
    kl_cuda_plan_t plan;
    for (int a = 0; a < KL_ACT_COUNT; a++) {
        snprintf(spec, sizeof spec,
                 "conv2d N=1 C=8 H=6 W=6 K=8 R=3 S=3 pad=1 bias=1 act=%s",
                 kl_act_name((kl_act)a));
        ws[a] = s_load(spec);
        kl_sched_t *s = NULL;
        assert_int_equal(kl_sched_create(&s, ws[a], err), KL_OK);
        assert_int_equal(kl_postproc_cuda(&tg, s, err), KL_OK);
        char entry[32];
        snprintf(entry, sizeof entry, "act%d", a);
        assert_int_equal(kl_codegen_cuda(s, &tg, entry, &ks[2 * a], err),
                         KL_OK);
        kl_sched_destroy(&s);
        s_sample(ws[a], 50 + a, 1, &ks[2 * a + 1], &plan);
        wk[2 * a] = wk[2 * a + 1] = ws[a];
    }
    assert_non_null(strstr(ks[2 * KL_ACT_GELU].source, "erff("));
    assert_non_null(strstr(ks[2 * KL_ACT_GELU_TANH].source, "tanhf("));
    kl_nvrtc_t *nv = kl_nvrtc_default(NULL);
    if (nv) {
        int rcs[N];
        assert_int_equal(
            kl_cuda_check_many(nv, ks, N, "sm_80", rcs, NULL, NULL, err),
            KL_OK);
        for (int i = 0; i < N; i++)
            assert_int_equal(rcs[i], KL_OK);
    }
    assert_int_equal(kl_emu_check_all(ks, N, wk, s_workdir, 5, 1e-4, 1e-5, err),
                     KL_OK);
    for (int i = 0; i < N; i++)
        kl_kernel_free(&ks[i]);
    for (int a = 0; a < KL_ACT_COUNT; a++)
        kl_workload_free(&ws[a]);
}

int main(void)
{
    if (!kl_test_mkdtemp(s_workdir, sizeof s_workdir,
                         "kiln-cuda-test-XXXXXX")) {
        perror("kl_test_mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_postproc_rejects),
        cmocka_unit_test(test_sampled_within_limits),
        cmocka_unit_test(test_naive),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_emulated_sampled),
        cmocka_unit_test(test_emulated_handmade),
        cmocka_unit_test(test_nvrtc_sampled),
        cmocka_unit_test(test_resource_hook),
        cmocka_unit_test(test_dynamic_smem),
    };
    int rc = cmocka_run_group_tests_name("cuda_codegen", tests, NULL, NULL);
    kl_test_rmdir(s_workdir);
    return rc;
}
