/* Unit tests of kiln-agent's builds and their gate (agent/builder.c,
 * kla_builder.h): a build, its error and its cache hit, a bounded log, a
 * compile past its timeout, a work directory that vanishes, builds paused
 * while the gate is held and a running compile stopped by it. Real
 * compiler, real forked children; the builder's confinement (source
 * check, sandbox, trimming, checked cache) is builder_test.c. */
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

static void test_builder_ok_error_cache(void **state)
{
    (void)state;
    const char *good = "int forty_two(void) { return 42; }\n";
    unsigned before = kla_builder_compiles(fx_cpu.builder);
    kla_build_t b1, b2, b3;
    assert_int_equal(kla_builder_build(fx_cpu.builder, good, strlen(good), &b1),
                     KL_OK);
    assert_true(b1.ok);
    assert_false(b1.cache_hit);
    assert_true(b1.compile_s > 0);
    assert_int_equal(access(b1.so_path, R_OK), 0);
    assert_int_equal(kla_builder_build(fx_cpu.builder, good, strlen(good), &b2),
                     KL_OK);
    assert_true(b2.cache_hit);
    assert_string_equal(b1.so_path, b2.so_path);
    assert_int_equal(kla_builder_compiles(fx_cpu.builder), before + 1);

    const char *bad = "int broken(void) { return undeclared_thing; }\n";
    assert_int_equal(kla_builder_build(fx_cpu.builder, bad, strlen(bad), &b3),
                     KL_ERR_COMPILE);
    assert_false(b3.ok);
    assert_non_null(strstr(b3.log, "undeclared_thing"));
    assert_true(strlen(b3.log) <= KLA_BUILD_LOG_MAX);
    /* A failed build is remembered too. */
    kla_build_t b4;
    assert_int_equal(kla_builder_build(fx_cpu.builder, bad, strlen(bad), &b4),
                     KL_ERR_COMPILE);
    assert_true(b4.cache_hit);
    assert_string_equal(b3.log, b4.log);
    assert_int_equal(kla_builder_compiles(fx_cpu.builder), before + 2);
}

static void test_builder_log_bounded(void **state)
{
    (void)state;
    kl_buf_t b = {0};
    for (int i = 0; i < 300; i++)
        kl_buf_printf(&b, "int f%d(void) { return nope_%d; }\n", i, i);
    kla_build_t bd;
    assert_int_equal(kla_builder_build(fx_cpu.builder, b.data, b.len, &bd),
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
    snprintf(dir, sizeof dir, "%s/vanishing", fx_cpu.dir);
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
    snprintf(cc, sizeof cc, "%s/hang-cc.sh", fx_cpu.dir);
    snprintf(pidfile, sizeof pidfile, "%s/hang-cc.pid", fx_cpu.dir);
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
    kla_builder_config_t bc = {
        .workdir = fx_cpu.dir, .cc = cc, .timeout_ms = 500};
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
    kla_builder_config_t nc = {.workdir = fx_cpu.dir, .cc = "/nonexistent/cc"};
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
    j->rc = kla_builder_build(fx_cpu.builder, j->src, strlen(j->src), &j->out);
    return NULL;
}

static void test_gate_pauses_builds(void **state)
{
    (void)state;
    unsigned before = kla_builder_compiles(fx_cpu.builder);
    double t0 = kl_now_s();
    kla_gate_pause(fx_cpu.gate);
    s_bg_build_t job = {.src = "int gated(void) { return 7; }\n"};
    pthread_t t;
    pthread_create(&t, NULL, s_bg_build, &job);
    usleep(400 * 1000);
    assert_int_equal(kla_builder_compiles(fx_cpu.builder), before);
    kla_gate_resume(fx_cpu.gate);
    pthread_join(t, NULL);
    assert_int_equal(job.rc, KL_OK);
    /* The build's wait at the gate is paused time (how long depends on
     * when its thread got there), within the pause..join interval. */
    assert_true(job.out.paused_s > 0);
    assert_true(job.out.paused_s <= kl_now_s() - t0);
    assert_true(job.out.compile_s < 30); /* a hang bound */
    assert_int_equal(kla_builder_compiles(fx_cpu.builder), before + 1);
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
    snprintf(cc, sizeof cc, "%s/ticking-cc.sh", fx_cpu.dir);
    snprintf(mark, sizeof mark, "%s/ticks", fx_cpu.dir);
    char *script = kl_xasprintf("#!/bin/sh\n"
                                "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do\n"
                                "  echo $i >> %s; sleep 0.05\n"
                                "done\n"
                                "exit 1\n",
                                mark);
    assert_int_equal(kl_write_file(cc, script, strlen(script), err), KL_OK);
    free(script);
    assert_int_equal(chmod(cc, 0755), 0);
    kla_builder_t *saved = fx_cpu.builder, *b = NULL;
    kla_builder_config_t bc = {
        .workdir = fx_cpu.dir, .cc = cc, .gate = fx_cpu.gate};
    assert_int_equal(kla_builder_new(&b, &bc, err), KL_OK);
    /* The ticks are seen from here only outside the compiler's sandbox;
     * builder_test stops a compile inside one. */
    bool unsafe = kla_jail_unsafe();
    kla_jail_set_unsafe(true);
    fx_cpu.builder = b; /* s_bg_build uses fx_cpu.builder */
    s_bg_build_t job = {.src = "int ticking(void) { return 3; }\n"};
    pthread_t t;
    double t0 = kl_now_s();
    pthread_create(&t, NULL, s_bg_build, &job);
    while (s_file_size(mark) < 4 && kl_now_s() - t0 < 30) /* hang bound */
        usleep(10 * 1000);
    assert_true(s_file_size(mark) >= 4); /* it runs when the gate closes */
    kla_gate_pause(fx_cpu.gate);
    usleep(100 * 1000); /* a tick in flight lands */
    long stopped_at = s_file_size(mark);
    usleep(400 * 1000);
    assert_int_equal(s_file_size(mark), stopped_at);
    kla_gate_resume(fx_cpu.gate);
    pthread_join(t, NULL);
    assert_int_equal(job.rc, KL_ERR_COMPILE);
    assert_true(s_file_size(mark) > stopped_at);
    /* The stop (at least the 0.5 s slept above) is paused time, not
     * compile time: both fit in the call, which fits in t0..now. */
    assert_true(job.out.paused_s >= 0.5);
    assert_true(job.out.compile_s + job.out.paused_s <= kl_now_s() - t0);
    kla_jail_set_unsafe(unsafe);
    fx_cpu.builder = saved;
    kla_builder_destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builder_ok_error_cache),
        cmocka_unit_test(test_builder_log_bounded),
        cmocka_unit_test(test_builder_timeout),
        cmocka_unit_test(test_builder_workdir_vanishes),
        cmocka_unit_test(test_gate_pauses_builds),
        cmocka_unit_test(test_gate_stops_running_compile),
    };
    return cmocka_run_group_tests(tests, fx_cpu_setup, fx_cpu_teardown);
}
