/* runner_harness.c - kiln-runner's harness (kla_cand.h): loads one
 * candidate under a seccomp allow-list, calls it once, then times it
 * sample by sample at the warden's word. Everything it reports may be the
 * candidate's forgery: the agent verifies the outputs from its own mapping
 * and checks each sample against the warden's clocks. */
#include "kla_runner_exe.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kl_abi.h"

#define S_MAX_NUMBER (1u << 30)

enum { S_SO = 3, S_IN, S_OUT, S_FLUSH, S_PEER };

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* System calls a kernel, its OpenMP threads, the C library and the
 * dynamic loader need. Everything else fails with EPERM: no execve, no
 * fork (clone only with CLONE_THREAD), no sockets, no ptrace or
 * process_vm_*, no signals to another process, no mounts, no namespaces,
 * no keyrings, no bpf or perf, no io_uring. */
static const int s_allowed[] = {
    SCMP_SYS(read),
    SCMP_SYS(write),
    SCMP_SYS(readv),
    SCMP_SYS(writev),
    SCMP_SYS(sendmsg), /* on the harness socket; no socket() */
    SCMP_SYS(recvmsg),
    SCMP_SYS(sendto),
    SCMP_SYS(recvfrom),
    SCMP_SYS(pread64),
    SCMP_SYS(close),
    SCMP_SYS(fstat),
    SCMP_SYS(newfstatat),
    SCMP_SYS(statx),
    SCMP_SYS(lseek),
    SCMP_SYS(openat),
    SCMP_SYS(open),
    SCMP_SYS(access),
    SCMP_SYS(faccessat),
    SCMP_SYS(faccessat2),
    SCMP_SYS(readlink),
    SCMP_SYS(readlinkat),
    SCMP_SYS(getcwd),
    SCMP_SYS(getdents64),
    SCMP_SYS(fcntl),
    SCMP_SYS(dup),
    SCMP_SYS(dup3),
    SCMP_SYS(poll),
    SCMP_SYS(ppoll),
    SCMP_SYS(mmap),
    SCMP_SYS(mprotect),
    SCMP_SYS(munmap),
    SCMP_SYS(mremap),
    SCMP_SYS(madvise),
    SCMP_SYS(brk),
    SCMP_SYS(mlock),
    SCMP_SYS(munlock),
    SCMP_SYS(mbind),
    SCMP_SYS(get_mempolicy),
    SCMP_SYS(set_mempolicy),
    SCMP_SYS(rt_sigaction),
    SCMP_SYS(rt_sigprocmask),
    SCMP_SYS(rt_sigreturn),
    SCMP_SYS(sigaltstack),
    SCMP_SYS(futex),
    SCMP_SYS(set_robust_list),
    SCMP_SYS(get_robust_list),
    SCMP_SYS(rseq),
    SCMP_SYS(set_tid_address),
    SCMP_SYS(sched_getaffinity),
    SCMP_SYS(sched_setaffinity),
    SCMP_SYS(sched_yield),
    SCMP_SYS(sched_getparam),
    SCMP_SYS(sched_getscheduler),
    SCMP_SYS(getpid),
    SCMP_SYS(gettid),
    SCMP_SYS(getppid),
    SCMP_SYS(getuid),
    SCMP_SYS(geteuid),
    SCMP_SYS(getgid),
    SCMP_SYS(getegid),
    SCMP_SYS(uname),
    SCMP_SYS(sysinfo),
    SCMP_SYS(getrlimit),
    SCMP_SYS(prlimit64),
    SCMP_SYS(getrusage),
    SCMP_SYS(times),
    SCMP_SYS(clock_gettime),
    SCMP_SYS(clock_getres),
    SCMP_SYS(clock_nanosleep),
    SCMP_SYS(nanosleep),
    SCMP_SYS(gettimeofday),
    SCMP_SYS(time),
    SCMP_SYS(getrandom),
    SCMP_SYS(arch_prctl),
    SCMP_SYS(prctl),
    SCMP_SYS(restart_syscall),
    SCMP_SYS(exit),
    SCMP_SYS(exit_group),
    SCMP_SYS(membarrier),
    SCMP_SYS(getcpu),
};

int kla_runner__harness_seccomp(char *err)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (!ctx) {
        snprintf(err, 256, "seccomp_init failed");
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < sizeof s_allowed / sizeof *s_allowed && !rc; i++)
        if (s_allowed[i] >= 0) /* __NR_SCMP_ERROR: not on this arch */
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, s_allowed[i], 0);
    /* Threads, never processes. */
    if (!rc)
        rc = seccomp_rule_add(
            ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
            SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
    /* clone3 passes its flags in memory, where a filter cannot look: the
     * C library falls back to clone. */
    if (!rc)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    /* Signals to itself only (raise, abort, a thread's cancel). */
    pid_t me = getpid();
    if (!rc)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1,
                              SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)me));
    if (!rc)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                              SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)me));
    if (!rc)
        rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
    if (!rc)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc) {
        snprintf(err, 256, "seccomp: %s", strerror(-rc));
        return -1;
    }
    return 0;
}

static void s_send(kla_cand_msg_t *m, double t0)
{
    m->magic = KLA_CAND_MAGIC;
    m->child_s = s_now() - t0;
    kla_runner__cand_send(S_PEER, m, sizeof *m, NULL, 0);
}

static int s_fail(double t0, const char *fmt, const char *a, const char *b)
{
    kla_cand_msg_t m = {.kind = KLA_CM_CALLED, .status = KLA_CS_ERROR};
    snprintf(m.msg, sizeof m.msg, fmt, a, b);
    s_send(&m, t0);
    return 0;
}

/* Blocks for the warden's word; true for GO. */
static bool s_go(void)
{
    kla_cand_msg_t m;
    return kla_runner__cand_recv(S_PEER, &m, sizeof m, NULL, 0) == 0 &&
           m.magic == KLA_CAND_MAGIC && m.kind == KLA_CM_GO;
}

static double s_runs(kl_abi_kernel_fn fn, void *const *args, uint32_t number)
{
    double t0 = s_now();
    for (uint32_t i = 0; i < number; i++)
        fn(args);
    return s_now() - t0;
}

static void *s_map(int fd, uint64_t n, int prot, int flags)
{
    if (!n)
        return NULL;
    void *p = mmap(NULL, (size_t)n, prot, flags, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

int kla_runner__harness_main(void)
{
    double t0 = s_now();
    /* Nothing else in the sandbox may open this process's memory. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* A crash of the kernel kills the harness with its signal, whatever
     * a sanitizer runtime of this build installed. */
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        signal(fatal[i], SIG_DFL);
    kla_cand_job_t j;
    if (kla_runner__cand_recv(S_PEER, &j, sizeof j, NULL, 0) != 0 ||
        !kla_runner__cand_job_ok(&j))
        return 2;
    /* Inputs: a private copy-on-write view of the sealed buffer. */
    char *in = s_map(S_IN, j.in_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE);
    char *out = s_map(S_OUT, j.out_bytes, PROT_READ | PROT_WRITE, MAP_SHARED);
    char *flush =
        j.timed && j.flush && j.flush_n
            ? s_map(S_FLUSH, j.flush_n, PROT_READ | PROT_WRITE, MAP_SHARED)
            : NULL;
    if ((j.in_bytes && !in) || !out ||
        (j.timed && j.flush && j.flush_n && !flush))
        return s_fail(t0, "cannot map the kernel's buffers%s%s", "", "");
    /* The mappings are all the kernel gets: no descriptor of the agent's
     * buffers stays open for it to write, resize or pass on. */
    close(S_IN);
    close(S_OUT);
    close(S_FLUSH);
    /* Kernels are linked without -lm (the agent's own process supplied
     * it when kernels ran in forks of it): the same symbols here. */
    dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL);
    char err[256];
    if (kla_runner__harness_seccomp(err) != 0)
        return s_fail(t0, "sandbox: %s%s", err, "");
    /* From here on the candidate's code runs: its constructors first. */
    void *lib = dlopen("/proc/self/fd/3", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return s_fail(t0, "dlopen: %s%s", dlerror(), "");
    kl_abi_kernel_fn fn;
    *(void **)&fn = dlsym(lib, j.entry);
    if (!fn)
        return s_fail(t0, "entry symbol '%s' not found in the shared object%s",
                      j.entry, "");
    void *args[KLA_CAND_MAX_ARGS + 1] = {0};
    bool is_const[KLA_CAND_MAX_ARGS] = {0};
    for (uint32_t a = 0; a < j.n_args; a++) {
        args[a] = (j.is_output[a] ? out : in) + j.off[a];
        is_const[a] = j.is_const[a];
    }
    void *block = NULL;
    kl_abi_prepare_fn prep = kl_abi_find_prepare(lib, j.entry);
    if (prep && !(block = kl_abi_prepare(prep, (int)j.n_args, args, is_const)))
        return s_fail(t0,
                      "'%s" KL_ABI_PREPARE_SUFFIX
                      "' returned NULL (out of memory while preparing the "
                      "constant inputs, or a tensorized kernel on a CPU "
                      "without its intrinsic)%s",
                      j.entry, "");
    args[j.n_args] = block;
    /* The first call, timed by the warden from outside like a sample. */
    kla_cand_msg_t r0 = {.kind = KLA_CM_READY};
    s_send(&r0, t0);
    if (!s_go())
        return 0;
    fn(args);
    kla_cand_msg_t m = {.kind = KLA_CM_CALLED, .status = KLA_CS_OK};
    s_send(&m, t0);
    if (!s_go())
        return 0;
    if (j.timed) {
        uint32_t number = j.number ? j.number : 1;
        double want = j.min_repeat_ms / 1000.0;
        if (want > 0) {
            for (;;) {
                double t = s_runs(fn, args, number);
                if (t >= want || number >= S_MAX_NUMBER)
                    break;
                double grow = t > 0 ? want / t * 1.1 : 100;
                grow = grow < 2 ? 2 : grow > 100 ? 100 : grow;
                double next = ceil(number * grow);
                number = next > S_MAX_NUMBER ? S_MAX_NUMBER : (uint32_t)next;
            }
        }
        for (uint32_t r = 0; r < j.repeat; r++) {
            if (flush) {
                memset(flush, (int)r + 1, (size_t)j.flush_n);
                __asm__ volatile("" : : "r"(flush) : "memory");
            }
            kla_cand_msg_t ready = {.kind = KLA_CM_READY};
            s_send(&ready, t0);
            if (!s_go())
                return 0;
            kla_cand_msg_t done = {.kind = KLA_CM_DONE, .number = number};
            done.t_c = s_runs(fn, args, number);
            s_send(&done, t0);
        }
    }
    kla_cand_msg_t end = {.kind = KLA_CM_END};
    s_send(&end, t0);
    free(block);
    return 0;
}
