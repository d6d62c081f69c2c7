/* The CUDA backend of kiln-agent without a GPU: --device lists, launch and
 * resource checks, the input generator, the message and exit code of an
 * agent without a driver, NVRTC builds of generated kernels for sm_80 and
 * sm_90 with their resources checked, and the fault handling of the GPU
 * worker against the KILN_FAKE_GPU_WORKER stand-in (poisoned context,
 * crash, hang, wrong result), through the runner and through the whole
 * agent on loopback; the worker's sandbox (the stand-in's "probe" reports
 * its uid, pid, the workdir, the network and /dev as it sees them; the
 * device nodes a GPU's worker gets). Results of the stand-in are
 * simulated: none of this is a GPU pass (tests/gpu/run.sh is, on a
 * machine with a GPU). Sandbox assertions are skipped where bwrap cannot
 * make a sandbox (kla_jail_probe); the rest then runs unsandboxed.
 *
 * Needs KILN_AGENT (the kiln-agent executable, which is also the worker).
 * NVRTC-dependent tests are skipped when NVRTC cannot be loaded. */
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

static char s_dir[256];
static bool s_jail; /* bwrap can make a sandbox here */

/* An sm_90 device with an H100/H200's limits (and an A100's for sm_80). */
static void s_dev(kla_cuda_dev_t *d, bool sm90)
{
    memset(d, 0, sizeof *d);
    snprintf(d->arch, sizeof d->arch, sm90 ? "sm_90" : "sm_80");
    snprintf(d->target, sizeof d->target, "cuda/%s", d->arch);
    d->max_threads_per_block = 1024;
    d->max_shared_per_block = 48 << 10;
    d->max_shared_optin = sm90 ? 227 << 10 : 163 << 10;
    d->max_regs_per_block = 65536;
    d->l2_bytes = sm90 ? 50 << 20 : 40 << 20;
}

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
    s_dev(&d, true);
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

/* ---- NVRTC builds of generated kernels ------------------------------- */

static kla_cuda_builder_t *s_builder(void)
{
    char err[KL_ERRMSG_LEN];
    kla_cuda_builder_t *b = NULL;
    if (kla_cuda_builder_new(&b, s_dir, err) != KL_OK) {
        fprintf(stderr, "SKIP: %s\n", err);
        return NULL;
    }
    return b;
}

static void test_build_generated(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = s_builder();
    if (!b)
        skip();
    char err[KL_ERRMSG_LEN];
    const char *ops[] = {"matmul M=256 N=256 K=256",
                         "conv2d N=1 C=32 H=14 W=14 K=64 R=3 S=3 pad=1"};
    for (int arch = 0; arch < 2; arch++) {
        const char *tname = arch ? "cuda/sm_90" : "cuda/sm_80";
        kla_cuda_dev_t d;
        s_dev(&d, arch == 1);
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            kl_workload_t *w = NULL;
            kl_space_t *sp = NULL;
            assert_int_equal(kl_workload_from_string(ops[o], &w, err), KL_OK);
            assert_int_equal(kl_space_for_target(tname, w, &sp, err), KL_OK);
            kl_rng_t rng;
            kl_rng_seed(&rng, 11 + o);
            for (int i = 0; i < 3; i++) {
                kl_trace_t *tr = NULL;
                kl_sched_t *s = NULL;
                assert_int_equal(
                    kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err), KL_OK);
                kl_kernel_t k;
                assert_int_equal(
                    kl_codegen_cuda(s, kl_space_target(sp), "cand", &k, err),
                    KL_OK);
                kla_build_t out;
                kla_cuda_res_t res;
                int rc = kla_cuda_builder_build(b, k.source, strlen(k.source),
                                                d.arch, k.entry, &out, &res);
                if (rc != KL_OK)
                    fprintf(stderr, "%s\n%s\n", out.log, k.source);
                assert_int_equal(rc, KL_OK);
                assert_true(out.ok);
                assert_non_null(strstr(out.so_path, d.arch));
                char *img = NULL;
                size_t len = 0;
                assert_int_equal(kl_read_file(out.so_path, &img, &len, err),
                                 KL_OK);
                assert_memory_equal(img,
                                    "\x7f"
                                    "ELF",
                                    4);
                free(img);
                /* ptxas's report, checked like the loaded function's. */
                if (!out.cache_hit) {
                    assert_true(res.regs >= 1 && res.regs <= 255);
                    kla_cuda_launch_t l;
                    for (int x = 0; x < 3; x++) {
                        l.grid[x] = (uint32_t)k.grid[x];
                        l.block[x] = (uint32_t)k.block[x];
                    }
                    l.shared_bytes = (uint32_t)k.shared_bytes;
                    rc = kla_cuda_check_launch(&d, &res, &l, err);
                    if (rc != KL_OK)
                        fprintf(stderr, "%s: %s\n", tname, err);
                    assert_int_equal(rc, KL_OK);
                    /* Registers per thread x threads beyond the device. */
                    kla_cuda_res_t big = res;
                    big.regs = 255;
                    l.block[0] = 1024;
                    l.block[1] = l.block[2] = 1;
                    assert_int_equal(kla_cuda_check_launch(&d, &big, &l, err),
                                     KL_ERR_INVAL);
                }
                /* The same source again: a cache hit, NVRTC not run. */
                unsigned before = kla_cuda_builder_compiles(b);
                kla_build_t again;
                assert_int_equal(
                    kla_cuda_builder_build(b, k.source, strlen(k.source),
                                           d.arch, k.entry, &again, NULL),
                    KL_OK);
                assert_true(again.cache_hit);
                assert_string_equal(again.so_path, out.so_path);
                assert_int_equal(kla_cuda_builder_compiles(b), before);
                kl_kernel_free(&k);
                kl_sched_destroy(&s);
                kl_trace_free(&tr);
            }
            kl_space_destroy(&sp);
            kl_workload_free(&w);
        }
    }
    kla_cuda_builder_destroy(&b);
}

/* The worker's own helper kernels compile for both archs (they only run
 * on a GPU: tests/gpu/run.sh). */
static void test_build_helpers(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = s_builder();
    if (!b)
        skip();
    const char *src = kla_cuda_helpers_source();
    const char *archs[] = {"sm_80", "sm_90"};
    for (int i = 0; i < 2; i++) {
        kla_build_t out;
        int rc = kla_cuda_builder_build(b, src, strlen(src), archs[i],
                                        "kla_compare", &out, NULL);
        if (rc != KL_OK)
            fprintf(stderr, "%s\n", out.log);
        assert_int_equal(rc, KL_OK);
    }
    kla_cuda_builder_destroy(&b);
}

static void test_build_error(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = s_builder();
    if (!b)
        skip();
    const char *bad = "extern \"C\" __global__ void k(float *a)\n"
                      "{\n"
                      "    a[0] = undefined_thing;\n"
                      "}\n";
    kla_build_t out;
    assert_int_equal(
        kla_cuda_builder_build(b, bad, strlen(bad), "sm_90", "k", &out, NULL),
        KL_ERR_COMPILE);
    assert_false(out.ok);
    assert_non_null(strstr(out.log, "undefined_thing"));
    assert_int_equal(
        kla_cuda_builder_build(b, bad, strlen(bad), "sm_99x", "k", &out, NULL),
        KL_ERR_COMPILE);
    kla_cuda_builder_destroy(&b);
}

/* ---- the worker's faults, against the stand-in ------------------------ */

/* Kernels whose names tell the stand-in what to do. */
static char *s_kernel(const char *name)
{
    return kl_xasprintf("extern \"C\" __global__ void %s(const float *a,\n"
                        "    const float *b, float *c)\n"
                        "{\n"
                        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "    if (i < 4096) c[i] = a[i] + b[i];\n"
                        "}\n",
                        name);
}

static void s_build_named(kla_cuda_builder_t *b, const char *name,
                          kla_build_t *out)
{
    char *src = s_kernel(name);
    assert_int_equal(
        kla_cuda_builder_build(b, src, strlen(src), "sm_90", name, out, NULL),
        KL_OK);
    free(src);
}

static void s_problem(kla_problem_t *p, uint32_t timeout_ms)
{
    memset(p, 0, sizeof *p);
    memset(p->workload_key, 7, 16);
    p->n_args = 3;
    for (int i = 0; i < 3; i++)
        p->nelem[i] = 4096;
    p->is_output[2] = true;
    kla_eval_defaults(&p->eval);
    p->eval.repeat = 3;
    p->eval.timeout_ms = timeout_ms;
}

static void test_runner_faults(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = s_builder();
    if (!b)
        skip();
    setenv("KILN_FAKE_GPU_WORKER", "1", 1);
    char err[KL_ERRMSG_LEN];
    kla_devsel_t spec = {.n = 1};
    kla_cuda_dev_t d;
    int n = 0;
    assert_int_equal(kla_cuda_query(&spec, &d, &n, err), KL_OK);
    assert_int_equal(n, 1);
    assert_true(d.fake);
    assert_non_null(strstr(d.name, "fake"));
    kla_cuda_runner_config_t c = {.dev = &d,
                                  .worker_path = getenv("KILN_AGENT")};
    kla_cuda_runner_t *r = NULL;
    assert_int_equal(kla_cuda_runner_new(&r, &c, err), KL_OK);
    kla_build_t ref, ok, oob, crash, hang, wrong;
    s_build_named(b, "ref", &ref);
    s_build_named(b, "ok", &ok);
    s_build_named(b, "oob", &oob);
    s_build_named(b, "crash", &crash);
    s_build_named(b, "hang", &hang);
    s_build_named(b, "wrong", &wrong);
    kla_problem_t p;
    s_problem(&p, 500);
    kla_cuda_launch_t l = {{16, 1, 1}, {256, 1, 1}, 0};
    kla_result_t res;
    struct {
        kla_build_t *k;
        const char *entry;
        Kiln__Status st;
        const char *msg;
        unsigned starts; /* workers started once this one is done */
    } steps[] = {
        {&ok, "ok", KILN__STATUS__STATUS_OK, "", 1},
        {&oob, "oob", KILN__STATUS__STATUS_RUNTIME_ERROR,
         "CUDA_ERROR_ILLEGAL_ADDRESS", 1},
        {&ok, "ok", KILN__STATUS__STATUS_OK, "", 2},
        {&crash, "crash", KILN__STATUS__STATUS_RUNTIME_ERROR, "died", 2},
        {&ok, "ok", KILN__STATUS__STATUS_OK, "", 3},
        {&hang, "hang", KILN__STATUS__STATUS_TIMEOUT, "timed out after 500", 3},
        {&wrong, "wrong", KILN__STATUS__STATUS_WRONG_RESULT, "expected", 4},
        {&ok, "ok", KILN__STATUS__STATUS_OK, "", 4},
    };
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        kla_cuda_runner_measure(r, &p, ref.so_path, "ref", steps[i].k->so_path,
                                steps[i].entry, &l, &res);
        if (res.status != steps[i].st || !strstr(res.error, steps[i].msg))
            fprintf(stderr, "step %zu (%s): %d %s\n", i, steps[i].entry,
                    res.status, res.error);
        assert_int_equal(res.status, steps[i].st);
        assert_non_null(strstr(res.error, steps[i].msg));
        assert_int_equal(kla_cuda_runner_starts(r), steps[i].starts);
        if (res.status == KILN__STATUS__STATUS_OK) {
            assert_int_equal(res.n_samples, 3);
            assert_true(res.samples[0] > 0);
        }
        kla_result_clear(&res);
    }
    /* A worker killed between candidates is replaced without blaming the
     * next candidate. */
    pid_t pid = kla_cuda_runner_pid(r);
    assert_true(pid > 0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    usleep(100000);
    kla_cuda_runner_measure(r, &p, ref.so_path, "ref", ok.so_path, "ok", &l,
                            &res);
    assert_int_equal(res.status, KILN__STATUS__STATUS_OK);
    assert_int_equal(kla_cuda_runner_starts(r), 5);
    kla_result_clear(&res);
    /* A reference that fails is reported as such. */
    kla_cuda_runner_measure(r, &p, ref.so_path, "badref", ok.so_path, "ok", &l,
                            &res);
    assert_int_equal(res.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(res.error, "reference kernel failed"));
    kla_result_clear(&res);
    kla_cuda_runner_destroy(&r);
    /* A worker that cannot start is a RUNTIME_ERROR that names it. */
    c.worker_path = "/bin/false";
    assert_int_equal(kla_cuda_runner_new(&r, &c, err), KL_OK);
    kla_cuda_runner_measure(r, &p, ref.so_path, "ref", ok.so_path, "ok", &l,
                            &res);
    assert_int_equal(res.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(res.error, "/bin/false"));
    kla_result_clear(&res);
    kla_cuda_runner_destroy(&r);
    unsetenv("KILN_FAKE_GPU_WORKER");
    kla_cuda_builder_destroy(&b);
}

/* ---- the worker's sandbox ---------------------------------------------- */

static void s_touch(const char *root, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Which device nodes a GPU's worker gets: its own by the driver's minor
 * for its PCI address, else by ordinal; the shared ones that exist. */
static void test_dev_nodes(void **state)
{
    (void)state;
    char root[300];
    snprintf(root, sizeof root, "%s/devroot", s_dir);
    mkdir(root, 0755);
    const char *nodes[] = {"dev/nvidia0", "dev/nvidia1", "dev/nvidia2",
                           "dev/nvidiactl", "dev/nvidia-uvm"};
    for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++)
        s_touch(root, nodes[i], "");
    s_touch(root, "proc/driver/nvidia/gpus/0000:3b:00.0/information",
            "Model: \t NVIDIA H200\nIRQ:   100\nDevice Minor: \t 2\n"
            "Bus Location: \t 0000:3b:00.0\n");
    s_touch(root, "proc/driver/nvidia/gpus/0000:5e:00.0/information",
            "Model: \t NVIDIA H200\nDevice Minor: \t 0\n");
    kla_cuda_dev_t d;
    s_dev(&d, true);
    d.ordinal = 0;
    snprintf(d.pci_bus_id, sizeof d.pci_bus_id, "0000:3B:00.0");
    char out[8][64];
    int n = kla_cuda_dev_nodes(&d, root, out, 8);
    assert_int_equal(n, 3);
    assert_string_equal(out[0], "/dev/nvidia2"); /* minor 2, not ordinal 0 */
    assert_string_equal(out[1], "/dev/nvidiactl");
    assert_string_equal(out[2], "/dev/nvidia-uvm");
    snprintf(d.pci_bus_id, sizeof d.pci_bus_id, "0000:5e:00.0");
    d.ordinal = 1;
    assert_int_equal(kla_cuda_dev_nodes(&d, root, out, 8), 3);
    assert_string_equal(out[0], "/dev/nvidia0");
    /* No driver file for its address, or no address: the ordinal. */
    snprintf(d.pci_bus_id, sizeof d.pci_bus_id, "0000:99:00.0");
    assert_int_equal(kla_cuda_dev_nodes(&d, root, out, 8), 3);
    assert_string_equal(out[0], "/dev/nvidia1");
    d.pci_bus_id[0] = '\0';
    d.ordinal = 7; /* no /dev/nvidia7: the shared nodes only */
    assert_int_equal(kla_cuda_dev_nodes(&d, root, out, 8), 2);
    assert_string_equal(out[0], "/dev/nvidiactl");
    /* The machine's own: none here is more than the five names. */
    n = kla_cuda_dev_nodes(&d, NULL, out, 8);
    assert_true(n >= 0 && n <= 5);
    for (int i = 0; i < n; i++)
        assert_int_equal(strncmp(out[i], "/dev/nvidia", 11), 0);
}

/* A TCP listener on 127.0.0.1; its port into *port. */
static int s_listener(int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s, 8), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return s;
}

/* The value of "key=" in the probe's words, copied into out. */
static const char *s_word(const char *msg, const char *key, char *out, size_t n)
{
    const char *p = strstr(msg, key);
    assert_non_null(p);
    p += strlen(key);
    size_t k = strcspn(p, " ");
    snprintf(out, n, "%.*s", (int)k, p);
    return out;
}

/* Runs the stand-in's probe through a runner; its words into msg. */
static void s_probe_run(kla_cuda_builder_t *b, int port, char *msg, size_t n)
{
    char err[KL_ERRMSG_LEN];
    kla_devsel_t spec = {.n = 1};
    kla_cuda_dev_t d;
    int nd = 0;
    assert_int_equal(kla_cuda_query(&spec, &d, &nd, err), KL_OK);
    kla_cuda_runner_config_t c = {.dev = &d,
                                  .worker_path = getenv("KILN_AGENT")};
    kla_cuda_runner_t *r = NULL;
    assert_int_equal(kla_cuda_runner_new(&r, &c, err), KL_OK);
    kla_build_t ref, probe;
    s_build_named(b, "ref", &ref);
    s_build_named(b, "probe", &probe);
    kla_problem_t p;
    s_problem(&p, 2000);
    kla_cuda_launch_t l = {{16, 1, 1}, {256, 1, 1}, 0};
    char entry[400];
    snprintf(entry, sizeof entry, "probe:%d:%s", port, s_dir);
    assert_true(strlen(entry) < 256);
    kla_result_t res;
    kla_cuda_runner_measure(r, &p, ref.so_path, "ref", probe.so_path, entry, &l,
                            &res);
    if (res.status != KILN__STATUS__STATUS_OK)
        fprintf(stderr, "probe: %d %s\n", res.status, res.error);
    assert_int_equal(res.status, KILN__STATUS__STATUS_OK);
    snprintf(msg, n, "%.1000s", res.error);
    fprintf(stderr, "# %s\n", msg);
    kla_result_clear(&res);
    kla_cuda_runner_destroy(&r);
}

/* What the worker sees in its sandbox: uid 65534, pid 1 (no bubblewrap
 * reaper), not dumpable, no core files, no workdir, no network, no device
 * nodes but the standard ones and its GPU's; unsandboxed, the same probe
 * sees the workdir and the listener, so it measures what it claims. */
static void test_runner_sandbox(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = s_builder();
    if (!b)
        skip();
    setenv("KILN_FAKE_GPU_WORKER", "1", 1);
    int port = 0;
    int ls = s_listener(&port);
    char msg[1024], v[256];
    bool was = kla_jail_unsafe();
    kla_jail_set_unsafe(true);
    s_probe_run(b, port, msg, sizeof msg);
    assert_string_equal(s_word(msg, "workdir=", v, sizeof v), "open");
    assert_string_equal(s_word(msg, "tcp=", v, sizeof v), "connected");
    assert_int_equal(atoi(s_word(msg, "uid=", v, sizeof v)), (int)getuid());
    assert_string_equal(s_word(msg, "dumpable=", v, sizeof v), "0");
    assert_string_equal(s_word(msg, "core=", v, sizeof v), "0");
    assert_string_equal(s_word(msg, "fds=", v, sizeof v), "0,1,2,3");
    kla_jail_set_unsafe(was);
    /* The unsandboxed probe's connection, taken off the listener. */
    int cfd = accept(ls, NULL, NULL);
    assert_true(cfd >= 0);
    close(cfd);
    fcntl(ls, F_SETFL, fcntl(ls, F_GETFL) | O_NONBLOCK);
    if (!s_jail) {
        close(ls);
        unsetenv("KILN_FAKE_GPU_WORKER");
        kla_cuda_builder_destroy(&b);
        skip();
    }
    s_probe_run(b, port, msg, sizeof msg);
    assert_string_equal(s_word(msg, "uid=", v, sizeof v), "65534");
    assert_string_equal(s_word(msg, "gid=", v, sizeof v), "65534");
    assert_string_equal(s_word(msg, "pid=", v, sizeof v), "1");
    /* Its socket and stdio only: no cubin memfd kept, and not the
     * descriptor its executable came by (bwrap --file closes it). */
    assert_string_equal(s_word(msg, "fds=", v, sizeof v), "0,1,2,3");
    assert_string_equal(s_word(msg, "dumpable=", v, sizeof v), "0");
    assert_string_equal(s_word(msg, "core=", v, sizeof v), "0");
    /* The workdir is not there at all; nor a reachable loopback. */
    assert_int_equal(strncmp(s_word(msg, "workdir=", v, sizeof v), "no(", 3),
                     0);
    assert_int_equal(strncmp(s_word(msg, "tcp=", v, sizeof v), "no", 2), 0);
    assert_int_equal(accept(ls, NULL, NULL), -1); /* nothing came */
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    /* /dev: the standard entries, and at most this machine's nvidia nodes
     * for cuda:0 (the stand-in has no PCI address: by ordinal). */
    kla_cuda_dev_t d;
    memset(&d, 0, sizeof d);
    char nodes[8][64];
    int nn = kla_cuda_dev_nodes(&d, NULL, nodes, 8);
    s_word(msg, "devs=", v, sizeof v);
    if (nn == 0) {
        assert_string_equal(v, "-");
    } else {
        for (char *save = NULL, *t = strtok_r(v, ",", &save); t;
             t = strtok_r(NULL, ",", &save)) {
            bool allowed = false;
            for (int i = 0; i < nn; i++)
                allowed |= !strcmp(nodes[i] + 5, t);
            if (!allowed)
                fprintf(stderr, "unexpected /dev/%s in the sandbox\n", t);
            assert_true(allowed);
        }
    }
    close(ls);
    unsetenv("KILN_FAKE_GPU_WORKER");
    kla_cuda_builder_destroy(&b);
}

/* Reads exactly n bytes; -1 at the end of the stream first. */
static int s_read_n(int fd, void *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Starts `KILN_AGENT --gpu-worker 0` (the stand-in, unsandboxed) on one
 * end of a socket pair at its fd 3; our end into *fd. */
static pid_t s_raw_worker(int *fd)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(sv[1], 3);
        const char *agent = getenv("KILN_AGENT");
        execl(agent, agent, "--gpu-worker", "0", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    *fd = sv[0];
    kla_cw_hello_t h;
    assert_int_equal(s_read_n(*fd, &h, sizeof h), 0);
    assert_int_equal(h.magic, KLA_CW_MAGIC);
    return pid;
}

/* A request with nfds descriptors (each the cubin at path). */
static void s_raw_send(int fd, const char *entry, const char *path, int nfds)
{
    kla_cw_req_t q;
    memset(&q, 0, sizeof q);
    q.magic = KLA_CW_MAGIC;
    q.n_args = 3;
    q.is_output[2] = 1;
    q.repeat = 1;
    snprintf(q.entry, sizeof q.entry, "%s", entry);
    snprintf(q.ref_entry, sizeof q.ref_entry, "ref");
    int fds[4];
    for (int i = 0; i < nfds; i++)
        assert_true((fds[i] = open(path, O_RDONLY)) >= 0);
    struct iovec iov = {.iov_base = &q, .iov_len = sizeof q};
    union {
        char b[CMSG_SPACE(sizeof(int) * 4)];
        struct cmsghdr align;
    } cb;
    memset(&cb, 0, sizeof cb);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        m.msg_control = cb.b;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    assert_int_equal(sendmsg(fd, &m, MSG_NOSIGNAL), (ssize_t)sizeof q);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
}

/* The wire (kla_cuda_wire.h): a request brings exactly its two cubins by
 * SCM_RIGHTS; one without them, or with more, ends the worker without an
 * answer. */
static void test_wire_fds(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = s_builder();
    if (!b)
        skip();
    kla_build_t ok;
    s_build_named(b, "ok", &ok);
    kla_cuda_builder_destroy(&b);
    setenv("KILN_FAKE_GPU_WORKER", "1", 1);
    for (int nfds = 0; nfds <= 3; nfds++) {
        int fd;
        pid_t pid = s_raw_worker(&fd);
        s_raw_send(fd, "ok", ok.so_path, nfds);
        uint32_t word = 0;
        int rc = s_read_n(fd, &word, sizeof word);
        if (nfds == KLA_CW_NFDS) {
            assert_int_equal(rc, 0);
            assert_int_equal(word, KLA_CW_START);
            kla_cw_res_t h;
            assert_int_equal(s_read_n(fd, &h, sizeof h), 0);
            assert_int_equal(h.status, KILN__STATUS__STATUS_OK);
            assert_int_equal(h.n_samples, 1);
            double sample;
            assert_int_equal(s_read_n(fd, &sample, sizeof sample), 0);
            /* And a file that is not a cubin is said to be one. */
            s_raw_send(fd, "ok", "/etc/hostname", 2);
            assert_int_equal(s_read_n(fd, &h, sizeof h), 0);
            assert_int_equal(h.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
            assert_non_null(strstr(h.msg, "not a cubin"));
        } else {
            assert_int_equal(rc, -1); /* closed, nothing said */
        }
        close(fd);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    unsetenv("KILN_FAKE_GPU_WORKER");
}

/* ---- the whole agent, on loopback -------------------------------------- */

typedef struct {
    kl_net_t *server;
    kl_peer_t peer;
    double next_hb;
} coord_t;

static void s_heartbeat(coord_t *c)
{
    if (c->peer.len == 0 || kl_now_s() < c->next_hb)
        return;
    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    char err[KL_ERRMSG_LEN];
    (void)kl_net_send(c->server, &c->peer, &env, err);
    c->next_hb = kl_now_s() + 0.25;
}

static Kiln__Envelope *s_expect(coord_t *c, int want, double timeout_s)
{
    double end = kl_now_s() + timeout_s;
    while (kl_now_s() < end) {
        s_heartbeat(c);
        Kiln__Envelope *env = NULL;
        kl_peer_t from;
        char err[KL_ERRMSG_LEN];
        if (kl_net_recv(c->server, &from, &env, 50, err) != KL_OK)
            continue;
        c->peer = from;
        if ((int)env->body_case == want)
            return env;
        kl_net_envelope_free(&env);
    }
    return NULL;
}

static void s_send(coord_t *c, Kiln__Envelope *env)
{
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_net_send(c->server, &c->peer, env, err), KL_OK);
}

/* Sends a request of the named kernels to device index dev; collects the
 * n results by candidate id into st[] / msg[] (simulated flags too). */
static void s_request(coord_t *c, uint64_t id, uint32_t dev, const char *ref,
                      const char *const *names, int n, Kiln__Status *st,
                      bool *sim, char (*msg)[256])
{
    int64_t shape[1] = {4096};
    Kiln__KernelArg a[3], *ap[3];
    for (int i = 0; i < 3; i++) {
        kiln__kernel_arg__init(&a[i]);
        a[i].name = i == 0 ? "a" : i == 1 ? "b" : "c";
        a[i].n_shape = 1;
        a[i].shape = shape;
        a[i].role =
            i == 2 ? KILN__ARG_ROLE__ROLE_OUTPUT : KILN__ARG_ROLE__ROLE_INPUT;
        ap[i] = &a[i];
    }
    uint32_t grid[3] = {16, 1, 1}, block[3] = {256, 1, 1};
    Kiln__Candidate cs[8], *cp[8];
    char *srcs[8];
    for (int i = 0; i < n; i++) {
        kiln__candidate__init(&cs[i]);
        cs[i].id = (uint64_t)i;
        srcs[i] = s_kernel(names[i]);
        cs[i].source = srcs[i];
        cs[i].entry = (char *)names[i];
        cs[i].n_grid = cs[i].n_block = 3;
        cs[i].grid = grid;
        cs[i].block = block;
        cp[i] = &cs[i];
    }
    Kiln__Evaluator ev = KILN__EVALUATOR__INIT;
    ev.repeat = 3;
    ev.timeout_ms = 800;
    ev.flush_cache = true;
    uint8_t key[16] = {1, 2, 3};
    char *refsrc = s_kernel("ref");
    Kiln__MeasureRequest m = KILN__MEASURE_REQUEST__INIT;
    m.request_id = id;
    m.workload_key.len = 16;
    m.workload_key.data = key;
    m.target = KL_TARGET_SIM "cuda/sm_90"; /* the fake GPUs' */
    m.n_args = 3;
    m.args = ap;
    m.reference_source = ref ? (char *)ref : refsrc;
    m.reference_entry = "ref";
    m.evaluator = &ev;
    m.n_candidates = (size_t)n;
    m.candidates = cp;
    m.device_index = dev;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &m;
    s_send(c, &env);
    for (int i = 0; st && i < n; i++) {
        Kiln__Envelope *r = s_expect(c, KILN__ENVELOPE__BODY_RESULT, 60);
        assert_non_null(r);
        assert_int_equal(r->result->request_id, id);
        uint64_t cid = r->result->candidate_id;
        assert_true(cid < (uint64_t)n);
        st[cid] = r->result->status;
        sim[cid] = r->result->simulated;
        snprintf(msg[cid], 256, "%s", r->result->error);
        kl_net_envelope_free(&r);
    }
    for (int i = 0; i < n; i++)
        free(srcs[i]);
    free(refsrc);
}

/* The state letter of process pid ('R', 'S', 'Z', ...), 0 when there is
 * no such process; *ppid its parent. */
static char s_proc_state(pid_t pid, pid_t *ppid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* "PID (COMM) STATE PPID ..." */
    char st = 0;
    int pp = 0;
    if (!p || sscanf(p + 1, " %c %d", &st, &pp) != 2)
        return 0;
    if (ppid)
        *ppid = (pid_t)pp;
    return st;
}

/* Whether process pid runs with "--gpu-worker" among its arguments. */
static bool s_is_gpu_worker(pid_t pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0'; /* the arguments are NUL-separated */
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
        if (!strcmp(buf + i, "--gpu-worker"))
            return true;
    return false;
}

/* The running children (not zombies) of process pid. */
static int s_children(pid_t pid, pid_t *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        pid_t p = (pid_t)atoi(e->d_name), ppid = 0;
        char st = p > 0 ? s_proc_state(p, &ppid) : 0;
        if (st && st != 'Z' && st != 'X' && ppid == pid)
            out[n++] = p;
    }
    closedir(d);
    return n;
}

/* The GPU workers this process started that are still running (not
 * zombies): with the sandbox, their bwrap (whose command line holds the
 * worker's). */
static int s_gpu_workers(pid_t *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        pid_t pid = (pid_t)atoi(e->d_name), ppid = 0;
        if (pid <= 0)
            continue;
        char st = s_proc_state(pid, &ppid);
        if (st && st != 'Z' && st != 'X' && ppid == getpid() &&
            s_is_gpu_worker(pid))
            out[n++] = pid;
    }
    closedir(d);
    return n;
}

static void test_agent_fake_gpus(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = s_builder();
    if (!b)
        skip();
    kla_cuda_builder_destroy(&b);
    setenv("KILN_FAKE_GPU_WORKER", "1", 1);
    coord_t c = {0};
    char err[KL_ERRMSG_LEN];
    kl_net_security_t sec = {.insecure = true};
    assert_int_equal(
        kl_net_server_new(&c.server, "tcp://127.0.0.1:*", &sec, err), KL_OK);
    kla_agent_config_t cfg = {.endpoint = kl_net_endpoint(c.server),
                              .sec = sec,
                              .name = "gpu-agent",
                              .build_slots = 2,
                              .heartbeat_ms = 1000,
                              .device = "cpu,cuda:0,1",
                              .gpu_worker = getenv("KILN_AGENT")};
    kla_agent_t *agent = NULL;
    int rc = kla_agent_new(&agent, &cfg, err);
    if (rc != KL_OK)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, KL_OK);
    Kiln__Envelope *env = s_expect(&c, KILN__ENVELOPE__BODY_HELLO, 10);
    assert_non_null(env);
    Kiln__Hello *h = env->hello;
    assert_int_equal(h->n_devices, 3);
    assert_string_equal(h->devices[0]->kind, "cpu");
    for (int i = 1; i < 3; i++) {
        const Kiln__DeviceInfo *d = h->devices[i];
        assert_string_equal(d->kind, "cuda");
        /* A stand-in never passes for a GPU: its target says simulated. */
        assert_string_equal(d->target, KL_TARGET_SIM "cuda/sm_90");
        assert_int_equal(d->index, i);
        assert_true(d->simulated); /* a stand-in never passes for a GPU */
        assert_true(d->cores > 0 && d->llc_bytes > 0);
        assert_true(d->max_threads_per_block == 1024);
        assert_true(d->max_shared_per_block > 48 * 1024);
        assert_true(d->max_registers_per_block == 65536);
        assert_non_null(strstr(d->name, "fake"));
        assert_true(*d->driver_version);
    }
    kl_net_envelope_free(&env);
    Kiln__Welcome w = KILN__WELCOME__INIT;
    w.coordinator_id = "test";
    w.heartbeat_ms = 1000;
    Kiln__Envelope we = KILN__ENVELOPE__INIT;
    we.body_case = KILN__ENVELOPE__BODY_WELCOME;
    we.welcome = &w;
    s_send(&c, &we);

    const char *names[] = {"ok",   "oob", "ok2",   "crash",
                           "hang", "ok3", "wrong", "ok4"};
    const Kiln__Status want[] = {
        KILN__STATUS__STATUS_OK,           KILN__STATUS__STATUS_RUNTIME_ERROR,
        KILN__STATUS__STATUS_OK,           KILN__STATUS__STATUS_RUNTIME_ERROR,
        KILN__STATUS__STATUS_TIMEOUT,      KILN__STATUS__STATUS_OK,
        KILN__STATUS__STATUS_WRONG_RESULT, KILN__STATUS__STATUS_OK};
    Kiln__Status st[8];
    bool sim[8];
    char msg[8][256];
    /* Spread over both GPUs (device index 1 names the pool of sm_90). */
    s_request(&c, 1, 1, NULL, names, 8, st, sim, msg);
    for (int i = 0; i < 8; i++) {
        if (st[i] != want[i])
            fprintf(stderr, "%s: %d %s\n", names[i], st[i], msg[i]);
        assert_int_equal(st[i], want[i]);
        assert_true(sim[i]);
    }
    assert_non_null(strstr(msg[1], "ILLEGAL_ADDRESS"));
    /* The agent lives on: the second GPU by its own index. */
    const char *one[] = {"ok5"};
    s_request(&c, 2, 2, NULL, one, 1, st, sim, msg);
    assert_int_equal(st[0], KILN__STATUS__STATUS_OK);
    /* No such device; a C reference for a GPU. */
    s_request(&c, 3, 7, NULL, one, 1, st, sim, msg);
    assert_int_equal(st[0], KILN__STATUS__STATUS_INVALID);
    assert_non_null(strstr(msg[0], "device index 7"));
    s_request(&c, 4, 1, "void ref(void *const *a) { (void)a; }", one, 1, st,
              sim, msg);
    assert_int_equal(st[0], KILN__STATUS__STATUS_INVALID);
    assert_non_null(strstr(msg[0], "CUDA C reference"));
    /* A compile error comes back with NVRTC's log. */
    const char *broken[] = {"does not compile("};
    s_request(&c, 5, 1, NULL, broken, 1, st, sim, msg);
    assert_int_equal(st[0], KILN__STATUS__STATUS_COMPILE_ERROR);
    assert_non_null(strstr(msg[0], "error"));
    /* Stopping while a kernel hangs on a GPU kills its worker. */
    const char *hang[] = {"hang"};
    s_request(&c, 6, 1, NULL, hang, 1, NULL, NULL, NULL);
    /* Its worker starts once the kernel is compiled: seconds under ASan on
     * a loaded machine, so wait for it (a hang bound, not a speed). */
    pid_t workers[16];
    int n = 0;
    for (double end = kl_now_s() + 60; n < 1 && kl_now_s() < end;) {
        double next = kl_now_s() + 0.2;
        while (kl_now_s() < next) {
            s_heartbeat(&c);
            usleep(10000);
        }
        n = s_gpu_workers(workers, 16); /* one of them hangs */
    }
    assert_true(n >= 1);
    for (double end = kl_now_s() + 1; kl_now_s() < end;)
        s_heartbeat(&c); /* into its kernel */
    /* Again: the request's timeout may have killed that worker meanwhile
     * and none be up this instant; then the ones seen must be gone too. */
    pid_t again[16];
    int m = s_gpu_workers(again, 16);
    if (m >= 1) {
        memcpy(workers, again, (size_t)m * sizeof *again);
        n = m;
    }
    /* Sandboxed, the workers themselves are the bwraps' children, pid 1 of
     * their namespaces, run from the copy the sandbox got. */
    pid_t inner[16];
    int ni = 0;
    for (int i = 0; s_jail && i < n; i++) {
        int k = s_children(workers[i], inner + ni, 16 - ni);
        for (int j = 0; j < k; j++) {
            char path[64], cmd[256] = "";
            snprintf(path, sizeof path, "/proc/%d/cmdline", (int)inner[ni + j]);
            FILE *f = fopen(path, "r");
            if (f) {
                size_t got = fread(cmd, 1, sizeof cmd - 1, f);
                cmd[got] = '\0';
                fclose(f);
            }
            if (*cmd) /* empty: it ended meanwhile (the timeout) */
                assert_string_equal(cmd, "/kiln-gpu-worker");
        }
        ni += k;
    }
    fprintf(stderr, "# %d GPU worker(s), %d sandboxed inside\n", n, ni);
    double t0 = kl_now_s();
    kla_agent_destroy(&agent);
    assert_true(kl_now_s() - t0 < 30); /* a hang bound: the kernel hangs */
    for (int i = 0; i < n; i++) {
        char st = s_proc_state(workers[i], NULL);
        if (st)
            fprintf(stderr, "worker %d still there (%c)\n", (int)workers[i],
                    st);
        assert_int_equal(st, 0); /* killed and reaped */
    }
    /* The worker inside dies with its bwrap (--die-with-parent); whoever
     * inherits it reaps it. */
    for (int i = 0; i < ni; i++) {
        char st = s_proc_state(inner[i], NULL);
        for (double end = kl_now_s() + 10; st && st != 'Z' && kl_now_s() < end;
             st = s_proc_state(inner[i], NULL))
            usleep(20000);
        if (st && st != 'Z')
            fprintf(stderr, "sandboxed worker %d still there (%c)\n",
                    (int)inner[i], st);
        assert_true(!st || st == 'Z');
    }
    kl_net_destroy(&c.server);
    unsetenv("KILN_FAKE_GPU_WORKER");
}

int main(void)
{
    if (!kl_test_mkdtemp(s_dir, sizeof s_dir, "kiln-cuda-agent-test-XXXXXX"))
        return 1;
    if (!getenv("KILN_AGENT")) { /* the build tree's, beside this test */
        char self[4096], path[4200];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return 1;
        self[n] = '\0';
        *strrchr(self, '/') = '\0';
        snprintf(path, sizeof path, "%s/../../agent/kiln-agent", self);
        setenv("KILN_AGENT", path, 1);
    }
    if (access(getenv("KILN_AGENT"), X_OK) != 0) {
        fprintf(stderr, "KILN_AGENT %s: not an executable\n",
                getenv("KILN_AGENT"));
        return 1;
    }
    char err[KL_ERRMSG_LEN];
    s_jail = kla_jail_probe(err) == KL_OK;
    if (!s_jail) { /* the worker's faults still run, unsandboxed */
        fprintf(stderr, "# no sandbox here (%s): sandbox checks skipped\n",
                err);
        kla_jail_set_unsafe(true);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devspec),
        cmocka_unit_test(test_check_launch),
        cmocka_unit_test(test_input_values),
        cmocka_unit_test(test_no_driver),
        cmocka_unit_test(test_build_generated),
        cmocka_unit_test(test_build_helpers),
        cmocka_unit_test(test_build_error),
        cmocka_unit_test(test_runner_faults),
        cmocka_unit_test(test_dev_nodes),
        cmocka_unit_test(test_runner_sandbox),
        cmocka_unit_test(test_wire_fds),
        cmocka_unit_test(test_agent_fake_gpus),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", s_dir);
    return rc;
}
