/* cuda_emu.c - see cuda_emu.h. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_emu.h"
#include "kl_check.h"
#include "kl_err.h"
#include "kl_util.h"

static const char *s_prelude =
    "#include <pthread.h>\n"
    "#include <math.h>\n"
    "#include <string.h>\n"
    "struct kl_dim3 { unsigned x, y, z; };\n"
    "static thread_local kl_dim3 threadIdx;\n"
    "static kl_dim3 blockIdx, blockDim, gridDim;\n"
    "static pthread_barrier_t kl_emu_bar;\n"
    "static inline void __syncthreads() { pthread_barrier_wait(&kl_emu_bar); "
    "}\n"
    "static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); "
    "return f; }\n"
    /* What the agent's helper kernels use (kla_cuda_helpers_source): the
     * host's float arithmetic rounds to nearest like the _rn intrinsics. */
    "static inline unsigned __float_as_uint(float f) { unsigned u; "
    "memcpy(&u, &f, 4); return u; }\n"
    "static inline float __fmul_rn(float a, float b) { return a * b; }\n"
    "static inline float __fsub_rn(float a, float b) { return a - b; }\n"
    "static inline double __longlong_as_double(long long i) { double d; "
    "memcpy(&d, &i, 8); return d; }\n"
    "static inline long long __double_as_longlong(double d) { long long i; "
    "memcpy(&i, &d, 8); return i; }\n"
    "typedef unsigned long long kl_emu_u64;\n"
    "static inline kl_emu_u64 atomicAdd(kl_emu_u64 *p, kl_emu_u64 v) "
    "{ return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }\n"
    "static inline kl_emu_u64 atomicMin(kl_emu_u64 *p, kl_emu_u64 v) {\n"
    "    kl_emu_u64 o = __atomic_load_n(p, __ATOMIC_SEQ_CST);\n"
    "    while (v < o && !__atomic_compare_exchange_n(p, &o, v, false,\n"
    "           __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}\n"
    "    return o;\n"
    "}\n"
    "static inline kl_emu_u64 atomicMax(kl_emu_u64 *p, kl_emu_u64 v) {\n"
    "    kl_emu_u64 o = __atomic_load_n(p, __ATOMIC_SEQ_CST);\n"
    "    while (v > o && !__atomic_compare_exchange_n(p, &o, v, false,\n"
    "           __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}\n"
    "    return o;\n"
    "}\n"
    "struct float4 { float x, y, z, w; };\n"
    "static inline float4 make_float4(float a, float b, float c, float d) "
    "{ return float4{a, b, c, d}; }\n"
    "#define KL_CUDA_EMU 1\n"
    "#define __device__\n"
    "#define __forceinline__ inline\n"
    "#define __global__\n"
    "#define __launch_bounds__(n)\n"
    "#define __restrict__ __restrict\n"
    "#define __shared__ static\n"
    "#define __align__(n) __attribute__((aligned(n)))\n"
    /* A kernel argument of any pointer type (f32 or 16-bit tensors). */
    "struct kl_emu_arg { void *p; template <class T> operator T *() const "
    "{ return (T *)p; } };\n"
    /* mma.sync m16n8k16 row.col f32 += f16|bf16 x f16|bf16, per the PTX
     * ISA fragments: every lane of the warp deposits its A (4 registers)
     * and B (2) fragments, the warp meets at a barrier, each lane computes
     * its 4 C/D elements from the whole warp's fragments, and a second
     * barrier keeps the exchange alive until all have read it. Warps are
     * the block's threads 32 at a time, as on the GPU. */
    "static pthread_barrier_t kl_emu_wbar[32];\n"
    "static unsigned kl_emu_xa[32][32][4], kl_emu_xb[32][32][2];\n"
    "static inline float kl_emu_h2f(int bf16, unsigned h) {\n"
    "    unsigned x;\n"
    "    if (bf16) { x = h << 16; }\n"
    "    else {\n"
    "        unsigned s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, "
    "m = h & 0x3ff;\n"
    "        if (e == 0x1f) x = s | 0x7f800000u | (m << 13);\n"
    "        else if (e) x = s | ((e + 112) << 23) | (m << 13);\n"
    "        else { float f = (float)m * 0x1p-24f; memcpy(&x, &f, 4); "
    "x |= s; }\n"
    "    }\n"
    "    float f; memcpy(&f, &x, 4); return f;\n"
    "}\n"
    "static void kl_emu_mma_m16n8k16(int bf16, float *d, const unsigned *a,\n"
    "                                const unsigned *b) {\n"
    "    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "    memcpy(kl_emu_xa[w][lane], a, 16);\n"
    "    memcpy(kl_emu_xb[w][lane], b, 8);\n"
    "    pthread_barrier_wait(&kl_emu_wbar[w]);\n"
    "    unsigned g = lane / 4, t = lane % 4;\n"
    "    for (unsigned i = 0; i < 4; i++) {\n"
    "        unsigned row = g + i / 2 * 8, col = t * 2 + i % 2;\n"
    "        float acc = d[i];\n"
    "        for (unsigned k = 0; k < 16; k++) {\n"
    /* A(row, k): lane 4 (row % 8) + (k % 8) / 2, register row / 8 +
     * 2 (k / 8), half k % 2; B(k, col): lane 4 col + (k % 8) / 2,
     * register k / 8, half k % 2 (the lower half holds the even index). */
    "            unsigned ra = kl_emu_xa[w][row % 8 * 4 + k % 8 / 2]"
    "[row / 8 + 2 * (k / 8)];\n"
    "            unsigned rb = kl_emu_xb[w][col * 4 + k % 8 / 2][k / 8];\n"
    "            acc += kl_emu_h2f(bf16, ra >> (16 * (k % 2)) & 0xffffu) *\n"
    "                   kl_emu_h2f(bf16, rb >> (16 * (k % 2)) & 0xffffu);\n"
    "        }\n"
    "        d[i] = acc;\n"
    "    }\n"
    "    pthread_barrier_wait(&kl_emu_wbar[w]);\n"
    "}\n"
    /* ldmatrix.sync.aligned.m8n8.xN.shared.b16: lanes 8j..8j+7 give the
     * addresses of the 8 rows of matrix j (8 16-bit elements each); lane
     * 4g+t receives row g, elements 2t and 2t+1 of matrix j in r[j]. */
    "static const unsigned short *kl_emu_xp[32][32];\n"
    "static void kl_emu_ldmatrix(int x, unsigned *r, const unsigned short *p) "
    "{\n"
    "    unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "    kl_emu_xp[w][lane] = p;\n"
    "    pthread_barrier_wait(&kl_emu_wbar[w]);\n"
    "    unsigned g = lane / 4, t = lane % 4;\n"
    "    for (int j = 0; j < x; j++) {\n"
    "        const unsigned short *row = kl_emu_xp[w][j * 8 + g];\n"
    "        r[j] = row[2 * t] | (unsigned)row[2 * t + 1] << 16;\n"
    "    }\n"
    "    pthread_barrier_wait(&kl_emu_wbar[w]);\n"
    "}\n"
    "struct kl_emu_job { void (*fn)(void **); void **a; kl_dim3 t; };\n"
    "static void *kl_emu_thread(void *p) {\n"
    "    kl_emu_job *j = (kl_emu_job *)p;\n"
    "    threadIdx = j->t;\n"
    "    j->fn(j->a);\n"
    "    return 0;\n"
    "}\n"
    "static int kl_emu_run(void (*fn)(void **), void **a, const long *g,\n"
    "                      const long *b) {\n"
    "    long n = b[0] * b[1] * b[2];\n"
    "    pthread_t *th = new pthread_t[n];\n"
    "    kl_emu_job *jobs = new kl_emu_job[n];\n"
    "    pthread_attr_t at;\n"
    "    pthread_attr_init(&at);\n"
    "    pthread_attr_setstacksize(&at, 1 << 18);\n"
    "    int rc = 0;\n"
    "    gridDim = kl_dim3{(unsigned)g[0], (unsigned)g[1], (unsigned)g[2]};\n"
    "    blockDim = kl_dim3{(unsigned)b[0], (unsigned)b[1], (unsigned)b[2]};\n"
    "    for (long bz = 0; bz < g[2]; bz++)\n"
    "    for (long by = 0; by < g[1]; by++)\n"
    "    for (long bx = 0; bx < g[0]; bx++) {\n"
    "        blockIdx = kl_dim3{(unsigned)bx, (unsigned)by, (unsigned)bz};\n"
    "        pthread_barrier_init(&kl_emu_bar, 0, (unsigned)n);\n"
    "        for (long w = 0; n % 32 == 0 && w < n / 32 && w < 32; w++)\n"
    "            pthread_barrier_init(&kl_emu_wbar[w], 0, 32);\n"
    "        for (long i = 0; i < n; i++) {\n"
    "            jobs[i].fn = fn; jobs[i].a = a;\n"
    "            jobs[i].t = kl_dim3{(unsigned)(i % b[0]),\n"
    "                (unsigned)(i / b[0] % b[1]), (unsigned)(i / b[0] / "
    "b[1])};\n"
    "            if (pthread_create(&th[i], &at, kl_emu_thread, &jobs[i]))\n"
    "                rc = -1;\n"
    "        }\n"
    "        for (long i = 0; i < n; i++) pthread_join(th[i], 0);\n"
    "        pthread_barrier_destroy(&kl_emu_bar);\n"
    "        for (long w = 0; n % 32 == 0 && w < n / 32 && w < 32; w++)\n"
    "            pthread_barrier_destroy(&kl_emu_wbar[w]);\n"
    "    }\n"
    "    pthread_attr_destroy(&at);\n"
    "    delete[] th; delete[] jobs;\n"
    "    return rc;\n"
    "}\n";

/* Compiles the prelude and b's text (taken) into a shared object. */
static int s_compile(kl_buf_t *b, const char *workdir, char **so_path,
                     char *err);

int kl_emu_build_text(const char *text, const char *workdir, char **so_path,
                      char *err)
{
    kl_buf_t b = {0};
    kl_buf_puts(&b, s_prelude);
    kl_buf_puts(&b, text);
    return s_compile(&b, workdir, so_path, err);
}

int kl_emu_build(const kl_kernel_t *ks, int n, const kl_workload_t *const *ws,
                 const char *workdir, char **so_path, char *err)
{
    kl_buf_t b = {0};
    kl_buf_puts(&b, s_prelude);
    for (int i = 0; i < n; i++) {
        kl_buf_puts(&b, ks[i].source);
        /* A thunk with a uniform signature per kernel, and its launcher. */
        kl_buf_printf(&b, "static void kl_emu_thunk_%s(void **a) { %s(",
                      ks[i].entry, ks[i].entry);
        for (int t = 0; t < ws[i]->ntensors; t++)
            kl_buf_printf(&b, "%skl_emu_arg{a[%d]}", t ? ", " : "", t);
        kl_buf_printf(&b,
                      "); }\nextern \"C\" int kl_emu_%s(void **a, const long "
                      "*g, const long *b) { return kl_emu_run("
                      "kl_emu_thunk_%s, a, g, b); }\n",
                      ks[i].entry, ks[i].entry);
    }
    return s_compile(&b, workdir, so_path, err);
}

static int s_compile(kl_buf_t *b, const char *workdir, char **so_path,
                     char *err)
{
    static int seq;
    char *src = kl_xasprintf("%s/emu_%d_%d.cc", workdir, (int)getpid(), seq);
    char *so = kl_xasprintf("%s/emu_%d_%d.so", workdir, (int)getpid(), seq);
    char *log = kl_xasprintf("%s/emu_%d_%d.log", workdir, (int)getpid(), seq);
    seq++;
    int rc = kl_write_file(src, b->data, b->len, err);
    kl_buf_free(b);
    if (!rc) {
        char *cmd = kl_xasprintf(
            "c++ -std=c++17 -O1 -fno-strict-aliasing -w -shared -fPIC "
            "-pthread -o %s %s >%s 2>&1",
            so, src, log);
        if (system(cmd) != 0) {
            char *out = NULL;
            kl_read_file(log, &out, NULL, NULL);
            rc = kl_seterr(err, KL_ERR_COMPILE, "c++ %s: %.300s", src,
                           out ? out : "");
            free(out);
        }
        free(cmd);
    }
    unlink(log);
    free(log);
    if (!rc)
        unlink(src);
    free(src);
    if (rc) {
        free(so);
        return rc;
    }
    *so_path = so;
    return KL_OK;
}

int kl_emu_check(const char *so_path, const kl_kernel_t *k,
                 const kl_workload_t *w, uint64_t seed, double rtol,
                 double atol, char *err)
{
    void *dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return kl_seterr(err, KL_ERR_IO, "dlopen %s: %s", so_path, dlerror());
    char sym[160];
    snprintf(sym, sizeof sym, "kl_emu_%s", k->entry);
    typedef int (*launch_fn)(void **, const long *, const long *);
    launch_fn fn;
    *(void **)&fn = dlsym(dl, sym);
    if (!fn) {
        dlclose(dl);
        return kl_seterr(err, KL_ERR_NOTFOUND, "%s: no symbol %s", so_path,
                         sym);
    }
    /* f16 / bf16 tensors: the f32 inputs rounded to the dtype (which the
     * interpreter does on every read too) and handed over as their bits. */
    kl_workload_t *wf = kl_workload_clone(w);
    for (int t = 0; t < wf->ntensors; t++)
        wf->tensors[t].dtype = KL_DT_F32;
    float **bufs = kl_check_alloc(wf, seed, err);
    float **ref = kl_check_alloc(wf, seed, err);
    kl_workload_free(&wf);
    int out = kl_workload_output(w);
    void *args[KL_IR_MAX_TENSORS];
    uint16_t *half[KL_IR_MAX_TENSORS] = {0};
    for (int t = 0; t < w->ntensors; t++) {
        args[t] = bufs[t];
        kl_dtype dt = w->tensors[t].dtype;
        if (dt == KL_DT_F32 || t == out)
            continue;
        int64_t n = kl_tensor_numel(&w->tensors[t]);
        half[t] = kl_xcalloc((size_t)n, sizeof(uint16_t));
        for (int64_t i = 0; i < n; i++)
            half[t][i] = kl_dtype_bits(dt, bufs[t][i]);
        args[t] = half[t];
    }
    long g[3] = {(long)k->grid[0], (long)k->grid[1], (long)k->grid[2]};
    long b[3] = {(long)k->block[0], (long)k->block[1], (long)k->block[2]};
    int rc = fn(args, g, b) ? kl_seterr(err, KL_ERR_RUNTIME,
                                        "%s: pthread_create failed", k->entry)
                            : KL_OK;
    for (int t = 0; t < w->ntensors; t++)
        free(half[t]);
    kl_workload_eval(w, ref);
    int64_t n = kl_tensor_numel(&w->tensors[out]), bad = 0, first = -1;
    for (int64_t i = 0; !rc && i < n; i++) {
        double o = bufs[out][i], r = ref[out][i];
        if (!(fabs(o - r) <= atol + rtol * fabs(r))) {
            if (first < 0)
                first = i;
            bad++;
        }
    }
    if (!rc && bad)
        rc = kl_seterr(err, KL_ERR_RUNTIME,
                       "%s: %lld of %lld outputs wrong, first [%lld] = %g "
                       "(expected %g)",
                       k->entry, (long long)bad, (long long)n, (long long)first,
                       bufs[out][first], ref[out][first]);
    kl_check_free(w, &bufs);
    kl_check_free(w, &ref);
    dlclose(dl);
    return rc;
}

int kl_emu_check_all(const kl_kernel_t *ks, int n,
                     const kl_workload_t *const *ws, const char *workdir,
                     uint64_t seed, double rtol, double atol, char *err)
{
    char *so = NULL;
    int rc = kl_emu_build(ks, n, ws, workdir, &so, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    for (int i = 0; !rc && i < n; i++)
        if ((rc = kl_emu_check(so, &ks[i], ws[i], seed, rtol, atol, err)))
            fprintf(stderr, "%s\n%s", err, ks[i].source);
    if (so)
        unlink(so);
    free(so);
    return rc;
}
