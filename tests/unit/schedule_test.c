/* Unit tests of the schedule state (kl_sched.h): the naive nest, every
 * primitive's effect and its error cases, and the CPU postprocessors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_space.h"
#include "wl_fx.h"

static int s_id(const kl_sched_t *s, int pos)
{
    return kl_sched_loop(s, pos)->id;
}

static void test_naive_nest(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("conv2d N=1 C=3 H=8 W=8 K=4 R=3 S=3 pad=1");
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_sched_nloops(s), w->niters);
    /* Spatial iterators first, then reductions. */
    bool seen_red = false;
    for (int p = 0; p < kl_sched_nloops(s); p++) {
        const kl_loop_t *l = kl_sched_loop(s, p);
        assert_int_equal(l->nparts, 1);
        assert_int_equal(l->parts[0].stride, 1);
        assert_int_equal(l->extent, w->iters[l->parts[0].iter].extent);
        assert_int_equal(l->kind, KL_LOOP_SERIAL);
        if (l->reduce)
            seen_red = true;
        else
            assert_false(seen_red);
    }
    assert_int_equal(kl_sched_nstages(s), 0);
    assert_int_equal(kl_sched_nguards(s), 0);
    kl_sched_destroy(&s);
    assert_null(s);
    kl_workload_free(&w);
}

static void test_split_fuse_reorder(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=64 N=48 K=32");
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int i = s_id(s, 0), j = s_id(s, 1), k = s_id(s, 2), ii[3], jj[2];
    int64_t fi[3] = {4, 2, 8}, fj[2] = {3, 16};
    assert_int_equal(kl_sched_split(s, i, fi, 3, ii, err), KL_OK);
    assert_int_equal(kl_sched_nloops(s), 5);
    assert_int_equal(kl_sched_loop_by_id(s, ii[0])->parts[0].stride, 16);
    assert_int_equal(kl_sched_loop_by_id(s, ii[1])->parts[0].stride, 8);
    assert_int_equal(kl_sched_loop_by_id(s, ii[2])->parts[0].stride, 1);
    assert_int_equal(kl_sched_loop_pos(s, i), -1);
    assert_int_equal(kl_sched_split(s, j, fj, 2, jj, err), KL_OK);
    assert_int_equal(kl_sched_nguards(s), 0);
    /* i0 i1 i2 j0 j1 k -> i0 j0 k i1 j1 i2 */
    int ord[6] = {ii[0], jj[0], k, ii[1], jj[1], ii[2]};
    assert_int_equal(kl_sched_reorder(s, ord, 6, err), KL_OK);
    for (int p = 0; p < 6; p++)
        assert_int_equal(s_id(s, p), ord[p]);
    int f;
    int two[2] = {ii[0], jj[0]};
    assert_int_equal(kl_sched_fuse(s, two, 2, &f, err), KL_OK);
    const kl_loop_t *fl = kl_sched_loop(s, 0);
    assert_int_equal(fl->id, f);
    assert_int_equal(fl->extent, 12);
    assert_int_equal(fl->nparts, 2);
    assert_int_equal(kl_sched_parallel(s, f, err), KL_OK);
    assert_int_equal(kl_sched_vectorize(s, ii[2], err), KL_OK);
    char *p = kl_sched_print(s);
    assert_non_null(strstr(p, "[parallel]"));
    assert_non_null(strstr(p, "[vectorize]"));
    free(p);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

static void test_imperfect_split_guard(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=100 N=16 K=8");
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int ids[2], ids2[2];
    int64_t f[2] = {9, 12};
    assert_int_equal(kl_sched_unroll(s, s_id(s, 0), err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "at most 64"));
    assert_int_equal(kl_sched_split(s, s_id(s, 0), f, 2, ids, err), KL_OK);
    assert_int_equal(kl_sched_nguards(s), 1);
    const kl_guard_t *g = kl_sched_guard(s, 0);
    assert_int_equal(g->bound, 100);
    assert_int_equal(g->nterms, 2);
    /* Splitting a guarded loop again keeps the guard in terms of the new
     * loops. */
    int64_t f2[2] = {3, 4};
    assert_int_equal(kl_sched_split(s, ids[1], f2, 2, ids2, err), KL_OK);
    g = kl_sched_guard(s, 0);
    assert_int_equal(g->nterms, 3);
    int64_t sum = 0;
    for (int t = 0; t < g->nterms; t++)
        sum += g->terms[t].coef;
    assert_int_equal(sum, 12 + 4 + 1);
    assert_int_equal(kl_sched_loop_by_id(s, ids[0])->extent, 9);
    assert_int_equal(kl_sched_unroll(s, ids[0], err), KL_OK);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

static void test_primitive_errors(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=64 N=64 K=64");
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int i = s_id(s, 0), j = s_id(s, 1), k = s_id(s, 2), out[4];
    int64_t small[2] = {2, 4}, zero[2] = {0, 64};
    /* split: product too small, zero factor, unknown loop */
    assert_int_equal(kl_sched_split(s, i, small, 2, out, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "< extent"));
    assert_int_equal(kl_sched_split(s, i, zero, 2, out, err), KL_ERR_INVAL);
    assert_int_equal(kl_sched_split(s, 999, small, 2, out, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not in the nest"));
    /* reorder: a loop not in the nest, a loop twice */
    int bad[2] = {i, 999}, twice[2] = {i, i};
    assert_int_equal(kl_sched_reorder(s, bad, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not in this nest"));
    assert_int_equal(kl_sched_reorder(s, twice, 2, err), KL_ERR_INVAL);
    /* fuse: non-adjacent, spatial with reduction */
    int nonadj[2] = {i, k}, mixed[2] = {j, k}, f;
    assert_int_equal(kl_sched_fuse(s, nonadj, 2, &f, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not adjacent"));
    assert_int_equal(kl_sched_fuse(s, mixed, 2, &f, err), KL_ERR_INVAL);
    /* vectorize: a reduction, a loop that is not innermost */
    assert_int_equal(kl_sched_vectorize(s, k, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "reduction"));
    assert_int_equal(kl_sched_vectorize(s, i, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "innermost"));
    /* parallel / bind on a reduction, bind to a CPU kind, unroll too long */
    assert_int_equal(kl_sched_parallel(s, k, err), KL_ERR_INVAL);
    assert_int_equal(kl_sched_bind(s, k, KL_LOOP_THREAD_X, err), KL_ERR_INVAL);
    assert_int_equal(kl_sched_bind(s, i, KL_LOOP_PARALLEL, err), KL_ERR_INVAL);
    /* bind the same index twice */
    assert_int_equal(kl_sched_bind(s, i, KL_LOOP_BLOCK_X, err), KL_OK);
    assert_int_equal(kl_sched_bind(s, j, KL_LOOP_BLOCK_X, err), KL_ERR_INVAL);
    /* caches: read of the output, a second write cache, compute_at of a
     * write stage, attach under a loop that does not read the tensor */
    int b, b2, rb;
    assert_int_equal(
        kl_sched_cache_read(s, kl_workload_output(w), KL_SCOPE_PACKED, &b, err),
        KL_ERR_INVAL);
    assert_int_equal(kl_sched_cache_write(s, KL_SCOPE_LOCAL, &b, err), KL_OK);
    assert_int_equal(kl_sched_cache_write(s, KL_SCOPE_LOCAL, &b2, err),
                     KL_ERR_INVAL);
    assert_int_equal(kl_sched_compute_at(s, b, i, err), KL_ERR_INVAL);
    assert_int_equal(kl_sched_cache_read(s, 0, KL_SCOPE_PACKED, &rb, err),
                     KL_OK);
    assert_int_equal(kl_sched_reverse_compute_at(s, rb, i, err), KL_ERR_INVAL);
    /* k is innermost: nothing below it reads A. */
    assert_int_equal(kl_sched_compute_at(s, rb, k, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "no loop below"));
    assert_int_equal(kl_sched_compute_at(s, rb, j, err), KL_OK);
    /* reorder across the attach point of a stage */
    int across[2] = {k, i};
    assert_int_equal(kl_sched_reorder(s, across, 2, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "attach point"));
    /* split of an attach point */
    int64_t f2[2] = {8, 8};
    assert_int_equal(kl_sched_split(s, j, f2, 2, out, err), KL_ERR_INVAL);
    /* annotate: empty key */
    assert_int_equal(kl_sched_annotate(s, i, "", 1, err), KL_ERR_INVAL);
    assert_int_equal(kl_sched_annotate(s, i, "unroll_max_step", 16, err),
                     KL_OK);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

static void test_fused_split_error(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=8 N=8 K=8");
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int two[2] = {s_id(s, 0), s_id(s, 1)}, f, out[2];
    assert_int_equal(kl_sched_fuse(s, two, 2, &f, err), KL_OK);
    int64_t fs[2] = {8, 8};
    assert_int_equal(kl_sched_split(s, f, fs, 2, out, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "fused"));
    /* The failed primitive left the nest as it was. */
    assert_int_equal(kl_sched_nloops(s), 2);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

static void test_postproc_cpu(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=64 N=64 K=64");
    kl_target_t t;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512", &t, err), KL_OK);
    assert_int_equal(t.vec_lanes, 16);
    assert_int_equal(kl_target_parse("cpu/sparc", &t, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "cpu/sparc"));
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512", &t, err), KL_OK);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_postproc_cpu(&t, s, err), KL_OK);
    /* A parallel loop that is not outermost is rejected with a reason. */
    assert_int_equal(kl_sched_parallel(s, s_id(s, 1), err), KL_OK);
    assert_int_equal(kl_postproc_cpu(&t, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "not the outermost"));
    kl_sched_destroy(&s);
    /* Too many accumulators for the register file. */
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int b, out[2];
    int64_t f[2] = {1, 64};
    assert_int_equal(kl_sched_split(s, s_id(s, 0), f, 2, out, err), KL_OK);
    int ord[4] = {out[0], s_id(s, 3), out[1], s_id(s, 2)};
    assert_int_equal(kl_sched_reorder(s, ord, 4, err), KL_OK);
    assert_int_equal(kl_sched_unroll(s, out[1], err), KL_OK);
    assert_int_equal(kl_sched_vectorize(s, s_id(s, 3), err), KL_OK);
    assert_int_equal(kl_sched_cache_write(s, KL_SCOPE_LOCAL, &b, err), KL_OK);
    assert_int_equal(kl_sched_reverse_compute_at(s, b, s_id(s, 1), err), KL_OK);
    assert_int_equal(kl_postproc_cpu(&t, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "accumulators"));
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_naive_nest),
        cmocka_unit_test(test_split_fuse_reorder),
        cmocka_unit_test(test_imperfect_split_guard),
        cmocka_unit_test(test_primitive_errors),
        cmocka_unit_test(test_fused_split_error),
        cmocka_unit_test(test_postproc_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
