/* The whole kiln-agent with fake GPUs (KILN_FAKE_GPU_WORKER) on loopback,
 * against a fake coordinator (tests/support/coord_fx.h): the Hello of two
 * simulated GPUs beside the CPU, the worker's faults (poisoned context,
 * crash, hang, wrong result) as results spread over both GPUs, a device
 * index that does not exist, a C reference for a GPU, a compile error with
 * NVRTC's log, and a hanging kernel's worker killed and reaped when the
 * agent stops. Results of the stand-in are simulated: none of this is a
 * GPU pass (tests/gpu/run.sh is, on a machine with a GPU). Skipped when
 * NVRTC cannot be loaded. Needs KILN_AGENT; the fixture is
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
#include "coord_fx.h"
#include "cuda_agent_fx.h"

/* Sends a request of the named kernels to device index dev; collects the
 * n results by candidate id into st[] / msg[] (simulated flags too). */
static void s_request(fx_coord_t *c, uint64_t id, uint32_t dev, const char *ref,
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
        srcs[i] = fx_cuda_kernel(names[i]);
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
    char *refsrc = fx_cuda_kernel("ref");
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
    assert_int_equal(fx_coord_send(c, &env), KL_OK);
    for (int i = 0; st && i < n; i++) {
        Kiln__Envelope *r = fx_coord_expect(c, KILN__ENVELOPE__BODY_RESULT, 60);
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
    kla_cuda_builder_t *b = fx_cuda_builder();
    if (!b)
        skip();
    kla_cuda_builder_destroy(&b);
    setenv("KILN_FAKE_GPU_WORKER", "1", 1);
    fx_coord_t c;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(fx_coord_new(&c, 1000, err), KL_OK);
    kla_agent_config_t cfg = {.endpoint = fx_coord_endpoint(&c),
                              .sec = {.insecure = true},
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
    Kiln__Envelope *env = fx_coord_expect(&c, KILN__ENVELOPE__BODY_HELLO, 10);
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
    assert_int_equal(fx_coord_welcome(&c, "test"), KL_OK);

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
            fx_coord_heartbeat(&c);
            usleep(10000);
        }
        n = s_gpu_workers(workers, 16); /* one of them hangs */
    }
    assert_true(n >= 1);
    for (double end = kl_now_s() + 1; kl_now_s() < end;)
        fx_coord_heartbeat(&c); /* into its kernel */
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
    for (int i = 0; fx_jail && i < n; i++) {
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
    fx_coord_destroy(&c);
    unsetenv("KILN_FAKE_GPU_WORKER");
}

int main(void)
{
    if (fx_cuda_setup())
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_fake_gpus),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fx_cuda_cleanup();
    return rc;
}
