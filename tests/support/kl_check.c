/* kl_check.c - compile-and-check harness (see kl_check.h). */
#include "kl_check.h"
#include "kl_abi.h"

#include "kl_err.h"
#include "kl_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static atomic_uint s_seq;

/* Runs the compiler on src into so, its output into log. */
static int s_compile(const char *src, const char *so, const char *log,
                     char *err)
{
    const char *cc = getenv("KILN_CHECK_CC");
    if (!cc || !*cc)
        cc = "cc";
    char *argv[] = {(char *)cc, "-O2", "-march=native", "-fopenmp",  "-shared",
                    "-fPIC",    "-o",  (char *)so,      (char *)src, "-lm",
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return kl_seterr(err, KL_ERR_IO, "cannot start %s: %s", cc,
                         strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return kl_seterr(err, KL_ERR_IO, "waitpid: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KL_OK;
    char *out = NULL;
    kl_read_file(log, &out, NULL, NULL);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    rc = kl_seterr(err, KL_ERR_COMPILE, "%s failed (status %d) on %s: %.360s",
                   cc, code, src, out ? out : "(no output)");
    free(out);
    return rc;
}

int kl_check_build_many(const char *const *sources, int n, const char *workdir,
                        char **so_path, char *err)
{
    *so_path = NULL;
    uint64_t h = 1469598103934665603ull;
    kl_buf_t all = {0};
    for (int i = 0; i < n; i++) {
        kl_buf_puts(&all, sources[i]);
        kl_buf_puts(&all, "\n");
    }
    if (all.data)
        h = kl_hash64(all.data, all.len);
    char *stem = kl_xasprintf("%s/kl_check_%016llx_%d_%u", workdir,
                              (unsigned long long)h, (int)getpid(),
                              atomic_fetch_add(&s_seq, 1));
    char *src = kl_xasprintf("%s.c", stem);
    char *so = kl_xasprintf("%s.so", stem);
    char *log = kl_xasprintf("%s.log", stem);
    int rc = kl_write_file(src, all.data ? all.data : "", all.len, err);
    if (!rc)
        rc = s_compile(src, so, log, err);
    kl_buf_free(&all);
    free(stem);
    free(src);
    free(log);
    if (rc) {
        free(so);
        return rc;
    }
    *so_path = so;
    return KL_OK;
}

int kl_check_build(const char *source, const char *workdir, char **so_path,
                   char *err)
{
    return kl_check_build_many(&source, 1, workdir, so_path, err);
}

float **kl_check_alloc(const kl_workload_t *w, uint64_t seed, char *err)
{
    for (int t = 0; t < w->ntensors; t++) {
        if (w->tensors[t].dtype != KL_DT_F32) {
            kl_seterr(err, KL_ERR_UNSUPPORTED,
                      "tensor %s is %s: the check harness runs f32 only",
                      w->tensors[t].name, kl_dtype_name(w->tensors[t].dtype));
            return NULL;
        }
    }
    float **bufs = kl_xcalloc((size_t)w->ntensors, sizeof(*bufs));
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    int out = kl_workload_output(w);
    for (int t = 0; t < w->ntensors; t++) {
        int64_t n = kl_tensor_numel(&w->tensors[t]);
        bufs[t] = kl_xmalloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            bufs[t][i] =
                t == out ? NAN : (float)(2.0 * kl_rng_double(&rng) - 1.0);
    }
    return bufs;
}

void kl_check_free(const kl_workload_t *w, float ***bufs_p)
{
    if (!bufs_p || !*bufs_p)
        return;
    for (int t = 0; t < w->ntensors; t++)
        free((*bufs_p)[t]);
    free(*bufs_p);
    *bufs_p = NULL;
}

/* "[0,3,5]" for flat index i of tensor t. */
static void s_unravel(const kl_tensor_t *t, int64_t i, char *out, size_t n)
{
    int64_t idx[KL_IR_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = i % t->shape[d];
        i /= t->shape[d];
    }
    size_t len = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < t->ndim && len < n; d++)
        len += (size_t)snprintf(out + len, n - len, "%s%lld", d ? "," : "",
                                (long long)idx[d]);
    if (len < n)
        snprintf(out + len, n - len, "]");
}

static int s_compare(const kl_workload_t *w, const float *got, const float *ref,
                     double rtol, double atol, double *max_err,
                     const char *entry, char *err)
{
    const kl_tensor_t *t = &w->tensors[kl_workload_output(w)];
    int64_t n = kl_tensor_numel(t), bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double o = got[i], r = ref[i], d = fabs(o - r);
        if (isnan(d))
            d = INFINITY;
        if (d > worst)
            worst = d;
        if (!(d <= atol + rtol * fabs(r))) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    if (max_err)
        *max_err = worst;
    if (!bad)
        return KL_OK;
    char where[128];
    s_unravel(t, first, where, sizeof(where));
    return kl_seterr(err, KL_ERR_RUNTIME,
                     "%s: wrong result at %s%s: got %.9g, expected %.9g "
                     "(tolerance %g + %g*|expected|); %lld of %lld elements "
                     "wrong, max error %g",
                     entry, t->name, where, (double)got[first],
                     (double)ref[first], atol, rtol, (long long)bad,
                     (long long)n, worst);
}

/* Calls fn on bufs as kl_abi.h says: through ENTRY_prepare first when the
 * object defines one, with only the constant tensors given to it. */
static int s_call(void *dl, const char *entry, void (*fn)(void *const *),
                  const kl_workload_t *w, float **bufs, char *msg)
{
    void *args[KL_IR_MAX_TENSORS + 1] = {0};
    bool cst[KL_IR_MAX_TENSORS] = {0};
    for (int t = 0; t < w->ntensors; t++) {
        args[t] = bufs[t];
        cst[t] = w->tensors[t].is_const;
    }
    kl_abi_prepare_fn prep = kl_abi_find_prepare(dl, entry);
    void *block = NULL;
    if (prep && !(block = kl_abi_prepare(prep, w->ntensors, args, cst)))
        return kl_seterr(msg, KL_ERR_NOMEM,
                         "%s" KL_ABI_PREPARE_SUFFIX " returned NULL", entry);
    args[w->ntensors] = block;
    fn((void *const *)args);
    free(block);
    return KL_OK;
}

int kl_check_run_many(const char *so_path, const char *const *entries, int n,
                      const kl_workload_t *w, uint64_t seed, double rtol,
                      double atol, double *max_err, int *rcs, char *err)
{
    float **bufs = kl_check_alloc(w, seed, err);
    if (!bufs)
        return KL_ERR_UNSUPPORTED;
    /* OpenMP worker threads outlive the kernel: keep libgomp loaded for
     * good, or unloading the kernel would unload it under them. */
    dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    void *dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        kl_check_free(w, &bufs);
        return kl_seterr(err, KL_ERR_IO, "dlopen %s: %s", so_path, dlerror());
    }
    int out = kl_workload_output(w), first_rc = KL_OK;
    int64_t on = kl_tensor_numel(&w->tensors[out]);
    float *ref = kl_xmalloc((size_t)on * sizeof(float));
    float **pristine = kl_xcalloc((size_t)w->ntensors, sizeof(*pristine));
    for (int t = 0; t < w->ntensors; t++) {
        size_t bytes = (size_t)kl_tensor_numel(&w->tensors[t]) * sizeof(float);
        pristine[t] = kl_xmalloc(bytes);
        memcpy(pristine[t], bufs[t], bytes);
    }
    float *outbuf = bufs[out];
    bufs[out] = ref;
    kl_workload_eval(w, bufs);
    bufs[out] = outbuf;
    for (int i = 0; i < n; i++) {
        char msg[KL_ERRMSG_LEN];
        int rc;
        double me = INFINITY;
        void (*fn)(void *const *);
        *(void **)(&fn) = dlsym(dl, entries[i]);
        if (!fn) {
            rc = kl_seterr(msg, KL_ERR_NOTFOUND, "entry '%s' not found in %s",
                           entries[i], so_path);
        } else {
            for (int t = 0; t < w->ntensors; t++)
                memcpy(bufs[t], pristine[t],
                       (size_t)kl_tensor_numel(&w->tensors[t]) * sizeof(float));
            rc = s_call(dl, entries[i], fn, w, bufs, msg);
            if (!rc)
                rc = s_compare(w, bufs[out], ref, rtol, atol, &me, entries[i],
                               msg);
        }
        if (rcs)
            rcs[i] = rc;
        if (max_err)
            max_err[i] = me;
        if (rc && !first_rc) {
            first_rc = rc;
            kl_seterr(err, rc, "%s", msg);
        }
    }
    for (int t = 0; t < w->ntensors; t++)
        free(pristine[t]);
    free(pristine);
    free(ref);
    kl_check_free(w, &bufs);
    dlclose(dl);
    return first_rc;
}

int kl_check_run(const char *so_path, const char *entry, const kl_workload_t *w,
                 uint64_t seed, double rtol, double atol, double *max_err,
                 char *err)
{
    return kl_check_run_many(so_path, &entry, 1, w, seed, rtol, atol, max_err,
                             NULL, err);
}
