/* cuda_worker_device.c - the GPU worker's device side
 * (kla_cuda_worker_int.h): the helper kernels, the worker's start, the
 * launches, the cached references, and the candidate's check,
 * verification and timing. The main loop is cuda_worker.c. */
#include "kla_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_cuda_api.h"
#include "kla_cuda_wire.h"
#include "kla_cuda_worker_int.h"

#define S_MAX_NUMBER (1u << 30)

/* Helper kernels, compiled by NVRTC for the device at start. kla_fill is
 * kla_cuda_input_value (cuda_device.c) element by element; kla_fill16
 * writes the same values rounded to f16 or bf16 (kla_cuda_input_bits:
 * kla_round16 is kla_cuda_half_bits). Everything runs on the legacy
 * default stream (0), so synchronous copies and memsets are ordered with
 * the launches. */
static const char s_helpers[] =
    "typedef unsigned long long u64;\n"
    "__device__ float kla_value(u64 seed, unsigned arg, u64 i)\n"
    "{\n"
    "    u64 x = seed ^ ((u64)arg << 48) ^ (i * 0x9E3779B97F4A7C15ull);\n"
    "    x += 0x9E3779B97F4A7C15ull;\n"
    "    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;\n"
    "    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;\n"
    "    x ^= x >> 31;\n"
    "    return __fsub_rn(__fmul_rn((float)(x >> 40), 1.0f / 8388608.0f),\n"
    "                     1.0f);\n"
    "}\n"
    "/* v as f16 (bf16 when bf16) bits, rounded to nearest even. */\n"
    "__device__ unsigned short kla_round16(float v, int bf16)\n"
    "{\n"
    "    unsigned x = __float_as_uint(v);\n"
    "    if (bf16) {\n"
    "        if ((x & 0x7fffffffu) > 0x7f800000u)\n"
    "            return (unsigned short)((x >> 16) | 0x40u);\n"
    "        return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);\n"
    "    }\n"
    "    unsigned sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;\n"
    "    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);\n"
    "    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);\n"
    "    if (a < 0x38800000u) {\n"
    "        if (a < 0x33000000u) return (unsigned short)sign;\n"
    "        unsigned m = (a & 0x7fffffu) | 0x800000u;\n"
    "        int shift = 126 - (int)(a >> 23);\n"
    "        unsigned q = m >> shift, r = m & ((1u << shift) - 1u),\n"
    "                 h = 1u << (shift - 1);\n"
    "        if (r > h || (r == h && (q & 1u))) q++;\n"
    "        return (unsigned short)(sign | q);\n"
    "    }\n"
    "    unsigned v16 = (((a >> 23) - 112u) << 10) | ((a & 0x7fffffu) >> 13),\n"
    "             r = a & 0x1fffu;\n"
    "    if (r > 0x1000u || (r == 0x1000u && (v16 & 1u))) v16++;\n"
    "    return (unsigned short)(sign | v16);\n"
    "}\n"
    "extern \"C\" __global__ void kla_fill(float *p, u64 n, u64 seed,\n"
    "                                     unsigned arg)\n"
    "{\n"
    "    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (u64)gridDim.x * blockDim.x)\n"
    "        p[i] = kla_value(seed, arg, i);\n"
    "}\n"
    "extern \"C\" __global__ void kla_fill16(unsigned short *p, u64 n,\n"
    "                                       u64 seed, unsigned arg, int bf16)\n"
    "{\n"
    "    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (u64)gridDim.x * blockDim.x)\n"
    "        p[i] = kla_round16(kla_value(seed, arg, i), bf16);\n"
    "}\n"
    "/* st[0]: wrong elements, st[1]: first wrong index (min), st[2]: bits\n"
    " * of the largest |out - ref| as a double (non-negative doubles order\n"
    " * like their bits; NaN counts as infinity). */\n"
    "extern \"C\" __global__ void kla_compare(const float *out,\n"
    "    const float *ref, u64 n, double rtol, double atol, u64 *st)\n"
    "{\n"
    "    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (u64)gridDim.x * blockDim.x) {\n"
    "        double r = (double)ref[i], d = (double)out[i] - r;\n"
    "        d = d < 0 ? -d : d;\n"
    "        if (d != d) d = __longlong_as_double(0x7ff0000000000000ll);\n"
    "        if (d > atol + rtol * (r < 0 ? -r : r)) {\n"
    "            atomicAdd(&st[0], 1ull);\n"
    "            atomicMin(&st[1], i);\n"
    "        }\n"
    "        if (d > 0) atomicMax(&st[2], (u64)__double_as_longlong(d));\n"
    "    }\n"
    "}\n";

/* ---- errors ---------------------------------------------------------- */

/* Records a CUDA failure of call `what` into msg; marks the context
 * poisoned when the error is sticky. Returns rc != CUDA_SUCCESS. */
bool kla_cw__fail(kla_cw__worker_t *w, CUresult rc, const char *what, char *msg,
                  size_t n)
{
    if (rc == CUDA_SUCCESS)
        return false;
    char m[256];
    snprintf(msg, n, "%s: %s", what, kla_cu_strerror(w->cu, rc, m, sizeof m));
    if (kla_cu_is_sticky(rc))
        w->poisoned = true;
    return true;
}

/* ---- start ------------------------------------------------------------- */

int kla_cw__setup(kla_cw__worker_t *w, int ordinal, char *msg, size_t n)
{
    char err[KL_ERRMSG_LEN];
    kla_devsel_t spec = {.n = 1, .id = {ordinal}};
    int cnt = 0;
    if (kla_cuda_query(&spec, &w->dev, &cnt, err) != KL_OK ||
        kla_cu_open(&w->cu, NULL, err) != KL_OK) {
        snprintf(msg, n, "%s", err);
        return -1;
    }
    CUresult rc = w->cu->DeviceGet(&w->cudev, ordinal);
    if (!rc)
        rc = w->cu->DevicePrimaryCtxRetain(&w->ctx, w->cudev);
    if (kla_cw__fail(w, rc, "cuDevicePrimaryCtxRetain", msg, n))
        return -1;
    if (kla_cw__fail(w, w->cu->CtxSetCurrent(w->ctx), "cuCtxSetCurrent", msg,
                     n))
        return -1;
    kl_nvrtc_t *nv = kl_nvrtc_default(err);
    kl_nvrtc_result_t *r = NULL;
    kl_nvrtc_opts_t o = {.arch = w->dev.arch,
                         .no_resources = true,
                         .prog_name = "kiln_helpers.cu"};
    if (!nv || kl_nvrtc_compile(nv, s_helpers, &o, &r, err) != KL_OK) {
        snprintf(msg, n, "helper kernels for %s: %s", w->dev.arch, err);
        kl_nvrtc_result_free(&r);
        return -1;
    }
    rc = w->cu->ModuleLoadData(&w->helpers, r->image);
    kl_nvrtc_result_free(&r);
    if (kla_cw__fail(w, rc, "cuModuleLoadData(helpers)", msg, n) ||
        kla_cw__fail(w,
                     w->cu->ModuleGetFunction(&w->fill, w->helpers, "kla_fill"),
                     "kla_fill", msg, n) ||
        kla_cw__fail(
            w, w->cu->ModuleGetFunction(&w->fill16, w->helpers, "kla_fill16"),
            "kla_fill16", msg, n) ||
        kla_cw__fail(
            w, w->cu->ModuleGetFunction(&w->compare, w->helpers, "kla_compare"),
            "kla_compare", msg, n) ||
        kla_cw__fail(w, w->cu->MemAlloc(&w->stats, 3 * sizeof(uint64_t)),
                     "cuMemAlloc(stats)", msg, n))
        return -1;
    w->flush_n = (size_t)(2 * (w->dev.l2_bytes ? w->dev.l2_bytes : 64 << 20));
    return kla_cw__fail(w, w->cu->MemAlloc(&w->flush, w->flush_n),
                        "cuMemAlloc(L2 flush buffer)", msg, n)
               ? -1
               : 0;
}

/* ---- launches ---------------------------------------------------------- */

static CUresult s_launch(kla_cw__worker_t *w, CUfunction f,
                         const kla_cuda_launch_t *l, void **params)
{
    return w->cu->LaunchKernel(f, l->grid[0], l->grid[1], l->grid[2],
                               l->block[0], l->block[1], l->block[2],
                               l->shared_bytes, w->stream, params, NULL);
}

static void s_grid_for(uint64_t n, kla_cuda_launch_t *l)
{
    uint64_t b = (n + 255) / 256;
    if (b > 65535)
        b = 65535;
    *l = (kla_cuda_launch_t){.grid = {(uint32_t)(b ? b : 1), 1, 1},
                             .block = {256, 1, 1}};
}

/* Fills input arg (n elements of dtype dt) with its seeded values: f32,
 * or f16 / bf16 bits of the same values rounded to nearest even. */
static CUresult s_fill(kla_cw__worker_t *w, CUdeviceptr p, uint64_t n,
                       uint64_t seed, uint32_t arg, Kiln__DType dt)
{
    kla_cuda_launch_t l;
    s_grid_for(n, &l);
    if (kla_cuda_dtype_size(dt) == 2) {
        int bf16 = dt == KILN__DTYPE__DTYPE_BF16;
        void *params[] = {&p, &n, &seed, &arg, &bf16};
        return s_launch(w, w->fill16, &l, params);
    }
    void *params[] = {&p, &n, &seed, &arg};
    return s_launch(w, w->fill, &l, params);
}

/* Bytes of argument a of q (f16 and bf16 inputs take 2 per element). */
static uint64_t s_bytes(const kla_cw_req_t *q, uint32_t a)
{
    return q->nelem[a] * kla_cuda_dtype_size((Kiln__DType)q->dtype[a]);
}

/* Compares n floats at out with ref; accumulates into st (host). */
static CUresult s_compare(kla_cw__worker_t *w, CUdeviceptr out, CUdeviceptr ref,
                          uint64_t n, double rtol, double atol, uint64_t st[3])
{
    uint64_t init[3] = {0, UINT64_MAX, 0};
    CUresult rc = w->cu->MemcpyHtoD(w->stats, init, sizeof init);
    kla_cuda_launch_t l;
    s_grid_for(n, &l);
    void *params[] = {&out, &ref, &n, &rtol, &atol, &w->stats};
    if (!rc)
        rc = s_launch(w, w->compare, &l, params);
    if (!rc)
        rc = w->cu->StreamSynchronize(w->stream);
    uint64_t got[3];
    if (!rc)
        rc = w->cu->MemcpyDtoH(got, w->stats, sizeof got);
    if (!rc) {
        st[0] += got[0];
        st[1] = got[1] < st[1] ? got[1] : st[1];
        st[2] = got[2] > st[2] ? got[2] : st[2];
    }
    return rc;
}

/* Loads the cubin of descriptor fd and finds entry. */
static int s_load(kla_cw__worker_t *w, int fd, const char *entry, CUmodule *m,
                  CUfunction *f, char *msg, size_t n)
{
    char *img = NULL;
    size_t len = 0;
    if (kla_cw__read_cubin(fd, &img, &len, msg, n) != 0)
        return -1;
    CUresult rc = w->cu->ModuleLoadData(m, img);
    free(img);
    if (kla_cw__fail(w, rc, "cuModuleLoadData", msg, n))
        return -1;
    rc = w->cu->ModuleGetFunction(f, *m, entry);
    if (rc != CUDA_SUCCESS) {
        kla_cw__fail(w, rc, "cuModuleGetFunction", msg, n);
        size_t k = strlen(msg);
        snprintf(msg + k, n - k, ": no kernel '%.200s' in the cubin", entry);
        w->cu->ModuleUnload(*m);
        return -1;
    }
    return 0;
}

/* ---- the reference ----------------------------------------------------- */

static void s_ref_free(kla_cw__worker_t *w, kla_cw__ref_t *e)
{
    for (int a = 0; a < e->n_args; a++)
        if (e->buf[a])
            w->cu->MemFree(e->buf[a]);
    memset(e, 0, sizeof *e);
}

static void s_ref_make(kla_cw__worker_t *w, const kla_cw_req_t *q, int ref_fd,
                       kla_cw__ref_t *e)
{
    memcpy(e->key, q->ref_key, 16);
    e->n_args = (int)q->n_args;
    char *m = e->error;
    size_t mn = sizeof e->error;
    uint64_t nout = 0;
    int first_out = -1;
    for (uint32_t a = 0; a < q->n_args; a++) {
        if (kla_cw__fail(w, w->cu->MemAlloc(&e->buf[a], s_bytes(q, a) + 256),
                         "cuMemAlloc", m, mn))
            goto bad;
        e->bytes += s_bytes(q, a);
        CUresult rc =
            q->is_output[a]
                ? w->cu->MemsetD32(e->buf[a], 0x7fc00000u, q->nelem[a])
                : s_fill(w, e->buf[a], q->nelem[a], q->seed, a,
                         (Kiln__DType)q->dtype[a]);
        if (kla_cw__fail(w, rc, "making the inputs", m, mn))
            goto bad;
        if (q->is_output[a] && first_out < 0) {
            first_out = (int)a;
            nout = q->nelem[a];
        }
    }
    CUmodule mod;
    CUfunction f;
    if (s_load(w, ref_fd, q->ref_entry, &mod, &f, m, mn) != 0)
        goto bad;
    kla_cuda_launch_t l;
    kla_cuda_ref_launch(nout, &l);
    void *params[64];
    for (uint32_t a = 0; a < q->n_args; a++)
        params[a] = &e->buf[a];
    CUresult rc = s_launch(w, f, &l, params);
    if (!rc)
        rc = w->cu->StreamSynchronize(w->stream);
    if (!w->poisoned)
        w->cu->ModuleUnload(mod);
    if (kla_cw__fail(w, rc, "running it", m, mn))
        goto bad;
    /* An element the reference did not write is still NaN: compare the
     * outputs with themselves. */
    uint64_t st[3] = {0, UINT64_MAX, 0};
    for (uint32_t a = 0; a < q->n_args; a++)
        if (q->is_output[a] &&
            kla_cw__fail(
                w, s_compare(w, e->buf[a], e->buf[a], q->nelem[a], 0, 0, st),
                "checking its output", m, mn))
            goto bad;
    if (st[0]) {
        snprintf(m, mn,
                 "%llu output elements are NaN (element %llu first: "
                 "not written?)",
                 (unsigned long long)st[0], (unsigned long long)st[1]);
        goto bad;
    }
    /* The scale the comparison allows rounding against (cpu/kla_runner.h). */
    for (uint32_t a = 0; a < q->n_args; a++) {
        if (!q->is_output[a] || !q->nelem[a])
            continue;
        float *host = malloc(q->nelem[a] * 4);
        if (!host) {
            snprintf(m, mn, "out of host memory for its output");
            goto bad;
        }
        rc = w->cu->MemcpyDtoH(host, e->buf[a], q->nelem[a] * 4);
        double ss = 0;
        for (uint64_t i = 0; !rc && i < q->nelem[a]; i++)
            ss += (double)host[i] * host[i];
        free(host);
        if (kla_cw__fail(w, rc, "reading its output", m, mn))
            goto bad;
        e->rms[a] = sqrt(ss / (double)q->nelem[a]);
    }
    return;
bad:
    e->failed = true;
}

/* Finds or makes the cached reference of q (least recently used out). */
kla_cw__ref_t *kla_cw__reference(kla_cw__worker_t *w, const kla_cw_req_t *q,
                                 int ref_fd)
{
    kla_cw__ref_t *victim = &w->refs[0];
    for (int i = 0; i < KLA_CW__REFS; i++) {
        kla_cw__ref_t *e = &w->refs[i];
        if (e->used && memcmp(e->key, q->ref_key, 16) == 0) {
            e->used = ++w->tick;
            return e;
        }
        if (e->used < victim->used)
            victim = e;
    }
    s_ref_free(w, victim);
    s_ref_make(w, q, ref_fd, victim);
    victim->used = ++w->tick;
    return victim;
}

/* ---- the candidate ----------------------------------------------------- */

/* Launches number times between two events, after a flush when asked. */
static CUresult s_sample(kla_cw__worker_t *w, CUfunction f,
                         const kla_cuda_launch_t *l, void **params,
                         uint32_t number, int flush_val, double *sec)
{
    CUresult rc = CUDA_SUCCESS;
    if (flush_val >= 0)
        rc = w->cu->MemsetD8Async(w->flush, (unsigned char)flush_val,
                                  w->flush_n, w->stream);
    if (!rc)
        rc = w->cu->EventRecord(w->ev[0], w->stream);
    for (uint32_t i = 0; !rc && i < number; i++)
        rc = s_launch(w, f, l, params);
    if (!rc)
        rc = w->cu->EventRecord(w->ev[1], w->stream);
    if (!rc)
        rc = w->cu->EventSynchronize(w->ev[1]);
    float ms = 0;
    if (!rc)
        rc = w->cu->EventElapsedTime(&ms, w->ev[0], w->ev[1]);
    *sec = (double)ms * 1e-3;
    return rc;
}

/* Grows number, then takes the samples (seconds per launch); *launches
 * counts the launches made. */
static void s_timing(kla_cw__worker_t *w, const kla_cw_req_t *q, CUfunction f,
                     const kla_cuda_launch_t *l, void **params, kla_cw_res_t *h,
                     double **samples, uint64_t *launches)
{
    uint32_t number = q->number ? q->number : 1;
    double want = q->min_repeat_ms / 1000.0, t = 0;
    CUresult rc = CUDA_SUCCESS;
    while (want > 0 && !rc) {
        rc = s_sample(w, f, l, params, number, -1, &t);
        *launches += number;
        if (rc || t >= want || number >= S_MAX_NUMBER)
            break;
        double grow = t > 0 ? want / t * 1.1 : 100;
        grow = grow < 2 ? 2 : grow > 100 ? 100 : grow;
        double next = ceil(number * grow);
        number = next > S_MAX_NUMBER ? S_MAX_NUMBER : (uint32_t)next;
    }
    double *s = kl_xcalloc(q->repeat, sizeof(double));
    for (uint32_t r = 0; !rc && r < q->repeat; r++) {
        rc = s_sample(w, f, l, params, number, q->flush ? (int)(r & 0xff) : -1,
                      &t);
        s[r] = t / number;
        *launches += number;
    }
    if (kla_cw__fail(w, rc, "timing", h->msg, sizeof h->msg)) {
        h->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
        free(s);
        return;
    }
    h->status = KILN__STATUS__STATUS_OK;
    h->number = number;
    h->n_samples = q->repeat;
    *samples = s;
}

/* Compares every output with the reference; false (and h filled, its
 * message starting with `when`) when wrong or when the comparison
 * failed. */
static bool s_verify(kla_cw__worker_t *w, const kla_cw_req_t *q,
                     const kla_cw__ref_t *ref, CUdeviceptr *out,
                     const char *when, kla_cw_res_t *h)
{
    uint64_t total = 0, bad = 0, maxbits = 0;
    for (uint32_t a = 0; a < q->n_args; a++) {
        if (!q->is_output[a])
            continue;
        uint64_t st[3] = {0, UINT64_MAX, 0}; /* count, first, max bits */
        /* |out - ref| > atol + rtol (|ref| + rms): the kernel's test with
         * rtol rms folded into atol. */
        CUresult rc = s_compare(w, out[a], ref->buf[a], q->nelem[a], q->rtol,
                                q->atol + q->rtol * ref->rms[a], st);
        if (kla_cw__fail(w, rc, "comparing the output", h->msg,
                         sizeof h->msg)) {
            h->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
            return false;
        }
        if (st[0] && !bad) {
            float got = NAN, want = NAN;
            w->cu->MemcpyDtoH(&got, out[a] + st[1] * 4, 4);
            w->cu->MemcpyDtoH(&want, ref->buf[a] + st[1] * 4, 4);
            snprintf(h->msg, sizeof h->msg,
                     "%soutput %u element %llu is %g, expected %g (rtol %g "
                     "of |expected| + rms %g, atol %g)",
                     when, a, (unsigned long long)st[1], (double)got,
                     (double)want, q->rtol, ref->rms[a], q->atol);
        }
        bad += st[0];
        total += q->nelem[a];
        maxbits = st[2] > maxbits ? st[2] : maxbits;
    }
    memcpy(&h->max_abs_err, &maxbits, sizeof maxbits);
    if (!bad)
        return true;
    size_t len = strlen(h->msg);
    snprintf(h->msg + len, sizeof h->msg - len,
             "; %llu of %llu elements wrong, max abs error %g",
             (unsigned long long)bad, (unsigned long long)total,
             h->max_abs_err);
    h->status = KILN__STATUS__STATUS_WRONG_RESULT;
    return false;
}

/* The check after timing: every timed launch writes the same outputs, so
 * comparing the last one's catches, with one more compare and nothing
 * recomputed, a kernel whose first launch was right and whose later ones
 * are not (a __device__ counter, state left in a buffer). When wrong,
 * the samples are dropped and h says so. */
static void s_verify_after(kla_cw__worker_t *w, const kla_cw_req_t *q,
                           const kla_cw__ref_t *ref, CUdeviceptr *out,
                           uint64_t launches, kla_cw_res_t *h, double **samples)
{
    char when[96];
    snprintf(when, sizeof when,
             "check after timing (output of launch %llu; the first "
             "launch's was right): ",
             (unsigned long long)launches);
    if (s_verify(w, q, ref, out, when, h))
        return;
    free(*samples);
    *samples = NULL;
    h->n_samples = 0;
    h->number = 0;
}

/* Reads the loaded function's resources and checks the launch. */
static int s_check(kla_cw__worker_t *w, CUfunction f,
                   const kla_cuda_launch_t *l, kla_cw_res_t *h)
{
    int v[4] = {0};
    static const int attrs[4] = {CU_FUNC_ATTRIBUTE_NUM_REGS,
                                 CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                 CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
                                 CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK};
    for (int i = 0; i < 4; i++)
        if (kla_cw__fail(w,
                         w->cu->FuncGetAttribute(
                             &v[i], (CUfunction_attribute)attrs[i], f),
                         "cuFuncGetAttribute", h->msg, sizeof h->msg))
            return -1;
    kla_cuda_res_t res = {.regs = v[0],
                          .smem_static = v[1],
                          .local_bytes = v[2],
                          .max_threads = v[3]};
    char err[KL_ERRMSG_LEN];
    if (kla_cuda_check_launch(&w->dev, &res, l, err) != KL_OK) {
        snprintf(h->msg, sizeof h->msg, "launch exceeds the device: %s", err);
        return -1;
    }
    /* Above the default 48 KiB, dynamic shared memory must be opted in. */
    if (l->shared_bytes &&
        (uint64_t)v[1] + l->shared_bytes > w->dev.max_shared_per_block &&
        kla_cw__fail(w,
                     w->cu->FuncSetAttribute(
                         f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         (int)l->shared_bytes),
                     "cuFuncSetAttribute(max dynamic shared)", h->msg,
                     sizeof h->msg))
        return -1;
    return 0;
}

void kla_cw__candidate(kla_cw__worker_t *w, const kla_cw_req_t *q,
                       const kla_cw__ref_t *ref, int fd, kla_cw_res_t *h,
                       double **samples)
{
    h->status = KILN__STATUS__STATUS_RUNTIME_ERROR;
    CUmodule mod;
    CUfunction f;
    if (s_load(w, fd, q->entry, &mod, &f, h->msg, sizeof h->msg) != 0)
        return;
    kla_cuda_launch_t l;
    memcpy(l.grid, q->grid, sizeof l.grid);
    memcpy(l.block, q->block, sizeof l.block);
    l.shared_bytes = q->shared_bytes;
    CUdeviceptr out[64] = {0};
    void *params[64];
    CUresult rc = CUDA_SUCCESS;
    uint64_t launches = 1; /* the verified one, then the timed ones */
    if (s_check(w, f, &l, h) != 0)
        goto done;
    /* Inputs are copies of the cached ones (a candidate that writes its
     * inputs harms no one else); outputs start as NaN. */
    for (uint32_t a = 0; a < q->n_args && !rc; a++) {
        rc = w->cu->MemAlloc(&out[a], s_bytes(q, a) + 256);
        if (!rc && q->is_output[a])
            rc = w->cu->MemsetD32(out[a], 0x7fc00000u, q->nelem[a]);
        else if (!rc)
            rc = w->cu->MemcpyDtoD(out[a], ref->buf[a], s_bytes(q, a));
        params[a] = &out[a];
    }
    if (kla_cw__fail(w, rc, "argument buffers", h->msg, sizeof h->msg))
        goto done;
    rc = s_launch(w, f, &l, params);
    if (kla_cw__fail(w, rc, "cuLaunchKernel", h->msg, sizeof h->msg) ||
        kla_cw__fail(w, w->cu->StreamSynchronize(w->stream), "kernel", h->msg,
                     sizeof h->msg))
        goto done;
    if (!q->skip_verify && !s_verify(w, q, ref, out, "", h))
        goto done;
    s_timing(w, q, f, &l, params, h, samples, &launches);
    if (h->status == KILN__STATUS__STATUS_OK && !q->skip_verify)
        s_verify_after(w, q, ref, out, launches, h, samples);
done:
    if (w->poisoned)
        return; /* the process ends; nothing can be freed */
    for (uint32_t a = 0; a < q->n_args; a++)
        if (out[a])
            w->cu->MemFree(out[a]);
    w->cu->ModuleUnload(mod);
}

const char *kla_cuda_helpers_source(void)
{
    return s_helpers;
}
