/* Unit tests of the tensorize primitive (kl_sched_tensorize, kl_intrin.h):
 * which blocks match which intrinsic, the messages of the refusals (the
 * dimension or the dtype that differs), and that a trace with tensorize
 * replays to the same nest and round-trips through its text and proto
 * forms. The generated code is tested in tensorize_codegen_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_trace.h"
#include "kl_util.h"
#include "wl_fx.h"

/* Splits loop 1 (n) into [?, lanes] and loop 2 (k) into [?, red], then
 * orders i, n_o, k_o, n_i, k_i; returns the n_i loop id. */
static int s_block(kl_sched_t *s, int64_t lanes, int64_t red)
{
    char err[KL_ERRMSG_LEN];
    int n[2], k[2];
    const kl_loop_t *ln = kl_sched_loop(s, 1), *lk = kl_sched_loop(s, 2);
    int64_t fn[2] = {(ln->extent + lanes - 1) / lanes, lanes};
    int64_t fk[2] = {(lk->extent + red - 1) / red, red};
    assert_int_equal(kl_sched_split(s, ln->id, fn, 2, n, err), KL_OK);
    assert_int_equal(kl_sched_split(s, kl_sched_loop(s, 3)->id, fk, 2, k, err),
                     KL_OK);
    int order[4] = {n[0], k[0], n[1], k[1]};
    assert_int_equal(kl_sched_reorder(s, order, 4, err), KL_OK);
    return n[1];
}

static void test_intrin_table(void **state)
{
    (void)state;
    assert_true(kl_intrin_count() >= 3);
    const kl_intrin_t *v = kl_intrin_find("avx512_vnni");
    assert_non_null(v);
    assert_int_equal(v->lanes, 16);
    assert_int_equal(v->red, 4);
    assert_int_equal(v->a_dtype, KL_DT_U8);
    assert_int_equal(v->b_dtype, KL_DT_S8);
    assert_int_equal(v->acc_dtype, KL_DT_S32);
    assert_non_null(strstr(v->mflags, "-mavx512vnni"));
    assert_int_equal(kl_intrin_find("avx_vnni")->lanes, 8);
    assert_int_equal(kl_intrin_find("avx2_i8")->lanes, 8);
    assert_null(kl_intrin_find("sse9"));
}

static void test_match(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *specs[] = {"qmatmul M=8 N=32 K=16 za=3",
                           "qdense N=4 I=10 O=20 bias=1",
                           "qmatmul M=3 N=7 K=5 out=s32"};
    for (int i = 0; i < 3; i++) {
        kl_workload_t *w = fx_wl(specs[i]);
        kl_sched_t *s = NULL;
        assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
        int blk = s_block(s, 16, 4);
        if (kl_sched_tensorize(s, blk, "avx512_vnni", err))
            fail_msg("%s: %s", specs[i], err);
        kl_tensorize_t tz;
        assert_int_equal(kl_sched_tensorized(s, &tz, err), KL_OK);
        assert_string_equal(tz.intrin, "avx512_vnni");
        assert_int_equal(tz.lanes, 16);
        assert_int_equal(tz.b_nk, i == 1);
        assert_int_equal(tz.za, i == 0 ? 3 : 0);
        /* Once only. */
        assert_int_equal(kl_sched_tensorize(s, blk, "avx512_vnni", err),
                         KL_ERR_INVAL);
        assert_non_null(strstr(err, "already"));
        char *p = kl_sched_print(s);
        assert_non_null(strstr(p, "with avx512_vnni"));
        free(p);
        kl_sched_destroy(&s);
        kl_workload_free(&w);
    }
}

static void s_refused(const char *spec, int64_t lanes, int64_t red,
                      const char *intrin, const char *want)
{
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = fx_wl(spec);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int blk = lanes ? s_block(s, lanes, red) : kl_sched_loop(s, 1)->id;
    assert_int_equal(kl_sched_tensorize(s, blk, intrin, err), KL_ERR_INVAL);
    if (!strstr(err, want))
        fail_msg("%s: got \"%s\", wants \"%s\"", spec, err, want);
    kl_tensorize_t tz;
    assert_int_equal(kl_sched_tensorized(s, &tz, err), KL_ERR_NOTFOUND);
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

static void test_refusals(void **state)
{
    (void)state;
    s_refused("qmatmul M=8 N=32 K=16", 8, 4, "avx512_vnni",
              "avx512_vnni: dimension j has extent 8, wants 16");
    s_refused("qmatmul M=8 N=32 K=16", 16, 2, "avx512_vnni",
              "dimension k has extent 2, wants 4");
    s_refused("qmatmul M=8 N=32 K=16", 16, 4, "avx_vnni",
              "avx_vnni: dimension j has extent 16, wants 8");
    s_refused("qmatmul M=8 N=32 K=16", 16, 4, "amx", "unknown intrinsic");
    s_refused("C[i,j] += A[i,k] * B[k,j] where i=8, j=32, k=16; A: s8[8,16], "
              "B: const s8[16,32], C: s32[8,32]",
              16, 4, "avx512_vnni", "tensor A is s8, wants u8");
    s_refused("C[i,j] += A[i,k] * B[k,j] where i=8, j=32, k=16; A: u8[8,16], "
              "B: const u8[16,32], C: s32[8,32]",
              16, 4, "avx512_vnni", "tensor B is u8, wants s8");
    s_refused("C[i,j] += A[i,k] * B[k,j] where i=8, j=32, k=16; A: u8[8,16], "
              "B: s8[16,32], C: s32[8,32]",
              16, 4, "avx512_vnni", "tensor B is not const");
    s_refused("matmul M=8 N=32 K=16", 16, 4, "avx512_vnni",
              "tensor A is f32, wants u8");
    s_refused("qconv2d N=1 C=4 H=6 W=6 K=16 R=3 S=3 groups=2", 0, 0,
              "avx512_vnni", "a grouped convolution");
    /* Unsplit: the block under j is j, k with their full extents. */
    s_refused("qmatmul M=8 N=32 K=16", 0, 0, "avx512_vnni",
              "dimension j has extent 32, wants 16");
}

/* A later primitive that breaks the block makes kl_sched_tensorized fail. */
static void test_broken_later(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = fx_wl("qmatmul M=8 N=32 K=16");
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    int blk = s_block(s, 16, 4);
    assert_int_equal(kl_sched_tensorize(s, blk, "avx512_vnni", err), KL_OK);
    assert_int_equal(kl_sched_vectorize(s, kl_sched_loop(s, 4)->id, err),
                     KL_ERR_INVAL); /* a reduction loop */
    assert_int_equal(kl_sched_unroll(s, blk, err), KL_OK);
    kl_tensorize_t tz;
    assert_int_equal(kl_sched_tensorized(s, &tz, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "wants serial"));
    kl_sched_destroy(&s);
    kl_workload_free(&w);
}

static void test_trace(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = fx_wl("qmatmul M=64 N=40 K=30 za=7");
    kl_trace_t *t = kl_trace_new("test");
    int64_t l[3], n[3], k[2];
    kl_tr_get_loops(t, 3, l);
    int64_t fn[3] = {KL_SPLIT_INFER, -1, -16}, fk[2] = {KL_SPLIT_INFER, -4};
    kl_tr_split(t, l[1], fn, 3, n);
    kl_tr_split(t, l[2], fk, 2, k);
    int64_t order[5] = {l[0], n[0], n[1], k[0], n[2]};
    kl_tr_reorder(t, order, 5);
    kl_tr_parallel(t, l[0]);
    kl_tr_tensorize(t, n[2], "avx512_vnni");
    char *text = kl_trace_to_text(t);
    assert_non_null(strstr(text, "tensorize(l"));
    assert_non_null(strstr(text, "intrin=\"avx512_vnni\")"));
    kl_trace_t *t2 = NULL;
    if (kl_trace_from_text(text, &t2, err))
        fail_msg("%s\n%s", err, text);
    char *text2 = kl_trace_to_text(t2);
    assert_string_equal(text, text2);
    uint8_t *buf;
    size_t len;
    kl_trace_to_proto(t, &buf, &len);
    kl_trace_t *t3 = NULL;
    assert_int_equal(kl_trace_from_proto(buf, len, &t3, err), KL_OK);
    char *text3 = kl_trace_to_text(t3);
    assert_string_equal(text, text3);
    /* Replays of the original and the parsed trace give the same nest. */
    kl_sched_t *s1 = NULL, *s2 = NULL;
    assert_int_equal(kl_sched_create(&s1, w, err), KL_OK);
    assert_int_equal(kl_sched_create(&s2, w, err), KL_OK);
    bool rej = true;
    if (kl_trace_apply(t, s1, NULL, NULL, &rej, err))
        fail_msg("%s", err);
    assert_false(rej);
    assert_int_equal(kl_trace_apply(t3, s2, NULL, NULL, &rej, err), KL_OK);
    char *p1 = kl_sched_print(s1), *p2 = kl_sched_print(s2);
    assert_string_equal(p1, p2);
    assert_non_null(strstr(p1, "with avx512_vnni"));
    kl_tensorize_t tz;
    assert_int_equal(kl_sched_tensorized(s2, &tz, err), KL_OK);
    assert_int_equal(tz.za, 7);
    /* A trace naming another intrinsic fails at replay with the reason. */
    char *at = strstr(text, "avx512_vnni");
    char *bad = kl_xasprintf("%.*savx_vnni%s", (int)(at - text), text,
                             at + strlen("avx512_vnni"));
    kl_trace_t *t4 = NULL;
    if (kl_trace_from_text(bad, &t4, err))
        fail_msg("%s\n%s", err, bad);
    kl_sched_t *s4 = NULL;
    assert_int_equal(kl_sched_create(&s4, w, err), KL_OK);
    assert_int_equal(kl_trace_apply(t4, s4, NULL, NULL, &rej, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "dimension j has extent 16, wants 8"));
    kl_sched_destroy(&s4);
    kl_trace_free(&t4);
    free(bad);
    free(p1);
    free(p2);
    kl_sched_destroy(&s1);
    kl_sched_destroy(&s2);
    free(buf);
    free(text);
    free(text2);
    free(text3);
    kl_trace_free(&t);
    kl_trace_free(&t2);
    kl_trace_free(&t3);
    kl_workload_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intrin_table),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_broken_later),
        cmocka_unit_test(test_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
