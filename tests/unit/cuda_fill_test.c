/* Unit tests of the CUDA agent's 16-bit inputs without a GPU: the f16 /
 * bf16 rounding of the host (kla_cuda_half_bits) against known bit
 * patterns and against the interpreter's (kl_dtype_bits), the element
 * sizes and the request checks, and the worker's own helper kernels
 * (kla_cuda_helpers_source: kla_fill, kla_fill16, kla_round16,
 * kla_compare) run on the CPU through cuda_emu, where they must write the
 * host's bits; then the worker's path for an f16 / bf16 matmul: inputs
 * filled by the helpers, the CUDA reference kernel and a sampled
 * candidate run on them, compared by kla_compare, and the reference
 * checked against the interpreter on the same seeded values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cuda_emu.h"
#include "kl_codegen_cuda.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_test_tmp.h"
#include "kl_util.h"
#include "kla_backend.h"
#include "kla_cuda.h"

static char s_workdir[512];

static float s_f(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Known values: exact ones, ties to even, overflow, subnormals, zeros,
 * infinities and NaNs, both formats. */
static void test_half_bits_known(void **state)
{
    (void)state;
    static const struct {
        float v;
        uint16_t f16, bf16;
    } k[] = {
        {1.0f, 0x3c00, 0x3f80},
        {-2.0f, 0xc000, 0xc000},
        {0.5f, 0x3800, 0x3f00},
        {0.0f, 0x0000, 0x0000},
        {-0.0f, 0x8000, 0x8000},
        {65504.0f, 0x7bff, 0x4780},
        {65519.0f, 0x7bff, 0x4780}, /* below the f16 tie: largest finite */
        {65520.0f, 0x7c00, 0x4780}, /* f16 tie, to even: infinity */
        {-65520.0f, 0xfc00, 0xc780},
        {1.0f + 0x1p-11f, 0x3c00, 0x3f80}, /* f16 tie: down to even */
        {1.0f + 0x3p-11f, 0x3c02, 0x3f80}, /* f16 tie: up to even */
        {1.0f + 0x1p-8f, 0x3c04, 0x3f80},  /* bf16 tie: down to even */
        {1.0f + 0x3p-8f, 0x3c0c, 0x3f82},  /* bf16 tie: up to even */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3c04, 0x3f81}, /* above the tie */
        {0x1p-14f, 0x0400, 0x3880},                  /* smallest normal f16 */
        {0x1p-24f, 0x0001, 0x3380},         /* smallest subnormal f16 */
        {0x1p-25f, 0x0000, 0x3300},         /* f16 tie with 0: to even (0) */
        {0x1.8p-25f, 0x0001, 0x3340},       /* above that tie */
        {0x3p-25f, 0x0002, 0x33c0},         /* 1.5 subnormal ulps: to even */
        {0x5p-25f, 0x0002, 0x3420},         /* 2.5 ulps: to even (2) */
        {-0x1p-24f, 0x8001, 0xb380},        /* negative subnormal */
        {0x3ffp-24f, 0x03ff, 0x3880},       /* largest subnormal f16 */
        {0x1p-30f, 0x0000, 0x3080},         /* below f16's range: zero */
        {0x1.fffffep127f, 0x7c00, 0x7f80},  /* FLT_MAX: infinity in both */
        {0x1p-149f, 0x0000, 0x0000},        /* f32 subnormal */
        {0x1.fffffcp-127f, 0x0000, 0x0080}, /* bf16 rounds up to normal */
        {INFINITY, 0x7c00, 0x7f80},
        {-INFINITY, 0xfc00, 0xff80},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        uint16_t h = kla_cuda_half_bits(false, k[i].v);
        uint16_t b = kla_cuda_half_bits(true, k[i].v);
        if (h != k[i].f16 || b != k[i].bf16)
            fprintf(stderr,
                    "%zu: %a: f16 %04x (want %04x) bf16 %04x (want "
                    "%04x)\n",
                    i, (double)k[i].v, h, k[i].f16, b, k[i].bf16);
        assert_int_equal(h, k[i].f16);
        assert_int_equal(b, k[i].bf16);
    }
    /* NaNs stay NaNs (quiet, same sign), also a signalling one whose
     * payload lies only in the bits that are dropped. */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                             0x7fffffffu};
    for (size_t i = 0; i < 5; i++) {
        uint16_t h = kla_cuda_half_bits(false, s_f(nans[i]));
        uint16_t b = kla_cuda_half_bits(true, s_f(nans[i]));
        assert_int_equal(h & 0x7fffu, 0x7e00);
        assert_int_equal(h >> 15, nans[i] >> 31);
        assert_int_equal(b & 0x7fc0u, 0x7fc0);
        assert_int_equal(b >> 15, nans[i] >> 31);
    }
}

/* Bit patterns that exercise the rounding: every sign and exponent with
 * low halves at and around the f16 (bit 12) and bf16 (bit 15) ties, every
 * f16 subnormal tie (shift 14..24: the bits below the result exactly
 * half) with even and odd results, and a walk through all 2^32 patterns.
 * Heap array, count in *n. */
static uint32_t *s_patterns(size_t *n)
{
    static const uint16_t lo[] = {0,      1,      0x0fff, 0x1000, 0x1001,
                                  0x1fff, 0x2000, 0x3000, 0x5000, 0x7fff,
                                  0x8000, 0x8001, 0xffff};
    size_t cap = 65536 * 13 + 2 * 2048 + 1100000, k = 0;
    uint32_t *p = kl_xcalloc(cap, sizeof *p);
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t j = 0; j < sizeof lo / sizeof lo[0]; j++)
            p[k++] = hi << 16 | lo[j];
    for (uint32_t e = 102; e <= 112; e++) {
        uint32_t shift = 126 - e, h = 1u << (shift - 1);
        for (uint32_t q = 0x800000u >> shift; q <= 0xffffffu >> shift; q++) {
            uint32_t m = q << shift | h; /* 0x800000 .. 0xffffff */
            p[k++] = e << 23 | (m & 0x7fffffu);
            p[k++] = 0x80000000u | e << 23 | (m & 0x7fffffu);
        }
    }
    for (uint64_t x = 0; x < (UINT64_C(1) << 32) && k < cap; x += 4093)
        p[k++] = (uint32_t)x;
    *n = k;
    return p;
}

/* The agent's rounding is the interpreter's (kl_dtype_bits), the one the
 * reference results of the coordinator's tests are made with. */
static void test_half_bits_match_ir(void **state)
{
    (void)state;
    size_t n = 0, ties = 0;
    uint32_t *p = s_patterns(&n);
    for (size_t i = 0; i < n; i++) {
        float v = s_f(p[i]);
        uint16_t h = kla_cuda_half_bits(false, v);
        assert_int_equal(h, kl_dtype_bits(KL_DT_F16, v));
        assert_int_equal(kla_cuda_half_bits(true, v),
                         kl_dtype_bits(KL_DT_BF16, v));
        /* a subnormal tie: exactly between two results, the even one */
        uint32_t a = p[i] & 0x7fffffffu;
        if (a >= 0x33000000u && a < 0x38800000u) {
            double x = fabs((double)v) * 0x1p24; /* in subnormal ulps */
            if (x - floor(x) == 0.5) {
                assert_int_equal((h & 0x7fffu) % 2, 0);
                ties++;
            }
        }
    }
    printf("%zu bit patterns agree (%zu f16 subnormal ties)\n", n, ties);
    assert_true(ties >= 2048);
    free(p);
}

/* The 16-bit inputs are the f32 ones rounded: the same distribution, and
 * the values the interpreter reads from such a tensor. */
static void test_input_bits(void **state)
{
    (void)state;
    int differ = 0;
    for (uint64_t i = 0; i < 20000; i++) {
        float v = kla_cuda_input_value(11, 2, i);
        uint16_t h = kla_cuda_input_bits(KILN__DTYPE__DTYPE_F16, 11, 2, i);
        uint16_t b = kla_cuda_input_bits(KILN__DTYPE__DTYPE_BF16, 11, 2, i);
        assert_int_equal(h, kl_dtype_bits(KL_DT_F16, v));
        assert_int_equal(b, kl_dtype_bits(KL_DT_BF16, v));
        float hv = kl_dtype_value(KL_DT_F16, h);
        float bv = kl_dtype_value(KL_DT_BF16, b);
        assert_true((double)hv == kl_dtype_round(KL_DT_F16, v));
        assert_true(hv >= -1.0f && hv <= 1.0f && bv >= -1.0f && bv <= 1.0f);
        assert_true(fabsf(hv - v) <= 0x1p-12f);
        assert_true(fabsf(bv - v) <= 0x1p-9f);
        differ += hv != v;
    }
    assert_true(differ > 10000); /* most f32 inputs are not f16 values */
    assert_int_equal(kla_cuda_dtype_size(KILN__DTYPE__DTYPE_F16), 2);
    assert_int_equal(kla_cuda_dtype_size(KILN__DTYPE__DTYPE_BF16), 2);
    assert_int_equal(kla_cuda_dtype_size(KILN__DTYPE__DTYPE_F32), 4);
}

/* The agent takes f16 / bf16 inputs for CUDA (two bytes an element) and
 * refuses 16-bit outputs and integer arguments. */
static void test_check_request(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    int64_t shape[2] = {64, 32};
    Kiln__KernelArg a = KILN__KERNEL_ARG__INIT, c;
    a.name = "A";
    a.dtype = KILN__DTYPE__DTYPE_BF16;
    a.role = KILN__ARG_ROLE__ROLE_INPUT;
    a.n_shape = 2;
    a.shape = shape;
    c = a;
    c.name = "C";
    c.dtype = KILN__DTYPE__DTYPE_F32;
    c.role = KILN__ARG_ROLE__ROLE_OUTPUT;
    Kiln__KernelArg *args[2] = {&a, &c};
    uint8_t key[16] = {1};
    Kiln__MeasureRequest req = KILN__MEASURE_REQUEST__INIT;
    req.workload_key.data = key;
    req.workload_key.len = 16;
    req.n_args = 2;
    req.args = args;
    req.reference_source = "extern \"C\" __global__ void r() {}";
    kla_problem_t p;
    assert_int_equal(kla_problem_from_request(&p, &req, 0, err), KL_OK);
    assert_int_equal(p.esize[0], 2);
    assert_int_equal(p.dtype[0], KILN__DTYPE__DTYPE_BF16);
    assert_false(p.any_int);
    /* The memory bound counts two bytes an element: 4096 + 8192. */
    assert_int_equal(kla_problem_from_request(&p, &req, 12288, err), KL_OK);
    assert_int_equal(kla_problem_from_request(&p, &req, 12287, err),
                     KL_ERR_INVAL);
    assert_int_equal(kla_backend_cuda.check_request(NULL, &req, err), KL_OK);
    a.dtype = KILN__DTYPE__DTYPE_F16;
    assert_int_equal(kla_backend_cuda.check_request(NULL, &req, err), KL_OK);
    c.dtype = KILN__DTYPE__DTYPE_F16;
    assert_int_equal(kla_backend_cuda.check_request(NULL, &req, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'C' has dtype f16 (output)"));
    c.dtype = KILN__DTYPE__DTYPE_F32;
    a.dtype = KILN__DTYPE__DTYPE_U8;
    assert_int_equal(kla_backend_cuda.check_request(NULL, &req, err),
                     KL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'A' has dtype u8"));
}

/* ---- the helper kernels, emulated ------------------------------------ */

/* Host thunks around the helper kernels (launched through kl_emu_run). */
static const char s_thunks[] =
    "typedef unsigned long long t_u64;\n"
    "static void th_fill(void **a) { kla_fill((float *)a[0], *(t_u64 *)a[1], "
    "*(t_u64 *)a[2], *(unsigned *)a[3]); }\n"
    "static void th_fill16(void **a) { kla_fill16((unsigned short *)a[0], "
    "*(t_u64 *)a[1], *(t_u64 *)a[2], *(unsigned *)a[3], *(int *)a[4]); }\n"
    "static void th_compare(void **a) { kla_compare((const float *)a[0], "
    "(const float *)a[1], *(t_u64 *)a[2], *(double *)a[3], *(double *)a[4], "
    "(t_u64 *)a[5]); }\n"
    "extern \"C\" int t_fill(void **a, const long *g, const long *b) "
    "{ return kl_emu_run(th_fill, a, g, b); }\n"
    "extern \"C\" int t_fill16(void **a, const long *g, const long *b) "
    "{ return kl_emu_run(th_fill16, a, g, b); }\n"
    "extern \"C\" int t_compare(void **a, const long *g, const long *b) "
    "{ return kl_emu_run(th_compare, a, g, b); }\n"
    "extern \"C\" unsigned short t_round16(float v, int bf16) "
    "{ return kla_round16(v, bf16); }\n";

typedef int (*s_launch_fn)(void **, const long *, const long *);

typedef struct {
    void *dl;
    s_launch_fn fill, fill16, compare;
    unsigned short (*round16)(float, int);
} s_helpers_t;

static void s_helpers_open(s_helpers_t *h)
{
    char err[KL_ERRMSG_LEN];
    char *text = kl_xasprintf("%s%s", kla_cuda_helpers_source(), s_thunks);
    char *so = NULL;
    int rc = kl_emu_build_text(text, s_workdir, &so, err);
    free(text);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, KL_OK);
    h->dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h->dl);
    unlink(so);
    free(so);
    *(void **)&h->fill = dlsym(h->dl, "t_fill");
    *(void **)&h->fill16 = dlsym(h->dl, "t_fill16");
    *(void **)&h->compare = dlsym(h->dl, "t_compare");
    *(void **)&h->round16 = dlsym(h->dl, "t_round16");
    assert_true(h->fill && h->fill16 && h->compare && h->round16);
}

/* The worker's launch of a helper over n elements (s_grid_for), with
 * fewer threads: 2 blocks of 64 here, so the grid-stride loop runs. */
static const long s_g[3] = {2, 1, 1}, s_b[3] = {64, 1, 1};

static void s_fill16(s_helpers_t *h, uint16_t *p, uint64_t n, uint64_t seed,
                     uint32_t arg, int bf16)
{
    void *a[] = {p, &n, &seed, &arg, &bf16};
    assert_int_equal(h->fill16(a, s_g, s_b), 0);
}

static void s_fill(s_helpers_t *h, float *p, uint64_t n, uint64_t seed,
                   uint32_t arg)
{
    void *a[] = {p, &n, &seed, &arg};
    assert_int_equal(h->fill(a, s_g, s_b), 0);
}

/* kla_compare's three numbers for out against ref. */
static void s_compare(s_helpers_t *h, const float *out, const float *ref,
                      uint64_t n, double rtol, double atol, uint64_t st[3])
{
    st[0] = 0;
    st[1] = UINT64_MAX;
    st[2] = 0;
    void *a[] = {(void *)out, (void *)ref, &n, &rtol, &atol, st};
    assert_int_equal(h->compare(a, s_g, s_b), 0);
}

/* The device's text writes the host's bits: kla_round16 for many bit
 * patterns, kla_fill and kla_fill16 element by element. */
static void test_helpers_emulated(void **state)
{
    (void)state;
    s_helpers_t h;
    s_helpers_open(&h);
    size_t np = 0;
    uint32_t *pat = s_patterns(&np);
    for (size_t i = 0; i < np; i++) {
        float v = s_f(pat[i]);
        assert_int_equal(h.round16(v, 0), kla_cuda_half_bits(false, v));
        assert_int_equal(h.round16(v, 1), kla_cuda_half_bits(true, v));
    }
    free(pat);
    enum { N = 3000 };
    float *f = kl_xcalloc(N, sizeof *f);
    uint16_t *q = kl_xcalloc(N, sizeof *q);
    s_fill(&h, f, N, 5, 1);
    for (uint64_t i = 0; i < N; i++)
        assert_true(f[i] == kla_cuda_input_value(5, 1, i));
    for (int bf16 = 0; bf16 < 2; bf16++) {
        Kiln__DType dt =
            bf16 ? KILN__DTYPE__DTYPE_BF16 : KILN__DTYPE__DTYPE_F16;
        memset(q, 0xff, N * sizeof *q);
        s_fill16(&h, q, N, 5, 1, bf16);
        for (uint64_t i = 0; i < N; i++)
            assert_int_equal(q[i], kla_cuda_input_bits(dt, 5, 1, i));
    }
    /* kla_compare: a count, the first wrong index and the largest
     * difference; NaN counts as wrong. */
    uint64_t st[3];
    float *g = kl_xcalloc(N, sizeof *g);
    memcpy(g, f, N * sizeof *g);
    s_compare(&h, g, f, N, 1e-3, 1e-4, st);
    assert_int_equal(st[0], 0);
    g[2000] += 0.5f;
    g[700] = NAN;
    s_compare(&h, g, f, N, 1e-3, 1e-4, st);
    assert_int_equal(st[0], 2);
    assert_int_equal(st[1], 700);
    double d;
    memcpy(&d, &st[2], 8);
    assert_true(isinf(d));
    free(f);
    free(q);
    free(g);
    dlclose(h.dl);
}

/* The largest |a[i] - b[i]|. */
static double s_max_diff(const float *a, const float *b, uint64_t n)
{
    double m = 0;
    for (uint64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* The worker's path for a 16-bit matmul: inputs by kla_fill16 /
 * kla_fill, the CUDA reference kernel and a sampled candidate on them,
 * the outputs compared by kla_compare; the reference equals the
 * interpreter's result for the seeded f32 values read at 16 bits, and
 * differs from the result of the unrounded values. */
static void s_worker_path(const char *op, uint64_t seed)
{
    char err[KL_ERRMSG_LEN];
    s_helpers_t h;
    s_helpers_open(&h);
    kl_workload_t *w = NULL;
    assert_int_equal(kl_workload_from_string(op, &w, err), KL_OK);
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    kl_kernel_t ks[2];
    assert_int_equal(kl_codegen_cuda_reference(w, &tg, "kl_ref", &ks[0], err),
                     KL_OK);
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cuda/sm_90", w, &sp, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    kl_trace_t *t = NULL;
    kl_sched_t *s = NULL;
    assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err), KL_OK);
    assert_int_equal(kl_codegen_cuda(s, &tg, "kl_cand", &ks[1], err), KL_OK);
    const kl_workload_t *ws[2] = {w, w};
    char *so = NULL;
    int rc = kl_emu_build(ks, 2, ws, s_workdir, &so, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, KL_OK);
    void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(dl);
    s_launch_fn ref_fn, cand_fn;
    *(void **)&ref_fn = dlsym(dl, "kl_emu_kl_ref");
    *(void **)&cand_fn = dlsym(dl, "kl_emu_kl_cand");
    assert_true(ref_fn && cand_fn);

    /* Device buffers as the worker sizes them; the interpreter's f32
     * copies of the same seeded values. */
    int out = kl_workload_output(w), nt = w->ntensors;
    void *dev[KL_IR_MAX_TENSORS], *cand[KL_IR_MAX_TENSORS];
    float *host[KL_IR_MAX_TENSORS], *host32[KL_IR_MAX_TENSORS];
    int n16 = 0;
    for (int a = 0; a < nt; a++) {
        uint64_t n = (uint64_t)kl_tensor_numel(&w->tensors[a]);
        Kiln__DType dt = (Kiln__DType)w->tensors[a].dtype;
        size_t es = kla_cuda_dtype_size(dt);
        dev[a] = kl_xcalloc(n, es);
        cand[a] = kl_xcalloc(n, es);
        host[a] = kl_xcalloc(n, sizeof(float));
        host32[a] = kl_xcalloc(n, sizeof(float));
        if (a == out)
            continue;
        for (uint64_t i = 0; i < n; i++)
            host[a][i] = host32[a][i] = kla_cuda_input_value(seed, a, i);
        if (es == 2) {
            n16++;
            s_fill16(&h, dev[a], n, seed, (uint32_t)a,
                     dt == KILN__DTYPE__DTYPE_BF16);
        } else {
            s_fill(&h, dev[a], n, seed, (uint32_t)a);
        }
        memcpy(cand[a], dev[a], n * es);
    }
    assert_true(n16 >= 2);
    uint64_t nout = (uint64_t)kl_tensor_numel(&w->tensors[out]);
    for (uint64_t i = 0; i < nout; i++)
        ((float *)dev[out])[i] = ((float *)cand[out])[i] = NAN;
    kla_cuda_launch_t rl;
    kla_cuda_ref_launch(nout, &rl);
    long rg[3] = {rl.grid[0], rl.grid[1], rl.grid[2]};
    long rb[3] = {rl.block[0], rl.block[1], rl.block[2]};
    assert_int_equal(ref_fn(dev, rg, rb), 0);
    long cg[3] = {ks[1].grid[0], ks[1].grid[1], ks[1].grid[2]};
    long cb[3] = {ks[1].block[0], ks[1].block[1], ks[1].block[2]};
    assert_int_equal(cand_fn(cand, cg, cb), 0);

    /* The worker's checks: the reference wrote every element, the
     * candidate matches it. */
    const float *ro = dev[out], *co = cand[out];
    uint64_t st[3];
    s_compare(&h, ro, ro, nout, 0, 0, st);
    assert_int_equal(st[0], 0);
    s_compare(&h, co, ro, nout, 1e-3, 1e-4, st);
    assert_int_equal(st[0], 0);
    /* The reference is the interpreter's result at 16 bits ... */
    kl_workload_eval(w, host);
    double worst = s_max_diff(ro, host[out], nout);
    printf("%s: reference vs interpreter at 16 bits: max |diff| %g\n", w->name,
           worst);
    assert_true(worst <= 1e-5);
    /* ... and not the result of the unrounded inputs. */
    kl_workload_t *wf = kl_workload_clone(w);
    for (int a = 0; a < nt; a++)
        wf->tensors[a].dtype = KL_DT_F32;
    kl_workload_eval(wf, host32);
    double off = s_max_diff(ro, host32[out], nout);
    printf("%s: reference vs unrounded f32 inputs: max |diff| %g\n", w->name,
           off);
    assert_true(off > 1e-4);
    kl_workload_free(&wf);

    for (int a = 0; a < nt; a++) {
        free(dev[a]);
        free(cand[a]);
        free(host[a]);
        free(host32[a]);
    }
    dlclose(dl);
    unlink(so);
    free(so);
    kl_kernel_free(&ks[0]);
    kl_kernel_free(&ks[1]);
    kl_sched_destroy(&s);
    kl_trace_free(&t);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
    dlclose(h.dl);
}

static void test_worker_path_f16(void **state)
{
    (void)state;
    s_worker_path("matmul M=40 N=24 K=40 in=f16", 3);
}

static void test_worker_path_bf16(void **state)
{
    (void)state;
    s_worker_path("dense N=9 I=40 O=20 bias=1 in=bf16", 4);
}

static int s_setup(void **state)
{
    (void)state;
    return kl_test_mkdtemp(s_workdir, sizeof s_workdir, "kiln-cuda-fill-XXXXXX")
               ? 0
               : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    rmdir(s_workdir); /* every file made in it is gone */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_bits_known),
        cmocka_unit_test(test_half_bits_match_ir),
        cmocka_unit_test(test_input_bits),
        cmocka_unit_test(test_check_request),
        cmocka_unit_test(test_helpers_emulated),
        cmocka_unit_test(test_worker_path_f16),
        cmocka_unit_test(test_worker_path_bf16),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
