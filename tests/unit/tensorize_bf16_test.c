/* Unit tests of the bf16 tensor intrinsics (kl_intrin.h: avx512_bf16,
 * amx_bf16, amx_int8), tensorize's refusals for them, the CPU design space
 * of bf16 products (rules_cpu_bf16.c) and the avx512_bf16 C
 * (codegen_tensorize_bf16.c): kernels sampled from the space on
 * "cpu/x86_64-avx512+bf16" are compiled, prepared and run against the
 * reference interpreter (kl_workload_eval, which rounds every bf16 read to
 * nearest even) within f32 accumulation error; the prepared weight panels
 * are checked element by element. Running needs avx512_bf16 on this CPU;
 * without it the source must still compile and prepare must refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bf16_fx.h"
#include "kl_abi.h"
#include "kl_cgrun.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

static char s_dir[512];

static int s_setup(void **state)
{
    (void)state;
    if (!dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE))
        return -1;
    return kl_test_mkdtemp(s_dir, sizeof s_dir, "kl_tzbf_test_XXXXXX") ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kl_test_rmdir(s_dir);
    return 0;
}

static void test_rows(void **state)
{
    (void)state;
    const kl_intrin_t *b = kl_intrin_find("avx512_bf16");
    assert_non_null(b);
    assert_int_equal(b->lanes, 16);
    assert_int_equal(b->red, 2);
    assert_int_equal(b->a_dtype, KL_DT_BF16);
    assert_int_equal(b->b_dtype, KL_DT_BF16);
    assert_int_equal(b->acc_dtype, KL_DT_F32);
    assert_string_equal(b->layout, "[K/2][N][2]");
    assert_string_equal(b->pragma, "avx512f,avx512bf16");
    assert_int_equal(b->ntiles, 0);
    const char *amx[2] = {"amx_bf16", "amx_int8"};
    for (int i = 0; i < 2; i++) {
        const kl_intrin_t *a = kl_intrin_find(amx[i]);
        assert_non_null(a);
        assert_int_equal(a->tile_rows, 16);
        assert_int_equal(a->tile_colsb, 64);
        assert_int_equal(a->ntiles, 8);
        assert_int_equal(a->red, i ? 4 : 2);
        assert_int_equal(a->acc_dtype, i ? KL_DT_S32 : KL_DT_F32);
    }
}

/* i, j, k -> i, jo, ko, [ji (lanes), ki (kb)]; tensorize's rc and err. */
static int s_plain_tz(const char *spec, const char *intrin, int64_t kb,
                      char *err)
{
    kl_workload_t *w = NULL;
    assert_int_equal(kl_workload_from_string(spec, &w, err), KL_OK);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int j2[2], k2[2];
    int64_t N = kl_sched_loop(s, 1)->extent, K = kl_sched_loop(s, 2)->extent;
    int64_t fj[2] = {(N + 15) / 16, 16}, fk[2] = {(K + kb - 1) / kb, kb};
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 1)->id, fj, 2, j2, err),
                     KL_OK);
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 3)->id, fk, 2, k2, err),
                     KL_OK);
    int o[3] = {k2[0], j2[1], k2[1]};
    assert_int_equal(kl_sched_reorder(s, o, 3, err), KL_OK);
    int rc = kl_sched_tensorize(s, j2[1], intrin, err);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
    return rc;
}

static void test_refusals(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    assert_int_not_equal(
        s_plain_tz("matmul M=8 N=32 K=16", "avx512_bf16", 2, err), KL_OK);
    assert_non_null(strstr(err, "is f32, wants bf16"));
    assert_int_not_equal(
        s_plain_tz("matmul M=8 N=32 K=16 in=bf16", "avx512_bf16", 4, err),
        KL_OK);
    assert_non_null(strstr(err, "extent 4, wants 2"));
    assert_int_not_equal(
        s_plain_tz("matmul M=8 N=32 K=16 in=bf16", "avx512_vnni", 4, err),
        KL_OK);
    assert_non_null(strstr(err, "is bf16, wants u8"));
    assert_int_equal(
        s_plain_tz("matmul M=8 N=32 K=16 in=bf16", "avx512_bf16", 2, err),
        KL_OK);
}

/* f32 buffers for every tensor (bf16 ones are stored as f32), inputs in
 * [-1, 1) (most values not bf16: the rounding matters), plus the
 * prepared slot. */
static float **s_alloc(const kl_workload_t *w, uint64_t seed, bool absval)
{
    float **b = kl_xcalloc((size_t)w->ntensors + 1, sizeof *b);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    for (int t = 0; t < w->ntensors; t++) {
        int64_t n = kl_tensor_numel(&w->tensors[t]);
        b[t] = kl_xcalloc((size_t)n, 4);
        for (int64_t i = 0; !w->tensors[t].is_output && i < n; i++) {
            float v = (float)(2 * kl_rng_double(&rng) - 1);
            b[t][i] = absval ? fabsf(v) : v;
        }
    }
    return b;
}

/* Rounds b's bf16 tensors to bf16 values, as the agent's inputs are (a
 * float kernel reads them as they are stored). */
static void s_round_bf16(const kl_workload_t *w, float **b)
{
    for (int t = 0; t < w->ntensors; t++)
        for (int64_t i = 0; w->tensors[t].dtype == KL_DT_BF16 &&
                            i < kl_tensor_numel(&w->tensors[t]);
             i++) {
            uint32_t x = (uint32_t)kl_dtype_bits(KL_DT_BF16, b[t][i]) << 16;
            memcpy(&b[t][i], &x, 4);
        }
}

static void s_free(const kl_workload_t *w, float **b)
{
    for (int t = 0; t < w->ntensors; t++)
        free(b[t]);
    free(b);
}

/* Runs kernel k of w (prepared, then called twice) against the reference;
 * returns whether it ran (false: no avx512_bf16 here, prepare refused).
 * intrin NULL: a float kernel (prepared when it has the step), on inputs
 * that are bf16 values. */
static bool s_run_on(const kl_workload_t *w, const kl_kernel_t *k,
                     const char *intrin);

static bool s_run(const kl_workload_t *w, const kl_kernel_t *k)
{
    return s_run_on(w, k, "avx512_bf16");
}

static bool s_run_on(const kl_workload_t *w, const kl_kernel_t *k,
                     const char *intrin)
{
    char err[KL_ERRMSG_LEN];
    kl_cgrun_t r;
    if (kl_cgrun_load(&r, k->source, k->entry, s_dir, err))
        fail_msg("%s: %s\n%s", w->name, err, k->source);
    assert_true(r.prep || !intrin);
    int nt = w->ntensors, ot = kl_workload_output(w);
    float **a = s_alloc(w, 7, false), **ref = s_alloc(w, 7, false),
          **mag = s_alloc(w, 7, true);
    if (!intrin) {
        s_round_bf16(w, a);
        s_round_bf16(w, ref);
        s_round_bf16(w, mag);
    }
    bool cst[KL_IR_MAX_TENSORS];
    for (int t = 0; t < nt; t++)
        cst[t] = w->tensors[t].is_const;
    void *blk =
        r.prep ? kl_abi_prepare(r.prep, nt, (void *const *)a, cst) : NULL;
    bool ran = !intrin || kl_intrin_cpu_has(kl_intrin_find(intrin));
    if (!ran) {
        assert_null(blk);
    } else {
        assert_true(blk || !r.prep);
        a[nt] = blk;
        kl_workload_eval(w, ref);
        kl_workload_eval(w, mag); /* sum |a * b| (+ |bias|): the scale */
        int64_t n = kl_tensor_numel(&w->tensors[ot]);
        for (int rep = 0; rep < 2; rep++) {
            for (int64_t i = 0; i < n; i++)
                a[ot][i] = -777.0f;
            r.fn((void *const *)a);
            for (int64_t i = 0; i < n; i++)
                if (!(fabsf(a[ot][i] - ref[ot][i]) <=
                      2e-5f * mag[ot][i] + 1e-6f))
                    fail_msg("%s: out[%lld] = %.9g, reference %.9g (scale "
                             "%g)\n%s",
                             w->name, (long long)i, a[ot][i], ref[ot][i],
                             mag[ot][i], k->source);
        }
        free(blk);
        a[nt] = NULL;
    }
    s_free(w, a);
    s_free(w, ref);
    s_free(w, mag);
    kl_cgrun_close(&r);
    return ran;
}

/* Samples of the space on the +bf16 target: tensorized ones and float
 * ones both appear, every one matches the reference. */
static void test_space(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *specs[] = {
        "matmul M=37 N=50 K=33 in=bf16",
        "matmul M=64 N=64 K=64 in=bf16 bias=1 relu=1",
        "dense N=8 I=70 O=48 in=bf16",
        "dense N=13 I=32 O=48 in=bf16 clip=-0.5,0.5",
        /* the vector epilogue: a tensor loaded along the lanes, one
         * gathered across them (S transposed), constants, a clip; N not
         * a multiple of 16 (masked lanes) */
        "Y[i,j] += A[i,k] * B[k,j] | + R[i,j] | * S[j,i] | + 0.25 | "
        "clip(-1, 1) where i=20, j=40, k=32; A: bf16[20,32], B: const "
        "bf16[32,40], R: f32[20,40], S: f32[40,20], Y: f32[20,40]",
    };
    int ntz = 0, nfl = 0, nran = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        kl_workload_t *w = NULL;
        assert_int_equal(kl_workload_from_string(specs[i], &w, err), KL_OK);
        assert_true(kl_workload_is_bf16(w));
        kl_space_t *sp = NULL;
        if (kl_space_for_target("cpu/x86_64-avx512+bf16", w, &sp, err))
            fail_msg("%s: %s", specs[i], err);
        for (uint64_t seed = 1; seed <= 6; seed++) {
            kl_rng_t rng;
            kl_rng_seed(&rng, seed);
            kl_trace_t *tr = NULL;
            kl_sched_t *s = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", specs[i], err);
            kl_tensorize_t tz;
            if (kl_sched_tensorized(s, &tz, err) == KL_OK) {
                assert_string_equal(tz.intrin, "avx512_bf16");
                kl_kernel_t k;
                if (kl_codegen_c(s, NULL, "kl_bf", &k, err))
                    fail_msg("%s: %s", specs[i], err);
                assert_non_null(strstr(k.source, "avx512f,avx512bf16"));
                assert_non_null(strstr(k.source, "vdpbf16ps"));
                assert_non_null(
                    strstr(k.source, "__builtin_cpu_supports(\"avx512bf16\")"));
                nran += s_run(w, &k);
                kl_kernel_free(&k);
                ntz++;
            } else {
                nfl++;
            }
            kl_trace_free(&tr);
            kl_sched_destroy(&s);
        }
        kl_space_destroy(&sp);
        /* Without "+bf16" the space never offers the intrinsic. */
        fx_bf16_never_offered(w, specs[i], 6);
        kl_workload_free(&w);
    }
    print_message("bf16: %d tensorized (%d run), %d float samples\n", ntz, nran,
                  nfl);
    assert_true(ntz > 0);
    assert_true(nfl > 0);
}

/* A sampled schedule of sp (seed): 1 tensorized (checked, and when run is
 * true compiled and run against the reference, *ran counting the runs), 0
 * float. */
static int s_sample_run(kl_space_t *sp, const kl_workload_t *w, uint64_t seed,
                        bool run, int *ran)
{
    char err[KL_ERRMSG_LEN];
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    kl_trace_t *tr = NULL;
    kl_sched_t *s = NULL;
    if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
        fail_msg("%s: %s", w->name, err);
    kl_tensorize_t tz;
    int tzd = kl_sched_tensorized(s, &tz, err) == KL_OK;
    if (tzd) {
        assert_string_equal(tz.intrin, "avx512_bf16");
        /* The batch iterator is the first loop's (fused, parallel). */
        assert_true(tz.it_b >= 0);
        const kl_loop_t *l0 = kl_sched_loop(s, 0);
        assert_int_equal(l0->kind, KL_LOOP_PARALLEL);
        assert_int_equal(l0->parts[0].iter, tz.it_b);
    }
    if (tzd && run) {
        kl_kernel_t k;
        if (kl_codegen_c(s, NULL, "kl_bm", &k, err))
            fail_msg("%s: %s", w->name, err);
        assert_non_null(strstr(k.source, "vdpbf16ps"));
        assert_non_null(strstr(k.source, "KL_WBAT(bc_"));
        *ran += s_run(w, &k);
        kl_kernel_free(&k);
    }
    kl_trace_free(&tr);
    kl_sched_destroy(&s);
    return tzd;
}

/* batch_matmul in=bf16 (and a batched product with B[b,n,k], written out):
 * the +bf16 space samples tensorized kernels with the batch fused into
 * the parallel outer loop, which match the reference; without "+bf16"
 * the intrinsic never appears. */
static void test_space_bmm(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *specs[] = {
        "batch_matmul B=1 M=37 N=50 K=33 in=bf16",
        "batch_matmul B=12 M=20 N=33 K=19 in=bf16",
        "C[b,i,j] += A[b,i,k] * B[b,j,k] where b=3, i=17, j=40, k=21; "
        "A: bf16[3,17,21], B: bf16[3,40,21]",
    };
    int nran = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        kl_workload_t *w = NULL;
        if (kl_workload_from_string(specs[i], &w, err))
            fail_msg("%s: %s", specs[i], err);
        kl_space_t *sp = NULL;
        if (kl_space_for_target("cpu/x86_64-avx512+bf16", w, &sp, err))
            fail_msg("%s: %s", specs[i], err);
        int ntz = 0, nfl = 0;
        for (uint64_t seed = 1; seed <= 16 && (ntz < 2 || !nfl); seed++) {
            int tzd = s_sample_run(sp, w, seed, ntz < 2, &nran);
            ntz += tzd;
            nfl += !tzd;
        }
        if (ntz < 2 || !nfl)
            fail_msg("%s: %d tensorized, %d float samples", specs[i], ntz, nfl);
        kl_space_destroy(&sp);
        fx_bf16_never_offered(w, specs[i], 6);
        kl_workload_free(&w);
    }
    print_message("bf16 batch_matmul: %d tensorized samples run\n", nran);
    if (!nran)
        skip(); /* no avx512_bf16 here: built, prepare refused */
}

/* Batched nests the space does not sample, built by hand and run: the
 * reduction above the batch (acc buffer, the block through acc, the
 * epilogue pass over every batch), and a register tile over an
 * imperfectly split batch (b in the tile, guarded, its reads clamped),
 * that one also with a const B[b,n,k] (every batch packed in prepare). */
static void test_bmm_nests(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    assert_int_equal(kl_workload_from_string(
                         "batch_matmul B=3 M=9 N=20 K=7 in=bf16", &w, err),
                     KL_OK);
    kl_workload_t *wc = NULL;
    assert_int_equal(
        kl_workload_from_string(
            "C[b,i,j] += A[b,i,k] * B[b,j,k] where b=3, i=9, j=20, k=7; "
            "A: bf16[3,9,7], B: const bf16[3,20,7]",
            &wc, err),
        KL_OK);
    int ran = 0;
    for (int v = 0; v < 3; v++) {
        const kl_workload_t *wv = v == 2 ? wc : w;
        kl_sched_t *s = NULL;
        assert_int_equal(kl_sched_create(&s, wv, err), KL_OK);
        int lb = kl_sched_loop(s, 0)->id, li = kl_sched_loop(s, 1)->id;
        int j2[2], k2[2], b2[2];
        int64_t fj[2] = {2, 16}, fk[2] = {4, 2}, fb[2] = {2, 2};
        assert_int_equal(
            kl_sched_split(s, kl_sched_loop(s, 2)->id, fj, 2, j2, err), KL_OK);
        assert_int_equal(
            kl_sched_split(s, kl_sched_loop(s, 4)->id, fk, 2, k2, err), KL_OK);
        if (v == 0) {
            int o[6] = {k2[0], lb, li, j2[0], j2[1], k2[1]};
            assert_int_equal(kl_sched_reorder(s, o, 6, err), KL_OK);
        } else {
            assert_int_equal(kl_sched_split(s, lb, fb, 2, b2, err), KL_OK);
            int o[7] = {b2[0], li, j2[0], b2[1], k2[0], j2[1], k2[1]};
            assert_int_equal(kl_sched_reorder(s, o, 7, err), KL_OK);
            assert_int_equal(kl_sched_parallel(s, b2[0], err), KL_OK);
            assert_int_equal(kl_sched_unroll(s, b2[1], err), KL_OK);
        }
        if (kl_sched_tensorize(s, j2[1], "avx512_bf16", err))
            fail_msg("nest %d: %s", v, err);
        kl_kernel_t k;
        if (kl_codegen_c(s, NULL, "kl_bn", &k, err))
            fail_msg("nest %d: %s", v, err);
        /* v 0: through acc; v 1, 2: a tile of two batches. */
        assert_non_null(strstr(k.source, v ? "bc_1" : "float *acc"));
        if (v == 2)
            assert_non_null(strstr(k.source, "kl_packb((const float *)args"));
        ran += s_run(wv, &k);
        kl_kernel_free(&k);
        kl_sched_destroy(&s);
    }
    kl_workload_free(&wc);
    kl_workload_free(&w);
    if (!ran)
        skip();
}

/* Batched products the tensorized kernel cannot take: tensorize names
 * what differs, and the +bf16 space offers only float schedules for them,
 * which still match the reference. */
static void test_bmm_refused(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *why;
    } c[] = {
        {"C[b,i,j] += A[b,k,i] * B[b,k,j] where b=2, i=17, j=20, k=6; "
         "A: bf16[2,6,17], B: bf16[2,6,20]",
         "the accesses are not A[b,m,k], B[b,k,n] or B[b,n,k], C[b,m,n]"},
        {"C[i,b,j] += A[b,i,k] * B[b,k,j] where b=2, i=17, j=20, k=6; "
         "A: bf16[2,17,6], B: bf16[2,6,20]",
         "the first index of C is not the batch b"},
        /* B shared by every batch: a 1x1 convolution, whose weights are
         * packed once: an input B is refused. */
        {"C[b,i,j] += A[b,i,k] * B[k,j] where b=2, i=17, j=20, k=6; "
         "A: bf16[2,17,6], B: bf16[6,20]",
         "tensor B is not const"},
    };
    char err[KL_ERRMSG_LEN];
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kl_workload_t *w = NULL;
        if (kl_workload_from_string(c[i].spec, &w, err))
            fail_msg("%s: %s", c[i].spec, err);
        /* b, i, j, k -> b, i, jo, ko, [ji ki] */
        kl_sched_t *s = NULL;
        assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
        int j2[2], k2[2];
        int64_t fj[2] = {2, 16}, fk[2] = {3, 2};
        assert_int_equal(
            kl_sched_split(s, kl_sched_loop(s, 2)->id, fj, 2, j2, err), KL_OK);
        assert_int_equal(
            kl_sched_split(s, kl_sched_loop(s, 4)->id, fk, 2, k2, err), KL_OK);
        int o[3] = {k2[0], j2[1], k2[1]};
        assert_int_equal(kl_sched_reorder(s, o, 3, err), KL_OK);
        assert_int_not_equal(kl_sched_tensorize(s, j2[1], "avx512_bf16", err),
                             KL_OK);
        if (!strstr(err, c[i].why))
            fail_msg("%s: \"%s\", wanted \"%s\"", c[i].spec, err, c[i].why);
        kl_sched_destroy(&s);
        kl_space_t *sp = NULL;
        if (kl_space_for_target("cpu/x86_64-avx512+bf16", w, &sp, err))
            fail_msg("%s: %s", c[i].spec, err);
        for (uint64_t seed = 1; seed <= 4; seed++) {
            kl_rng_t rng;
            kl_rng_seed(&rng, seed);
            kl_trace_t *tr = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", c[i].spec, err);
            kl_tensorize_t tz;
            assert_int_equal(kl_sched_tensorized(s, &tz, err), KL_ERR_NOTFOUND);
            if (seed == 1) {
                kl_kernel_t k;
                if (kl_codegen_c(s, NULL, "kl_fl", &k, err))
                    fail_msg("%s: %s", c[i].spec, err);
                assert_true(s_run_on(w, &k, NULL));
                kl_kernel_free(&k);
            }
            kl_trace_free(&tr);
            kl_sched_destroy(&s);
        }
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
    /* An int8 intrinsic does not take a batched product. */
    kl_workload_t *w = NULL;
    assert_int_equal(kl_workload_from_string(
                         "batch_matmul B=2 M=8 N=32 K=16 in=bf16", &w, err),
                     KL_OK);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int j2[2], k2[2];
    int64_t fj[2] = {2, 16}, fk[2] = {8, 2};
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 2)->id, fj, 2, j2, err),
                     KL_OK);
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 4)->id, fk, 2, k2, err),
                     KL_OK);
    int o[3] = {k2[0], j2[1], k2[1]};
    assert_int_equal(kl_sched_reorder(s, o, 3, err), KL_OK);
    assert_int_equal(kl_sched_tensorize(s, j2[1], "amx_bf16", err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "batched product (batch b)"));
    assert_int_equal(kl_sched_tensorize(s, j2[1], "avx512_bf16", err), KL_OK);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

/* The prepared block of a dense (W const, [O][I]): panel (n / 16) over
 * all K pairs, element (k, n) at ((n/16 * kg + k/2) * 16 + n%16) * 2 +
 * k%2, the bf16 bits of W[n][k] rounded to nearest even, zeros past. */
static void test_packed_layout(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    assert_int_equal(
        kl_workload_from_string("dense N=4 I=37 O=21 in=bf16", &w, err), KL_OK);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int j2[2], k2[2];
    int64_t fj[2] = {2, 16}, fk[2] = {19, 2};
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 1)->id, fj, 2, j2, err),
                     KL_OK);
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 3)->id, fk, 2, k2, err),
                     KL_OK);
    int o[3] = {k2[0], j2[1], k2[1]};
    assert_int_equal(kl_sched_reorder(s, o, 3, err), KL_OK);
    assert_int_equal(kl_sched_tensorize(s, j2[1], "avx512_bf16", err), KL_OK);
    kl_kernel_t k;
    assert_int_equal(kl_codegen_c(s, NULL, "kl_bf", &k, err), KL_OK);
    if (!kl_intrin_cpu_has(kl_intrin_find("avx512_bf16"))) {
        s_run(w, &k); /* prepare refuses */
        kl_kernel_free(&k);
        kl_sched_destroy(&s);
        kl_workload_free(&w);
        skip();
    }
    kl_cgrun_t r;
    assert_int_equal(kl_cgrun_load(&r, k.source, k.entry, s_dir, err), KL_OK);
    float **a = s_alloc(w, 3, false);
    int tw = -1;
    for (int t = 0; t < w->ntensors; t++)
        if (w->tensors[t].is_const && w->tensors[t].dtype == KL_DT_BF16)
            tw = t;
    assert_true(tw >= 0);
    bool cst[KL_IR_MAX_TENSORS];
    for (int t = 0; t < w->ntensors; t++)
        cst[t] = w->tensors[t].is_const;
    const uint16_t *wp =
        kl_abi_prepare(r.prep, w->ntensors, (void *const *)a, cst);
    assert_non_null(wp);
    const int64_t K = 37, N = 21, kg = 19;
    for (int64_t n = 0; n < 32; n++)
        for (int64_t kk = 0; kk < 2 * kg; kk++) {
            uint16_t want = n < N && kk < K
                                ? kl_dtype_bits(KL_DT_BF16, a[tw][n * K + kk])
                                : 0;
            int64_t off = ((n / 16 * kg + kk / 2) * 16 + n % 16) * 2 + kk % 2;
            if (wp[off] != want)
                fail_msg("W[%lld][%lld]: packed %#x, want %#x", (long long)n,
                         (long long)kk, wp[off], want);
        }
    free((void *)wp);
    s_free(w, a);
    kl_cgrun_close(&r);
    assert_true(s_run(w, &k));
    kl_kernel_free(&k);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

/* AMX kernels (codegen_amx.c): the tile configuration and the tile
 * intrinsics in the source, the permission request in prepare; built
 * here, run against the reference where the CPU has AMX (skipped
 * otherwise, after checking that prepare refuses). */
static void test_amx(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    static const struct {
        const char *spec, *intrin, *dp;
    } c[] = {
        {"dense N=20 I=70 O=40 in=bf16 relu=1", "amx_bf16", "_tile_dpbf16ps"},
        {"qdense N=8 I=100 O=48 za=3 bias=1", "amx_int8", "_tile_dpbusd"},
        {"qmatmul M=33 N=40 K=70 za=5 out=s32", "amx_int8", "_tile_dpbusd"},
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        kl_workload_t *w = NULL;
        assert_int_equal(kl_workload_from_string(c[i].spec, &w, err), KL_OK);
        kl_kernel_t k;
        if (kl_codegen_amx_product(w, c[i].intrin, "kl_amx", &k, err))
            fail_msg("%s: %s", c[i].spec, err);
        const char *want[] = {"#pragma GCC target(\"amx-tile,",
                              "c.palette_id = 1;",
                              "c.rows[t] = 16;",
                              "c.colsb[t] = 64;",
                              "_tile_loadconfig(&c);",
                              "_tile_zero(3);",
                              "_tile_loadd(4, ap + m0 *",
                              "_tile_loadd(7, wp + KL_WOFF(k0, n0 + 16)",
                              c[i].dp,
                              "_tile_stored(3, &cb[16][16], 128);",
                              "_tile_release();",
                              "syscall(SYS_arch_prctl, 0x1023, 18)",
                              "__builtin_cpu_supports(\"amx-tile\")"};
        for (size_t j = 0; j < sizeof want / sizeof want[0]; j++)
            if (!strstr(k.source, want[j]))
                fail_msg("%s: no \"%s\" in\n%s", c[i].spec, want[j], k.source);
        kl_cgrun_t r;
        if (kl_cgrun_load(&r, k.source, k.entry, s_dir, err))
            fail_msg("%s: %s\n%s", c[i].spec, err, k.source);
        assert_non_null(r.prep);
        if (kl_workload_is_int(w)) {
            bool has = kl_intrin_cpu_has(kl_intrin_find(c[i].intrin));
            void **a = NULL, **b = NULL;
            if (has) {
                if (kl_cgrun_compare(&r, w, 5, &a, &b, err))
                    fail_msg("%s: %s\n%s", c[i].spec, err, k.source);
                kl_cgrun_free(w, b);
                ran++;
            } else {
                a = kl_cgrun_alloc(w, 5);
                bool cst[KL_IR_MAX_TENSORS];
                for (int t = 0; t < w->ntensors; t++)
                    cst[t] = w->tensors[t].is_const;
                assert_null(kl_abi_prepare(r.prep, w->ntensors, a, cst));
            }
            kl_cgrun_free(w, a);
            kl_cgrun_close(&r);
        } else {
            kl_cgrun_close(&r);
            ran += s_run_on(w, &k, c[i].intrin);
        }
        kl_kernel_free(&k);
        kl_workload_free(&w);
    }
    /* A matmul's B is an input: not packed once, refused for now. */
    kl_workload_t *w = NULL;
    assert_int_equal(
        kl_workload_from_string("matmul M=32 N=32 K=32 in=bf16", &w, err),
        KL_OK);
    kl_kernel_t k;
    assert_int_not_equal(kl_codegen_amx_product(w, "amx_bf16", NULL, &k, err),
                         KL_OK);
    assert_non_null(strstr(err, "B is an input"));
    kl_workload_free(&w);
    if (!ran)
        skip(); /* no AMX on this CPU: built and checked, not run */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test_setup_teardown(test_space, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_space_bmm, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_bmm_nests, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_bmm_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_packed_layout, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_amx, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
