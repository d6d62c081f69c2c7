/* cuda_worker.c - the GPU worker process: owns one device's CUDA context,
 * runs references and candidates on it, one at a time (kla_cuda.h).
 *
 * Everything the candidate touches lives on the device: inputs made by a
 * helper kernel from the seed, reference outputs cached per reference key,
 * the comparison done by a helper kernel that returns three numbers. The
 * worker runs in the sandbox cuda_runner.c makes and reads its cubins from
 * the descriptors each request brings (kla_cuda_wire.h). This file is the
 * process's main loop and the wire; the device side is
 * cuda_worker_device.c, the stand-in cuda_worker_fake.c
 * (kla_cuda_worker_int.h). */
#include "kla_cuda.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_cuda_api.h"
#include "kla_cuda_wire.h"
#include "kla_cuda_worker_int.h"
#include "kla_sandbox.h"

/* The largest cubin the worker reads. */
#define S_MAX_CUBIN ((size_t)1 << 30)

/* ---- the wire ---------------------------------------------------------- */

static int s_send_res(kla_cw__worker_t *w, kla_cw_res_t *h,
                      const double *samples)
{
    h->magic = KLA_CW_MAGIC;
    h->poisoned = w->poisoned;
    if (kla_write_all(w->fd, h, sizeof *h) != 0)
        return -1;
    if (h->n_samples &&
        kla_write_all(w->fd, samples, h->n_samples * sizeof(double)) != 0)
        return -1;
    return 0;
}

void kla_cw__close_fds(int *fds)
{
    for (int i = 0; i < KLA_CW_NFDS; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

/* Reads one request and its descriptors (kla_cuda_wire.h) into q and
 * fds. 0; 1 at a clean end of the stream; -1 on a short read, an error,
 * or another number of descriptors than KLA_CW_NFDS (none kept). */
int kla_cw__recv_req(int fd, kla_cw_req_t *q, int *fds)
{
    size_t got = 0;
    int nfds = 0;
    for (int i = 0; i < KLA_CW_NFDS; i++)
        fds[i] = -1;
    bool extra = false;
    while (got < sizeof *q) {
        struct iovec iov = {.iov_base = (char *)q + got,
                            .iov_len = sizeof *q - got};
        union {
            char b[CMSG_SPACE(sizeof(int) * (KLA_CW_NFDS + 2))];
            struct cmsghdr align;
        } cb;
        struct msghdr m = {.msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = cb.b,
                           .msg_controllen = sizeof cb.b};
        ssize_t k = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
        if (k < 0 && errno == EINTR)
            continue;
        for (struct cmsghdr *c = k >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c;
             c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            int cnt = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int in[KLA_CW_NFDS + 2];
            memcpy(in, CMSG_DATA(c), (size_t)cnt * sizeof(int));
            for (int i = 0; i < cnt; i++) {
                if (nfds < KLA_CW_NFDS) {
                    fds[nfds++] = in[i];
                } else {
                    close(in[i]);
                    extra = true;
                }
            }
        }
        if (k > 0 && (m.msg_flags & MSG_CTRUNC))
            extra = true;
        if (k <= 0) {
            kla_cw__close_fds(fds);
            return k == 0 && got == 0 ? 1 : -1;
        }
        got += (size_t)k;
    }
    if (extra || nfds != KLA_CW_NFDS) {
        kla_cw__close_fds(fds);
        return -1;
    }
    return 0;
}

bool kla_cw__req_ok(kla_cw_req_t *q)
{
    q->entry[sizeof q->entry - 1] = q->ref_entry[sizeof q->ref_entry - 1] = 0;
    if (q->magic != KLA_CW_MAGIC || q->n_args < 1 || q->n_args > 64 ||
        q->repeat < 1 || q->repeat > KLA_MAX_REPEAT)
        return false;
    /* Outputs are f32 (the comparison reads floats). */
    for (uint32_t a = 0; a < q->n_args; a++)
        if (q->is_output[a] && q->dtype[a] != KILN__DTYPE__DTYPE_F32)
            return false;
    return true;
}

/* The contents of the cubin descriptor fd (a sealed memfd) into *img
 * (malloc'd, NUL-terminated) and *len. -1 with msg. */
int kla_cw__read_cubin(int fd, char **img, size_t *len, char *msg, size_t n)
{
    *img = NULL;
    *len = 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (size_t)st.st_size > S_MAX_CUBIN) {
        snprintf(msg, n, "cubin: not a file of 1 byte to 1 GiB");
        return -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *b = malloc(size + 1);
    if (!b) {
        snprintf(msg, n, "cubin: out of memory");
        return -1;
    }
    while (got < size) {
        ssize_t k = pread(fd, b + got, size - got, (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            snprintf(msg, n, "cubin: read: %s", k ? strerror(errno) : "short");
            free(b);
            return -1;
        }
        got += (size_t)k;
    }
    b[size] = '\0';
    *img = b;
    *len = size;
    return 0;
}

/* ---- the loop ---------------------------------------------------------- */

int kla_cuda_worker_main(int ordinal, int fd)
{
    signal(SIGPIPE, SIG_IGN);
    /* Nothing outside may read this process's memory (ptrace, /proc/PID/
     * mem: it holds the driver's state), and it leaves no core file. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (kla_cuda_fake())
        return kla_cw__fake_main(fd);
    static kla_cw__worker_t w; /* large (reference table); one per process */
    w.fd = fd;
    kla_cw_hello_t hello = {.magic = KLA_CW_MAGIC,
                            .status = KILN__STATUS__STATUS_OK};
    /* In the sandbox the driver shows this GPU alone, under an ordinal of
     * its own: find it by its PCI address (cuda_runner.c sets it). */
    const char *bus = getenv("KILN_GPU_PCI_BUS_ID");
    char err[KL_ERRMSG_LEN];
    if (bus && *bus && kla_cuda_ordinal_of(bus, &ordinal, err) != KL_OK) {
        hello.status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(hello.msg, sizeof hello.msg, "%s", err);
    } else if (kla_cw__setup(&w, ordinal, hello.msg, sizeof hello.msg) != 0 ||
               kla_cw__fail(&w, w.cu->EventCreate(&w.ev[0], CU_EVENT_DEFAULT),
                            "cuEventCreate", hello.msg, sizeof hello.msg) ||
               kla_cw__fail(&w, w.cu->EventCreate(&w.ev[1], CU_EVENT_DEFAULT),
                            "cuEventCreate", hello.msg, sizeof hello.msg)) {
        hello.status = KILN__STATUS__STATUS_RUNTIME_ERROR;
    }
    if (kla_write_all(fd, &hello, sizeof hello) != 0 || hello.status)
        return 1;
    kla_cw_req_t q;
    int fds[KLA_CW_NFDS];
    int got;
    while ((got = kla_cw__recv_req(fd, &q, fds)) == 0) {
        kla_cw_res_t h = {.status = KILN__STATUS__STATUS_RUNTIME_ERROR};
        double *samples = NULL, t0 = kl_now_s();
        if (!kla_cw__req_ok(&q)) {
            kla_cw__close_fds(fds);
            snprintf(h.msg, sizeof h.msg, "malformed request");
            s_send_res(&w, &h, NULL);
            return 1;
        }
        kla_cw__ref_t *ref = kla_cw__reference(&w, &q, fds[KLA_CW_FD_REF]);
        uint32_t start = KLA_CW_START;
        if (ref->failed) {
            snprintf(h.msg, sizeof h.msg, "reference kernel failed: %s",
                     ref->error);
        } else if (kla_write_all(fd, &start, sizeof start) != 0) {
            return 1;
        } else {
            t0 = kl_now_s();
            kla_cw__candidate(&w, &q, ref, fds[KLA_CW_FD_CUBIN], &h, &samples);
        }
        kla_cw__close_fds(fds);
        h.run_s = kl_now_s() - t0;
        int rc = s_send_res(&w, &h, samples);
        free(samples);
        if (rc != 0)
            return 1;
        if (w.poisoned)
            return 3;
    }
    if (got < 0) { /* a request without its cubins, or cut short */
        kla_cw_res_t h = {.status = KILN__STATUS__STATUS_RUNTIME_ERROR};
        snprintf(h.msg, sizeof h.msg, "malformed request");
        s_send_res(&w, &h, NULL);
        return 1;
    }
    return 0;
}
