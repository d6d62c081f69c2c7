/* runner.c - inputs, reference cache, verification and timing. */
#include "kla_runner.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kl_abi.h"
#include "kl_err.h"
#include "kl_eval.h"
#include "kl_util.h"
#include "kla_sandbox.h"

#define S_MAGIC 0x6b6c6e31u
#define S_MAX_NUMBER (1u << 30)

enum { S_CH_OK = 0, S_CH_WRONG = 1, S_CH_ERROR = 2 };

/* What a child writes first; then n_samples doubles. */
typedef struct {
    uint32_t magic, status, number, n_samples;
    double max_abs_err;
    double child_s; /* the child's own time, from its body's start */
    char msg[1024];
} s_child_hdr_t;

typedef kl_abi_kernel_fn s_kernel_fn;

typedef struct s_ref {
    uint8_t key[16];
    void *buf[64];  /* inputs: generated; outputs: the reference's */
    double rms[64]; /* outputs: root mean square of the reference's */
    size_t bytes;
    bool failed;
    char *error;
    struct s_ref *next; /* most recently used first */
} s_ref_t;

struct kla_runner_s {
    kla_runner_config_t cfg;
    kla_cores_t pin;
    s_ref_t *refs;
    size_t ref_bytes;
    unsigned ref_runs;
    _Atomic pid_t running;
    char *flush; /* shared, populated once, inherited by every child */
    size_t flush_n;
};

void kla_eval_defaults(kla_eval_t *e)
{
    *e = (kla_eval_t){.number = KL_EVAL_DEF_NUMBER,
                      .repeat = KL_EVAL_DEF_REPEAT,
                      .min_repeat_ms = KL_EVAL_DEF_MIN_REPEAT_MS,
                      .flush_cache = KL_EVAL_DEF_FLUSH,
                      .timeout_ms = KL_EVAL_DEF_TIMEOUT_MS,
                      .rtol = KL_EVAL_DEF_RTOL,
                      .atol = KL_EVAL_DEF_ATOL};
}

void kla_eval_from_proto(kla_eval_t *e, const Kiln__Evaluator *pe)
{
    kla_eval_defaults(e);
    if (!pe)
        return;
    if (pe->number)
        e->number = pe->number > S_MAX_NUMBER ? S_MAX_NUMBER : pe->number;
    if (pe->repeat)
        e->repeat = pe->repeat > KLA_MAX_REPEAT ? KLA_MAX_REPEAT : pe->repeat;
    if (pe->timeout_ms) /* at most a day: it becomes an int of ms */
        e->timeout_ms = pe->timeout_ms > 86400000u ? 86400000u : pe->timeout_ms;
    e->min_repeat_ms = pe->min_repeat_ms;
    e->flush_cache = pe->flush_cache;
    if ((pe->rtol != 0 || pe->atol != 0) && isfinite(pe->rtol) &&
        isfinite(pe->atol) && pe->rtol >= 0 && pe->atol >= 0) {
        e->rtol = pe->rtol;
        e->atol = pe->atol;
    }
    e->seed = pe->seed;
    e->skip_verify = pe->skip_verify;
}

int kla_problem_from_request(kla_problem_t *p, const Kiln__MeasureRequest *req,
                             uint64_t max_bytes, char *err)
{
    memset(p, 0, sizeof *p);
    if (req->workload_key.len != 16)
        return kl_seterr(err, KL_ERR_INVAL,
                         "workload key has %zu bytes, expected 16",
                         req->workload_key.len);
    memcpy(p->workload_key, req->workload_key.data, 16);
    if (req->n_args < 1 || req->n_args > 64)
        return kl_seterr(err, KL_ERR_INVAL,
                         "request has %zu arguments, expected 1..64",
                         req->n_args);
    uint64_t total = 0;
    int outputs = 0;
    for (size_t i = 0; i < req->n_args; i++) {
        const Kiln__KernelArg *a = req->args[i];
        const char *name = a->name && *a->name ? a->name : "?";
        switch (a->dtype) {
        case KILN__DTYPE__DTYPE_F32:
        case KILN__DTYPE__DTYPE_I32:
            p->esize[i] = 4;
            break;
        case KILN__DTYPE__DTYPE_F16:
        case KILN__DTYPE__DTYPE_BF16:
            p->esize[i] = 2; /* the backend decides (check_request) */
            break;
        case KILN__DTYPE__DTYPE_U8:
        case KILN__DTYPE__DTYPE_S8:
            p->esize[i] = 1;
            break;
        default:
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "argument %zu '%s' has dtype %d: not one this "
                             "agent knows (f32, f16, bf16, u8, s8, s32)",
                             i, name, (int)a->dtype);
        }
        p->dtype[i] = a->dtype;
        p->any_int |= p->esize[i] != 2 && a->dtype != KILN__DTYPE__DTYPE_F32;
        if (a->n_shape < 1 || a->n_shape > 8)
            return kl_seterr(err, KL_ERR_INVAL,
                             "argument %zu '%s' has %zu dimensions, expected "
                             "1..8",
                             i, name, a->n_shape);
        uint64_t n = 1;
        for (size_t d = 0; d < a->n_shape; d++) {
            if (a->shape[d] < 1 || a->shape[d] > (1ll << 32) ||
                n > (UINT64_C(1) << 40) / (uint64_t)a->shape[d])
                return kl_seterr(err, KL_ERR_INVAL,
                                 "argument %zu '%s': dimension %zu is %lld "
                                 "(or the tensor is too large)",
                                 i, name, d, (long long)a->shape[d]);
            n *= (uint64_t)a->shape[d];
        }
        p->nelem[i] = (size_t)n;
        p->is_output[i] = a->role == KILN__ARG_ROLE__ROLE_OUTPUT;
        p->is_const[i] = a->role == KILN__ARG_ROLE__ROLE_CONSTANT;
        outputs += p->is_output[i];
        total += n * p->esize[i];
    }
    p->n_args = (int)req->n_args;
    if (!outputs)
        return kl_seterr(err, KL_ERR_INVAL, "request has no output argument");
    if (max_bytes && total > max_bytes)
        return kl_seterr(err, KL_ERR_INVAL,
                         "arguments need %llu MiB, more than the %llu MiB "
                         "memory limit",
                         (unsigned long long)(total >> 20),
                         (unsigned long long)(max_bytes >> 20));
    kla_eval_from_proto(&p->eval, req->evaluator);
    return KL_OK;
}

void kla_result_clear(kla_result_t *r)
{
    free(r->samples);
    memset(r, 0, sizeof *r);
}

void kla_result_stats(kla_result_t *r)
{
    r->spread = 0;
    if (r->n_samples == 0)
        return;
    double lo = r->samples[0], hi = r->samples[0];
    for (uint32_t i = 1; i < r->n_samples; i++) {
        lo = fmin(lo, r->samples[i]);
        hi = fmax(hi, r->samples[i]);
    }
    double med = kl_median(r->samples, r->n_samples);
    r->spread = med > 0 ? (hi - lo) / med : 0;
}

int kla_runner_new(kla_runner_t **out, const kla_runner_config_t *cfg,
                   char *err)
{
    (void)err;
    kla_runner_t *r = kl_xcalloc(1, sizeof *r);
    r->cfg = *cfg;
    if (cfg->pin) {
        r->pin = *cfg->pin;
        r->cfg.pin = &r->pin;
    }
    if (!r->cfg.cache_bytes)
        r->cfg.cache_bytes = (size_t)1 << 30;
    if (!r->cfg.llc_bytes)
        r->cfg.llc_bytes = 32u << 20;
    /* Writing 2x the LLC evicts the candidate's data between samples. A
     * virtual machine often reports the whole host's L3 (260 MiB here),
     * and writing 520 MiB per sample costs more than most candidates run;
     * so the default is capped at KLA_FLUSH_CAP_BYTES. 64 MiB was not
     * enough here: after writing 64 MiB, reading 10 MiB took 380-410 us,
     * as without a flush (365), and 630-680 us after 128 or 192 MiB, so a
     * 10 MiB Winograd block was timed warm by a "flushed" sample. 128 MiB
     * costs about 5 ms a sample. --flush-mb sets any size. */
    r->flush_n = r->cfg.flush_bytes ? (size_t)r->cfg.flush_bytes
                                    : (size_t)(2 * r->cfg.llc_bytes);
    if (!r->cfg.flush_bytes && r->flush_n > KLA_FLUSH_CAP_BYTES)
        r->flush_n = KLA_FLUSH_CAP_BYTES;
    atomic_init(&r->running, 0);
    *out = r;
    return KL_OK;
}

static void s_ref_free(s_ref_t *e)
{
    for (int i = 0; i < 64; i++)
        free(e->buf[i]);
    free(e->error);
    free(e);
}

void kla_runner_destroy(kla_runner_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_runner_t *r = *self_p;
    for (s_ref_t *e = r->refs, *next; e; e = next) {
        next = e->next;
        s_ref_free(e);
    }
    if (r->flush)
        munmap(r->flush, r->flush_n);
    free(r);
    *self_p = NULL;
}

unsigned kla_runner_reference_runs(kla_runner_t *r)
{
    return r->ref_runs;
}

void kla_runner_abort(kla_runner_t *r)
{
    kla_sandbox_kill(&r->running);
}

/* ---- the child --------------------------------------------------------- */

typedef struct {
    const kla_problem_t *p;
    const s_ref_t *ref;
    float **shared_out; /* reference run: outputs land here */
    const char *so, *entry;
    char *flush; /* NULL: the child maps its own */
    size_t flush_n;
} s_ctx_t;

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* When the child's body began (a child has one thread: ours). */
static double s_child_t0;

static int s_send(int fd, s_child_hdr_t *h, const double *samples)
{
    h->magic = S_MAGIC;
    h->child_s = s_now() - s_child_t0;
    if (kla_write_all(fd, h, sizeof *h) != 0)
        return 1;
    if (h->n_samples && kla_write_all(fd, samples, h->n_samples * 8) != 0)
        return 1;
    return 0;
}

/* Bytes per element of argument a (a problem made by hand, with esize
 * left 0, is f32). */
static size_t s_esize(const kla_problem_t *p, int a)
{
    return p->esize[a] ? p->esize[a] : sizeof(float);
}

/* Element i of integer argument a stored at buf. */
static int64_t s_int_at(const kla_problem_t *p, int a, const void *buf,
                        size_t i)
{
    switch (p->dtype[a]) {
    case KILN__DTYPE__DTYPE_U8:
        return ((const uint8_t *)buf)[i];
    case KILN__DTYPE__DTYPE_S8:
        return ((const int8_t *)buf)[i];
    default:
        return ((const int32_t *)buf)[i];
    }
}

/* Compares the outputs with the reference; fills h on a mismatch, its
 * message starting with `when` ("" for the check of the first call). */
static bool s_verify(const s_ctx_t *c, void *const *args, const char *when,
                     s_child_hdr_t *h)
{
    const kla_eval_t *e = &c->p->eval;
    size_t bad = 0, total = 0;
    double max_err = 0;
    for (int a = 0; a < c->p->n_args; a++) {
        if (!c->p->is_output[a])
            continue;
        if (c->p->dtype[a] != KILN__DTYPE__DTYPE_F32) {
            /* Integer outputs: exactly the reference's. */
            for (size_t i = 0; i < c->p->nelem[a]; i++, total++) {
                int64_t o = s_int_at(c->p, a, args[a], i);
                int64_t r = s_int_at(c->p, a, c->ref->buf[a], i);
                double d = fabs((double)(o - r));
                if (d > max_err)
                    max_err = d;
                if (o != r && !bad++)
                    snprintf(h->msg, sizeof h->msg,
                             "%soutput %d element %zu is %lld, expected %lld "
                             "(integer outputs must match exactly)",
                             when, a, i, (long long)o, (long long)r);
            }
            continue;
        }
        const float *out = args[a], *ref = c->ref->buf[a];
        double rms = c->ref->rms[a];
        for (size_t i = 0; i < c->p->nelem[a]; i++, total++) {
            double d = fabs((double)out[i] - (double)ref[i]);
            if (isnan(d))
                d = INFINITY;
            if (d > max_err)
                max_err = d;
            if (d > e->atol + e->rtol * (fabs((double)ref[i]) + rms)) {
                if (!bad++)
                    snprintf(h->msg, sizeof h->msg,
                             "%soutput %d element %zu is %g, expected %g "
                             "(rtol %g of |expected| + rms %g, atol %g)",
                             when, a, i, (double)out[i], (double)ref[i],
                             e->rtol, rms, e->atol);
            }
        }
    }
    h->max_abs_err = max_err;
    if (!bad)
        return true;
    size_t len = strlen(h->msg);
    snprintf(h->msg + len, sizeof h->msg - len,
             "; %zu of %zu elements wrong, max abs error %g", bad, total,
             max_err);
    h->status = S_CH_WRONG;
    return false;
}

static double s_time_runs(s_kernel_fn fn, void *const *args, uint32_t number)
{
    double t0 = s_now();
    for (uint32_t i = 0; i < number; i++)
        fn(args);
    return s_now() - t0;
}

/* Grows number until `number` runs last min_repeat_ms, then takes the
 * samples, then checks the output of the last timed call: a kernel whose
 * first call was right may change between calls (state kept in a static,
 * a buffer it reuses), and every timed call writes the same outputs, so
 * one more compare, nothing recomputed, catches it. */
static int s_timing(const s_ctx_t *c, s_kernel_fn fn, void *const *args, int fd)
{
    const kla_eval_t *e = &c->p->eval;
    s_child_hdr_t h = {.status = S_CH_OK, .n_samples = e->repeat};
    uint32_t number = e->number;
    uint64_t calls = 1; /* the verified call */
    double want = e->min_repeat_ms / 1000.0;
    if (want > 0) {
        for (;;) {
            double t = s_time_runs(fn, args, number);
            calls += number;
            if (t >= want || number >= S_MAX_NUMBER)
                break;
            double grow = t > 0 ? want / t * 1.1 : 100;
            grow = grow < 2 ? 2 : grow > 100 ? 100 : grow;
            double next = ceil(number * grow);
            number = next > S_MAX_NUMBER ? S_MAX_NUMBER : (uint32_t)next;
        }
    }
    h.number = number;
    size_t flush_n = e->flush_cache ? c->flush_n : 0;
    char *flush = flush_n ? c->flush : NULL, *own = NULL;
    if (flush_n && !flush) {
        own = mmap(NULL, flush_n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        flush = own = own == MAP_FAILED ? NULL : own;
    }
    double *samples = calloc(e->repeat, sizeof(double));
    if (!samples || (flush_n && !flush)) {
        snprintf(h.msg, sizeof h.msg,
                 "out of memory for timing buffers (cache flush: %zu MiB, "
                 "twice the last-level cache)",
                 flush_n >> 20);
        h.status = S_CH_ERROR;
        h.n_samples = 0;
        return s_send(fd, &h, NULL);
    }
    for (uint32_t r = 0; r < e->repeat; r++) {
        if (flush) {
            memset(flush, (int)r + 1, flush_n);
            __asm__ volatile("" : : "r"(flush) : "memory");
        }
        samples[r] = s_time_runs(fn, args, number) / number;
        calls += number;
    }
    char when[96];
    snprintf(when, sizeof when,
             "check after timing (output of call %llu; the first call's was "
             "right): ",
             (unsigned long long)calls);
    s_child_hdr_t wrong = {0};
    int rc = !e->skip_verify && !s_verify(c, args, when, &wrong)
                 ? s_send(fd, &wrong, NULL)
                 : s_send(fd, &h, samples);
    free(samples);
    if (own)
        munmap(own, flush_n);
    return rc;
}

/* Calls ENTRY_prepare when lib defines it (kl_abi.h): once, with only the
 * constant inputs non-NULL, before the verification run and the timing.
 * Sets *block (NULL when there is no prepare). Returns false with h filled
 * when prepare returned NULL. Both the candidate and the reference go
 * through here; the reference (the naive schedule) never defines one. */
static bool s_prepare(const s_ctx_t *c, void *lib, void *const *args,
                      void **block, s_child_hdr_t *h)
{
    *block = NULL;
    kl_abi_prepare_fn prep = kl_abi_find_prepare(lib, c->entry);
    if (prep &&
        !(*block = kl_abi_prepare(prep, c->p->n_args, args, c->p->is_const))) {
        snprintf(h->msg, sizeof h->msg,
                 "'%s" KL_ABI_PREPARE_SUFFIX "' returned NULL (out of memory "
                 "while preparing the constant inputs, or a tensorized "
                 "kernel on a CPU without its intrinsic)",
                 c->entry);
        return false;
    }
    return true;
}

static int s_child(void *arg, int fd)
{
    const s_ctx_t *c = arg;
    s_child_t0 = s_now();
    s_child_hdr_t h = {.status = S_CH_ERROR};
    void *lib = dlopen(c->so, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(h.msg, sizeof h.msg, "dlopen: %s", dlerror());
        return s_send(fd, &h, NULL);
    }
    s_kernel_fn fn;
    *(void **)&fn = dlsym(lib, c->entry);
    if (!fn) {
        snprintf(h.msg, sizeof h.msg,
                 "entry symbol '%s' not found in the shared object", c->entry);
        return s_send(fd, &h, NULL);
    }
    /* n_args (<= 64) tensors, then the prepared block (kl_abi.h). */
    void *args[65] = {0};
    for (int a = 0; a < c->p->n_args; a++) {
        if (!c->p->is_output[a]) {
            args[a] = c->ref->buf[a];
            continue;
        }
        size_t bytes = c->p->nelem[a] * s_esize(c->p, a);
        void *o = c->shared_out ? (void *)c->shared_out[a]
                                : aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!o) {
            snprintf(h.msg, sizeof h.msg, "out of memory for output %d", a);
            return s_send(fd, &h, NULL);
        }
        if (c->p->dtype[a] == KILN__DTYPE__DTYPE_F32)
            for (size_t i = 0; i < c->p->nelem[a]; i++)
                ((float *)o)[i] = NAN;
        else /* no NaN: a pattern a kernel that writes nothing keeps */
            memset(o, 0xa5, bytes);
        args[a] = o;
    }
    void *block;
    if (!s_prepare(c, lib, args, &block, &h))
        return s_send(fd, &h, NULL);
    args[c->p->n_args] = block;
    fn(args);
    int rc;
    if (c->shared_out) {
        h.status = S_CH_OK;
        rc = s_send(fd, &h, NULL);
    } else if (!c->p->eval.skip_verify && !s_verify(c, args, "", &h)) {
        rc = s_send(fd, &h, NULL);
    } else {
        rc = s_timing(c, fn, args, fd);
    }
    free(block);
    return rc;
}

/* ---- the parent -------------------------------------------------------- */

/* Checks what a child wrote; fills out. Returns true when it made sense. */
static bool s_parse(const char *buf, size_t len, uint32_t want_samples,
                    kla_result_t *out)
{
    s_child_hdr_t h;
    if (len < sizeof h)
        return false;
    memcpy(&h, buf, sizeof h);
    h.msg[sizeof h.msg - 1] = '\0';
    if (h.magic != S_MAGIC || h.status > S_CH_ERROR)
        return false;
    /* The child's own time, when believable; else fork to reap stays. */
    if (isfinite(h.child_s) && h.child_s >= 0 && h.child_s <= out->run_s)
        out->run_s = h.child_s;
    if (h.status != S_CH_OK) {
        if (len != sizeof h || isnan(h.max_abs_err) || h.max_abs_err < 0)
            return false;
        out->status = h.status == S_CH_WRONG
                          ? KILN__STATUS__STATUS_WRONG_RESULT
                          : KILN__STATUS__STATUS_RUNTIME_ERROR;
        out->max_abs_err = h.max_abs_err;
        snprintf(out->error, sizeof out->error, "%s", h.msg);
        return true;
    }
    if (h.n_samples != want_samples ||
        len != sizeof h + (size_t)h.n_samples * 8)
        return false;
    if (want_samples == 0) { /* the reference run: no timing */
        out->status = KILN__STATUS__STATUS_OK;
        return true;
    }
    if (h.number < 1 || h.number > S_MAX_NUMBER)
        return false;
    out->samples = kl_xcalloc(h.n_samples, sizeof(double));
    memcpy(out->samples, buf + sizeof h, (size_t)h.n_samples * 8);
    for (uint32_t i = 0; i < h.n_samples; i++)
        if (!isfinite(out->samples[i]) || out->samples[i] < 0) {
            free(out->samples);
            out->samples = NULL;
            return false;
        }
    out->n_samples = h.n_samples;
    out->number = h.number;
    out->status = KILN__STATUS__STATUS_OK;
    kla_result_stats(out);
    return true;
}

/* Runs a child and turns its fate into out->status / out->error. */
static void s_run_child(kla_runner_t *r, s_ctx_t *ctx, bool timed,
                        kla_result_t *out)
{
    const kla_eval_t *e = &ctx->p->eval;
    size_t cap = sizeof(s_child_hdr_t) + (size_t)e->repeat * 8;
    char *buf = kl_xmalloc(cap);
    /* The reference is the naive kernel, often 10-100x slower than the
     * candidates the timeout is meant for (a naive 1024^3 matmul takes
     * tens of seconds), and it runs once per workload: it gets ten times
     * the candidate's limit, at least 10 minutes, at most a day. */
    uint64_t tmo = e->timeout_ms;
    if (!timed) {
        tmo = tmo * 10 < 600000u ? 600000u : tmo * 10;
        tmo = tmo > 86400000u ? 86400000u : tmo;
    }
    kla_sandbox_opts_t o = {.timeout_ms = (int)tmo,
                            .max_mem_bytes = r->cfg.max_mem_bytes,
                            .pin = timed ? r->cfg.pin : NULL,
                            .running = &r->running};
    kla_sandbox_result_t sr;
    if (timed && r->cfg.gate)
        kla_gate_pause(r->cfg.gate);
    kla_sandbox_run(&o, s_child, ctx, buf, cap, &sr);
    if (timed && r->cfg.gate)
        kla_gate_resume(r->cfg.gate);
    out->run_s = sr.wall_s;
    if (sr.outcome == KLA_SB_TIMEOUT) {
        out->status = KILN__STATUS__STATUS_TIMEOUT;
        snprintf(out->error, sizeof out->error, "%s", sr.error);
    } else if (sr.outcome != KLA_SB_EXITED || sr.code != 0) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "%s", sr.error);
    } else if (!s_parse(buf, sr.len, timed ? e->repeat : 0, out)) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error,
                 sr.len ? "kernel process sent a malformed result (%zu bytes)"
                        : "kernel process ended without a result (%zu bytes; "
                          "exit() inside the kernel?)",
                 sr.len);
    }
    free(buf);
}

static void s_ref_key(const kla_problem_t *p, const char *ref_so,
                      const char *ref_entry, uint8_t key[16])
{
    kl_buf_t b = {0};
    kl_buf_append(&b, (const char *)p->workload_key, 16);
    kl_buf_printf(&b, "|%llu|%d|", (unsigned long long)p->eval.seed, p->n_args);
    for (int i = 0; i < p->n_args; i++)
        kl_buf_printf(&b, "%zu%c%d,", p->nelem[i], p->is_output[i] ? 'o' : 'i',
                      (int)p->dtype[i]);
    kl_buf_printf(&b, "|%s|%s", ref_so, ref_entry);
    kl_hash128(b.data, b.len, key);
    kl_buf_free(&b);
}

static void s_fill_inputs(const kla_problem_t *p, s_ref_t *e)
{
    for (int a = 0; a < p->n_args; a++) {
        e->buf[a] = kl_xmalloc(p->nelem[a] * s_esize(p, a) + 64);
        e->bytes += p->nelem[a] * s_esize(p, a);
        if (p->is_output[a])
            continue;
        uint64_t seed_idx[2] = {p->eval.seed, (uint64_t)a};
        kl_rng_t rng;
        kl_rng_seed(&rng, kl_hash64(seed_idx, sizeof seed_idx));
        void *b = e->buf[a];
        for (size_t i = 0; i < p->nelem[a]; i++) {
            double u = kl_rng_double(&rng);
            switch (p->dtype[a]) {
            case KILN__DTYPE__DTYPE_U8:
                ((uint8_t *)b)[i] = (uint8_t)(u * 256);
                break;
            case KILN__DTYPE__DTYPE_S8:
                ((int8_t *)b)[i] = (int8_t)((int)(u * 256) - 128);
                break;
            case KILN__DTYPE__DTYPE_I32:
                ((int32_t *)b)[i] = (int32_t)(u * 2001) - 1000;
                break;
            default: /* with integers about, f32 inputs are scales */
                ((float *)b)[i] = p->any_int ? (float)(1e-3 + 9e-3 * u)
                                             : (float)(2.0 * u - 1.0);
                break;
            }
        }
    }
}

/* Runs the reference once into a shared mapping, then keeps a private
 * copy, so candidates (which inherit it) cannot change it. */
static void s_ref_run(kla_runner_t *r, const kla_problem_t *p, s_ref_t *e,
                      const char *ref_so, const char *ref_entry)
{
    float *shared[64] = {0};
    size_t sizes[64] = {0};
    for (int a = 0; a < p->n_args; a++) {
        if (!p->is_output[a])
            continue;
        sizes[a] = p->nelem[a] * s_esize(p, a);
        void *m = mmap(NULL, sizes[a], PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        shared[a] = m == MAP_FAILED ? NULL : m;
        if (!shared[a]) {
            e->failed = true;
            e->error = kl_xasprintf("mmap of %zu bytes failed", sizes[a]);
            goto done;
        }
    }
    s_ctx_t ctx = {.p = p,
                   .ref = e,
                   .shared_out = shared,
                   .so = ref_so,
                   .entry = ref_entry};
    kla_result_t res = {0};
    r->ref_runs++;
    s_run_child(r, &ctx, false, &res);
    if (res.status != KILN__STATUS__STATUS_OK) {
        e->failed = true;
        e->error = kl_xstrdup(res.error);
        goto done;
    }
    for (int a = 0; a < p->n_args && !e->failed; a++) {
        if (!p->is_output[a])
            continue;
        memcpy(e->buf[a], shared[a], sizes[a]);
        if (p->dtype[a] != KILN__DTYPE__DTYPE_F32)
            continue; /* compared exactly: no rms, no NaN to look for */
        const float *rb = e->buf[a];
        double ss = 0;
        for (size_t i = 0; i < p->nelem[a]; i++) {
            if (isnan(rb[i])) {
                e->failed = true;
                e->error = kl_xasprintf("its output %d element %zu is NaN "
                                        "(not written?)",
                                        a, i);
                break;
            }
            ss += (double)rb[i] * rb[i];
        }
        e->rms[a] = p->nelem[a] ? sqrt(ss / (double)p->nelem[a]) : 0;
    }
done:
    kla_result_clear(&res);
    for (int a = 0; a < p->n_args; a++)
        if (shared[a])
            munmap(shared[a], sizes[a]);
}

/* Finds or makes the cache entry for p (most recently used first). */
static s_ref_t *s_reference(kla_runner_t *r, const kla_problem_t *p,
                            const char *ref_so, const char *ref_entry)
{
    uint8_t key[16];
    s_ref_key(p, ref_so, ref_entry, key);
    for (s_ref_t **pp = &r->refs; *pp; pp = &(*pp)->next)
        if (memcmp((*pp)->key, key, 16) == 0) {
            s_ref_t *e = *pp;
            *pp = e->next;
            e->next = r->refs;
            r->refs = e;
            return e;
        }
    s_ref_t *e = kl_xcalloc(1, sizeof *e);
    memcpy(e->key, key, 16);
    s_fill_inputs(p, e);
    s_ref_run(r, p, e, ref_so, ref_entry);
    e->next = r->refs;
    r->refs = e;
    r->ref_bytes += e->bytes;
    /* Evict the least recently used beyond the bound (never the new one). */
    while (r->ref_bytes > r->cfg.cache_bytes && r->refs->next) {
        s_ref_t **last = &r->refs;
        while ((*last)->next)
            last = &(*last)->next;
        r->ref_bytes -= (*last)->bytes;
        s_ref_free(*last);
        *last = NULL;
    }
    return e;
}

void kla_runner_measure(kla_runner_t *r, const kla_problem_t *p,
                        const char *ref_so, const char *ref_entry,
                        const char *so, const char *entry, kla_result_t *out)
{
    memset(out, 0, sizeof *out);
    s_ref_t *ref = s_reference(r, p, ref_so, ref_entry);
    if (ref->failed) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "reference kernel failed: %s",
                 ref->error);
        return;
    }
    /* The flush buffer is mapped shared and populated once, so children
     * neither fault it in nor copy it: they only write it. Nothing reads
     * it, so a child scribbling on it harms no one. */
    if (p->eval.flush_cache && !r->flush && r->flush_n) {
        void *m = mmap(NULL, r->flush_n, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        r->flush = m == MAP_FAILED ? NULL : m;
    }
    s_ctx_t ctx = {.p = p,
                   .ref = ref,
                   .so = so,
                   .entry = entry,
                   .flush = r->flush,
                   .flush_n = r->flush_n};
    s_run_child(r, &ctx, true, out);
}
