/* kl_nvrtc.c - NVRTC through dlopen; see kl_nvrtc.h. */
#include "kl_nvrtc.h"
#include "kl_err.h"
#include "kl_util.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The NVRTC API, declared here with plain types so that kiln builds
 * without the CUDA headers. nvrtcResult is an int enum, nvrtcProgram an
 * opaque pointer; 0 is NVRTC_SUCCESS. */
typedef void *s_prog_t;
typedef int (*s_version_fn)(int *, int *);
typedef const char *(*s_errstr_fn)(int);
typedef int (*s_create_fn)(s_prog_t *, const char *, const char *, int,
                           const char *const *, const char *const *);
typedef int (*s_destroy_fn)(s_prog_t *);
typedef int (*s_compile_fn)(s_prog_t, int, const char *const *);
typedef int (*s_size_fn)(s_prog_t, size_t *);
typedef int (*s_get_fn)(s_prog_t, char *);
typedef int (*s_narchs_fn)(int *);
typedef int (*s_archs_fn)(int *);

#define S_NVRTC_SUCCESS 0
#define S_NVRTC_ERROR_COMPILATION 6

struct kl_nvrtc_s {
    void *dl;
    char *path;
    int major, minor;
    s_version_fn version;
    s_errstr_fn errstr;
    s_create_fn create;
    s_destroy_fn destroy;
    s_compile_fn compile;
    s_size_fn log_size, ptx_size, cubin_size;
    s_get_fn log, ptx, cubin;
    int narchs;
    int *archs; /* supported sm_ numbers (80, 90, ...); may be empty */
};

static const char *s_search[] = {
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "/usr/local/cuda/lib64/libnvrtc.so",
    "/usr/local/cuda/lib64/libnvrtc.so.13",
    "/usr/local/cuda/lib64/libnvrtc.so.12",
    "/usr/local/cuda/lib/libnvrtc.so",
    "/usr/local/cuda/lib/libnvrtc.so.13",
    "/usr/local/cuda/lib/libnvrtc.so.12",
};

static int s_bind(kl_nvrtc_t *nv, char *err)
{
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"nvrtcVersion", (void **)&nv->version},
        {"nvrtcGetErrorString", (void **)&nv->errstr},
        {"nvrtcCreateProgram", (void **)&nv->create},
        {"nvrtcDestroyProgram", (void **)&nv->destroy},
        {"nvrtcCompileProgram", (void **)&nv->compile},
        {"nvrtcGetProgramLogSize", (void **)&nv->log_size},
        {"nvrtcGetProgramLog", (void **)&nv->log},
        {"nvrtcGetPTXSize", (void **)&nv->ptx_size},
        {"nvrtcGetPTX", (void **)&nv->ptx},
        {"nvrtcGetCUBINSize", (void **)&nv->cubin_size},
        {"nvrtcGetCUBIN", (void **)&nv->cubin},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(nv->dl, syms[i].name);
        if (!*syms[i].slot)
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "nvrtc %s: symbol %s missing (NVRTC older than "
                             "11.1?)",
                             nv->path, syms[i].name);
    }
    if (nv->version(&nv->major, &nv->minor) != S_NVRTC_SUCCESS)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "nvrtc %s: nvrtcVersion failed", nv->path);
    s_narchs_fn narchs =
        (s_narchs_fn)dlsym(nv->dl, "nvrtcGetNumSupportedArchs");
    s_archs_fn archs = (s_archs_fn)dlsym(nv->dl, "nvrtcGetSupportedArchs");
    int n = 0;
    if (narchs && archs && narchs(&n) == S_NVRTC_SUCCESS && n > 0 && n < 1024) {
        nv->archs = kl_xcalloc((size_t)n, sizeof(int));
        if (archs(nv->archs) == S_NVRTC_SUCCESS)
            nv->narchs = n;
    }
    return KL_OK;
}

static int s_try(kl_nvrtc_t **out, const char *path, char *err)
{
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *why = dlerror();
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", why ? why : path);
    }
    kl_nvrtc_t *nv = kl_xcalloc(1, sizeof *nv);
    nv->dl = dl;
    nv->path = kl_xstrdup(path);
    int rc = s_bind(nv, err);
    if (rc) {
        kl_nvrtc_close(&nv);
        return rc;
    }
    *out = nv;
    return KL_OK;
}

int kl_nvrtc_open(kl_nvrtc_t **out, const char *path, char *err)
{
    *out = NULL;
    if (!path || !*path)
        path = getenv("KILN_NVRTC");
    if (path && *path) {
        char why[KL_ERRMSG_LEN];
        if (s_try(out, path, why) == KL_OK)
            return KL_OK;
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "cannot load NVRTC from %s: %s", path, why);
    }
    char why[KL_ERRMSG_LEN] = "";
    for (size_t i = 0; i < sizeof s_search / sizeof s_search[0]; i++) {
        char one[KL_ERRMSG_LEN];
        int rc = s_try(out, s_search[i], one);
        if (rc == KL_OK)
            return KL_OK;
        if (!why[0] || rc == KL_ERR_UNSUPPORTED)
            snprintf(why, sizeof why, "%s", one);
    }
    return kl_seterr(err, KL_ERR_UNSUPPORTED,
                     "NVRTC not found (tried libnvrtc.so, .so.13, .so.12, "
                     ".so.11.2 and /usr/local/cuda/lib64; set KILN_NVRTC to "
                     "its path): %s",
                     why);
}

void kl_nvrtc_close(kl_nvrtc_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_nvrtc_t *nv = *self_p;
    if (nv->dl)
        dlclose(nv->dl);
    free(nv->archs);
    free(nv->path);
    free(nv);
    *self_p = NULL;
}

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static kl_nvrtc_t *s_default;
static char s_default_err[KL_ERRMSG_LEN];

static void s_default_init(void)
{
    kl_nvrtc_open(&s_default, NULL, s_default_err);
}

kl_nvrtc_t *kl_nvrtc_default(char *err)
{
    pthread_once(&s_once, s_default_init);
    if (!s_default && err)
        kl_seterr(err, KL_ERR_UNSUPPORTED, "%s", s_default_err);
    return s_default;
}

void kl_nvrtc_version(const kl_nvrtc_t *nv, int *major, int *minor)
{
    if (major)
        *major = nv ? nv->major : 0;
    if (minor)
        *minor = nv ? nv->minor : 0;
}

const char *kl_nvrtc_path(const kl_nvrtc_t *nv)
{
    return nv ? nv->path : "";
}

/* Parses "sm_90", "sm_90a", "compute_80" into its number and kind. */
static int s_parse_arch(const char *arch, int *num, bool *is_ptx, char *err)
{
    const char *p;
    if (!arch || !*arch)
        return kl_seterr(err, KL_ERR_INVAL, "nvrtc: no arch given");
    if (strncmp(arch, "sm_", 3) == 0) {
        p = arch + 3;
        *is_ptx = false;
    } else if (strncmp(arch, "compute_", 8) == 0) {
        p = arch + 8;
        *is_ptx = true;
    } else {
        return kl_seterr(err, KL_ERR_INVAL,
                         "nvrtc: arch '%s' is not sm_XY or compute_XY", arch);
    }
    int n = 0, digits = 0;
    while (isdigit((unsigned char)*p) && digits < 4) {
        n = n * 10 + (*p++ - '0');
        digits++;
    }
    if (digits < 2 || (*p && strcmp(p, "a") != 0 && strcmp(p, "f") != 0))
        return kl_seterr(err, KL_ERR_INVAL,
                         "nvrtc: arch '%s' is not sm_XY or compute_XY", arch);
    *num = n;
    return KL_OK;
}

int kl_nvrtc_check_arch(const kl_nvrtc_t *nv, const char *arch, char *err)
{
    int num;
    bool is_ptx;
    int rc = s_parse_arch(arch, &num, &is_ptx, err);
    if (rc)
        return rc;
    if (!nv)
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "nvrtc: not loaded");
    if (nv->narchs == 0)
        return KL_OK; /* an NVRTC that cannot list them: let it decide */
    kl_buf_t list = {0};
    for (int i = 0; i < nv->narchs; i++) {
        if (nv->archs[i] == num) {
            kl_buf_free(&list);
            return KL_OK;
        }
        kl_buf_printf(&list, "%s%d", i ? " " : "", nv->archs[i]);
    }
    rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                   "nvrtc %d.%d does not support %s (supported sm_: %s)",
                   nv->major, nv->minor, arch, list.data ? list.data : "");
    kl_buf_free(&list);
    return rc;
}

int kl_nvrtc_arch_of_target(const char *target, char *out, size_t n, char *err)
{
    if (!target)
        return kl_seterr(err, KL_ERR_INVAL, "target: none given");
    const char *arch = target;
    if (strncmp(target, "cuda/", 5) == 0)
        arch = target + 5;
    else if (strchr(target, '/'))
        return kl_seterr(err, KL_ERR_INVAL,
                         "target '%s' is not a CUDA target (cuda/sm_XY)",
                         target);
    int num;
    bool is_ptx;
    if (s_parse_arch(arch, &num, &is_ptx, NULL) || is_ptx)
        return kl_seterr(err, KL_ERR_INVAL,
                         "target '%s': expected cuda/sm_XY, e.g. cuda/sm_90",
                         target);
    if (strlen(arch) + 1 > n)
        return kl_seterr(err, KL_ERR_INVAL, "target '%s': name too long",
                         target);
    memcpy(out, arch, strlen(arch) + 1);
    return KL_OK;
}

/* ---- ptxas report ---- */

/* Reads the long that precedes `word` in line ("16384 bytes smem"). */
static bool s_num_before(const char *line, const char *word, long *v)
{
    const char *w = strstr(line, word);
    if (!w)
        return false;
    const char *p = w;
    while (p > line && p[-1] == ' ')
        p--;
    const char *end = p;
    while (p > line && isdigit((unsigned char)p[-1]))
        p--;
    if (p == end)
        return false;
    *v = strtol(p, NULL, 10);
    return true;
}

/* Copies the text between the first pair of single quotes after key. */
static bool s_quoted(const char *line, const char *key, char *out, size_t n)
{
    const char *k = strstr(line, key);
    if (!k)
        return false;
    const char *a = strchr(k + strlen(key), '\'');
    const char *b = a ? strchr(a + 1, '\'') : NULL;
    if (!a || !b || (size_t)(b - a - 1) >= n)
        return false;
    memcpy(out, a + 1, (size_t)(b - a - 1));
    out[b - a - 1] = '\0';
    return true;
}

static void s_parse_line(const char *line, kl_nvrtc_kernel_t *k,
                         bool props_match)
{
    long v;
    if (props_match && strstr(line, "bytes stack frame")) {
        if (s_num_before(line, " bytes stack frame", &v))
            k->stack_frame = v;
        if (s_num_before(line, " bytes spill stores", &v))
            k->spill_stores = v;
        if (s_num_before(line, " bytes spill loads", &v))
            k->spill_loads = v;
    }
    if (strstr(line, "Used ") && strstr(line, " registers")) {
        if (s_num_before(line, " registers", &v))
            k->registers = (int)v;
        if (s_num_before(line, " barriers", &v))
            k->barriers = (int)v;
        if (s_num_before(line, " bytes smem", &v))
            k->smem_static = v;
    }
}

int kl_nvrtc_parse_ptxas(const char *log, kl_nvrtc_kernel_t **out, int *n,
                         char *err)
{
    *out = NULL;
    *n = 0;
    kl_nvrtc_kernel_t *ks = NULL;
    int nk = 0, cap = 0;
    char props[KL_NVRTC_NAME_MAX] = "";
    const char *p = log ? log : "";
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[512];
        size_t m = len < sizeof line - 1 ? len : sizeof line - 1;
        memcpy(line, p, m);
        line[m] = '\0';
        p += len + (eol ? 1 : 0);
        if (strncmp(line, "ptxas", 5) != 0)
            continue;
        char name[KL_NVRTC_NAME_MAX];
        if (s_quoted(line, "Compiling entry function", name, sizeof name)) {
            if (nk == cap) {
                cap = cap ? cap * 2 : 8;
                ks = kl_xrealloc(ks, (size_t)cap * sizeof *ks);
            }
            memset(&ks[nk], 0, sizeof ks[nk]);
            memcpy(ks[nk].name, name, sizeof name);
            nk++;
            props[0] = '\0';
            continue;
        }
        if (s_quoted(line, "Function properties for", name, sizeof name) ||
            (strstr(line, "Function properties for ") &&
             sscanf(strstr(line, "for ") + 4, "%127s", name) == 1)) {
            memcpy(props, name, sizeof name);
            continue;
        }
        bool res = strstr(line, "bytes stack frame") ||
                   (strstr(line, "Used ") && strstr(line, " registers"));
        if (!res)
            continue;
        if (nk == 0) {
            free(ks);
            return kl_seterr(err, KL_ERR_INVAL,
                             "ptxas report: resource line before any entry "
                             "function: %s",
                             line);
        }
        s_parse_line(line, &ks[nk - 1], strcmp(props, ks[nk - 1].name) == 0);
    }
    *out = ks;
    *n = nk;
    return KL_OK;
}

/* ---- compilation ---- */

void kl_nvrtc_result_free(kl_nvrtc_result_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_nvrtc_result_t *r = *self_p;
    free(r->image);
    free(r->log);
    free(r->kernels);
    free(r);
    *self_p = NULL;
}

const kl_nvrtc_kernel_t *kl_nvrtc_result_kernel(const kl_nvrtc_result_t *r,
                                                const char *name)
{
    if (!r || !name)
        return NULL;
    for (int i = 0; i < r->nkernels; i++)
        if (strcmp(r->kernels[i].name, name) == 0)
            return &r->kernels[i];
    return NULL;
}

/* The first line of log that holds "error", for the caller's message. */
static void s_first_error(const char *log, char *out, size_t n)
{
    const char *e = strstr(log, "error");
    if (!e) {
        snprintf(out, n, "%s", log);
    } else {
        const char *a = e;
        while (a > log && a[-1] != '\n')
            a--;
        const char *b = strchr(e, '\n');
        size_t len = b ? (size_t)(b - a) : strlen(a);
        snprintf(out, n, "%.*s", (int)len, a);
    }
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
}

/* Fetches the log of prog into r->log (bounded) and *full (unbounded, for
 * the ptxas parser; freed by the caller). */
static void s_fetch_log(kl_nvrtc_t *nv, s_prog_t prog, size_t max,
                        kl_nvrtc_result_t *r, char **full)
{
    size_t n = 0;
    char *log;
    if (nv->log_size(prog, &n) != S_NVRTC_SUCCESS || n == 0) {
        log = kl_xstrdup("");
    } else {
        log = kl_xmalloc(n + 1);
        if (nv->log(prog, log) != S_NVRTC_SUCCESS)
            log[0] = '\0';
        log[n] = '\0';
    }
    size_t len = strlen(log);
    if (len <= max) {
        r->log = kl_xstrdup(log);
    } else {
        kl_buf_t b = {0};
        kl_buf_append(&b, log, max);
        kl_buf_printf(&b, "\n[log cut: %zu of %zu bytes shown]\n", max, len);
        r->log = kl_buf_take(&b);
    }
    *full = log;
}

static int s_fetch_image(kl_nvrtc_t *nv, s_prog_t prog, kl_nvrtc_result_t *r,
                         char *err)
{
    size_t n = 0;
    s_size_fn size_fn = r->is_ptx ? nv->ptx_size : nv->cubin_size;
    s_get_fn get_fn = r->is_ptx ? nv->ptx : nv->cubin;
    int rc = size_fn(prog, &n);
    if (rc != S_NVRTC_SUCCESS || n == 0)
        return kl_seterr(err, KL_ERR_INTERNAL, "nvrtc: no %s produced: %s",
                         r->is_ptx ? "PTX" : "cubin", nv->errstr(rc));
    r->image = kl_xmalloc(n);
    rc = get_fn(prog, r->image);
    if (rc != S_NVRTC_SUCCESS)
        return kl_seterr(err, KL_ERR_INTERNAL, "nvrtc: reading %s: %s",
                         r->is_ptx ? "PTX" : "cubin", nv->errstr(rc));
    r->image_len = n;
    return KL_OK;
}

int kl_nvrtc_compile(kl_nvrtc_t *nv, const char *src,
                     const kl_nvrtc_opts_t *opts, kl_nvrtc_result_t **out,
                     char *err)
{
    *out = NULL;
    if (!nv)
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "nvrtc: not loaded");
    if (!src || !opts)
        return kl_seterr(err, KL_ERR_INVAL, "nvrtc: no source or options");
    int num;
    bool is_ptx;
    int rc = kl_nvrtc_check_arch(nv, opts->arch, err);
    if (rc)
        return rc;
    s_parse_arch(opts->arch, &num, &is_ptx, NULL);
    if (opts->nextra < 0 || (opts->nextra > 0 && !opts->extra))
        return kl_seterr(err, KL_ERR_INVAL, "nvrtc: bad extra options");

    bool want_res = !is_ptx && !opts->no_resources;
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", opts->arch);
    int nopt = 0;
    const char **argv = kl_xcalloc((size_t)opts->nextra + 3, sizeof(char *));
    argv[nopt++] = archopt;
    argv[nopt++] = "-std=c++17";
    if (want_res)
        argv[nopt++] = "--ptxas-options=-v";
    for (int i = 0; i < opts->nextra; i++)
        argv[nopt++] = opts->extra[i];

    const char *pname = opts->prog_name ? opts->prog_name : "kernel.cu";
    s_prog_t prog = NULL;
    double t0 = kl_now_s();
    rc = nv->create(&prog, src, pname, 0, NULL, NULL);
    if (rc != S_NVRTC_SUCCESS) {
        free(argv);
        return kl_seterr(err, KL_ERR_INTERNAL, "nvrtcCreateProgram: %s",
                         nv->errstr(rc));
    }
    int crc = nv->compile(prog, nopt, argv);
    free(argv);

    kl_nvrtc_result_t *r = kl_xcalloc(1, sizeof *r);
    r->is_ptx = is_ptx;
    char *full = NULL;
    s_fetch_log(nv, prog, opts->log_max ? opts->log_max : KL_NVRTC_LOG_MAX, r,
                &full);
    if (crc == S_NVRTC_ERROR_COMPILATION) {
        char first[KL_ERRMSG_LEN - 32];
        s_first_error(full, first, sizeof first);
        rc = kl_seterr(err, KL_ERR_COMPILE, "nvrtc %s: %s", opts->arch, first);
        r->seconds = kl_now_s() - t0;
        *out = r;
    } else if (crc != S_NVRTC_SUCCESS) {
        rc = kl_seterr(err, KL_ERR_INTERNAL, "nvrtcCompileProgram: %s",
                       nv->errstr(crc));
        kl_nvrtc_result_free(&r);
    } else {
        rc = s_fetch_image(nv, prog, r, err);
        if (rc == KL_OK && want_res)
            rc = kl_nvrtc_parse_ptxas(full, &r->kernels, &r->nkernels, err);
        r->seconds = kl_now_s() - t0;
        if (rc)
            kl_nvrtc_result_free(&r);
        *out = r;
    }
    free(full);
    nv->destroy(&prog);
    return rc;
}
