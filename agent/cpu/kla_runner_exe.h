/* kla_runner_exe.h - the parts of kiln-runner (runner_main.c) and what the
 * agent's runner shares with them: the framing of kla_cand.h messages on
 * SOCK_SEQPACKET sockets. Private to agent/cpu/. */
#ifndef KLA_RUNNER_EXE_H
#define KLA_RUNNER_EXE_H

#include <stdbool.h>
#include <stddef.h>

#include "kla_cand.h"

/* One message of exactly len bytes with exactly nfds descriptors
 * (SCM_RIGHTS, received close-on-exec). 0, or -1 (EOF, error, or a
 * message of another size or descriptor count: its descriptors closed). */
int kla_runner__cand_recv(int fd, void *buf, size_t len, int *fds, int nfds);
int kla_runner__cand_send(int fd, const void *buf, size_t len, const int *fds,
                          int nfds);
/* A job's fields in range (argument count, offsets within the buffers,
 * entry NUL-terminated). */
bool kla_runner__cand_job_ok(const kla_cand_job_t *j);

/* `kiln-runner host [--unsafe]`: serves jobs from fd 3 until EOF. */
int kla_runner__host_main(bool unsafe);
/* `kiln-runner harness`: runs the job on fds 3..7 once. */
int kla_runner__harness_main(void);
/* The harness's seccomp allow-list, loaded before the candidate is
 * opened. 0, or -1 with a message in err (256 bytes). */
int kla_runner__harness_seccomp(char *err);

#endif
