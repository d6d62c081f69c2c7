/* The CUDA backend of kiln-agent without a GPU, its devices: --device
 * lists, launch and resource checks against a device's limits, the input
 * generator, and the message and exit code of an agent without a driver.
 * Needs KILN_AGENT (it runs kiln-agent); the fixture is
 * tests/support/cuda_agent_fx.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_net.h"
#include "kl_space.h"
#include "kl_util.h"
#include "kla_agent.h"
#include "kla_cuda.h"
#include "kla_cuda_wire.h"
#include "kla_jail.h"
#include "kl_target.h"
#include "kl_test_tmp.h"
#include "cuda_agent_fx.h"

static void test_devspec(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kla_devspec_t s;
    const kla_devsel_t *cpu = &s.sel[KL_TARGET_CPU];
    const kla_devsel_t *gpu = &s.sel[KL_TARGET_CUDA];
    assert_int_equal(kla_devspec_parse("cpu", &s, err), KL_OK);
    assert_true(cpu->all);
    assert_false(kla_devsel_any(gpu));
    assert_int_equal(kla_devspec_parse("cuda:0,1", &s, err), KL_OK);
    assert_false(kla_devsel_any(cpu));
    assert_int_equal(gpu->n, 2);
    assert_int_equal(gpu->id[1], 1);
    assert_int_equal(kla_devspec_parse("cpu,cuda:3", &s, err), KL_OK);
    assert_true(cpu->all);
    assert_int_equal(gpu->id[0], 3);
    assert_int_equal(kla_devspec_parse("cuda:all", &s, err), KL_OK);
    assert_true(gpu->all);
    assert_int_equal(kla_devspec_parse("cuda", &s, err), KL_OK);
    assert_true(gpu->all);
    const char *bad[] = {"",
                         "gpu",
                         "cuda:x",
                         "cuda:0,0",
                         "cpu,cpu",
                         "cuda:-1",
                         "cuda:all,cuda:1",
                         "cpu,1",
                         "cpu:0",
                         "cudax",
                         "cuda:"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        assert_int_equal(kla_devspec_parse(bad[i], &s, err), KL_ERR_INVAL);
        assert_non_null(strstr(err, "--device"));
    }
}

static void test_check_launch(void **state)
{
    (void)state;
    kla_cuda_dev_t d;
    fx_cuda_dev(&d, true);
    char err[KL_ERRMSG_LEN];
    kla_cuda_res_t r = {.regs = 32, .smem_static = 16 << 10};
    kla_cuda_launch_t l = {{64, 64, 1}, {16, 16, 1}, 0};
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_OK);
    l.block[0] = 64; /* 1024 threads: fine */
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_OK);
    r.regs = 65; /* 72 x 1024 registers > 65536 */
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "registers"));
    r.regs = 32;
    l.block[1] = 32; /* 2048 threads */
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "threads per block"));
    l.block[1] = 4;      /* 256 threads */
    r.max_threads = 256; /* __launch_bounds__(256) */
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_OK);
    l.block[1] = 8;
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "kernel allows 256"));
    r.max_threads = 0;
    l.block[1] = 1;
    l.shared_bytes = 220 << 10; /* 16 + 220 KiB > 227 KiB */
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "shared memory"));
    l.shared_bytes = 200 << 10; /* opt-in range: allowed */
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_OK);
    l.grid[1] = 0;
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "grid.y"));
    l.grid[1] = 1;
    l.block[2] = 65;
    assert_int_equal(kla_cuda_check_launch(&d, &r, &l, err), KL_ERR_INVAL);
    kla_cuda_launch_t rl;
    kla_cuda_ref_launch(1000, &rl);
    assert_int_equal(rl.grid[0], 4);
    assert_int_equal(rl.block[0], KLA_CUDA_REF_BLOCK);
}

static void test_input_values(void **state)
{
    (void)state;
    double sum = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        float v = kla_cuda_input_value(7, 1, i);
        assert_true(v >= -1.0f && v < 1.0f);
        /* A multiple of 2^-23: the device computes the same bits. */
        float k = (v + 1.0f) * 8388608.0f;
        assert_true(k == (float)(int64_t)k);
        sum += v;
    }
    assert_true(sum / 100000 < 0.01 && sum / 100000 > -0.01);
    assert_true(kla_cuda_input_value(7, 1, 5) == kla_cuda_input_value(7, 1, 5));
    assert_true(kla_cuda_input_value(7, 1, 5) != kla_cuda_input_value(7, 2, 5));
    assert_true(kla_cuda_input_value(7, 1, 5) != kla_cuda_input_value(8, 1, 5));
}

/* Runs kiln-agent with args and the environment as is; exit status and
 * the first bytes of its stderr. */
static int s_run_agent(const char *const *args, char *out, size_t n)
{
    const char *agent = getenv("KILN_AGENT");
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        char *av[16] = {(char *)agent};
        for (int i = 0; args[i] && i < 14; i++)
            av[i + 1] = (char *)args[i];
        execv(agent, av);
        _exit(127);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < n && (k = read(p[0], out + got, n - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = '\0';
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_no_driver(void **state)
{
    (void)state;
    /* A driver that cannot be there, whatever the machine has. */
    setenv("KILN_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    char err[KL_ERRMSG_LEN] = "";
    kla_devsel_t s = {.n = 1};
    kla_cuda_dev_t d[KLA_MAX_GPUS];
    int n = 5;
    assert_int_equal(kla_cuda_query(&s, d, &n, err), KL_ERR_UNSUPPORTED);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err, "no CUDA driver"));
    const char *args[] = {"--connect",  "tcp://127.0.0.1:9",
                          "--insecure", "--device",
                          "cuda:0",     NULL};
    char out[2048];
    assert_int_equal(s_run_agent(args, out, sizeof out), 69);
    assert_non_null(strstr(out, "device 'cuda:0'"));
    assert_non_null(strstr(out, "no CUDA driver"));
    const char *mixed[] = {"--connect", "tcp://127.0.0.1:9", "--insecure",
                           "--device",  "cpu,cuda:0",        NULL};
    assert_int_equal(s_run_agent(mixed, out, sizeof out), 69);
    const char *bad[] = {"--connect",  "tcp://127.0.0.1:9",
                         "--insecure", "--device",
                         "tpu:0",      NULL};
    assert_int_equal(s_run_agent(bad, out, sizeof out), 2);
    assert_non_null(strstr(out, "tpu:0"));
    unsetenv("KILN_LIBCUDA");
}

int main(void)
{
    if (fx_cuda_setup())
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devspec),
        cmocka_unit_test(test_check_launch),
        cmocka_unit_test(test_input_values),
        cmocka_unit_test(test_no_driver),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fx_cuda_cleanup();
    return rc;
}
