/* Unit tests of the integer reference C (codegen_int.c): for quantized
 * workloads with zero points, padding, strides, groups, per-channel and
 * per-tensor scales, the generated C is compiled, run on seeded random
 * integers and compared bit for bit with the reference interpreter
 * (kl_workload_eval_typed). Also: scheduled C refuses an integer schedule
 * that is not tensorized, naming the dtype, and the CPU design space an
 * integer workload it cannot tensorize (tensorize_cg_test.c has the
 * tensorized ones). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_cgrun.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_test_tmp.h"
#include "kl_util.h"
#include "kl_wino.h"

static char s_dir[512];

static int s_setup(void **state)
{
    (void)state;
    return kl_test_mkdtemp(s_dir, sizeof s_dir, "kl_cgint_test_XXXXXX") ? 0
                                                                        : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kl_test_rmdir(s_dir);
    return 0;
}

static void s_check(const char *spec)
{
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(spec, &w, err))
        fail_msg("%s: %s", spec, err);
    kl_kernel_t k;
    if (kl_codegen_reference(w, NULL, &k, err))
        fail_msg("%s: %s", spec, err);
    kl_cgrun_t r;
    if (kl_cgrun_load(&r, k.source, k.entry, s_dir, err))
        fail_msg("%s: %s\n%s", spec, err, k.source);
    void **a = NULL, **b = NULL;
    if (kl_cgrun_compare(&r, w, 7, &a, &b, err))
        fail_msg("%s: %s", spec, err);
    assert_true(kl_cgrun_varied(w, a));
    kl_cgrun_free(w, a);
    kl_cgrun_free(w, b);
    kl_cgrun_close(&r);
    kl_kernel_free(&k);
    kl_workload_free(&w);
}

static void test_reference_matches(void **state)
{
    (void)state;
    s_check("qmatmul M=5 N=7 K=33 za=131 zo=9 bias=1");
    s_check("qmatmul M=3 N=4 K=16 scale=0.004 out=s8 zo=-7 relu=1");
    s_check("qmatmul M=4 N=6 K=20 za=3 out=s32 bias=1");
    s_check("qdense N=2 I=40 O=9 za=100 clip=20,200");
    s_check("qconv2d N=1 C=4 H=7 W=6 K=6 R=3 S=3 pad=1 stride=2 za=77 "
            "bias=1 zo=128");
    s_check("qconv2d N=2 C=4 H=5 W=5 K=4 R=3 S=3 pad=1 groups=2 "
            "layout=NHWC za=10 out=s8 bias=1");
    s_check("qdepthwise_conv2d N=1 C=3 H=6 W=6 R=3 S=3 pad=1 multiplier=2 "
            "za=5 bias=1 dilation=2");
    s_check("Y[c,y] max= X[c,y*2+r-1] where c=3, y=4, r=3; X: u8[3,8], "
            "Y: u8[3,4]");
    s_check("Y[y] += X[(y+1-r)/2] * K[r] - 2 where y=9, r=3; X: s8[5], "
            "K: s8[3], Y: s32[9]");
}

static void test_refusals(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    /* The CPU design space tensorizes products and groups=1 convolutions
     * only (tensorize_test.c). */
    assert_int_equal(kl_workload_from_string("qconv2d N=1 C=8 H=8 W=8 K=8 "
                                             "R=3 S=3 pad=1 groups=2",
                                             &w, err),
                     KL_OK);
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cpu", w, &sp, err),
                     KL_ERR_UNSUPPORTED);
    assert_null(sp);
    assert_non_null(strstr(err, "cannot tensorize"));
    kl_workload_free(&w);
    assert_int_equal(kl_workload_from_string("qmatmul M=64 N=64 K=64", &w, err),
                     KL_OK);
    kl_sched_t *s = NULL;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    kl_kernel_t k;
    assert_int_equal(kl_codegen_c(s, NULL, NULL, &k, err), KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "u8 output C"));
    kl_sched_destroy(&s);
    kl_workload_free(&w);
    /* No Winograd form for an integer 3x3 convolution. */
    assert_int_equal(kl_workload_from_string("qconv2d N=1 C=8 H=8 W=8 K=8 "
                                             "R=3 S=3 pad=1",
                                             &w, err),
                     KL_OK);
    kl_workload_t *d = NULL;
    assert_int_not_equal(kl_workload_winograd(w, 2, &d, NULL, err), KL_OK);
    assert_null(d);
    assert_non_null(strstr(err, "integer workload"));
    kl_workload_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reference_matches, s_setup,
                                        s_teardown),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
