/* Unit tests of common/kl_nvrtc: real NVRTC compilations for sm_80 and
 * sm_90. When libnvrtc cannot be loaded, the cases that compile skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_nvrtc.h"

static kl_nvrtc_t *s_nv;

/* Skips the case when main found no NVRTC (it said why). */
#define S_NEED_NVRTC()                                                         \
    do {                                                                       \
        if (!s_nv)                                                             \
            skip();                                                            \
    } while (0)

static const char *s_saxpy =
    "extern \"C\" __global__ void saxpy(float *__restrict__ a0,\n"
    "                                   float *__restrict__ a1)\n"
    "{\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    a1[i] = 2.0f * a0[i] + a1[i];\n"
    "}\n";

static void test_compile_sm80_sm90(void **state)
{
    (void)state;
    S_NEED_NVRTC();
    const char *archs[] = {"sm_80", "sm_90"};
    for (int i = 0; i < 2; i++) {
        char err[KL_ERRMSG_LEN] = "";
        kl_nvrtc_opts_t o = {.arch = archs[i]};
        kl_nvrtc_result_t *r = NULL;
        int rc = kl_nvrtc_compile(s_nv, s_saxpy, &o, &r, err);
        if (rc)
            fprintf(stderr, "%s\n", err);
        assert_int_equal(rc, KL_OK);
        assert_non_null(r);
        assert_false(r->is_ptx);
        /* A cubin is an ELF file. */
        assert_true(r->image_len > 64);
        assert_memory_equal(r->image,
                            "\x7f"
                            "ELF",
                            4);
        const kl_nvrtc_kernel_t *k = kl_nvrtc_result_kernel(r, "saxpy");
        assert_non_null(k);
        assert_in_range(k->registers, 1, 64);
        assert_int_equal(k->smem_static, 0);
        assert_int_equal(k->spill_stores, 0);
        assert_null(kl_nvrtc_result_kernel(r, "nope"));
        kl_nvrtc_result_free(&r);
        assert_null(r);
    }
}

static void test_ptx(void **state)
{
    (void)state;
    S_NEED_NVRTC();
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_opts_t o = {.arch = "compute_90"};
    kl_nvrtc_result_t *r = NULL;
    assert_int_equal(kl_nvrtc_compile(s_nv, s_saxpy, &o, &r, err), KL_OK);
    assert_true(r->is_ptx);
    assert_non_null(strstr((const char *)r->image, ".entry saxpy"));
    assert_non_null(strstr((const char *)r->image, ".target sm_90"));
    assert_int_equal(r->nkernels, 0);
    kl_nvrtc_result_free(&r);
}

static void test_syntax_error(void **state)
{
    (void)state;
    S_NEED_NVRTC();
    const char *bad = "extern \"C\" __global__ void k(float *a)\n"
                      "{\n"
                      "    a[0] = 1.0f\n"
                      "    a[1] = 2.0f;\n"
                      "}\n";
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_opts_t o = {.arch = "sm_90", .prog_name = "bad.cu"};
    kl_nvrtc_result_t *r = NULL;
    assert_int_equal(kl_nvrtc_compile(s_nv, bad, &o, &r, err), KL_ERR_COMPILE);
    /* The result still carries the log, and the message names the line. */
    assert_non_null(r);
    assert_null(r->image);
    assert_non_null(strstr(r->log, "bad.cu(4)"));
    assert_non_null(strstr(err, "bad.cu(4)"));
    assert_non_null(strstr(err, "error"));
    kl_nvrtc_result_free(&r);
}

static void test_log_bounded(void **state)
{
    (void)state;
    S_NEED_NVRTC();
    /* Many errors, a tiny log budget: the log is cut and says so. */
    char src[4096] = "extern \"C\" __global__ void k(float *a)\n{\n";
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "    undefined_%d += 1;\n", i);
        strcat(src, line);
    }
    strcat(src, "}\n");
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_opts_t o = {.arch = "sm_80", .log_max = 200};
    kl_nvrtc_result_t *r = NULL;
    assert_int_equal(kl_nvrtc_compile(s_nv, src, &o, &r, err), KL_ERR_COMPILE);
    assert_true(strlen(r->log) < 300);
    assert_non_null(strstr(r->log, "[log cut:"));
    kl_nvrtc_result_free(&r);
}

static void test_big_shared(void **state)
{
    (void)state;
    S_NEED_NVRTC();
    /* Two kernels in one program: resources are reported per kernel. */
    const char *src =
        "extern \"C\" __global__ void big(float *__restrict__ a)\n"
        "{\n"
        "    __shared__ float s[8192];\n"
        "    int t = threadIdx.x;\n"
        "    for (int i = t; i < 8192; i += blockDim.x) s[i] = a[i];\n"
        "    __syncthreads();\n"
        "    a[t] = s[8191 - t];\n"
        "}\n"
        "extern \"C\" __global__ void small(float *__restrict__ a)\n"
        "{\n"
        "    a[threadIdx.x] *= 3.0f;\n"
        "}\n";
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_opts_t o = {.arch = "sm_90"};
    kl_nvrtc_result_t *r = NULL;
    assert_int_equal(kl_nvrtc_compile(s_nv, src, &o, &r, err), KL_OK);
    assert_int_equal(r->nkernels, 2);
    const kl_nvrtc_kernel_t *big = kl_nvrtc_result_kernel(r, "big");
    const kl_nvrtc_kernel_t *small = kl_nvrtc_result_kernel(r, "small");
    assert_non_null(big);
    assert_non_null(small);
    assert_int_equal(big->smem_static, 8192 * 4);
    assert_true(big->barriers >= 1);
    assert_int_equal(small->smem_static, 0);
    kl_nvrtc_result_free(&r);
}

static void test_spill_reported(void **state)
{
    (void)state;
    S_NEED_NVRTC();
    /* A register array indexed at run time lives in local memory. */
    const char *src =
        "extern \"C\" __global__ void loc(float *__restrict__ a, int j)\n"
        "{\n"
        "    float r[64];\n"
        "    for (int i = 0; i < 64; i++) r[i] = a[i * threadIdx.x];\n"
        "    r[(j * threadIdx.x) & 63] += 1.0f;\n"
        "    float s = 0.0f;\n"
        "    for (int i = 0; i < 64; i++) s += r[i] * r[(i + j) & 63];\n"
        "    a[threadIdx.x] = s;\n"
        "}\n";
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_opts_t o = {.arch = "sm_80"};
    kl_nvrtc_result_t *r = NULL;
    assert_int_equal(kl_nvrtc_compile(s_nv, src, &o, &r, err), KL_OK);
    const kl_nvrtc_kernel_t *k = kl_nvrtc_result_kernel(r, "loc");
    assert_non_null(k);
    assert_int_equal(k->stack_frame, 256);
    kl_nvrtc_result_free(&r);
}

static void test_bad_args(void **state)
{
    (void)state;
    S_NEED_NVRTC();
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_result_t *r = NULL;
    kl_nvrtc_opts_t o = {.arch = "sm90"};
    assert_int_equal(kl_nvrtc_compile(s_nv, s_saxpy, &o, &r, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "sm90"));
    assert_null(r);
    o.arch = NULL;
    assert_int_equal(kl_nvrtc_compile(s_nv, s_saxpy, &o, &r, err),
                     KL_ERR_INVAL);
    o.arch = "sm_12"; /* well formed, but no NVRTC knows it */
    assert_int_equal(kl_nvrtc_compile(s_nv, s_saxpy, &o, &r, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "sm_12"));
    assert_int_equal(kl_nvrtc_check_arch(s_nv, "sm_90", err), KL_OK);
    assert_int_equal(kl_nvrtc_check_arch(s_nv, "gfx90a", err), KL_ERR_INVAL);

    char arch[16];
    assert_int_equal(kl_nvrtc_arch_of_target("cuda/sm_90", arch, 16, err),
                     KL_OK);
    assert_string_equal(arch, "sm_90");
    assert_int_equal(
        kl_nvrtc_arch_of_target("cpu/x86_64-avx512", arch, 16, err),
        KL_ERR_INVAL);
    assert_int_equal(kl_nvrtc_arch_of_target("cuda/90", arch, 16, err),
                     KL_ERR_INVAL);
}

static void test_missing_library(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_t *nv = NULL;
    assert_int_equal(kl_nvrtc_open(&nv, "/nonexistent/libnvrtc.so", err),
                     KL_ERR_UNSUPPORTED);
    assert_null(nv);
    assert_non_null(strstr(err, "/nonexistent/libnvrtc.so"));
    /* A library that is not NVRTC: a symbol is missing. */
    assert_int_equal(kl_nvrtc_open(&nv, "libm.so.6", err), KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "nvrtc"));
    /* Every call on a missing NVRTC says so. */
    kl_nvrtc_opts_t o = {.arch = "sm_90"};
    kl_nvrtc_result_t *r = NULL;
    assert_int_equal(kl_nvrtc_compile(NULL, s_saxpy, &o, &r, err),
                     KL_ERR_UNSUPPORTED);
    assert_int_equal(kl_nvrtc_check_arch(NULL, "sm_90", err),
                     KL_ERR_UNSUPPORTED);
    kl_nvrtc_close(&nv);
}

static void test_parse_ptxas(void **state)
{
    (void)state;
    const char *log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function 'k1' for 'sm_90'\n"
        "ptxas info    : Function properties for k1\n"
        "ptxas         .     256 bytes stack frame, 8 bytes spill stores, "
        "12 bytes spill loads\n"
        "ptxas info    : Used 32 registers, used 0 barriers, 256 bytes "
        "cumulative stack size\n"
        "ptxas info    : Compiling entry function 'k0' for 'sm_90'\n"
        "ptxas info    : Function properties for k0\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 "
        "bytes spill loads\n"
        "ptxas info    : Used 12 registers, used 1 barriers, 16384 bytes "
        "smem\n";
    kl_nvrtc_kernel_t *ks = NULL;
    int n = 0;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_nvrtc_parse_ptxas(log, &ks, &n, err), KL_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ks[0].name, "k1");
    assert_int_equal(ks[0].registers, 32);
    assert_int_equal(ks[0].stack_frame, 256);
    assert_int_equal(ks[0].spill_stores, 8);
    assert_int_equal(ks[0].spill_loads, 12);
    assert_int_equal(ks[0].smem_static, 0);
    assert_string_equal(ks[1].name, "k0");
    assert_int_equal(ks[1].registers, 12);
    assert_int_equal(ks[1].barriers, 1);
    assert_int_equal(ks[1].smem_static, 16384);
    free(ks);
    assert_int_equal(kl_nvrtc_parse_ptxas("ptxas info    : Used 3 registers\n",
                                          &ks, &n, err),
                     KL_ERR_INVAL);
    assert_null(ks);
}

int main(void)
{
    char err[KL_ERRMSG_LEN] = "";
    s_nv = kl_nvrtc_default(err);
    if (!s_nv)
        printf("SKIP: NVRTC not available: %s\n", err);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ptxas),
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_compile_sm80_sm90),
        cmocka_unit_test(test_ptx),
        cmocka_unit_test(test_syntax_error),
        cmocka_unit_test(test_log_bounded),
        cmocka_unit_test(test_big_shared),
        cmocka_unit_test(test_spill_reported),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests_name("nvrtc", tests, NULL, NULL);
}
