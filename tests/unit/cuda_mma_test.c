/* Unit tests of the tensor-core CUDA tiling (mma.sync m16n8k16, f16/bf16
 * inputs, f32 accumulation; kl_cuda_plan.h): the in= op spelling and its
 * keys, the interpreter's rounding, the design-space choice (only f16/bf16
 * products on sm_80+), byte-identical replay, NVRTC compilation for sm_80
 * and sm_90 (skipped when NVRTC is missing) and the emulated run (cuda_emu,
 * whose C model of mma.sync reads the lanes' fragment registers) against
 * the reference interpreter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cuda_check.h"
#include "cuda_emu.h"
#include "kl_codegen_cuda.h"
#include "kl_cuda_plan.h"
#include "kl_err.h"
#include "kl_nvrtc.h"
#include "kl_search.h"
#include "kl_space.h"
#include "kl_test_tmp.h"

#define NSAMP 4

static char s_workdir[512];

/* Ragged sizes (not multiples of 16/8/16), both dtypes, a batch, a dense
 * with bias and relu (W read as [n, k]: the col-major B), a transposed A. */
static const char *s_ops[] = {
    "matmul M=40 N=24 K=40 in=f16",
    "matmul M=40 N=24 K=40 in=bf16",
    "matmul M=64 N=64 K=64 in=f16",
    "batch_matmul B=2 M=20 N=16 K=24 in=bf16",
    "dense N=9 I=40 O=20 bias=1 relu=1 in=f16",
    "C[b,h,i,j] += A[b,h,i,k] * B[b,h,k,j] where b=2, h=3, i=16, j=8, "
    "k=8; A: bf16[2,3,16,8], B: bf16[2,3,8,8]",
    "C[i,j] += A[k,i] * B[j,k] where i=17, j=9, k=33; A: f16[33,17], "
    "B: f16[9,33]",
};
#define NOPS ((int)(sizeof s_ops / sizeof s_ops[0]))

static kl_workload_t *s_load(const char *op)
{
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    int rc = kl_workload_from_string(op, &w, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", op, err);
    assert_int_equal(rc, KL_OK);
    return w;
}

static void test_op_spelling(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *f32 = s_load("matmul M=40 N=24 K=40");
    kl_workload_t *f16 = s_load("matmul M=40 N=24 K=40 in=f16");
    kl_workload_t *bf = s_load("matmul M=40 N=24 K=40 in=bf16");
    kl_workload_t *same = s_load("matmul M=40 N=24 K=40 in=f32");
    assert_string_equal(f16->name, "matmul_40_24_40_f16");
    assert_string_equal(bf->name, "matmul_40_24_40_bf16");
    assert_non_null(strstr(f16->canonical, "A: f16[40,40]"));
    assert_non_null(strstr(f16->canonical, "B: f16[40,24]"));
    assert_non_null(strstr(f16->canonical, "C: f32[40,24]"));
    assert_memory_equal(f32->key, same->key, 16);
    assert_memory_not_equal(f32->key, f16->key, 16);
    assert_memory_not_equal(f16->key, bf->key, 16);
    /* The named op and the same text typed by hand are one workload. */
    kl_workload_t *txt = s_load(f16->canonical);
    assert_memory_equal(txt->key, f16->key, 16);
    kl_workload_t *d = s_load("dense N=9 I=40 O=20 in=bf16");
    assert_non_null(strstr(d->canonical, "W: const bf16[20,40]"));
    assert_non_null(strstr(d->canonical, "X: bf16[9,40]"));
    assert_non_null(strstr(d->canonical, "b: const f32[20]"));
    kl_workload_t *bad = NULL;
    assert_int_equal(
        kl_workload_from_string("matmul M=4 N=4 K=4 in=f64", &bad, err),
        KL_ERR_INVAL);
    assert_non_null(strstr(err, "bad value 'f64' for in"));
    kl_workload_free(&f32);
    kl_workload_free(&f16);
    kl_workload_free(&bf);
    kl_workload_free(&same);
    kl_workload_free(&txt);
    kl_workload_free(&d);
}

static void test_dtype_rounding(void **state)
{
    (void)state;
    assert_int_equal(kl_dtype_bits(KL_DT_F16, 1.0f), 0x3c00);
    assert_int_equal(kl_dtype_bits(KL_DT_F16, -2.0f), 0xc000);
    assert_int_equal(kl_dtype_bits(KL_DT_F16, 65504.0f), 0x7bff);
    assert_int_equal(kl_dtype_bits(KL_DT_F16, 65520.0f), 0x7c00);
    assert_int_equal(kl_dtype_bits(KL_DT_F16, 0x1p-24f), 0x0001);
    assert_int_equal(kl_dtype_bits(KL_DT_F16, 0x1p-14f), 0x0400);
    assert_int_equal(kl_dtype_bits(KL_DT_F16, 1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(kl_dtype_bits(KL_DT_F16, 1.0f + 0x3p-11f), 0x3c02);
    assert_int_equal(kl_dtype_bits(KL_DT_BF16, 1.0f), 0x3f80);
    assert_int_equal(kl_dtype_bits(KL_DT_BF16, 1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(kl_dtype_bits(KL_DT_BF16, 1.0f + 0x3p-8f), 0x3f82);
    for (int i = -300; i <= 300; i++) {
        float v = (float)i / 7.0f;
        assert_true(kl_dtype_value(KL_DT_F16, kl_dtype_bits(KL_DT_F16, v)) -
                        v <=
                    0x1p-11f * 64);
        uint16_t h = (uint16_t)(i & 0x7bff);
        assert_int_equal(kl_dtype_bits(KL_DT_F16, kl_dtype_value(KL_DT_F16, h)),
                         h);
    }
    /* The interpreter reads f16 tensors as f16: 1 + 2^-12 is 1. */
    kl_workload_t *w = s_load("matmul M=1 N=1 K=2 in=f16");
    kl_workload_t *wf = s_load("matmul M=1 N=1 K=2");
    float a[2] = {1.0f + 0x1p-12f, 0.5f}, b[2] = {1.0f, 2.0f}, c = 0;
    float *bufs[3] = {a, b, &c};
    kl_workload_eval(w, bufs);
    assert_true(c == 2.0f);
    kl_workload_eval(wf, bufs);
    assert_true(c == 2.0f + 0x1p-12f);
    kl_workload_free(&w);
    kl_workload_free(&wf);
}

/* One sampled kernel: its plan (tensor-core or not) and shared bytes. */
typedef struct {
    bool mma;
    kl_cuda_mma_plan_t mp;
    int64_t smem;
} s_info_t;

/* Samples n kernels of w for target (seeded); each trace replays to a
 * byte-identical source, directly and through the text form. */
static void s_sample(const kl_workload_t *w, const char *target, int seed,
                     int n, kl_kernel_t *ks, s_info_t *info)
{
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    int rc = kl_space_for_target(target, w, &sp, err);
    if (rc)
        fprintf(stderr, "%s: %s\n", w->name, err);
    assert_int_equal(rc, KL_OK);
    const kl_target_t *tg = kl_space_target(sp);
    kl_rng_t rng;
    kl_rng_seed(&rng, 500 + (uint64_t)seed);
    for (int i = 0; i < n; i++) {
        kl_trace_t *t = NULL;
        kl_sched_t *s = NULL;
        rc = kl_space_sample(sp, &rng, &t, &s, 0, NULL, err);
        if (rc)
            fprintf(stderr, "%s: %s\n", w->name, err);
        assert_int_equal(rc, KL_OK);
        char entry[32];
        snprintf(entry, sizeof entry, "m%d_%d", seed, i);
        assert_int_equal(kl_codegen_cuda(s, tg, entry, &ks[i], err), KL_OK);
        rc = kl_cuda_mma_plan(s, tg, &info[i].mp, err);
        info[i].mma = rc == KL_OK;
        if (info[i].mma) {
            assert_string_equal(kl_trace_space(t), "cuda-sssrrsrs-mma");
            info[i].smem = info[i].mp.smem_bytes;
        } else {
            assert_int_equal(rc, KL_ERR_NOTFOUND);
            kl_cuda_plan_t p;
            assert_int_equal(kl_cuda_plan(s, tg, &p, err), KL_OK);
            info[i].smem = p.smem_bytes;
        }
        assert_int_equal(strstr(ks[i].source, "mma.sync") != NULL, info[i].mma);
        kl_sched_t *s2 = NULL;
        kl_kernel_t k2;
        assert_int_equal(kl_space_replay(sp, t, &s2, err), KL_OK);
        assert_int_equal(kl_codegen_cuda(s2, tg, entry, &k2, err), KL_OK);
        assert_string_equal(ks[i].source, k2.source);
        char *text = kl_trace_to_text(t);
        kl_trace_t *t3 = NULL;
        kl_sched_t *s3 = NULL;
        kl_kernel_t k3;
        assert_int_equal(kl_trace_from_text(text, &t3, err), KL_OK);
        assert_int_equal(kl_space_replay(sp, t3, &s3, err), KL_OK);
        assert_int_equal(kl_codegen_cuda(s3, tg, entry, &k3, err), KL_OK);
        assert_string_equal(ks[i].source, k3.source);
        free(text);
        kl_kernel_free(&k2);
        kl_kernel_free(&k3);
        kl_sched_destroy(&s2);
        kl_sched_destroy(&s3);
        kl_trace_free(&t3);
        kl_sched_destroy(&s);
        kl_trace_free(&t);
    }
    kl_space_destroy(&sp);
}

/* A sampled tensor-core schedule of w for target. */
static void s_mma_sched(const kl_workload_t *w, const char *target,
                        kl_sched_t **out)
{
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target(target, w, &sp, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 1);
    kl_cuda_mma_plan_t mp;
    for (int i = 0; i < 50; i++) {
        kl_trace_t *t = NULL;
        assert_int_equal(kl_space_sample(sp, &rng, &t, out, 0, NULL, err),
                         KL_OK);
        kl_trace_free(&t);
        if (!kl_cuda_mma_plan(*out, kl_space_target(sp), &mp, err))
            break;
        kl_sched_destroy(out);
    }
    assert_non_null(*out);
    kl_space_destroy(&sp);
}

/* Only f16/bf16 products into f32 on sm_80 or newer may get the tiling;
 * there it is one side of a sampled choice. */
static void test_space_choice(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = s_load("matmul M=40 N=24 K=40 in=f16");
    kl_space_t *sp = NULL;
    kl_rng_t rng;
    kl_trace_t *t = NULL;
    kl_sched_t *s = NULL;
    kl_kernel_t k;
    /* sm_75: CUDA cores only, reading the halves as f32. */
    assert_int_equal(kl_space_for_target("cuda/sm_75", w, &sp, err), KL_OK);
    kl_rng_seed(&rng, 3);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err),
                         KL_OK);
        assert_string_equal(kl_trace_space(t), "cuda-sssrrsrs");
        assert_int_equal(kl_codegen_cuda(s, kl_space_target(sp), "f", &k, err),
                         KL_OK);
        assert_null(strstr(k.source, "mma.sync"));
        assert_non_null(strstr(k.source, "kl_f16(a0["));
        kl_kernel_free(&k);
        kl_sched_destroy(&s);
        kl_trace_free(&t);
    }
    kl_space_destroy(&sp);
    /* sm_80 and sm_90: both sides are sampled. */
    const char *tgs[] = {"cuda/sm_80", "cuda/sm_90"};
    for (int a = 0; a < 2; a++) {
        int nmma = 0;
        assert_int_equal(kl_space_for_target(tgs[a], w, &sp, err), KL_OK);
        kl_rng_seed(&rng, 4);
        for (int i = 0; i < 40; i++) {
            assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err),
                             KL_OK);
            assert_int_equal(
                kl_codegen_cuda(s, kl_space_target(sp), "f", &k, err), KL_OK);
            nmma += strstr(k.source, "mma.sync.aligned.m16n8k16.row.col.f32."
                                     "f16.f16.f32") != NULL;
            kl_kernel_free(&k);
            kl_sched_destroy(&s);
            kl_trace_free(&t);
        }
        printf("%s: %d of 40 samples on tensor cores\n", tgs[a], nmma);
        assert_in_range(nmma, 10, 39);
        kl_space_destroy(&sp);
    }
    /* A tensor-core schedule is refused for sm_75. */
    s_mma_sched(w, "cuda/sm_80", &s);
    kl_target_t t75;
    assert_int_equal(kl_target_parse("cuda/sm_75", &t75, err), KL_OK);
    assert_int_equal(kl_postproc_cuda(&t75, s, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "sm_80"));
    assert_int_equal(kl_codegen_cuda(s, &t75, NULL, &k, err),
                     KL_ERR_UNSUPPORTED);
    kl_sched_destroy(&s);
    kl_workload_free(&w);

    /* f32 inputs, mixed dtypes or an f16 output never get it. */
    const char *others[] = {
        "matmul M=40 N=24 K=40",
        "C[i,j] += A[i,k] * B[k,j] where i=32, j=32, k=32; A: f16[32,32], "
        "B: bf16[32,32]",
        "C[i,j] += A[i,k] * B[k,j] where i=32, j=32, k=32; A: f16[32,32], "
        "B: f16[32,32], C: f16[32,32]",
    };
    for (int o = 0; o < 3; o++) {
        w = s_load(others[o]);
        kl_cuda_mma_match_t mm;
        assert_false(kl_cuda_mma_match(w, &mm));
        int rc = kl_space_for_target("cuda/sm_90", w, &sp, err);
        if (o == 2) {
            assert_int_equal(rc, KL_ERR_UNSUPPORTED);
            assert_non_null(strstr(err, "output C is f16"));
            kl_workload_free(&w);
            continue;
        }
        assert_int_equal(rc, KL_OK);
        kl_rng_seed(&rng, 2);
        for (int i = 0; i < 10; i++) {
            assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err),
                             KL_OK);
            assert_string_equal(kl_trace_space(t), "cuda-sssrrsrs");
            assert_int_equal(
                kl_codegen_cuda(s, kl_space_target(sp), "f", &k, err), KL_OK);
            assert_null(strstr(k.source, "mma.sync"));
            if (o == 1)
                assert_non_null(strstr(k.source, "kl_bf16(a1["));
            kl_kernel_free(&k);
            kl_sched_destroy(&s);
            kl_trace_free(&t);
        }
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
    /* The transposed text form matches: A[k,i] has m as its unit stride. */
    w = s_load(s_ops[NOPS - 1]);
    kl_cuda_mma_match_t mm;
    assert_true(kl_cuda_mma_match(w, &mm));
    assert_int_equal(mm.sa[mm.m], 1);
    kl_workload_free(&w);
}

/* Applies the edits (pairs from -> to, first occurrence each, in turn)
 * to kernel k, renames its entry, and checks that the emulation catches
 * the result. */
static void s_broken(const kl_kernel_t *k, const kl_workload_t *w,
                     const char *const *edits, int nedits)
{
    char err[KL_ERRMSG_LEN];
    char *src = kl_xstrdup(k->source);
    for (int e = 0; e < nedits; e++) {
        const char *from = edits[2 * e], *to = edits[2 * e + 1];
        char *p = strstr(src, from);
        assert_non_null(p);
        kl_buf_t b = {0};
        kl_buf_printf(&b, "%.*s%s%s", (int)(p - src), src, to,
                      p + strlen(from));
        free(src);
        src = kl_buf_take(&b);
    }
    static int seq;
    char entry[32];
    snprintf(entry, sizeof entry, "bad%d", seq++);
    /* The entry and its helpers (kl_mma_ENTRY, kl_ldsm_ENTRY). */
    kl_buf_t b = {0};
    size_t n = strlen(k->entry);
    for (const char *c = src; *c;) {
        if (!strncmp(c, k->entry, n) && c[n] == '(') {
            kl_buf_puts(&b, entry);
            c += n;
        } else {
            kl_buf_printf(&b, "%c", *c++);
        }
    }
    free(src);
    kl_kernel_t bad = *k;
    bad.source = kl_buf_take(&b);
    bad.entry = entry;
    char *so = NULL;
    int rc = kl_emu_build(&bad, 1, &w, s_workdir, &so, err);
    if (rc)
        fprintf(stderr, "%s\n%s", err, bad.source);
    assert_int_equal(rc, KL_OK);
    rc = kl_emu_check(so, &bad, w, 13, 1e-4, 1e-4, err);
    printf("broken kernel: %s\n", rc ? err : "passed");
    assert_int_equal(rc, KL_ERR_RUNTIME);
    unlink(so);
    free(so);
    free(bad.source);
}

/* Sampled kernels run on the CPU emulation and match the interpreter. */
static void test_emulated(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    enum { NALL = NOPS * NSAMP };
    kl_workload_t *ws[NOPS];
    const kl_workload_t *wk[NALL];
    kl_kernel_t ks[NALL];
    s_info_t info[NALL];
    int n = 0, multi_warp = 0, multi_tile = 0, bf16 = 0, nmma = 0;
    int plain = -1, ldsm = -1;
    for (int op = 0; op < NOPS; op++) {
        ws[op] = s_load(s_ops[op]);
        s_sample(ws[op], op % 2 ? "cuda/sm_80" : "cuda/sm_90", op, NSAMP,
                 &ks[n], &info[n]);
        for (int i = 0; i < NSAMP; i++)
            wk[n++] = ws[op];
    }
    for (int i = 0; i < NALL; i++) {
        const kl_cuda_mma_plan_t *mp = &info[i].mp;
        if (info[i].mma) {
            nmma++;
            if (info[i].mp.ldmatrix)
                ldsm = ldsm < 0 ? i : ldsm;
            else
                plain = plain < 0 ? i : plain;
            multi_warp += mp->warps_m * mp->warps_n > 1;
            multi_tile += mp->tiles_m * mp->tiles_n > 1;
            bf16 += strstr(ks[i].source, ".f32.bf16.bf16.f32") != NULL;
            assert_non_null(strstr(ks[i].source, "#if defined(KL_CUDA_EMU)"));
        }
    }
    /* Inputs already rounded to the dtype: only the f32 summation order
     * differs from the interpreter's double sum. */
    assert_int_equal(
        kl_emu_check_all(ks, NALL, wk, s_workdir, 13, 1e-4, 1e-4, err), KL_OK);
    printf("%d emulated kernels, %d on tensor cores: %d with several warps, "
           "%d with several tiles per warp, %d bf16, ldmatrix in kernel %d\n",
           NALL, nmma, multi_warp, multi_tile, bf16, ldsm);
    assert_true(nmma > 0 && nmma < NALL); /* both sides of the choice ran */
    assert_true(multi_warp > 0);
    assert_true(multi_tile > 0);
    assert_true(bf16 > 0);
    /* A wrong fragment layout is caught: two A registers swapped, or
     * ldmatrix given the wrong rows. */
    assert_true(plain >= 0 && ldsm >= 0);
    static const char *swap[] = {"fa[mt][1] = s[", "fa[mt][9] = s[",
                                 "fa[mt][2] = s[", "fa[mt][1] = s[",
                                 "fa[mt][9] = s[", "fa[mt][2] = s["};
    s_broken(&ks[plain], wk[plain], swap, 3);
    static const char *rows[] = {"kl_lane % 16) *", "kl_lane % 8) *"};
    s_broken(&ks[ldsm], wk[ldsm], rows, 1);
    for (int i = 0; i < NALL; i++)
        kl_kernel_free(&ks[i]);
    for (int op = 0; op < NOPS; op++)
        kl_workload_free(&ws[op]);
}

/* NVRTC compiles the sampled kernels for sm_80 and sm_90, with the shared
 * memory the plan made; for sm_75, which has no m16n8k16 f16 mma, the same
 * source does not assemble (the arch flag reaches ptxas). */
static void test_nvrtc(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_nvrtc_t *nv = kl_nvrtc_default(err);
    if (!nv) {
        printf("SKIP: %s\n", err);
        skip();
    }
    char arch[32];
    assert_int_equal(
        kl_nvrtc_arch_of_target("cuda/sm_80", arch, sizeof arch, err), KL_OK);
    assert_string_equal(arch, "sm_80");
    const char *archs[] = {"sm_80", "sm_90"};
    int nmma = 0, nldsm = 0;
    bool did75 = false;
    for (int op = 0; op < NOPS; op += 1) {
        kl_workload_t *w = s_load(s_ops[op]);
        kl_kernel_t ks[NSAMP];
        s_info_t info[NSAMP];
        s_sample(w, "cuda/sm_90", 100 + op, NSAMP, ks, info);
        for (int a = 0; a < 2; a++) {
            int rcs[NSAMP];
            kl_nvrtc_kernel_t res[NSAMP];
            char why[NSAMP][KL_ERRMSG_LEN];
            double t0 = kl_now_s();
            int rc =
                kl_cuda_check_many(nv, ks, NSAMP, archs[a], rcs, why, res, err);
            if (rc)
                fprintf(stderr, "%s %s: %s\n", w->name, archs[a], err);
            assert_int_equal(rc, KL_OK);
            printf("%s %s: %d kernels compiled in %.2f s\n", w->name, archs[a],
                   NSAMP, kl_now_s() - t0);
            for (int i = 0; i < NSAMP; i++) {
                if (rcs[i])
                    fprintf(stderr, "%s\n", why[i]);
                assert_int_equal(rcs[i], KL_OK);
                assert_in_range(res[i].registers, 1, 255);
                assert_int_equal(res[i].smem_static, info[i].smem);
                nmma += info[i].mma && a == 0;
                nldsm += info[i].mma && info[i].mp.ldmatrix && a == 0;
            }
        }
        for (int i = 0; i < NSAMP; i++) {
            if (!info[i].mma || did75)
                continue;
            did75 = true;
            int rc75 = -1;
            int rc = kl_cuda_check_many(nv, &ks[i], 1, "sm_75", &rc75, NULL,
                                        NULL, err);
            printf("tensor-core kernel for sm_75: %s\n", rc ? err : "compiled");
            assert_int_not_equal(rc, KL_OK);
            assert_non_null(strstr(err, "sm_80"));
        }
        for (int i = 0; i < NSAMP; i++)
            kl_kernel_free(&ks[i]);
        kl_workload_free(&w);
    }
    printf("%d of %d compiled kernels on tensor cores, %d with ldmatrix\n",
           nmma, NOPS * NSAMP, nldsm);
    assert_true(nmma > 0);
    assert_true(nldsm > 0 && nldsm < nmma);
    assert_true(did75);
}

/* The search's mutators move a trace between the two sides of the
 * choice; the fixed trace replays to the same source. (The choice's
 * branches hold the SIMT side's unroll_max_step if-chain, so kl_mutate
 * counts it an unroll categorical, as it does the CPU space's layout
 * choice: both mutators are tried.) */
static void test_mutate_choice(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = s_load("matmul M=40 N=24 K=40 in=f16");
    kl_space_t *sp = NULL;
    assert_int_equal(kl_space_for_target("cuda/sm_90", w, &sp, err), KL_OK);
    const kl_target_t *tg = kl_space_target(sp);
    kl_rng_t rng;
    kl_rng_seed(&rng, 9);
    kl_trace_t *t = NULL;
    kl_sched_t *s = NULL;
    assert_int_equal(kl_space_sample(sp, &rng, &t, &s, 0, NULL, err), KL_OK);
    int flips = 0, fixed = 0;
    kl_cuda_mma_plan_t mp;
    bool was = kl_cuda_mma_plan(s, tg, &mp, err) == KL_OK;
    kl_sched_destroy(&s);
    for (int i = 0; i < 200 && flips < 2; i++) {
        kl_trace_t *m = NULL, *f = NULL;
        if (kl_mutate(t, i % 2 ? KL_MUT_CATEGORICAL : KL_MUT_UNROLL, &rng, &m,
                      err))
            continue;
        if (kl_space_fix(sp, m, &rng, &f, &s, err)) {
            kl_trace_free(&m);
            continue; /* rejected (a reject_if) */
        }
        fixed++;
        bool is = kl_cuda_mma_plan(s, tg, &mp, err) == KL_OK;
        kl_kernel_t k1, k2;
        kl_sched_t *s2 = NULL;
        assert_int_equal(kl_codegen_cuda(s, tg, "mut", &k1, err), KL_OK);
        assert_int_equal(kl_space_replay(sp, f, &s2, err), KL_OK);
        assert_int_equal(kl_codegen_cuda(s2, tg, "mut", &k2, err), KL_OK);
        assert_string_equal(k1.source, k2.source);
        assert_int_equal(strstr(k1.source, "mma.sync") != NULL, is);
        kl_kernel_free(&k1);
        kl_kernel_free(&k2);
        kl_sched_destroy(&s2);
        kl_sched_destroy(&s);
        kl_trace_free(&m);
        flips += is != was;
        was = is;
        kl_trace_free(&t);
        t = f;
    }
    printf("%d mutated traces fixed, %d crossed between tensor and CUDA "
           "cores\n",
           fixed, flips);
    assert_true(flips >= 2);
    kl_trace_free(&t);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* f16 / bf16 inputs on CUDA cores (sm_75, or the other side of the
 * choice): read as their bits, converted, computed in f32. */
static void test_simt_half(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *ops[] = {
        "matmul M=40 N=24 K=40 in=f16",
        "C[i,j] += A[i,k] * B[k,j] | + bias[j] where i=20, j=12, k=24; "
        "A: f16[20,24], B: bf16[24,12], bias: bf16[12]",
    };
    enum { N = 2 * NSAMP + 1 };
    kl_workload_t *ws[2];
    const kl_workload_t *wk[N];
    kl_kernel_t ks[N];
    s_info_t info[N];
    for (int op = 0; op < 2; op++) {
        ws[op] = s_load(ops[op]);
        s_sample(ws[op], "cuda/sm_75", 200 + op, NSAMP, &ks[op * NSAMP],
                 &info[op * NSAMP]);
        for (int i = 0; i < NSAMP; i++) {
            wk[op * NSAMP + i] = ws[op];
            assert_false(info[op * NSAMP + i].mma);
        }
    }
    /* The task's reference kernel (naive, flat) reads halves too. */
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    assert_int_equal(
        kl_codegen_cuda_reference(ws[1], &tg, "ref_half", &ks[N - 1], err),
        KL_OK);
    assert_non_null(strstr(ks[N - 1].source, "kl_bf16(a2["));
    wk[N - 1] = ws[1];
    info[N - 1].smem = 0;
    kl_nvrtc_t *nv = kl_nvrtc_default(NULL);
    for (int a = 0; nv && a < 2; a++) {
        int rcs[N];
        kl_nvrtc_kernel_t res[N];
        const char *arch = a ? "sm_90" : "sm_75";
        int rc = kl_cuda_check_many(nv, ks, N, arch, rcs, NULL, res, err);
        if (rc)
            fprintf(stderr, "%s: %s\n", arch, err);
        assert_int_equal(rc, KL_OK);
        for (int i = 0; i < N; i++)
            assert_int_equal(res[i].smem_static, info[i].smem);
    }
    assert_int_equal(
        kl_emu_check_all(ks, N, wk, s_workdir, 17, 1e-4, 1e-4, err), KL_OK);
    for (int i = 0; i < N; i++)
        kl_kernel_free(&ks[i]);
    kl_workload_free(&ws[0]);
    kl_workload_free(&ws[1]);
}

int main(void)
{
    if (!kl_test_mkdtemp(s_workdir, sizeof s_workdir, "kiln-mma-test-XXXXXX")) {
        perror("kl_test_mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_spelling),
        cmocka_unit_test(test_dtype_rounding),
        cmocka_unit_test(test_space_choice),
        cmocka_unit_test(test_emulated),
        cmocka_unit_test(test_nvrtc),
        cmocka_unit_test(test_simt_half),
        cmocka_unit_test(test_mutate_choice),
    };
    int rc = cmocka_run_group_tests_name("cuda_mma", tests, NULL, NULL);
    kl_test_rmdir(s_workdir);
    return rc;
}
