/* Unit tests of the runner's prepare step (common/kl_abi.h): real
 * compiler, real forked children. A 64x64 matmul whose B is constant: the
 * candidate's mm_prepare transposes B into its block once, and mm reads
 * only the block, never args[1]. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_builder.h"
#include "kla_runner.h"
#include "kl_test_tmp.h"
#include "mm_fx.h"

/* The candidate. PREP_FIRST runs first in mm_prepare. The prepare aborts
 * unless only B is non-NULL (args[3], the block's slot, included); mm
 * aborts unless prepare ran exactly once and its block is args[3], on
 * every call (the verification run and the timed runs). */
static const char *s_cand_fmt =
    "#include <stdlib.h>\n"
    "static int s_preps;\n"
    "static void *s_block;\n"
    "void *mm_prepare(void *const *args) {\n"
    "  %s\n"
    "  if (args[0] || !args[1] || args[2] || args[3]) abort();\n"
    "  s_preps++;\n"
    "  const float *B = args[1];\n"
    "  float *Bt = malloc(64 * 64 * sizeof *Bt);\n"
    "  if (!Bt) return NULL;\n"
    "  for (int k = 0; k < 64; k++)\n"
    "    for (int j = 0; j < 64; j++) Bt[j * 64 + k] = B[k * 64 + j];\n"
    "  return s_block = Bt;\n"
    "}\n"
    "void mm(void *const *args) {\n"
    "  if (s_preps != 1 || !s_block || args[3] != s_block) abort();\n"
    "  const float *A = args[0], *Bt = args[3];\n"
    "  float *C = args[2];\n"
    "  for (int i = 0; i < 64; i++)\n"
    "    for (int j = 0; j < 64; j++) {\n"
    "      float s = 0;\n"
    "      for (int k = 0; k < 64; k++) s += A[i * 64 + k] * Bt[j * 64 + k];\n"
    "      C[i * 64 + j] = s;\n"
    "    }\n"
    "}\n";

typedef struct {
    char dir[256];
    kla_builder_t *builder;
    kla_runner_t *runner;
} fix_t;

static fix_t F;

static int s_setup(void **state)
{
    (void)state;
    if (!kl_test_mkdtemp(F.dir, sizeof F.dir, "kla-prep-XXXXXX"))
        return -1;
    char err[KL_ERRMSG_LEN];
    kla_builder_config_t bc = {.workdir = F.dir, .cflags = "-O2"};
    if (kla_builder_new(&F.builder, &bc, err) != KL_OK)
        return -1;
    kla_runner_config_t rc = {.llc_bytes = 1 << 20,
                              .max_mem_bytes = 512u << 20};
    return kla_runner_new(&F.runner, &rc, err) == KL_OK ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kla_runner_destroy(&F.runner);
    kla_builder_destroy(&F.builder);
    char *cmd = kl_xasprintf("rm -rf '%s'", F.dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

/* Builds src into *bd; the test fails when it does not compile. */
static void s_build(const char *src, kla_build_t *bd)
{
    int rc = kla_builder_build(F.builder, src, strlen(src), bd);
    if (rc != KL_OK)
        fprintf(stderr, "build failed: %s\n", bd->log);
    assert_int_equal(rc, KL_OK);
}

/* A, B (constant), C: 64x64 each; min_repeat_ms makes the timing call
 * the kernel many times. */
static void s_problem(kla_problem_t *p)
{
    memset(p, 0, sizeof *p);
    memset(p->workload_key, 0xcd, 16);
    p->n_args = 3;
    p->nelem[0] = p->nelem[1] = p->nelem[2] = 64 * 64;
    p->is_const[1] = true;
    p->is_output[2] = true;
    kla_eval_defaults(&p->eval);
    p->eval.repeat = 3;
    p->eval.min_repeat_ms = 5;
    p->eval.flush_cache = false;
    p->eval.timeout_ms = 5000;
    p->eval.seed = 11;
}

/* Measures the candidate with prep_first in its prepare. */
static void s_measure(const char *prep_first, kla_result_t *res)
{
    kla_build_t ref, cand;
    s_build(fx_ref_src, &ref);
    char *src = kl_xasprintf(s_cand_fmt, prep_first);
    s_build(src, &cand);
    free(src);
    kla_problem_t p;
    s_problem(&p);
    kla_runner_measure(F.runner, &p, ref.so_path, "ref", cand.so_path, "mm",
                       res);
}

/* Prepared once, passed as args[3] to every call, verified. */
static void test_prepare_ok(void **state)
{
    (void)state;
    kla_result_t r;
    s_measure("", &r);
    if (r.status != KILN__STATUS__STATUS_OK)
        fprintf(stderr, "error: %s\n", r.error);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    assert_int_equal(r.n_samples, 3);
    assert_true(r.number > 1); /* many calls, one prepare */
    assert_true(r.max_abs_err < 1e-3);
    kla_result_clear(&r);
}

static void test_prepare_null(void **state)
{
    (void)state;
    kla_result_t r;
    s_measure("return NULL;", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "'mm_prepare' returned NULL"));
    assert_non_null(strstr(r.error, "out of memory"));
    kla_result_clear(&r);
}

/* A (not constant) is NULL in prepare's args: reading it crashes, and the
 * sandbox reports the crash. */
static void test_prepare_sees_only_constants(void **state)
{
    (void)state;
    kla_result_t r;
    s_measure("volatile float a0 = ((const float *)args[0])[0]; (void)a0;", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_string_equal(r.error, "killed by signal 11 (SIGSEGV)");
    kla_result_clear(&r);
}

/* A kernel without prepare ignores the constant marking. */
static void test_const_without_prepare(void **state)
{
    (void)state;
    kla_build_t ref;
    s_build(fx_ref_src, &ref);
    char *src = kl_xstrdup(fx_ref_src);
    memcpy(strstr(src, "ref("), "mm_(", 4); /* the same loops, named mm_ */
    kla_build_t cand;
    s_build(src, &cand);
    free(src);
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    kla_runner_measure(F.runner, &p, ref.so_path, "ref", cand.so_path, "mm_",
                       &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    assert_true(r.max_abs_err < 1e-3);
    kla_result_clear(&r);
}

/* 64 arguments, the most a problem has: the block goes in a 65th slot.
 * 63 inputs of 16 floats (1..62 constant) and an output, their sum. */
static void test_prepare_64_args(void **state)
{
    (void)state;
    const char *ref_src = "void ref(void *const *args) {\n"
                          "  float *C = args[63];\n"
                          "  for (int i = 0; i < 16; i++) {\n"
                          "    C[i] = 0;\n"
                          "    for (int a = 0; a < 63; a++) C[i] += ((const "
                          "float *)args[a])[i];\n"
                          "  }\n"
                          "}\n";
    const char *cand_src =
        "#include <stdlib.h>\n"
        "void *sum_prepare(void *const *args) {\n"
        "  if (args[0] || args[63] || args[64]) abort();\n"
        "  float *s = calloc(16, sizeof *s);\n"
        "  for (int a = 1; a < 63; a++)\n"
        "    for (int i = 0; i < 16; i++) s[i] += ((const float "
        "*)args[a])[i];\n"
        "  return s;\n"
        "}\n"
        "void sum(void *const *args) {\n"
        "  const float *x = args[0], *s = args[64]; float *C = args[63];\n"
        "  for (int i = 0; i < 16; i++) C[i] = x[i] + s[i];\n"
        "}\n";
    kla_build_t ref, cand;
    s_build(ref_src, &ref);
    s_build(cand_src, &cand);
    kla_problem_t p;
    s_problem(&p);
    memset(p.is_const, 0, sizeof p.is_const);
    memset(p.is_output, 0, sizeof p.is_output);
    p.n_args = 64;
    for (int a = 0; a < 64; a++) {
        p.nelem[a] = 16;
        p.is_const[a] = a >= 1 && a < 63;
    }
    p.is_output[63] = true;
    kla_result_t r;
    kla_runner_measure(F.runner, &p, ref.so_path, "ref", cand.so_path, "sum",
                       &r);
    if (r.status != KILN__STATUS__STATUS_OK)
        fprintf(stderr, "error: %s\n", r.error);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
}

/* ROLE_CONSTANT on the wire is a constant input, not an output. */
static void test_problem_constant_role(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    int64_t shape[1] = {8};
    Kiln__KernelArg a = KILN__KERNEL_ARG__INIT, w, c;
    a.name = "X";
    a.n_shape = 1;
    a.shape = shape;
    w = c = a;
    w.name = "W";
    w.role = KILN__ARG_ROLE__ROLE_CONSTANT;
    c.name = "Y";
    c.role = KILN__ARG_ROLE__ROLE_OUTPUT;
    Kiln__KernelArg *args[3] = {&a, &w, &c};
    uint8_t key[16] = {2};
    Kiln__MeasureRequest req = KILN__MEASURE_REQUEST__INIT;
    req.workload_key.data = key;
    req.workload_key.len = 16;
    req.n_args = 3;
    req.args = args;
    kla_problem_t p;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_true(!p.is_const[0] && p.is_const[1] && !p.is_const[2]);
    assert_true(!p.is_output[0] && !p.is_output[1] && p.is_output[2]);
    /* A constant is no output. */
    args[2] = &w;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "no output"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_problem_constant_role),
        cmocka_unit_test(test_prepare_ok),
        cmocka_unit_test(test_prepare_null),
        cmocka_unit_test(test_prepare_sees_only_constants),
        cmocka_unit_test(test_const_without_prepare),
        cmocka_unit_test(test_prepare_64_args),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
