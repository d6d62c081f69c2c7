/* cpu_agent_fx.h - the fixture of the CPU agent's builder and runner tests
 * (builder_gate_test.c, runner_measure_test.c): a work directory, a gate,
 * a builder and a runner that share it, and the naive 64x64 matmul
 * reference (mm_fx.h) built once (fx_cpu.ref), for a group's setup and
 * teardown: cmocka_run_group_tests(tests, fx_cpu_setup, fx_cpu_teardown). */
#ifndef CPU_AGENT_FX_H
#define CPU_AGENT_FX_H

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
#include "mm_fx.h"

typedef struct {
    char dir[256];
    kla_gate_t *gate;
    kla_builder_t *builder;
    kla_runner_t *runner;
    kla_build_t ref;
} fx_cpu_t;

static fx_cpu_t fx_cpu;

static inline int fx_cpu_setup(void **state)
{
    (void)state;
    if (!kl_test_mkdtemp(fx_cpu.dir, sizeof fx_cpu.dir, "kla-test-XXXXXX"))
        return -1;
    char err[KL_ERRMSG_LEN];
    kla_gate_new(&fx_cpu.gate);
    kla_builder_config_t bc = {
        .workdir = fx_cpu.dir, .cflags = "-O2", .gate = fx_cpu.gate};
    if (kla_builder_new(&fx_cpu.builder, &bc, err) != KL_OK)
        return -1;
    kla_runner_config_t rc = {
        .llc_bytes = 1 << 20, .max_mem_bytes = 512u << 20, .gate = fx_cpu.gate};
    if (kla_runner_new(&fx_cpu.runner, &rc, err) != KL_OK)
        return -1;
    if (kla_builder_build(fx_cpu.builder, fx_ref_src, strlen(fx_ref_src),
                          &fx_cpu.ref))
        return -1;
    return 0;
}

static inline int fx_cpu_teardown(void **state)
{
    (void)state;
    kla_runner_destroy(&fx_cpu.runner);
    kla_builder_destroy(&fx_cpu.builder);
    kla_gate_destroy(&fx_cpu.gate);
    char *cmd = kl_xasprintf("rm -rf '%s'", fx_cpu.dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

#endif
