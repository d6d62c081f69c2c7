/* Unit tests of kiln-agent's runner measuring candidates (agent/runner.c,
 * kla_runner.h): a right result and the reference cached, a segfault, a
 * timeout, exit() in a kernel, a huge malloc, a missing entry, wrong
 * results (also after timing), a kernel that writes nothing, a failing
 * reference, the evaluator's statistics, cold samples of an OpenMP
 * kernel, and the evaluator and problem
 * read from the wire. Real compiler, real forked children, a 64x64
 * matmul; the runner's trusted half against hostile candidates is
 * runner_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_backend.h"
#include "kla_builder.h"
#include "kla_device.h"
#include "kla_jail.h"
#include "kla_runner.h"
#include "kla_simulate.h"
#include "kl_test_tmp.h"
#include "cpu_agent_fx.h"

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif

/* A candidate: the same product in i, j, k order, plus `extra`. */
static char *s_mm(const char *extra)
{
    return kl_xasprintf("#include <stdlib.h>\n"
                        "void mm(void *const *args) {\n"
                        "  const float *A = args[0], *B = args[1];\n"
                        "  float *C = args[2];\n"
                        "  %s\n"
                        "  for (int i = 0; i < 64; i++)\n"
                        "    for (int j = 0; j < 64; j++) {\n"
                        "      float s = 0;\n"
                        "      for (int k = 0; k < 64; k++)\n"
                        "        s += A[i * 64 + k] * B[k * 64 + j];\n"
                        "      C[i * 64 + j] = s WRONG;\n"
                        "    }\n"
                        "}\n",
                        extra);
}

/* A 64x64x64 matmul problem with a quick evaluator. */
static void s_problem(kla_problem_t *p)
{
    memset(p, 0, sizeof *p);
    memset(p->workload_key, 0xab, 16);
    p->n_args = 3;
    p->nelem[0] = p->nelem[1] = p->nelem[2] = 64 * 64;
    p->is_output[2] = true;
    kla_eval_defaults(&p->eval);
    p->eval.repeat = 3;
    p->eval.min_repeat_ms = 0;
    p->eval.flush_cache = false;
    p->eval.timeout_ms = 5000;
    p->eval.seed = 7;
}

/* Builds src (WRONG replaced by `wrong`) and measures it. */
static void s_measure(const kla_problem_t *p, const char *extra,
                      const char *wrong, const char *entry, kla_result_t *res)
{
    char *src = s_mm(extra);
    char *w = strstr(src, "WRONG");
    kl_buf_t b = {0};
    kl_buf_append(&b, src, (size_t)(w - src));
    kl_buf_puts(&b, wrong);
    kl_buf_puts(&b, w + 5);
    kla_build_t bd;
    int rc = kla_builder_build(fx_cpu.builder, b.data, b.len, &bd);
    if (rc != KL_OK)
        fprintf(stderr, "build failed: %s\n", bd.log);
    assert_int_equal(rc, KL_OK);
    kla_runner_measure(fx_cpu.runner, p, fx_cpu.ref.so_path, "ref", bd.so_path,
                       entry, res);
    kl_buf_free(&b);
    free(src);
}

static void test_run_ok_and_reference_cached(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    p.eval.seed = 1234; /* a problem no other test uses */
    unsigned refs = kla_runner_reference_runs(fx_cpu.runner);
    kla_result_t r;
    s_measure(&p, "", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    assert_int_equal(r.n_samples, 3);
    assert_int_equal(r.number, 1);
    for (uint32_t i = 0; i < r.n_samples; i++)
        assert_true(r.samples[i] > 0 && r.samples[i] < 0.1);
    assert_true(r.run_s > 0);
    kla_result_clear(&r);
    s_measure(&p, "/* another candidate */", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    s_measure(&p, "", "+ 1.0f", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_WRONG_RESULT);
    kla_result_clear(&r);
    assert_int_equal(kla_runner_reference_runs(fx_cpu.runner), refs + 1);
    /* Another seed is another reference. */
    p.eval.seed = 1235;
    s_measure(&p, "", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    assert_int_equal(kla_runner_reference_runs(fx_cpu.runner), refs + 2);
}

static void test_segfault(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    s_measure(&p, "*(volatile int *)0 = 1;", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_string_equal(r.error, "killed by signal 11 (SIGSEGV)");
    kla_result_clear(&r);
}

static void test_timeout(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    p.eval.timeout_ms = 1000;
    kla_result_t r;
    double t0 = kl_now_s();
    s_measure(&p, "volatile int spin = 1; while (spin) {}", "", "mm", &r);
    double took = kl_now_s() - t0;
    assert_int_equal(r.status, KILN__STATUS__STATUS_TIMEOUT);
    assert_non_null(strstr(r.error, "1000 ms"));
    /* Killed at the timeout, not before; the upper bound is a hang bound
     * (the kernel spins forever). */
    assert_true(took >= 1.0);
    assert_true(r.run_s >= 1.0);
    assert_true(took < 30.0);
    kla_result_clear(&r);
}

static void test_exit_in_kernel(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    s_measure(&p, "exit(3);", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_string_equal(r.error, "exited with status 3");
    kla_result_clear(&r);
    s_measure(&p, "exit(0);", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "without a result"));
    kla_result_clear(&r);
}

static void test_huge_malloc(void **state)
{
    (void)state;
#ifdef T_ASAN
    skip(); /* RLIMIT_AS does not mix with ASan's shadow memory */
#else
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    s_measure(&p,
              "size_t n = (size_t)64 << 30; char *big = malloc(n);"
              "if (!big) abort();"
              "for (size_t x = 0; x < n; x += 4096) big[x] = 1;",
              "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "SIGABRT"));
    kla_result_clear(&r);
#endif
}

static void test_missing_entry(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    s_measure(&p, "", "", "no_such_kernel", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "'no_such_kernel'"));
    kla_result_clear(&r);
}

static void test_wrong_result(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    s_measure(&p, "", "+ 0.5f", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_WRONG_RESULT);
    assert_true(r.max_abs_err > 0.49 && r.max_abs_err < 0.51);
    assert_non_null(strstr(r.error, "element 0 "));
    assert_non_null(strstr(r.error, "4096 of 4096"));
    kla_result_clear(&r);
    /* A small error within rtol passes. */
    s_measure(&p, "", "* 1.00001f", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    /* rtol also scales with the output's rms (sqrt(64 / 9) = 2.7 for 64
     * products of uniforms in [-1, 1)): 1e-3 everywhere is more than
     * atol + rtol |ref| wherever |ref| < 0.9, but within rtol (|ref| +
     * rms); 5e-3 is not. */
    s_measure(&p, "", "+ 1e-3f", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    s_measure(&p, "", "+ 5e-3f", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_WRONG_RESULT);
    const char *rms = strstr(r.error, "+ rms ");
    if (!rms)
        fail_msg("no rms in '%s'", r.error);
    double v = strtod(rms + 6, NULL);
    if (v < 2.3 || v > 3.0)
        fail_msg("rms %g in '%s'", v, r.error);
    kla_result_clear(&r);
}

/* A kernel that is right on its first call and wrong from its third on
 * (a static counter) passes the check before timing; the check after
 * timing catches it and says so. */
static void test_wrong_after_timing(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    s_measure(&p, "static int calls; calls++;", "+ (calls >= 3 ? 1.0f : 0.0f)",
              "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_WRONG_RESULT);
    if (!strstr(r.error, "after timing"))
        fail_msg("error '%s' does not say 'after timing'", r.error);
    assert_non_null(strstr(r.error, "4096 of 4096"));
    assert_true(r.max_abs_err > 0.99 && r.max_abs_err < 1.01);
    assert_int_equal(r.n_samples, 0);
    kla_result_clear(&r);
    /* skip_verify skips both checks. */
    p.eval.skip_verify = true;
    s_measure(&p, "static int calls; calls++;", "+ (calls >= 3 ? 1.0f : 0.0f)",
              "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
}

static void test_writes_nothing(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    kla_result_t r;
    kla_build_t bd;
    const char *src = "void mm(void *const *args) { (void)args; }\n";
    assert_int_equal(kla_builder_build(fx_cpu.builder, src, strlen(src), &bd),
                     KL_OK);
    kla_runner_measure(fx_cpu.runner, &p, fx_cpu.ref.so_path, "ref", bd.so_path,
                       "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_WRONG_RESULT);
    assert_non_null(strstr(r.error, "is nan"));
    kla_result_clear(&r);
}

static void test_reference_fails(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    p.eval.seed = 99;
    kla_result_t r;
    kla_build_t bd;
    const char *src = "void mm(void *const *args) { (void)args; }\n";
    assert_int_equal(kla_builder_build(fx_cpu.builder, src, strlen(src), &bd),
                     KL_OK);
    /* The "reference" writes nothing: every candidate says so. */
    kla_runner_measure(fx_cpu.runner, &p, bd.so_path, "mm", fx_cpu.ref.so_path,
                       "ref", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "reference kernel failed: "));
    kla_result_clear(&r);
}

static void test_evaluator_stats(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    p.eval.repeat = 4;
    p.eval.min_repeat_ms = 20;
    p.eval.flush_cache = true;
    kla_result_t r;
    s_measure(&p, "", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    assert_int_equal(r.n_samples, 4);
    assert_true(r.number > 1);
    /* One sample lasts about min_repeat_ms (machines are shared). */
    assert_true(r.samples[0] * r.number > 0.005);
    double lo = r.samples[0], hi = r.samples[0];
    for (int i = 1; i < 4; i++) {
        lo = r.samples[i] < lo ? r.samples[i] : lo;
        hi = r.samples[i] > hi ? r.samples[i] : hi;
    }
    double med = kl_median(r.samples, 4);
    assert_true(fabs(r.spread - (hi - lo) / med) < 1e-12);
    kla_result_clear(&r);

    kla_result_t k = {.n_samples = 4};
    double v[4] = {2.0, 1.0, 4.0, 3.0};
    k.samples = v;
    kla_result_stats(&k);
    assert_true(fabs(k.spread - 3.0 / 2.5) < 1e-12);
}

/* Cold samples (one call each, the caches flushed before it) of a kernel
 * whose OpenMP threads spin through the flush: the kernel process's CPU
 * clock charges a running thread at the scheduler's tick, so up to a
 * tick of that spinning lands in the sample; the account must allow it
 * (it refused about half of such samples). */
static void test_cold_openmp(void **state)
{
    (void)state;
    static const char src[] = "void mm(void *const *args) {\n"
                              "  const float *A = args[0], *B = args[1];\n"
                              "  float *C = args[2];\n"
                              "  #pragma omp parallel for schedule(static)\n"
                              "  for (int i = 0; i < 64; i++)\n"
                              "    for (int j = 0; j < 64; j++) {\n"
                              "      float s = 0;\n"
                              "      for (int rep = 0; rep < 2; rep++) {\n"
                              "        s = 0;\n"
                              "        for (int k = 0; k < 64; k++)\n"
                              "          s += A[i * 64 + k] * B[k * 64 + j];\n"
                              "        __asm__ volatile(\"\" : \"+x\"(s));\n"
                              "      }\n"
                              "      C[i * 64 + j] = s;\n"
                              "    }\n"
                              "}\n";
    /* built with OpenMP, and the agent's own flush (128 MiB, some ms) */
    char err[KL_ERRMSG_LEN];
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {
        .workdir = fx_cpu.dir, .cflags = "-O2 -fopenmp", .gate = fx_cpu.gate};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    kla_runner_t *run = NULL;
    kla_runner_config_t rc = {.llc_bytes = 64u << 20,
                              .max_mem_bytes = 1024u << 20,
                              .gate = fx_cpu.gate};
    assert_int_equal(kla_runner_new(&run, &rc, err), KL_OK);
    kla_build_t bd;
    if (kla_builder_build(b, src, sizeof src - 1, &bd) != KL_OK)
        fail_msg("build failed: %s", bd.log);
    kla_problem_t p;
    s_problem(&p);
    p.eval.repeat = 40;
    p.eval.min_repeat_ms = 0;
    p.eval.flush_cache = true;
    kla_result_t r;
    kla_runner_measure(run, &p, fx_cpu.ref.so_path, "ref", bd.so_path, "mm",
                       &r);
    if (r.status != KILN__STATUS__STATUS_OK)
        fail_msg("cold samples of an OpenMP kernel: %s", r.error);
    assert_int_equal(r.n_samples, 40);
    kla_result_clear(&r);
    kla_runner_destroy(&run);
    kla_builder_destroy(&b);
}

static void test_eval_from_proto(void **state)
{
    (void)state;
    kla_eval_t e;
    kla_eval_from_proto(&e, NULL);
    assert_int_equal(e.number, 1);
    assert_int_equal(e.repeat, 5);
    assert_int_equal(e.min_repeat_ms, 50);
    assert_true(e.flush_cache);
    assert_int_equal(e.timeout_ms, 10000);
    Kiln__Evaluator pe = KILN__EVALUATOR__INIT;
    pe.repeat = 1000000;
    pe.seed = 5;
    kla_eval_from_proto(&e, &pe);
    assert_int_equal(e.repeat, KLA_MAX_REPEAT);
    assert_int_equal(e.number, 1);
    assert_true(e.rtol == 1e-3 && e.atol == 1e-4);
    assert_int_equal(e.seed, 5);
}

static void test_problem_from_request(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    int64_t shape[2] = {64, 64};
    Kiln__KernelArg a = KILN__KERNEL_ARG__INIT, c = KILN__KERNEL_ARG__INIT;
    a.name = "A";
    a.n_shape = 2;
    a.shape = shape;
    c = a;
    c.name = "C";
    c.role = KILN__ARG_ROLE__ROLE_OUTPUT;
    Kiln__KernelArg *args[2] = {&a, &c};
    uint8_t key[16] = {1};
    Kiln__MeasureRequest req = KILN__MEASURE_REQUEST__INIT;
    req.workload_key.data = key;
    req.workload_key.len = 16;
    req.n_args = 2;
    req.args = args;
    kla_problem_t p;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_int_equal(p.n_args, 2);
    assert_int_equal(p.nelem[1], 4096);
    assert_true(p.is_output[1] && !p.is_output[0]);
    /* f16 / bf16: two bytes an element, for the backend to accept (CUDA
     * inputs; the CPU agent's bf16 inputs, held as f32) or refuse (the
     * CPU agent's f16, and a bf16 output). */
    a.dtype = KILN__DTYPE__DTYPE_F16;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 2);
    assert_false(p.any_int);
    assert_int_equal(kla_backend_cpu.check_request(NULL, &req, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'A' has dtype f16"));
    assert_int_equal(kla_problem_bf16_as_f32(&p, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 2); /* f16 stays itself */
    assert_int_equal(p.dtype[0], KILN__DTYPE__DTYPE_F16);
    a.dtype = KILN__DTYPE__DTYPE_BF16;
    assert_int_equal(kla_backend_cpu.check_request(NULL, &req, err), KL_OK);
    assert_true(kla_backend_cpu.bf16_as_f32);
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 2);
    assert_int_equal(kla_problem_bf16_as_f32(&p, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 4);
    assert_int_equal(p.dtype[0], KILN__DTYPE__DTYPE_BF16); /* filled rounded */
    assert_int_equal(p.esize[1], 4);
    assert_false(p.any_int);
    /* Held as f32 it needs twice the bytes: 2 x 4096 x 4 > 16 KiB. */
    assert_int_equal(kla_problem_from_request(&p, &req, 16384 + 8192, err),
                     KL_OK);
    assert_int_equal(kla_problem_bf16_as_f32(&p, 16384 + 8192, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "bf16 held as f32"));
    a.role = KILN__ARG_ROLE__ROLE_OUTPUT;
    assert_int_equal(kla_backend_cpu.check_request(NULL, &req, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'A' has dtype bf16"));
    a.role = KILN__ARG_ROLE__ROLE_INPUT;
    a.dtype = (Kiln__DType)9;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'A' has dtype 9"));
    a.dtype = KILN__DTYPE__DTYPE_F32;
    assert_int_equal(kla_backend_cpu.check_request(NULL, &req, err), KL_OK);
    /* Integer arguments: accepted, with their element sizes. */
    a.dtype = KILN__DTYPE__DTYPE_U8;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 1);
    assert_int_equal(p.esize[1], 4);
    assert_true(p.any_int);
    assert_int_equal(p.dtype[0], KILN__DTYPE__DTYPE_U8);
    a.dtype = KILN__DTYPE__DTYPE_I32;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 4);
    a.dtype = KILN__DTYPE__DTYPE_F32;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_false(p.any_int);
    shape[1] = 0;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_ERR_INVAL);
    shape[1] = 64;
    req.workload_key.len = 3;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "workload key"));
    req.workload_key.len = 16;
    assert_int_equal(kla_problem_from_request(&p, &req, 1000, err),
                     KL_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_from_proto),
        cmocka_unit_test(test_problem_from_request),
        cmocka_unit_test(test_run_ok_and_reference_cached),
        cmocka_unit_test(test_segfault),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_exit_in_kernel),
        cmocka_unit_test(test_huge_malloc),
        cmocka_unit_test(test_missing_entry),
        cmocka_unit_test(test_wrong_result),
        cmocka_unit_test(test_wrong_after_timing),
        cmocka_unit_test(test_writes_nothing),
        cmocka_unit_test(test_reference_fails),
        cmocka_unit_test(test_evaluator_stats),
        cmocka_unit_test(test_cold_openmp),
    };
    return cmocka_run_group_tests(tests, fx_cpu_setup, fx_cpu_teardown);
}
