/* export_cc.c - the build of libkiln_model.so (kl_export_cc): the C
 * compiler run on an exported model's sources, its output in a log next
 * to the library, the log's tail in the error when it fails. */
#include "kl_export.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_util.h"

extern char **environ;

static int s_log_tail(const char *log, const char *cc, int status, char *err)
{
    char *text = NULL;
    size_t len = 0;
    char e2[KL_ERRMSG_LEN];
    if (kl_read_file(log, &text, &len, e2))
        text = kl_xstrdup("");
    const char *tail = len > 300 ? text + len - 300 : text;
    int rc = kl_seterr(err, KL_ERR_COMPILE, "%s exited with %d (log %s): %s",
                       cc, status, log, tail);
    free(text);
    return rc;
}

int kl_export_cc(const char *cc, char *const *srcs, int n, const char *lib,
                 char *err)
{
    if (!cc)
        cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    /* -z nodelete: dlclose leaves the library (and so libgomp) mapped,
     * since OpenMP's idle worker threads outlive it and would crash in
     * unmapped code in a program that does not link libgomp itself. */
    const char *fixed[] = {
        cc,        "-O3",   "-march=native",  "-fopenmp",
        "-shared", "-fPIC", "-Wl,-Bsymbolic", "-Wl,-z,nodelete",
        "-o",      lib};
    int nf = (int)(sizeof fixed / sizeof fixed[0]);
    char **argv = kl_xcalloc((size_t)(nf + n + 2), sizeof(char *));
    for (int i = 0; i < nf; i++)
        argv[i] = (char *)fixed[i];
    for (int i = 0; i < n; i++)
        argv[nf + i] = srcs[i];
    argv[nf + n] = "-lm";
    char *log = kl_xasprintf("%s.log", lib);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(argv);
    if (rc) {
        rc = kl_seterr(err, KL_ERR_COMPILE, "cannot run %s: %s", cc,
                       strerror(rc));
        free(log);
        return rc;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        rc = s_log_tail(log, cc, WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
    free(log);
    return rc;
}
