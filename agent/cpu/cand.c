/* cand.c - framing of the candidate sandbox's messages (kla_cand.h,
 * kla_runner_exe.h): linked into the agent and into kiln-runner. */
#include "kla_runner_exe.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int kla_runner__cand_recv(int fd, void *buf, size_t len, int *fds, int nfds)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        char b[CMSG_SPACE(sizeof(int) * KLA_CAND_NFDS)];
        struct cmsghdr align;
    } cbuf;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fds) {
        m.msg_control = cbuf.b;
        m.msg_controllen = sizeof cbuf.b;
    }
    for (int i = 0; i < nfds; i++)
        fds[i] = -1;
    ssize_t n;
    do
        n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    int got = 0;
    for (struct cmsghdr *c = fds ? CMSG_FIRSTHDR(&m) : NULL; c;
         c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int *in = (int *)CMSG_DATA(c);
        for (int i = 0; i < k; i++) {
            if (got < nfds)
                fds[got++] = in[i];
            else
                close(in[i]);
        }
    }
    if ((size_t)n != len || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
        got != nfds) {
        for (int i = 0; i < got; i++)
            close(fds[i]);
        return -1;
    }
    return 0;
}

int kla_runner__cand_send(int fd, const void *buf, size_t len, const int *fds,
                          int nfds)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        char b[CMSG_SPACE(sizeof(int) * KLA_CAND_NFDS)];
        struct cmsghdr align;
    } cbuf;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        memset(&cbuf, 0, sizeof cbuf);
        m.msg_control = cbuf.b;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n;
    do
        n = sendmsg(fd, &m, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)len ? 0 : -1;
}

bool kla_runner__cand_job_ok(const kla_cand_job_t *j)
{
    if (j->magic != KLA_CAND_MAGIC || j->n_args < 1 ||
        j->n_args > KLA_CAND_MAX_ARGS || j->repeat > 100000 ||
        j->entry[sizeof j->entry - 1] != '\0' || !j->entry[0])
        return false;
    for (uint32_t a = 0; a < j->n_args; a++) {
        uint64_t end = j->off[a] + j->bytes[a];
        uint64_t lim = j->is_output[a] ? j->out_bytes : j->in_bytes;
        if (end < j->off[a] || end > lim)
            return false;
    }
    return true;
}
