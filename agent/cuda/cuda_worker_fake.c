/* cuda_worker_fake.c - the GPU worker's stand-in (kla_cuda.h,
 * KILN_FAKE_GPU_WORKER): it speaks the worker's wire (kla_cuda_wire.h),
 * answers by entry name and touches no driver; its "probe" reports what
 * the sandbox lets the process see and do (kla_cuda_worker_int.h). */
#include "kla_cuda.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kla_cuda_wire.h"
#include "kla_cuda_worker_int.h"
#include "kla_sandbox.h"

/* Whether the name of a /dev entry is one every sandbox has (bwrap's
 * --dev: the standard character devices, pts, shm and links). */
static bool s_std_dev(const char *name)
{
    static const char *const std[] = {
        ".",       "..",     "null",   "zero", "full",    "random",
        "urandom", "tty",    "pts",    "ptmx", "shm",     "fd",
        "stdin",   "stdout", "stderr", "core", "console", "mqueue"};
    for (size_t i = 0; i < sizeof std / sizeof *std; i++)
        if (!strcmp(name, std[i]))
            return true;
    return false;
}

/* The stand-in's "probe" (kla_cuda.h): what this process can see and do,
 * as "key=value" words in msg. entry is "probe[:PORT[:DIR]]": PORT a TCP
 * port on 127.0.0.1 to connect to, DIR a directory to open. */
static void s_probe(const char *entry, char *msg, size_t n)
{
    int port = 9;
    const char *dir = NULL;
    const char *c = strchr(entry, ':');
    if (c) {
        port = atoi(c + 1);
        dir = strchr(c + 1, ':');
        dir = dir ? dir + 1 : NULL;
    }
    char wd[32] = "-";
    if (dir && *dir) {
        int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d >= 0)
            snprintf(wd, sizeof wd, "open");
        else
            snprintf(wd, sizeof wd, "no(%d)", errno);
        if (d >= 0)
            close(d);
    }
    char tcp[32];
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        snprintf(tcp, sizeof tcp, "nosocket(%d)", errno);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0)
            snprintf(tcp, sizeof tcp, "connected");
        else
            snprintf(tcp, sizeof tcp, "no(%d)", errno);
        close(s);
    }
    char devs[512] = "";
    DIR *d = opendir("/dev");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!s_std_dev(e->d_name)) {
            size_t k = strlen(devs);
            snprintf(devs + k, sizeof devs - k, "%s%s", k ? "," : "",
                     e->d_name);
        }
    if (d)
        closedir(d);
    char fds[128] = "";
    d = opendir("/proc/self/fd");
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d)) {
            size_t k = strlen(fds);
            snprintf(fds + k, sizeof fds - k, "%s%.12s", k ? "," : "",
                     e->d_name);
        }
    if (d)
        closedir(d);
    struct rlimit rl = {0, 0};
    getrlimit(RLIMIT_CORE, &rl);
    snprintf(msg, n,
             "probe: uid=%d gid=%d pid=%d dumpable=%d core=%llu workdir=%s "
             "tcp=%s devs=%s fds=%s bus=%s",
             (int)getuid(), (int)getgid(), (int)getpid(),
             prctl(PR_GET_DUMPABLE, 0, 0, 0, 0),
             (unsigned long long)rl.rlim_cur, wd, tcp, *devs ? devs : "-", fds,
             getenv("KILN_GPU_PCI_BUS_ID") ? getenv("KILN_GPU_PCI_BUS_ID")
                                           : "-");
}

/* The stand-in of kla_cuda.h: answers by entry name, touches no driver. */
int kla_cw__fake_main(int fd)
{
    kla_cw_hello_t hello = {.magic = KLA_CW_MAGIC};
    if (kla_write_all(fd, &hello, sizeof hello) != 0)
        return 1;
    kla_cw_req_t q;
    int fds[KLA_CW_NFDS];
    while (kla_cw__recv_req(fd, &q, fds) == 0 && kla_cw__req_ok(&q)) {
        kla_cw_res_t h = {.magic = KLA_CW_MAGIC,
                          .status = KILN__STATUS__STATUS_OK};
        uint32_t start = KLA_CW_START;
        char *img = NULL;
        size_t len = 0;
        char err[256];
        if (kla_cw__read_cubin(fds[KLA_CW_FD_CUBIN], &img, &len, err,
                               sizeof err) != 0 ||
            len < 4 ||
            memcmp(img,
                   "\x7f"
                   "ELF",
                   4) != 0) {
            h.status = KILN__STATUS__STATUS_RUNTIME_ERROR;
            snprintf(h.msg, sizeof h.msg, "not a cubin");
        } else if (strstr(q.ref_entry, "badref")) {
            h.status = KILN__STATUS__STATUS_RUNTIME_ERROR;
            snprintf(h.msg, sizeof h.msg,
                     "reference kernel failed: fake GPU worker");
        }
        free(img);
        kla_cw__close_fds(fds);
        if (h.status == KILN__STATUS__STATUS_OK &&
            kla_write_all(fd, &start, sizeof start) != 0)
            return 1;
        if (h.status != KILN__STATUS__STATUS_OK) {
        } else if (strstr(q.entry, "crash")) {
            _exit(3);
        } else if (strstr(q.entry, "hang")) {
            for (;;)
                pause();
        } else if (strstr(q.entry, "oob")) {
            h.status = KILN__STATUS__STATUS_RUNTIME_ERROR;
            h.poisoned = 1;
            snprintf(h.msg, sizeof h.msg,
                     "kernel: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory "
                     "access was encountered) [fake GPU worker]");
        } else if (strstr(q.entry, "wrong")) {
            h.status = KILN__STATUS__STATUS_WRONG_RESULT;
            h.max_abs_err = 1;
            snprintf(h.msg, sizeof h.msg,
                     "output 2 element 0 is 1, expected 0 [fake GPU worker]");
        } else if (!strncmp(q.entry, "probe", 5)) {
            s_probe(q.entry, h.msg, sizeof h.msg);
        }
        double s[KLA_MAX_REPEAT];
        if (h.status == KILN__STATUS__STATUS_OK) {
            h.number = q.number ? q.number : 1;
            h.n_samples = q.repeat;
            for (uint32_t i = 0; i < q.repeat; i++)
                s[i] = 1e-4 * (1 + 0.01 * i);
        }
        if (kla_write_all(fd, &h, sizeof h) != 0 ||
            (h.n_samples && kla_write_all(fd, s, h.n_samples * 8) != 0))
            return 1;
        if (h.poisoned)
            return 3;
    }
    return 0;
}
