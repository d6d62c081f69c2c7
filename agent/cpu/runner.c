/* runner.c - the trusted half of the candidate runner: the runner, the
 * reference cache (inputs made once, the reference run once, its outputs
 * in the agent's own memory), and measure. One run in the sandbox is
 * runner_sandbox.c's; the problem and evaluator from the wire are the
 * agent's (measure.c). */
#include "kla_runner_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_sandbox.h"

/* Bytes per element of argument a (a problem made by hand, with esize
 * left 0, is f32). */
size_t kla_runner__esize(const kla_problem_t *p, int a)
{
    return p->esize[a] ? p->esize[a] : sizeof(float);
}

/* ---- memory the agent owns --------------------------------------------- */

int kla_runner__memfd(const char *name, uint64_t bytes)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)(bytes ? bytes : KLA_RUNNER__PAGE)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* No process may resize fd again (a shrunk mapping would fault the
 * agent), nor change the seals; write too when writes is false. */
int kla_runner__seal(int fd, bool writes)
{
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (!writes)
        seals |= F_SEAL_WRITE;
    /* The write seal waits for pages still referenced (a just-dropped
     * mapping, the kernel's per-CPU page batches) and can give up with
     * EBUSY under load: try again, and never go on unsealed. */
    for (int i = 0; i < 50; i++) {
        if (fcntl(fd, F_ADD_SEALS, seals) == 0)
            return 0;
        if (errno != EBUSY)
            return -1;
        usleep(20 * 1000);
    }
    return -1;
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
    r->flush_n = (r->flush_n + KLA_RUNNER__PAGE - 1) / KLA_RUNNER__PAGE *
                 KLA_RUNNER__PAGE;
    r->host = -1;
    r->flush_fd = -1;
    kla_cores_t mine;
    kla_cores_affinity(&mine);
    r->ncpu = r->cfg.pin && r->pin.n > 0 ? r->pin.n : mine.n;
    const char *wp = getenv("OMP_WAIT_POLICY");
    r->spin_unbounded =
        getenv("GOMP_SPINCOUNT") || (wp && strcasecmp(wp, "active") == 0);
    if (r->ncpu < 1)
        r->ncpu = 1;
    atomic_init(&r->running, 0);
    *out = r;
    return KL_OK;
}

static void s_ref_free(kla_runner__ref_t *e)
{
    for (int i = 0; i < 64; i++)
        free(e->buf[i]);
    if (e->out_map)
        munmap(e->out_map, e->out_bytes ? e->out_bytes : KLA_RUNNER__PAGE);
    if (e->in_fd >= 0)
        close(e->in_fd);
    if (e->out_fd >= 0)
        close(e->out_fd);
    free(e->error);
    free(e);
}

void kla_runner_destroy(kla_runner_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_runner_t *r = *self_p;
    kla_runner__host_stop(r);
    for (kla_runner__ref_t *e = r->refs, *next; e; e = next) {
        next = e->next;
        s_ref_free(e);
    }
    if (r->flush_fd >= 0)
        close(r->flush_fd);
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

/* ---- the reference cache ------------------------------------------------ */

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

/* Where in its page an argument starts: as the C library's malloc and
 * aligned_alloc(64) placed them when kernels ran in a fork of the agent
 * (16 bytes past a page for inputs, 64 for outputs), so that latencies
 * stay comparable with the records of a store measured then. Exactly
 * page-aligned buffers measured a naive 256^3 matmul's loop orders up to
 * 30 % apart from that (aligned vector loads on one side, 4 KiB aliasing
 * between A, B and C on the other). */
#define S_IN_SKEW 16u
#define S_OUT_SKEW 64u

/* Lays the arguments out (each in pages of its own at its skew, inputs and
 * outputs in a buffer each), makes the buffers and fills the inputs.
 * false with e->error. */
static bool s_ref_buffers(const kla_problem_t *p, kla_runner__ref_t *e)
{
    for (int a = 0; a < p->n_args; a++) {
        uint64_t n = p->nelem[a] * kla_runner__esize(p, a);
        uint64_t *at = p->is_output[a] ? &e->out_bytes : &e->in_bytes;
        uint64_t skew = p->is_output[a] ? S_OUT_SKEW : S_IN_SKEW;
        e->off[a] = *at + skew;
        *at += (n + skew + KLA_RUNNER__PAGE - 1) / KLA_RUNNER__PAGE *
               KLA_RUNNER__PAGE;
        e->bytes += n;
        if (p->is_output[a])
            e->buf[a] = kl_xmalloc(n + 64);
    }
    e->in_fd = kla_runner__memfd("kiln-inputs", e->in_bytes);
    e->out_fd = kla_runner__memfd("kiln-outputs", e->out_bytes);
    size_t in_map = e->in_bytes ? e->in_bytes : KLA_RUNNER__PAGE;
    char *in = e->in_fd >= 0 ? mmap(NULL, in_map, PROT_READ | PROT_WRITE,
                                    MAP_SHARED, e->in_fd, 0)
                             : MAP_FAILED;
    void *om = e->out_fd >= 0
                   ? mmap(NULL, e->out_bytes ? e->out_bytes : KLA_RUNNER__PAGE,
                          PROT_READ | PROT_WRITE, MAP_SHARED, e->out_fd, 0)
                   : MAP_FAILED;
    e->out_map = om == MAP_FAILED ? NULL : om;
    if (in == MAP_FAILED || !e->out_map) {
        e->error =
            kl_xasprintf("cannot make buffers of %llu + %llu bytes: %s",
                         (unsigned long long)e->in_bytes,
                         (unsigned long long)e->out_bytes, strerror(errno));
        if (in != MAP_FAILED)
            munmap(in, in_map);
        return false;
    }
    for (int a = 0; a < p->n_args; a++) {
        if (p->is_output[a])
            continue;
        uint64_t seed_idx[2] = {p->eval.seed, (uint64_t)a};
        kl_rng_t rng;
        kl_rng_seed(&rng, kl_hash64(seed_idx, sizeof seed_idx));
        void *b = in + e->off[a];
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
    /* No writable mapping may remain for the write seal. */
    munmap(in, in_map);
    if (kla_runner__seal(e->in_fd, false) != 0 ||
        kla_runner__seal(e->out_fd, true) != 0) {
        e->error = kl_xasprintf("cannot seal the kernel's buffers: %s (a "
                                "candidate could change them for the next)",
                                strerror(errno));
        return false;
    }
    return true;
}

/* Runs the reference once (in the sandbox, like any candidate: it is
 * the tenant's code too) and keeps its outputs in the agent's memory. */
static void s_ref_run(kla_runner_t *r, const kla_problem_t *p,
                      kla_runner__ref_t *e, const char *ref_so,
                      const char *ref_entry)
{
    kla_result_t res = {0};
    r->ref_runs++;
    kla_runner__run(r, p, e, ref_so, ref_entry, false, &res);
    if (res.status != KILN__STATUS__STATUS_OK) {
        e->failed = true;
        e->error = kl_xstrdup(res.error);
        kla_result_clear(&res);
        return;
    }
    kla_result_clear(&res);
    for (int a = 0; a < p->n_args && !e->failed; a++) {
        if (!p->is_output[a] || p->dtype[a] != KILN__DTYPE__DTYPE_F32)
            continue; /* integers are compared exactly: no rms, no NaN */
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
}

/* Finds or makes the cache entry for p (most recently used first). */
static kla_runner__ref_t *s_reference(kla_runner_t *r, const kla_problem_t *p,
                                      const char *ref_so, const char *ref_entry)
{
    uint8_t key[16];
    s_ref_key(p, ref_so, ref_entry, key);
    for (kla_runner__ref_t **pp = &r->refs; *pp; pp = &(*pp)->next)
        if (memcmp((*pp)->key, key, 16) == 0) {
            kla_runner__ref_t *e = *pp;
            *pp = e->next;
            e->next = r->refs;
            r->refs = e;
            return e;
        }
    kla_runner__ref_t *e = kl_xcalloc(1, sizeof *e);
    e->in_fd = e->out_fd = -1;
    memcpy(e->key, key, 16);
    if (!s_ref_buffers(p, e))
        e->failed = true;
    else
        s_ref_run(r, p, e, ref_so, ref_entry);
    e->next = r->refs;
    r->refs = e;
    r->ref_bytes += e->bytes;
    /* Evict the least recently used beyond the bound (never the new one). */
    while (r->ref_bytes > r->cfg.cache_bytes && r->refs->next) {
        kla_runner__ref_t **last = &r->refs;
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
    kla_runner__ref_t *ref = s_reference(r, p, ref_so, ref_entry);
    if (ref->failed) {
        out->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        snprintf(out->error, sizeof out->error, "reference kernel failed: %s",
                 ref->error);
        return;
    }
    if (r->cfg.gate)
        kla_gate_pause(r->cfg.gate);
    kla_runner__run(r, p, ref, so, entry, true, out);
    if (r->cfg.gate)
        kla_gate_resume(r->cfg.gate);
}
