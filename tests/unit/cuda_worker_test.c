/* The GPU worker of kiln-agent without a GPU, against the
 * KILN_FAKE_GPU_WORKER stand-in: its fault handling through the runner
 * (poisoned context, crash, hang, wrong result), its sandbox (the
 * stand-in's "probe" reports its uid, pid, the workdir, the network and
 * /dev as it sees them; the device nodes a GPU's worker gets) and its
 * wire (a request brings exactly its descriptors). Results of the
 * stand-in are simulated: none of this is a GPU pass (tests/gpu/run.sh
 * is, on a machine with a GPU). Sandbox assertions are skipped where
 * bwrap cannot make a sandbox (kla_jail_probe); the rest then runs
 * unsandboxed. NVRTC-dependent tests are skipped when NVRTC cannot be
 * loaded. Needs KILN_AGENT (the worker); the fixture is
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

static void s_build_named(kla_cuda_builder_t *b, const char *name,
                          kla_build_t *out)
{
    char *src = fx_cuda_kernel(name);
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
    kla_cuda_builder_t *b = fx_cuda_builder();
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
    snprintf(root, sizeof root, "%s/devroot", fx_dir);
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
    fx_cuda_dev(&d, true);
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
    snprintf(entry, sizeof entry, "probe:%d:%s", port, fx_dir);
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
    kla_cuda_builder_t *b = fx_cuda_builder();
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
    if (!fx_jail) {
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
    kla_cuda_builder_t *b = fx_cuda_builder();
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

int main(void)
{
    if (fx_cuda_setup())
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runner_faults),
        cmocka_unit_test(test_dev_nodes),
        cmocka_unit_test(test_runner_sandbox),
        cmocka_unit_test(test_wire_fds),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fx_cuda_cleanup();
    return rc;
}
