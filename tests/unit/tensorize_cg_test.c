/* Unit tests of the C of tensorized schedules (codegen_tensorize.c): for
 * qmatmul / qdense shapes (N not a multiple of the lanes, K not of 4, zero
 * points, bias, per-channel and per-tensor requant, s8 / s32 outputs) and
 * several outer tilings (loop orders, imperfect splits, fused and parallel
 * loops), the generated kernel is compiled, prepared (packed weights and
 * compensation) and run, and its output compared bit for bit with the
 * reference interpreter (kl_workload_eval_typed). Each intrinsic runs where
 * this CPU has its feature; where it does not, its source must still
 * compile (the #pragma GCC target carries the ISA). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

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
    /* Keep libgomp loaded: its idle threads outlive the kernel's dlclose. */
    if (!dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE))
        return -1;
    return kl_test_mkdtemp(s_dir, sizeof s_dir, "kl_tzcg_test_XXXXXX") ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kl_test_rmdir(s_dir);
    return 0;
}

/* Tilings of the nest i, j, k (loops 0, 1, 2) around a lanes x 4 block. */
enum { T_PLAIN, T_TILED, T_PARALLEL, T_KOUTER, T_REGTILE };

static void s_tile(kl_sched_t *s, int tiling, int64_t lanes, int *blk)
{
    char err[KL_ERRMSG_LEN];
    int li = kl_sched_loop(s, 0)->id, lj = kl_sched_loop(s, 1)->id,
        lk = kl_sched_loop(s, 2)->id;
    int i2[2], j2[2], j3[3], k2[2], k3[3];
    int64_t Kx = kl_sched_loop(s, 2)->extent;
    int64_t fj2[2] = {(kl_sched_loop(s, 1)->extent + lanes - 1) / lanes, lanes};
    int64_t fk2[2] = {(Kx + 3) / 4, 4};
    switch (tiling) {
    case T_PLAIN: /* i, jo, ko, [ji, ki] */
        assert_int_equal(kl_sched_split(s, lj, fj2, 2, j2, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lk, fk2, 2, k2, err), KL_OK);
        {
            int o[3] = {k2[0], j2[1], k2[1]};
            assert_int_equal(kl_sched_reorder(s, o, 3, err), KL_OK);
        }
        *blk = j2[1];
        break;
    case T_TILED: { /* io, jo, ii, jm, ko, [ji, ki]: imperfect outer splits */
        int64_t fi[2] = {2, (kl_sched_loop(s, 0)->extent + 1) / 2 + 1};
        int64_t fj[3] = {2, (fj2[0] + 1) / 2 + 1, lanes};
        assert_int_equal(kl_sched_split(s, li, fi, 2, i2, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lj, fj, 3, j3, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lk, fk2, 2, k2, err), KL_OK);
        int o[7] = {i2[0], j3[0], i2[1], j3[1], k2[0], j3[2], k2[1]};
        assert_int_equal(kl_sched_reorder(s, o, 7, err), KL_OK);
        *blk = j3[2];
        break;
    }
    case T_PARALLEL: { /* (io.jo) parallel, ii, ko, jm, [ji, ki] */
        int64_t fi[2] = {(kl_sched_loop(s, 0)->extent + 1) / 2, 2};
        assert_int_equal(kl_sched_split(s, li, fi, 2, i2, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lj, fj2, 2, j2, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lk, fk2, 2, k2, err), KL_OK);
        int o[6] = {i2[0], j2[0], i2[1], k2[0], j2[1], k2[1]};
        assert_int_equal(kl_sched_reorder(s, o, 6, err), KL_OK);
        int f[2] = {i2[0], j2[0]}, fused;
        assert_int_equal(kl_sched_fuse(s, f, 2, &fused, err), KL_OK);
        assert_int_equal(kl_sched_parallel(s, fused, err), KL_OK);
        *blk = j2[1];
        break;
    }
    case T_REGTILE: { /* io, jo, ii (unrolled, 3, imperfect), jm (unrolled,
                       * 2), ko, [ji, ki]: a register tile of 6 */
        int64_t fi[2] = {(kl_sched_loop(s, 0)->extent + 2) / 3, 3};
        int64_t fj[3] = {(fj2[0] + 1) / 2, 2, lanes};
        assert_int_equal(kl_sched_split(s, li, fi, 2, i2, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lj, fj, 3, j3, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lk, fk2, 2, k2, err), KL_OK);
        int o[7] = {i2[0], j3[0], i2[1], j3[1], k2[0], j3[2], k2[1]};
        assert_int_equal(kl_sched_reorder(s, o, 7, err), KL_OK);
        assert_int_equal(kl_sched_unroll(s, i2[1], err), KL_OK);
        assert_int_equal(kl_sched_unroll(s, j3[1], err), KL_OK);
        *blk = j3[2];
        break;
    }
    case T_KOUTER: { /* ko0, i, jo, ko1, [ji, ki]: k split around the rest */
        int64_t fk[3] = {2, (fk2[0] + 1) / 2, 4};
        assert_int_equal(kl_sched_split(s, lj, fj2, 2, j2, err), KL_OK);
        assert_int_equal(kl_sched_split(s, lk, fk, 3, k3, err), KL_OK);
        int o[6] = {k3[0], li, j2[0], k3[1], j2[1], k3[2]};
        assert_int_equal(kl_sched_reorder(s, o, 6, err), KL_OK);
        *blk = j2[1];
        break;
    }
    }
}

static int s_run_checks;

/* Generates, builds and (where the CPU has the feature) runs s, comparing
 * with the interpreter. */
static void s_verify(const kl_workload_t *w, const kl_sched_t *s,
                     const kl_intrin_t *in, const char *spec, int tiling)
{
    char err[KL_ERRMSG_LEN];
    const char *intrin = in->name;
    kl_kernel_t k;
    if (kl_codegen_c(s, NULL, "kl_tz", &k, err))
        fail_msg("%s %s %d: %s", spec, intrin, tiling, err);
    assert_true(k.prepare);
    assert_non_null(strstr(k.source, in->pragma));
    kl_cgrun_t r;
    if (kl_cgrun_load(&r, k.source, k.entry, s_dir, err))
        fail_msg("%s: %s\n%s", spec, err, k.source);
    assert_non_null(r.prep);
    if (kl_intrin_cpu_has(in)) {
        void **a = NULL, **b = NULL;
        if (kl_cgrun_compare(&r, w, 11, &a, &b, err))
            fail_msg("%s %s tiling %d: tensorized C: %s\n%s", spec, intrin,
                     tiling, err, k.source);
        /* A second call on the same prepared block gives the same. */
        assert_true(kl_cgrun_again(&r, w, a, b));
        assert_true(kl_cgrun_varied(w, a));
        kl_cgrun_free(w, a);
        kl_cgrun_free(w, b);
        s_run_checks++;
    } else {
        /* Without the feature, prepare refuses: no kernel runs to trap. */
        void **a = kl_cgrun_alloc(w, 11);
        bool cst[KL_IR_MAX_TENSORS];
        for (int t = 0; t < w->ntensors; t++)
            cst[t] = w->tensors[t].is_const;
        assert_null(kl_abi_prepare(r.prep, w->ntensors, a, cst));
        kl_cgrun_free(w, a);
    }
    kl_cgrun_close(&r);
    kl_kernel_free(&k);
}

static void s_check(const char *spec, const char *intrin, int tiling)
{
    char err[KL_ERRMSG_LEN];
    const kl_intrin_t *in = kl_intrin_find(intrin);
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(spec, &w, err))
        fail_msg("%s: %s", spec, err);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int blk = -1;
    s_tile(s, tiling, in->lanes, &blk);
    if (kl_sched_tensorize(s, blk, intrin, err))
        fail_msg("%s %s %d: %s", spec, intrin, tiling, err);
    s_verify(w, s, in, spec, tiling);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

/* The CPU design space of integer products: samples of avx512 and avx2
 * targets are tensorized with their intrinsic and bit-exact. */
static void test_space(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *specs[] = {"qmatmul M=64 N=48 K=40 za=5 bias=1",
                           "qdense N=12 I=50 O=21 za=9 out=s8 zo=3"};
    /* The intrinsic comes from the target's features: AVX-512 without
     * "+vnni" (Skylake-SP) gets the AVX2 fallback, AVX2 with "+avxvnni"
     * the VEX vpdpbusd. */
    const char *targets[] = {"cpu/x86_64-avx512+vnni", "cpu/x86_64-avx2",
                             "cpu/x86_64-avx512", "cpu/x86_64-avx2+avxvnni"};
    const char *intrins[] = {"avx512_vnni", "avx2_i8", "avx2_i8", "avx_vnni"};
    s_run_checks = 0;
    for (int ti = 0; ti < 4; ti++)
        for (int i = 0; i < 2; i++) {
            kl_workload_t *w = NULL;
            assert_int_equal(kl_workload_from_string(specs[i], &w, err), KL_OK);
            kl_space_t *sp = NULL;
            if (kl_space_for_target(targets[ti], w, &sp, err))
                fail_msg("%s: %s", specs[i], err);
            kl_rng_t rng;
            kl_rng_seed(&rng, 42);
            for (int n = 0; n < 4; n++) {
                kl_trace_t *tr = NULL;
                kl_sched_t *s = NULL;
                if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                    fail_msg("%s: %s", specs[i], err);
                char *text = kl_trace_to_text(tr);
                assert_non_null(strstr(text, intrins[ti]));
                kl_tensorize_t tz;
                assert_int_equal(kl_sched_tensorized(s, &tz, err), KL_OK);
                s_verify(w, s, kl_intrin_find(intrins[ti]), specs[i], -1);
                free(text);
                kl_trace_free(&tr);
                kl_sched_destroy(&s);
            }
            kl_space_destroy(&sp);
            kl_workload_free(&w);
        }
    assert_true(s_run_checks > 0);
}

static const char *s_specs[] = {
    "qmatmul M=5 N=7 K=33 za=131 zo=9 bias=1",
    "qmatmul M=16 N=32 K=64 za=3",
    "qmatmul M=9 N=40 K=30 scale=0.004 out=s8 zo=-7 relu=1",
    "qmatmul M=6 N=20 K=12 za=200 out=s32 bias=1",
    "qdense N=3 I=41 O=19 za=100 clip=20,200 bias=1",
    "qdense N=8 I=64 O=48 za=128",
    /* plain s32 outputs: the fused tile stores whole vectors, and the
     * lanes of a last partial block one by one */
    "qmatmul M=7 N=40 K=20 za=5 out=s32",
    "qmatmul M=10 N=36 K=16 za=250 out=s32",
};

static void test_match_reference(void **state)
{
    (void)state;
    s_run_checks = 0;
    /* The int8 SIMD rows (bf16: tensorize_bf16_test; AMX: not run here). */
    for (int i = 0; i < kl_intrin_count(); i++)
        for (size_t sp = 0; kl_intrin_at(i)->acc_dtype == KL_DT_S32 &&
                            !kl_intrin_at(i)->ntiles &&
                            sp < sizeof s_specs / sizeof s_specs[0];
             sp++)
            for (int t = T_PLAIN; t <= T_REGTILE; t++)
                s_check(s_specs[sp], kl_intrin_at(i)->name, t);
    /* This machine runs at least the AVX2 fallback. */
    print_message("ran %d tensorized kernels\n", s_run_checks);
    assert_true(s_run_checks > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_match_reference, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_space, s_setup, s_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
