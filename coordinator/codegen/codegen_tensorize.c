/* codegen_tensorize.c - C of a tensorized schedule (kl_sched_tensorize,
 * kl_intrin.h; docs/architecture.md, "The tensorize primitive").
 *
 * The schedule's loops above the block become C loops (the first parallel
 * loop gets `#pragma omp parallel for`, unrolled loops `#pragma GCC
 * unroll`); the block (lanes output columns x 4 reduction points) is one
 * intrinsic call: acc[m][n0..n0+lanes) += A[m][k0..k0+4) . Wp[k0/4][n0..][4].
 *
 * ENTRY_prepare packs the const weights as column panels
 * [Np/lanes][Kp/4][lanes][4] (each panel in the intrinsic's [K/4][N][4]
 * layout, contiguous over k; zeros past K and N: the padding of shapes
 * that are not multiples of the block) and
 * computes the zero-point compensation comp[n] = za * sum_k B[k][n] once.
 * The kernel accumulates sum A * B in int32 (wrapping like vpdpbusd; the
 * true sum fits, so the wrap is exact) into acc, an int32 [rows][Np]
 * array covering every (m, n0) the nest visits. When the loops between the
 * innermost spatial loop and the block all run the reduction, the
 * accumulator stays in a register across them (and, when they cover the
 * whole reduction, starts at zero, so acc needs no clearing). A guard of
 * an imperfect split is evaluated with the block's loops at 0, i.e. at the
 * block's first lane: padding lanes compute garbage nobody reads. The 4
 * activation bytes past the end of K are read as zeros. Finally every
 * output point gets x = acc - comp[n], then the workload's epilogue
 * (bias, requant half-to-even as nearbyintf, zero point, clip) and the
 * saturating store, exactly as the reference C (codegen_int.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_tz.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_util.h"

/* Whether the output is a plain s32 Y[m][n] ([M][N], row-major, index m
 * and n themselves) with no epilogue: then a finished accumulator vector
 * is stored as one vector, acc - comp, which is what the scalar epilogue
 * computes lane by lane (the int32 clamp of an int32 is the identity). */
static bool s_plain_s32_out(const kl_workload_t *w, int itm, int itn, int64_t M,
                            int64_t N)
{
    int ot = kl_workload_output(w);
    const kl_tensor_t *t = &w->tensors[ot];
    if (w->nepi || t->dtype != KL_DT_S32 || t->ndim != 2 || t->shape[0] != M ||
        t->shape[1] != N)
        return false;
    for (int d = 0; d < 2; d++) {
        const kl_affine_t *a = &w->out.idx[d];
        if (a->offset || a->div != 1)
            return false;
        for (int i = 0; i < w->niters; i++)
            if (a->coef[i] != (i == (d ? itn : itm)))
                return false;
    }
    return true;
}

int kl_codegen_tensorized(const kl_sched_t *s, const char *entry,
                          kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    kl_tensorize_t tz;
    int rc = kl_sched_tensorized(s, &tz, err);
    if (rc == KL_ERR_NOTFOUND)
        return kl_seterr(err, KL_ERR_INVAL, "codegen: not tensorized");
    if (rc)
        return rc;
    if (tz.conv)
        return kl_codegen_tensorized_conv(s, &tz, entry, out, err);
    const kl_intrin_t *in = kl_intrin_find(tz.intrin);
    const kl_workload_t *w = kl_sched_workload(s);
    entry = entry ? entry : "kl_main";
    int bpos = kl_sched_loop_pos(s, tz.loop);
    int nt = w->ntensors, ot = kl_workload_output(w);
    int64_t M = w->iters[tz.it_m].extent, N = w->iters[tz.it_n].extent,
            K = w->iters[tz.it_k].extent;
    /* hp: the first of the reduction loops right above the block. */
    int hp = bpos;
    while (hp > 0 && kl_sched_loop(s, hp - 1)->reduce)
        hp--;
    kl_buf_t em = {0}, en = {0}, ek = {0};
    int64_t mmax, nmax, kmax, kmax_run;
    kl_cg_tz_iter_expr(s, tz.it_m, bpos, &em, &mmax);
    kl_cg_tz_iter_expr(s, tz.it_n, bpos, &en, &nmax);
    kl_cg_tz_iter_expr(s, tz.it_k, bpos, &ek, &kmax);
    /* Whether the run [hp, bpos) covers the whole reduction. */
    bool full = true;
    for (int p = 0; p < hp; p++)
        if (kl_sched_loop(s, p)->reduce && kl_sched_loop(s, p)->extent > 1)
            full = false;
    (void)kmax_run;
    int64_t rows = mmax + 1, np = nmax + in->lanes, kg = kmax / in->red + 1;
    int64_t wbytes = (kg * np * in->red + 63) / 64 * 64;
    int64_t cbytes = (np * 4 + 63) / 64 * 64;
    int ta = tz.ta, tb = tz.tb;
    kl_buf_t b = {0};
    kl_buf_printf(&b,
                  "/* Tensorized with %s: the weights packed once, in "
                  "prepare, as column panels in the %s layout. */\n"
                  "#pragma GCC target(\"%s\")\n#include <immintrin.h>\n"
                  "#include <stdlib.h>\n#include <string.h>\n",
                  in->name, in->layout, in->pragma);
    kl_buf_puts(&b, kl_cg_int_prelude());
    kl_cg_tz_intrin_macros(&b, in->name);
    kl_buf_printf(
        &b,
        "/* 4 activations from k0 on, zeros past the end (%lld). */\n"
        "static inline int32_t kl_a4(const uint8_t *row, int64_t k0)\n"
        "{\n    int32_t v = 0;\n    if (%d || k0 + 4 <= %lld) {\n"
        "        memcpy(&v, row + k0, 4);\n        return v;\n    }\n"
        "    uint32_t u = 0;\n"
        "    for (int64_t j = 0; k0 + j < %lld; j++)\n"
        "        u |= (uint32_t)row[k0 + j] << (8 * j);\n"
        "    return (int32_t)u;\n}\n\n",
        (long long)K, K % 4 == 0, (long long)K, (long long)K);
    /* prepare */
    kl_buf_printf(&b, "#define K_ %lldLL\n#define N_ %lldLL\n", (long long)K,
                  (long long)N);
    /* The packed weights: column panels of `lanes` columns, each over all
     * of K in the intrinsic's [K/4][lanes][4] layout, so that one panel
     * is read contiguously as k advances. Offset of (k0, n0), both
     * multiples of the block. */
    kl_buf_printf(&b,
                  "#define KL_WOFF(k0, n0) ((((n0) / %d) * %lldLL + (k0) / "
                  "%d) * %d)\n",
                  in->lanes, (long long)kg, in->red, in->lanes * in->red);
    kl_buf_printf(&b,
                  "void *%s_prepare(void *const *args)\n{\n"
                  "    /* Refuse (NULL) on a CPU without the intrinsic. */\n"
                  "    if (!__builtin_cpu_supports(\"%s\"))\n"
                  "        return NULL;\n"
                  "    const int8_t *B = (const int8_t *)args[%d];\n"
                  "    char *blk = (char *)aligned_alloc(64, %lld);\n"
                  "    if (!blk)\n        return NULL;\n"
                  "    int8_t *wp = (int8_t *)blk;\n"
                  "    int32_t *comp = (int32_t *)(blk + %lld);\n"
                  "    for (int64_t g = 0; g < %lld; g++)\n"
                  "        for (int64_t n = 0; n < %lld; n++)\n"
                  "            for (int64_t j = 0; j < %d; j++) {\n"
                  "                int64_t k = g * %d + j;\n"
                  "                wp[KL_WOFF(g * %d, n - n %% %d) + n %% %d * "
                  "%d + j] =\n"
                  "                    k < %lld && n < %lld ? B[%s] : 0;\n"
                  "            }\n"
                  "    for (int64_t n = 0; n < %lld; n++) {\n"
                  "        int64_t sum = 0;\n"
                  "        for (int64_t k = 0; n < %lld && k < %lld; k++)\n"
                  "            sum += B[%s];\n"
                  "        comp[n] = (int32_t)(uint32_t)(uint64_t)(sum * "
                  "%lld);\n    }\n"
                  "    return blk;\n}\n\n",
                  entry, in->builtin, tb, (long long)(wbytes + cbytes),
                  (long long)wbytes, (long long)kg, (long long)np, in->red,
                  in->red, in->red, in->lanes, in->lanes, in->red, (long long)K,
                  (long long)N, tz.b_nk ? "n * K_ + k" : "k * N_ + n",
                  (long long)np, (long long)N, (long long)K,
                  tz.b_nk ? "n * K_ + k" : "k * N_ + n", (long long)tz.za);
    /* the kernel */
    kl_buf_printf(&b, "void %s(void *const *args)\n{\n", entry);
    for (int t = 0; t < nt; t++)
        kl_buf_printf(
            &b, "    %s%s *restrict t%d = (%s%s *)args[%d];\n",
            t == ot ? "" : "const ", kl_dtype_ctype(w->tensors[t].dtype), t,
            t == ot ? "" : "const ", kl_dtype_ctype(w->tensors[t].dtype), t);
    /* Fused: the accumulators hold whole sums when stored, so the
     * epilogue runs right there and no acc buffer is needed. */
    bool fused = full && hp < bpos;
    bool vstore = fused && s_plain_s32_out(w, tz.it_m, tz.it_n, M, N);
    char *alloc = fused ? NULL
                  : full
                      ? kl_xasprintf("malloc(%lld)", (long long)(rows * np * 4))
                      : kl_xasprintf("calloc(%lld, 4)", (long long)(rows * np));
    kl_buf_printf(&b,
                  "    const int8_t *wp = (const int8_t *)args[%d];\n"
                  "    const int32_t *comp = (const int32_t *)((const char "
                  "*)args[%d] + %lld);\n",
                  nt, nt, (long long)wbytes);
    if (alloc)
        kl_buf_printf(&b,
                      "    int32_t *acc = (int32_t *)%s;\n"
                      "    if (!acc)\n        return;\n",
                      alloc);
    free(alloc);
    char ind[256] = "    ";
    bool par = false;
    /* The register tile: unrolled spatial loops right above the reduction
     * run, up to 32 accumulators; tp..hp-1 (none: tp = hp, one tile). */
    int tp = hp;
    int64_t ntile = 1;
    while (hp < bpos && tp > 0 &&
           kl_sched_loop(s, tp - 1)->kind == KL_LOOP_UNROLL &&
           !kl_sched_loop(s, tp - 1)->reduce &&
           ntile * kl_sched_loop(s, tp - 1)->extent <= 32) {
        tp--;
        ntile *= kl_sched_loop(s, tp)->extent;
    }
    for (int p = 0; p < bpos; p++) {
        const kl_loop_t *l = kl_sched_loop(s, p);
        if (p == tp && hp < bpos) {
            kl_buf_t g = {0};
            kl_cg_tz_guards(s, 0, hp, bpos, &g);
            for (int64_t t = 0; t < ntile; t++) {
                kl_buf_printf(
                    &b, "%sint64_t m_%lld, n0_%lld;\n%sint ok_%lld;\n", ind,
                    (long long)t, (long long)t, ind, (long long)t);
                kl_buf_printf(&b, "%s{\n", ind);
                int64_t rem = t;
                for (int q = hp - 1; q >= tp; q--) {
                    const kl_loop_t *lq = kl_sched_loop(s, q);
                    kl_buf_printf(&b, "%s    const int64_t l%d = %lld;\n", ind,
                                  lq->id, (long long)(rem % lq->extent));
                    rem /= lq->extent;
                }
                kl_buf_printf(&b,
                              "%s    m_%lld = %s;\n%s    n0_%lld = %s;\n"
                              "%s    ok_%lld = 1%s;\n%s}\n",
                              ind, (long long)t, em.data, ind, (long long)t,
                              en.data, ind, (long long)t, g.data ? g.data : "",
                              ind);
                if (full)
                    kl_buf_printf(&b, "%skl_vacc_t c_%lld = KL_VZERO();\n", ind,
                                  (long long)t);
                else
                    kl_buf_printf(&b,
                                  "%skl_vacc_t c_%lld = ok_%lld ? KL_VLOAD(acc "
                                  "+ m_%lld * %lld + n0_%lld) : KL_VZERO();\n",
                                  ind, (long long)t, (long long)t, (long long)t,
                                  (long long)np, (long long)t);
                /* Rows past M (an imperfect split) read row M-1: their
                 * sums are never stored (ok_t is 0). */
                kl_buf_printf(&b,
                              "%sconst uint8_t *a_%lld = t%d + (m_%lld < %lld "
                              "? m_%lld : %lld) * %lld;\n",
                              ind, (long long)t, ta, (long long)t, (long long)M,
                              (long long)t, (long long)(M - 1), (long long)K);
            }
            kl_buf_free(&g);
        }
        if (p >= tp && p < hp && hp < bpos)
            continue; /* the tile: unrolled above */
        if (l->kind == KL_LOOP_PARALLEL && !par) {
            kl_buf_printf(&b, "%s#pragma omp parallel for\n", ind);
            par = true;
        } else if (l->kind == KL_LOOP_UNROLL) {
            kl_buf_printf(&b, "%s#pragma GCC unroll %lld\n", ind,
                          (long long)l->extent);
        }
        kl_buf_printf(&b, "%sfor (int64_t l%d = 0; l%d < %lld; ++l%d) {\n", ind,
                      l->id, l->id, (long long)l->extent, l->id);
        strcat(ind, "    ");
    }
    {
        kl_buf_t g = {0};
        kl_cg_tz_guards(s, hp, bpos, bpos, &g);
        if (hp == bpos) {
            kl_cg_tz_guards(s, 0, hp, bpos, &g);
            kl_buf_printf(&b,
                          "%sconst int64_t m = %s, n0 = %s, k0 = %s;\n"
                          "%sif (1%s) {\n"
                          "%s    kl_vacc_t c = KL_VLOAD(acc + m * %lld + n0);\n"
                          "%s    c = kl_dot(c, kl_a4(t%d + m * %lld, k0), wp + "
                          "KL_WOFF(k0, n0));\n"
                          "%s    KL_VSTORE(acc + m * %lld + n0, c);\n%s}\n",
                          ind, em.data, en.data, ek.data, ind,
                          g.data ? g.data : "", ind, (long long)np, ind, ta,
                          (long long)K, ind, (long long)np, ind);
        } else {
            kl_buf_printf(&b, "%sconst int64_t k0 = %s;\n%sif (1%s) {\n", ind,
                          ek.data, ind, g.data ? g.data : "");
            for (int64_t t = 0; t < ntile; t++)
                kl_buf_printf(&b,
                              "%s    c_%lld = kl_dot(c_%lld, kl_a4(a_%lld, "
                              "k0), wp + KL_WOFF(k0, n0_%lld));\n",
                              ind, (long long)t, (long long)t, (long long)t,
                              (long long)t);
            kl_buf_printf(&b, "%s}\n", ind);
        }
        kl_buf_free(&g);
    }
    for (int p = bpos - 1; p >= 0; p--) {
        if (!(p >= tp && p < hp && hp < bpos)) {
            ind[strlen(ind) - 4] = '\0';
            kl_buf_printf(&b, "%s}\n", ind);
        }
        if (p == tp && hp < bpos && fused && vstore) {
            /* One vector store per accumulator; lanes past N (an
             * imperfect last block) take the scalar path. */
            for (int64_t t = 0; t < ntile; t++) {
                kl_buf_printf(&b,
                              "%sif (ok_%lld && n0_%lld + %d <= %lld)\n"
                              "%s    KL_VSTORE(t%d + m_%lld * %lld + n0_%lld, "
                              "KL_VSUB(c_%lld, KL_VLOAD(comp + n0_%lld)));\n",
                              ind, (long long)t, (long long)t, in->lanes,
                              (long long)N, ind, ot, (long long)t, (long long)N,
                              (long long)t, (long long)t, (long long)t);
                if (N % in->lanes)
                    kl_buf_printf(
                        &b,
                        "%selse if (ok_%lld) {\n%s    int32_t lane[%d];\n"
                        "%s    KL_VSTORE(lane, c_%lld);\n"
                        "%s    for (int64_t q = 0; n0_%lld + q < %lld; q++)\n"
                        "%s        t%d[m_%lld * %lld + n0_%lld + q] = "
                        "(int32_t)((uint32_t)lane[q] - (uint32_t)comp[n0_%lld "
                        "+ q]);\n%s}\n",
                        ind, (long long)t, ind, in->lanes, ind, (long long)t,
                        ind, (long long)t, (long long)N, ind, ot, (long long)t,
                        (long long)N, (long long)t, (long long)t, ind);
            }
        } else if (p == tp && hp < bpos && fused) {
            /* ok_t implies m_t < M (the guards of m's splits). */
            for (int64_t t = 0; t < ntile && !rc; t++) {
                kl_buf_printf(
                    &b,
                    "%sif (ok_%lld) {\n%s    int32_t lane[%d];\n"
                    "%s    KL_VSTORE(lane, c_%lld);\n"
                    "%s    for (int64_t q = 0; q < %d && n0_%lld + q "
                    "< %lld; q++) {\n"
                    "%s        const int64_t i%d = m_%lld, i%d = "
                    "n0_%lld + q;\n"
                    "%s        int64_t x = (int32_t)((uint32_t)lane[q] "
                    "- (uint32_t)comp[i%d]);\n",
                    ind, (long long)t, ind, in->lanes, ind, (long long)t, ind,
                    in->lanes, (long long)t, (long long)N, ind, tz.it_m,
                    (long long)t, tz.it_n, (long long)t, ind, tz.it_n);
                char ind2[300];
                snprintf(ind2, sizeof ind2, "%s        ", ind);
                rc = kl_cg_int_epilogue(&b, w, ind2, err);
                kl_buf_printf(&b, "%s    }\n%s}\n", ind, ind);
            }
        } else if (p == tp && hp < bpos) {
            for (int64_t t = 0; t < ntile; t++)
                kl_buf_printf(&b,
                              "%sif (ok_%lld)\n%s    KL_VSTORE(acc + m_%lld * "
                              "%lld + n0_%lld, c_%lld);\n",
                              ind, (long long)t, ind, (long long)t,
                              (long long)np, (long long)t, (long long)t);
        }
    }
    /* the epilogue */
    if (fused) {
        kl_buf_puts(&b, "}\n");
        goto done;
    }
    if (par)
        kl_buf_puts(&b, "    #pragma omp parallel for\n");
    kl_buf_printf(
        &b,
        "    for (int64_t i%d = 0; i%d < %lld; ++i%d)\n"
        "        for (int64_t i%d = 0; i%d < %lld; ++i%d) {\n"
        "            int64_t x = (int32_t)((uint32_t)acc[i%d * %lld + "
        "i%d] - (uint32_t)comp[i%d]);\n",
        tz.it_m, tz.it_m, (long long)M, tz.it_m, tz.it_n, tz.it_n, (long long)N,
        tz.it_n, tz.it_m, (long long)np, tz.it_n, tz.it_n);
    strcpy(ind, "            ");
    rc = kl_cg_int_epilogue(&b, w, ind, err);
    kl_buf_puts(&b, "        }\n    free(acc);\n}\n");
done:
    kl_buf_free(&em);
    kl_buf_free(&en);
    kl_buf_free(&ek);
    return kl_cg_tz_kernel(&b, entry, rc, out);
}
