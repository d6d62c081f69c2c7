/* Unit tests of the CPU agent's builder, sandbox, runner and simulator:
 * real compiler, real forked children, a 64x64 matmul. */
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

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif

/* The naive reference: i, k, j order, accumulating into C. */
static const char *s_ref_src =
    "void ref(void *const *args) {\n"
    "  const float *A = args[0], *B = args[1]; float *C = args[2];\n"
    "  for (int i = 0; i < 64 * 64; i++) C[i] = 0;\n"
    "  for (int i = 0; i < 64; i++)\n"
    "    for (int k = 0; k < 64; k++)\n"
    "      for (int j = 0; j < 64; j++)\n"
    "        C[i * 64 + j] += A[i * 64 + k] * B[k * 64 + j];\n"
    "}\n";

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

typedef struct {
    char dir[256];
    kla_gate_t *gate;
    kla_builder_t *builder;
    kla_runner_t *runner;
    kla_build_t ref;
} fix_t;

static fix_t F;

static int s_setup(void **state)
{
    (void)state;
    if (!kl_test_mkdtemp(F.dir, sizeof F.dir, "kla-test-XXXXXX"))
        return -1;
    char err[KL_ERRMSG_LEN];
    kla_gate_new(&F.gate);
    kla_builder_config_t bc = {
        .workdir = F.dir, .cflags = "-O2", .gate = F.gate};
    if (kla_builder_new(&F.builder, &bc, err) != KL_OK)
        return -1;
    kla_runner_config_t rc = {
        .llc_bytes = 1 << 20, .max_mem_bytes = 512u << 20, .gate = F.gate};
    if (kla_runner_new(&F.runner, &rc, err) != KL_OK)
        return -1;
    if (kla_builder_build(F.builder, s_ref_src, strlen(s_ref_src), &F.ref))
        return -1;
    return 0;
}

static int s_teardown(void **state)
{
    (void)state;
    kla_runner_destroy(&F.runner);
    kla_builder_destroy(&F.builder);
    kla_gate_destroy(&F.gate);
    char *cmd = kl_xasprintf("rm -rf '%s'", F.dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
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
    int rc = kla_builder_build(F.builder, b.data, b.len, &bd);
    if (rc != KL_OK)
        fprintf(stderr, "build failed: %s\n", bd.log);
    assert_int_equal(rc, KL_OK);
    kla_runner_measure(F.runner, p, F.ref.so_path, "ref", bd.so_path, entry,
                       res);
    kl_buf_free(&b);
    free(src);
}

static void test_builder_ok_error_cache(void **state)
{
    (void)state;
    const char *good = "int forty_two(void) { return 42; }\n";
    unsigned before = kla_builder_compiles(F.builder);
    kla_build_t b1, b2, b3;
    assert_int_equal(kla_builder_build(F.builder, good, strlen(good), &b1),
                     KL_OK);
    assert_true(b1.ok);
    assert_false(b1.cache_hit);
    assert_true(b1.compile_s > 0);
    assert_int_equal(access(b1.so_path, R_OK), 0);
    assert_int_equal(kla_builder_build(F.builder, good, strlen(good), &b2),
                     KL_OK);
    assert_true(b2.cache_hit);
    assert_string_equal(b1.so_path, b2.so_path);
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);

    const char *bad = "int broken(void) { return undeclared_thing; }\n";
    assert_int_equal(kla_builder_build(F.builder, bad, strlen(bad), &b3),
                     KL_ERR_COMPILE);
    assert_false(b3.ok);
    assert_non_null(strstr(b3.log, "undeclared_thing"));
    assert_true(strlen(b3.log) <= KLA_BUILD_LOG_MAX);
    /* A failed build is remembered too. */
    kla_build_t b4;
    assert_int_equal(kla_builder_build(F.builder, bad, strlen(bad), &b4),
                     KL_ERR_COMPILE);
    assert_true(b4.cache_hit);
    assert_string_equal(b3.log, b4.log);
    assert_int_equal(kla_builder_compiles(F.builder), before + 2);
}

static void test_builder_log_bounded(void **state)
{
    (void)state;
    kl_buf_t b = {0};
    for (int i = 0; i < 300; i++)
        kl_buf_printf(&b, "int f%d(void) { return nope_%d; }\n", i, i);
    kla_build_t bd;
    assert_int_equal(kla_builder_build(F.builder, b.data, b.len, &bd),
                     KL_ERR_COMPILE);
    assert_int_equal(strlen(bd.log), KLA_BUILD_LOG_MAX);
    kl_buf_free(&b);
}

/* A work directory removed under the agent (a /tmp cleaner) is made
 * again: new sources and cached ones whose library went with it build. */
static void test_builder_workdir_vanishes(void **state)
{
    (void)state;
    char dir[300], err[KL_ERRMSG_LEN], cmd[320];
    snprintf(dir, sizeof dir, "%s/vanishing", F.dir);
    assert_int_equal(kl_mkdirs(dir, err), KL_OK);
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {.workdir = dir};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    const char *one = "int one(void) { return 1; }\n";
    const char *two = "int two(void) { return 2; }\n";
    kla_build_t bd;
    assert_int_equal(kla_builder_build(b, one, strlen(one), &bd), KL_OK);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(kla_builder_build(b, two, strlen(two), &bd), KL_OK);
    assert_int_equal(access(bd.so_path, R_OK), 0);
    assert_int_equal(kla_builder_build(b, one, strlen(one), &bd), KL_OK);
    assert_false(bd.cache_hit);
    assert_int_equal(access(bd.so_path, R_OK), 0);
    assert_int_equal(kla_builder_compiles(b), 3);
    kla_builder_destroy(&b);
}

/* Whether process pid still runs (a zombie, killed but not yet reaped by
 * whoever inherited it, does not). */
static bool s_running(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *st = strrchr(buf, ')'); /* "PID (COMM) STATE ..." */
    return st && st[1] == ' ' && st[2] != 'Z' && st[2] != 'X';
}

/* A "compiler" that hangs is killed after the builder's timeout, with its
 * whole process group (the shell and its sleep). */
static void test_builder_timeout(void **state)
{
    (void)state;
    char cc[300], pidfile[300], err[KL_ERRMSG_LEN];
    snprintf(cc, sizeof cc, "%s/hang-cc.sh", F.dir);
    snprintf(pidfile, sizeof pidfile, "%s/hang-cc.pid", F.dir);
    unlink(pidfile);
    char *script = kl_xasprintf("#!/bin/sh\n"
                                "sleep 60 &\n"
                                "echo $! > %s.tmp && mv %s.tmp %s\n"
                                "wait\n",
                                pidfile, pidfile, pidfile);
    assert_int_equal(kl_write_file(cc, script, strlen(script), err), KL_OK);
    free(script);
    assert_int_equal(chmod(cc, 0755), 0);
    kla_builder_t *b = NULL;
    kla_builder_config_t bc = {.workdir = F.dir, .cc = cc, .timeout_ms = 500};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    kla_build_t bd;
    const char *src = "int hang(void) { return 1; }\n";
    double t0 = kl_now_s();
    assert_int_equal(kla_builder_build(b, src, strlen(src), &bd),
                     KL_ERR_COMPILE);
    /* A hang bound only: a compiler never killed would wait 60 s. */
    assert_true(kl_now_s() - t0 < 30.0);
    assert_non_null(strstr(bd.log, "still running after 0.5 s: killed"));
    /* The sleep went with the shell (if the shell got as far as starting
     * it before the kill). */
    char *text = NULL;
    size_t len = 0;
    if (kl_read_file(pidfile, &text, &len, err) == KL_OK) {
        pid_t sleeper = (pid_t)atoi(text);
        free(text);
        assert_true(sleeper > 0);
        double end = kl_now_s() + 30; /* a hang bound for the reaping */
        while (s_running(sleeper) && kl_now_s() < end)
            usleep(10 * 1000);
        assert_false(s_running(sleeper));
    }
    /* Not remembered: the compiler runs (and hangs) again. */
    assert_int_equal(kla_builder_build(b, src, strlen(src), &bd),
                     KL_ERR_COMPILE);
    assert_false(bd.cache_hit);
    assert_int_equal(kla_builder_compiles(b), 2);
    kla_builder_destroy(&b);
    /* A missing compiler is a clear error too. */
    kla_builder_config_t nc = {.workdir = F.dir, .cc = "/nonexistent/cc"};
    assert_int_equal(kla_builder_new(&b, &nc, err), KL_OK);
    assert_int_equal(kla_builder_build(b, src, strlen(src), &bd),
                     KL_ERR_COMPILE);
    assert_non_null(strstr(bd.log, "cannot run"));
    kla_builder_destroy(&b);
    kla_builder_config_t bad = {.workdir = "/nonexistent/dir"};
    assert_int_equal(kla_builder_new(&b, &bad, err), KL_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/dir"));
}

typedef struct {
    const char *src;
    kla_build_t out;
    int rc;
} s_bg_build_t;

static void *s_bg_build(void *arg)
{
    s_bg_build_t *j = arg;
    j->rc = kla_builder_build(F.builder, j->src, strlen(j->src), &j->out);
    return NULL;
}

static void test_gate_pauses_builds(void **state)
{
    (void)state;
    unsigned before = kla_builder_compiles(F.builder);
    double t0 = kl_now_s();
    kla_gate_pause(F.gate);
    s_bg_build_t job = {.src = "int gated(void) { return 7; }\n"};
    pthread_t t;
    pthread_create(&t, NULL, s_bg_build, &job);
    usleep(400 * 1000);
    assert_int_equal(kla_builder_compiles(F.builder), before);
    kla_gate_resume(F.gate);
    pthread_join(t, NULL);
    assert_int_equal(job.rc, KL_OK);
    /* The build's wait at the gate is paused time (how long depends on
     * when its thread got there), within the pause..join interval. */
    assert_true(job.out.paused_s > 0);
    assert_true(job.out.paused_s <= kl_now_s() - t0);
    assert_true(job.out.compile_s < 30); /* a hang bound */
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);
}

static long s_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* A compile already running when the gate closes is stopped (SIGSTOP to
 * its process group) and goes on after the gate opens. */
static void test_gate_stops_running_compile(void **state)
{
    (void)state;
    char cc[300], mark[300], err[KL_ERRMSG_LEN];
    snprintf(cc, sizeof cc, "%s/ticking-cc.sh", F.dir);
    snprintf(mark, sizeof mark, "%s/ticks", F.dir);
    char *script = kl_xasprintf("#!/bin/sh\n"
                                "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do\n"
                                "  echo $i >> %s; sleep 0.05\n"
                                "done\n"
                                "exit 1\n",
                                mark);
    assert_int_equal(kl_write_file(cc, script, strlen(script), err), KL_OK);
    free(script);
    assert_int_equal(chmod(cc, 0755), 0);
    kla_builder_t *saved = F.builder, *b = NULL;
    kla_builder_config_t bc = {.workdir = F.dir, .cc = cc, .gate = F.gate};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    /* The ticks are seen from here only outside the compiler's sandbox;
     * builder_test stops a compile inside one. */
    bool unsafe = kla_jail_unsafe();
    kla_jail_set_unsafe(true);
    F.builder = b; /* s_bg_build uses F.builder */
    s_bg_build_t job = {.src = "int ticking(void) { return 3; }\n"};
    pthread_t t;
    double t0 = kl_now_s();
    pthread_create(&t, NULL, s_bg_build, &job);
    while (s_file_size(mark) < 4 && kl_now_s() - t0 < 30) /* hang bound */
        usleep(10 * 1000);
    assert_true(s_file_size(mark) >= 4); /* it runs when the gate closes */
    kla_gate_pause(F.gate);
    usleep(100 * 1000); /* a tick in flight lands */
    long stopped_at = s_file_size(mark);
    usleep(400 * 1000);
    assert_int_equal(s_file_size(mark), stopped_at);
    kla_gate_resume(F.gate);
    pthread_join(t, NULL);
    assert_int_equal(job.rc, KL_ERR_COMPILE);
    assert_true(s_file_size(mark) > stopped_at);
    /* The stop (at least the 0.5 s slept above) is paused time, not
     * compile time: both fit in the call, which fits in t0..now. */
    assert_true(job.out.paused_s >= 0.5);
    assert_true(job.out.compile_s + job.out.paused_s <= kl_now_s() - t0);
    kla_jail_set_unsafe(unsafe);
    F.builder = saved;
    kla_builder_destroy(&b);
}

static void test_run_ok_and_reference_cached(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p);
    p.eval.seed = 1234; /* a problem no other test uses */
    unsigned refs = kla_runner_reference_runs(F.runner);
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
    assert_int_equal(kla_runner_reference_runs(F.runner), refs + 1);
    /* Another seed is another reference. */
    p.eval.seed = 1235;
    s_measure(&p, "", "", "mm", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    assert_int_equal(kla_runner_reference_runs(F.runner), refs + 2);
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
    assert_int_equal(kla_builder_build(F.builder, src, strlen(src), &bd),
                     KL_OK);
    kla_runner_measure(F.runner, &p, F.ref.so_path, "ref", bd.so_path, "mm",
                       &r);
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
    assert_int_equal(kla_builder_build(F.builder, src, strlen(src), &bd),
                     KL_OK);
    /* The "reference" writes nothing: every candidate says so. */
    kla_runner_measure(F.runner, &p, bd.so_path, "mm", F.ref.so_path, "ref",
                       &r);
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
     * inputs) or refuse (the CPU agent). */
    a.dtype = KILN__DTYPE__DTYPE_F16;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 2);
    assert_false(p.any_int);
    assert_int_equal(kla_backend_cpu.check_request(NULL, &req, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'A' has dtype f16"));
    a.dtype = KILN__DTYPE__DTYPE_BF16;
    assert_int_equal(kla_backend_cpu.check_request(NULL, &req, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'A' has dtype bf16"));
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

static void test_simulate(void **state)
{
    (void)state;
    kla_result_t a, b, c;
    const char *s1 = "void k(void *const *a) { /* 1 */ }";
    kla_simulate(s1, strlen(s1), &a);
    kla_simulate(s1, strlen(s1), &b);
    assert_int_equal(a.status, KILN__STATUS__STATUS_OK);
    assert_int_equal(a.n_samples, 3);
    assert_memory_equal(a.samples, b.samples, 3 * sizeof(double));
    for (int i = 0; i < 3; i++)
        assert_true(a.samples[i] >= 49e-6 && a.samples[i] <= 5.1e-3);
    const char *s2 = "/* KILN_SIMULATE_FAIL */";
    kla_simulate(s2, strlen(s2), &c);
    assert_int_equal(c.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    kla_result_clear(&a);
    kla_result_clear(&b);
    kla_result_clear(&c);
}

static void test_device_and_cores(void **state)
{
    (void)state;
    kla_device_t d;
    kla_device_detect(&d);
    assert_true(d.cores >= 1);
    assert_true(d.memory_bytes > (64u << 20));
    assert_true(d.llc_bytes > 0);
    assert_true(strncmp(d.target, "cpu/", 4) == 0);
    assert_string_not_equal(d.name, "");
    char err[KL_ERRMSG_LEN], text[64];
    kla_cores_t c, e;
    assert_int_equal(kla_cores_parse("0-3,6,2", &c, err), KL_OK);
    assert_int_equal(c.n, 5);
    kla_cores_format(&c, text, sizeof text);
    assert_string_equal(text, "0-3,6");
    assert_int_equal(kla_cores_parse("4-5", &e, err), KL_OK);
    assert_true(kla_cores_disjoint(&c, &e));
    assert_int_equal(kla_cores_parse("3-1", &e, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "'3-1'"));
    assert_int_equal(kla_cores_parse("a", &e, err), KL_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_and_cores),
        cmocka_unit_test(test_simulate),
        cmocka_unit_test(test_eval_from_proto),
        cmocka_unit_test(test_problem_from_request),
        cmocka_unit_test(test_builder_ok_error_cache),
        cmocka_unit_test(test_builder_log_bounded),
        cmocka_unit_test(test_builder_timeout),
        cmocka_unit_test(test_builder_workdir_vanishes),
        cmocka_unit_test(test_gate_pauses_builds),
        cmocka_unit_test(test_gate_stops_running_compile),
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
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
