/* cuda_build.c - NVRTC builds of CUDA candidates into cached cubins.
 *
 * NVRTC runs in the calling build thread (one program per call; the
 * library is thread-safe). A cubin is written to a temp file and renamed,
 * so two threads building the same source at once both end with the same
 * complete file. */
#include "kla_cuda.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_util.h"

struct kla_cuda_builder_s {
    kl_nvrtc_t *nv; /* the process-wide instance: not ours to close */
    char workdir[PATH_MAX];
    int major, minor;
    _Atomic unsigned compiles;
};

int kla_cuda_builder_new(kla_cuda_builder_t **out, const char *workdir,
                         char *err)
{
    *out = NULL;
    char why[KL_ERRMSG_LEN] = "";
    kl_nvrtc_t *nv = kl_nvrtc_default(why);
    if (!nv)
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "CUDA builds: %s", why);
    kla_cuda_builder_t *b = kl_xcalloc(1, sizeof *b);
    b->nv = nv;
    snprintf(b->workdir, sizeof b->workdir, "%s", workdir);
    kl_nvrtc_version(nv, &b->major, &b->minor);
    atomic_init(&b->compiles, 0);
    *out = b;
    return KL_OK;
}

void kla_cuda_builder_destroy(kla_cuda_builder_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

unsigned kla_cuda_builder_compiles(kla_cuda_builder_t *b)
{
    return atomic_load(&b->compiles);
}

static bool s_cubin_path(kla_cuda_builder_t *b, const char *src, size_t len,
                         const char *arch, char *out, size_t n)
{
    kl_buf_t k = {0};
    kl_buf_printf(&k, "nvrtc %d.%d|%s|", b->major, b->minor, arch);
    kl_buf_append(&k, src, len);
    uint8_t h[16];
    char hex[33];
    kl_hash128(k.data, k.len, h);
    kl_hex128(h, hex);
    kl_buf_free(&k);
    return snprintf(out, n, "%s/%s.%s.cubin", b->workdir, hex, arch) < (int)n;
}

static int s_write_atomic(const char *path, const void *data, size_t n,
                          char *log, size_t cap)
{
    char tmp[PATH_MAX + 64];
    if (snprintf(tmp, sizeof tmp, "%s.%d.%lx.tmp", path, (int)getpid(),
                 (unsigned long)pthread_self()) >= (int)sizeof tmp) {
        snprintf(log, cap, "path too long: %.200s", path);
        return KL_ERR_IO;
    }
    char err[KL_ERRMSG_LEN];
    if (kl_write_file(tmp, data, n, err) != KL_OK) {
        snprintf(log, cap, "%s", err);
        return KL_ERR_IO;
    }
    if (rename(tmp, path) != 0) {
        snprintf(log, cap, "rename %.2000s: %s", tmp, strerror(errno));
        unlink(tmp);
        return KL_ERR_IO;
    }
    return KL_OK;
}

int kla_cuda_builder_build(kla_cuda_builder_t *b, const char *source,
                           size_t len, const char *arch, const char *entry,
                           kla_build_t *out, kla_cuda_res_t *res)
{
    memset(out, 0, sizeof *out);
    if (res)
        memset(res, 0, sizeof *res);
    if (!s_cubin_path(b, source, len, arch, out->so_path,
                      sizeof out->so_path)) {
        snprintf(out->log, sizeof out->log, "workdir path too long");
        return KL_ERR_IO;
    }
    if (access(out->so_path, R_OK) == 0) {
        out->ok = out->cache_hit = true;
        return KL_OK;
    }
    /* NVRTC wants a NUL-terminated source. */
    char *src = kl_xstrndup(source, len);
    kl_nvrtc_opts_t o = {.arch = arch,
                         .log_max = KLA_BUILD_LOG_MAX,
                         .prog_name = "candidate.cu"};
    kl_nvrtc_result_t *r = NULL;
    char err[KL_ERRMSG_LEN] = "";
    double t0 = kl_now_s();
    int rc = kl_nvrtc_compile(b->nv, src, &o, &r, err);
    out->compile_s = kl_now_s() - t0;
    atomic_fetch_add(&b->compiles, 1);
    free(src);
    if (rc == KL_ERR_COMPILE) {
        snprintf(out->log, sizeof out->log, "%s",
                 r && r->log && *r->log ? r->log : err);
        kl_nvrtc_result_free(&r);
        return KL_ERR_COMPILE;
    }
    if (rc != KL_OK) {
        snprintf(out->log, sizeof out->log, "NVRTC: %s", err);
        return rc == KL_ERR_INVAL || rc == KL_ERR_UNSUPPORTED ? KL_ERR_COMPILE
                                                              : KL_ERR_IO;
    }
    if (res && entry) {
        const kl_nvrtc_kernel_t *k = kl_nvrtc_result_kernel(r, entry);
        if (k) {
            res->regs = k->registers;
            res->smem_static = k->smem_static;
            res->local_bytes = k->stack_frame;
        }
    }
    rc = s_write_atomic(out->so_path, r->image, r->image_len, out->log,
                        sizeof out->log);
    kl_nvrtc_result_free(&r);
    out->ok = rc == KL_OK;
    return rc;
}
