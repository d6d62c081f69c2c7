/* codegen_tensorize_base.c - what the tensorized C generators share
 * (cg_tz.h, cg_tz_conv.h): the kernel's hand-over, the intrinsic's macros,
 * iterator and guard expressions over the loops above the block, and the
 * convolution's output offsets and vector-epilogue test. Below the
 * product generator (codegen_tensorize.c), the convolution core
 * (codegen_tensorize_conv.c) and its NCHW parts (codegen_tensorize_nchw.c),
 * so that calls go down only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_act.h"
#include "cg_emit.h"
#include "cg_tz.h"
#include "cg_tz_conv.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_util.h"

int kl_codegen__tz_kernel(kl_buf_t *b, const char *entry, int rc,
                          kl_kernel_t *out)
{
    if (rc) {
        kl_buf_free(b);
        return rc;
    }
    out->source = kl_buf_take(b);
    out->entry = kl_xstrdup(entry);
    out->prepare = true;
    for (int i = 0; i < 3; i++)
        out->grid[i] = out->block[i] = 1;
    return KL_OK;
}

/* The intrinsic's C: kl_vacc_t, KL_VLOAD/KL_VSTORE/KL_VZERO and kl_dot. */
void kl_codegen__tz_intrin_macros(kl_buf_t *b, const char *name)
{
    if (!strcmp(name, "avx512_vnni")) {
        kl_buf_puts(
            b, "typedef __m512i kl_vacc_t;\n"
               "#define KL_VLOAD(p) _mm512_loadu_si512((const void *)(p))\n"
               "#define KL_VSTORE(p, v) _mm512_storeu_si512((void *)(p), v)\n"
               "#define KL_VZERO() _mm512_setzero_si512()\n"
               "#define KL_VSUB(a, b) _mm512_sub_epi32(a, b)\n"
               "/* vpdpbusd as asm with the accumulator tied (\"+v\"):\n"
               " * the intrinsic makes GCC copy every accumulator of a\n"
               " * register tile to another register (and spill some)\n"
               " * at every step of k. Same instruction, same result. */\n"
               "static inline kl_vacc_t kl_dot(kl_vacc_t c, int32_t a4,\n"
               "                               const int8_t *w)\n"
               "{\n"
               "    __m512i a = _mm512_set1_epi32(a4), wv = KL_VLOAD(w);\n"
               "    __asm__(\"vpdpbusd %2, %1, %0\" : \"+v\"(c) : \"v\"(a), "
               "\"v\"(wv));\n"
               "    return c;\n"
               "}\n");
        return;
    }
    kl_buf_puts(b,
                "typedef __m256i kl_vacc_t;\n"
                "#define KL_VLOAD(p) _mm256_loadu_si256((const __m256i *)(p))\n"
                "#define KL_VSTORE(p, v) _mm256_storeu_si256((__m256i *)(p), "
                "v)\n"
                "#define KL_VZERO() _mm256_setzero_si256()\n"
                "#define KL_VSUB(a, b) _mm256_sub_epi32(a, b)\n");
    if (!strcmp(name, "avx_vnni")) {
        kl_buf_puts(b, "static inline kl_vacc_t kl_dot(kl_vacc_t c, int32_t "
                       "a4,\n                               const int8_t *w)\n"
                       "{ return _mm256_dpbusd_avx_epi32(c, "
                       "_mm256_set1_epi32(a4),\n"
                       "                                 KL_VLOAD(w)); }\n");
        return;
    }
    /* avx2_i8: exact. Each 32-bit lane of w holds s8 b0..b3; the 16-bit
     * halves sign-extended give (b0, b2) and (b1, b3); activations as
     * int16 (a0, a2) and (a1, a3); vpmaddwd sums each pair in int32 with
     * no saturation (|b * a| <= 128 * 255). */
    kl_buf_puts(
        b, "static inline kl_vacc_t kl_dot(kl_vacc_t c, int32_t a4,\n"
           "                               const int8_t *w)\n"
           "{\n"
           "    __m256i wv = KL_VLOAD(w);\n"
           "    __m256i we = _mm256_srai_epi16(_mm256_slli_epi16(wv, 8), 8);\n"
           "    __m256i wo = _mm256_srai_epi16(wv, 8);\n"
           "    uint32_t u = (uint32_t)a4;\n"
           "    __m256i ae = _mm256_set1_epi32((int32_t)((u & 0xffu) |\n"
           "                                   (((u >> 16) & 0xffu) << 16)));\n"
           "    __m256i ao = _mm256_set1_epi32((int32_t)(((u >> 8) & 0xffu) |\n"
           "                                   (((u >> 24) & 0xffu) << 16)));\n"
           "    return _mm256_add_epi32(c, _mm256_add_epi32(\n"
           "        _mm256_madd_epi16(we, ae), _mm256_madd_epi16(wo, ao)));\n"
           "}\n");
}

/* sum over the parts feeding iterator it of loops [0, upto) of the part's
 * value times its stride, as C; the max of that sum into *max. */
void kl_codegen__tz_iter_expr(const kl_sched_t *s, int it, int upto,
                              kl_buf_t *b, int64_t *max)
{
    *max = 0;
    kl_buf_puts(b, "(int64_t)0");
    for (int p = 0; p < upto; p++) {
        const kl_loop_t *l = kl_sched_loop(s, p);
        int64_t inner = 1;
        for (int q = l->nparts - 1; q >= 0; q--) {
            const kl_loop_part_t *pt = &l->parts[q];
            if (pt->iter == it) {
                if (l->nparts == 1)
                    kl_buf_printf(b, " + %lld * l%d", (long long)pt->stride,
                                  l->id);
                else
                    kl_buf_printf(b, " + %lld * ((l%d / %lld) %% %lld)",
                                  (long long)pt->stride, l->id,
                                  (long long)inner, (long long)pt->extent);
                *max += (pt->extent - 1) * pt->stride;
            }
            inner *= pt->extent;
        }
    }
}

/* Guards whose every term sits in loops [lo, hi) or the block (at 0) and
 * at least one in [lo, hi): "&& (... < bound)". */
void kl_codegen__tz_guards(const kl_sched_t *s, int lo, int hi, int bpos,
                           kl_buf_t *b)
{
    for (int g = 0; g < kl_sched_nguards(s); g++) {
        const kl_guard_t *gd = kl_sched_guard(s, g);
        int maxpos = -1;
        for (int t = 0; t < gd->nterms; t++) {
            int pos = kl_sched_loop_pos(s, gd->terms[t].loop);
            if (pos < bpos && pos > maxpos)
                maxpos = pos;
        }
        if (maxpos < lo || maxpos >= hi)
            continue;
        kl_buf_puts(b, " && ((int64_t)0");
        for (int t = 0; t < gd->nterms; t++) {
            int pos = kl_sched_loop_pos(s, gd->terms[t].loop);
            if (pos >= bpos)
                continue;
            const kl_loop_t *l = kl_sched_loop(s, pos);
            int64_t inner = 1;
            for (int q = gd->terms[t].part + 1; q < l->nparts; q++)
                inner *= l->parts[q].extent;
            kl_buf_printf(b, " + %lld * ((l%d / %lld) %% %lld)",
                          (long long)gd->terms[t].coef, l->id, (long long)inner,
                          (long long)l->parts[gd->terms[t].part].extent);
        }
        kl_buf_printf(b, " < %lld)", (long long)gd->bound);
    }
}

void kl_codegen__tz_open(kl_buf_t *b, const kl_loop_t *l, char *ind, bool *par)
{
    if (l->kind == KL_LOOP_PARALLEL && !*par) {
        kl_buf_printf(b, "%s#pragma omp parallel for\n", ind);
        *par = true;
    } else if (l->kind == KL_LOOP_UNROLL) {
        kl_buf_printf(b, "%s#pragma GCC unroll %lld\n", ind,
                      (long long)l->extent);
    }
    kl_buf_printf(b, "%sfor (int64_t l%d = 0; l%d < %lld; ++l%d) {\n", ind,
                  l->id, l->id, (long long)l->extent, l->id);
    strcat(ind, "    ");
}

void kl_codegen__tz_close(kl_buf_t *b, char *ind)
{
    ind[strlen(ind) - 4] = '\0';
    kl_buf_printf(b, "%s}\n", ind);
}

void kl_codegen__tz_tensor_args(kl_buf_t *b, const kl_workload_t *w)
{
    int ot = kl_workload_output(w);
    for (int t = 0; t < w->ntensors; t++) {
        const kl_codegen__kv_t kv[] = {
            KL_CG_S("c", t == ot ? "" : "const "),
            KL_CG_S("ty", kl_dtype_ctype(w->tensors[t].dtype)), KL_CG_I("t", t),
            KL_CG_END};
        kl_codegen__template(
            b, "    ${c}${ty} *restrict t${t} = (${c}${ty} *)args[${t}];\n",
            kv);
    }
}

/* ---- convolutions ---- */

/* The iterator of access a's index d (its last with a coefficient). */
int kl_codegen__tzc_iter_of(const kl_workload_t *w, const kl_affine_t *a)
{
    int it = -1;
    for (int k = 0; k < w->niters; k++)
        if (a->coef[k])
            it = k;
    return it;
}

/* Whether access a reads a 1-D tensor at the output channel f alone. */
static bool s_at_f(const kl_workload_t *w, const kl_access_t *a, int f)
{
    if (w->tensors[a->tensor].ndim != 1 || a->idx[0].offset ||
        a->idx[0].div != 1)
        return false;
    for (int i = 0; i < w->niters; i++)
        if (a->idx[0].coef[i] != (i == f))
            return false;
    return true;
}

/* Whether the epilogue has the q-op form that the AVX-512 vector epilogue
 * computes exactly: [+ bias[f]] requant(S or scale[f], zp) (clip | relu)*
 * with a u8 / s8 output. */
bool kl_codegen__tzc_vec_epi_ok(const conv_t *c)
{
    const kl_workload_t *w = c->w;
    kl_dtype odt = w->tensors[kl_workload_output(w)].dtype;
    if (c->in->lanes != 16 || (odt != KL_DT_U8 && odt != KL_DT_S8))
        return false;
    int i = 0, f = c->tz->it_n;
    if (i < w->nepi && w->epi[i].kind == KL_EPI_ADD_TENSOR) {
        if (!s_at_f(w, &w->epi[i].access, f) ||
            w->tensors[w->epi[i].access.tensor].dtype != KL_DT_S32)
            return false;
        i++;
    }
    if (i >= w->nepi ||
        !(w->epi[i].kind == KL_EPI_REQUANT ||
          (w->epi[i].kind == KL_EPI_REQUANT_TENSOR &&
           s_at_f(w, &w->epi[i].access, f) &&
           w->tensors[w->epi[i].access.tensor].dtype == KL_DT_F32)))
        return false;
    if (w->epi[i].zp < -255 || w->epi[i].zp > 255)
        return false;
    for (i++; i < w->nepi; i++)
        if (w->epi[i].kind != KL_EPI_CLIP && w->epi[i].kind != KL_EPI_RELU)
            return false;
    return true;
}

void kl_codegen__tzc_yoff(kl_buf_t *b, const conv_t *c, int64_t t)
{
    const kl_workload_t *w = c->w;
    const kl_tensor_t *Y = &w->tensors[kl_workload_output(w)];
    kl_buf_puts(b, "(int64_t)0");
    int64_t st = 1;
    for (int d = Y->ndim - 1; d >= 0; d--) {
        kl_buf_printf(b, " + %lld * v%d_%lld", (long long)st,
                      kl_codegen__tzc_iter_of(w, &w->out.idx[d]), (long long)t);
        st *= Y->shape[d];
    }
}

void kl_codegen__tzp_plan(kl_codegen__tzp_t *p)
{
    const kl_sched_t *s = p->s;
    const kl_tensorize_t *tz = p->tz;
    p->bpos = kl_sched_loop_pos(s, tz->loop);
    p->nt = p->w->ntensors;
    p->ot = kl_workload_output(p->w);
    p->M = p->w->iters[tz->it_m].extent;
    p->N = p->w->iters[tz->it_n].extent;
    p->K = p->w->iters[tz->it_k].extent;
    p->hp = p->bpos;
    while (p->hp > 0 && kl_sched_loop(s, p->hp - 1)->reduce)
        p->hp--;
    int64_t mmax, nmax, kmax;
    kl_codegen__tz_iter_expr(s, tz->it_m, p->bpos, &p->em, &mmax);
    kl_codegen__tz_iter_expr(s, tz->it_n, p->bpos, &p->en, &nmax);
    kl_codegen__tz_iter_expr(s, tz->it_k, p->bpos, &p->ek, &kmax);
    p->nb = 1;
    if (tz->it_b >= 0) {
        int64_t bmax;
        kl_codegen__tz_iter_expr(s, tz->it_b, p->bpos, &p->eb, &bmax);
        p->nb = p->w->iters[tz->it_b].extent;
    }
    p->full = true;
    for (int q = 0; q < p->hp; q++)
        if (kl_sched_loop(s, q)->reduce && kl_sched_loop(s, q)->extent > 1)
            p->full = false;
    p->rows = mmax + 1;
    p->np = nmax + p->in->lanes;
    p->kg = kmax / p->in->red + 1;
    /* Fused: the accumulators hold whole sums when stored, so the
     * epilogue runs right there and no acc buffer is needed. */
    p->fused = p->full && p->hp < p->bpos;
    /* The register tile: unrolled spatial loops right above the reduction
     * run, up to 32 accumulators. */
    p->tp = p->hp;
    p->ntile = 1;
    while (p->hp < p->bpos && p->tp > 0 &&
           kl_sched_loop(s, p->tp - 1)->kind == KL_LOOP_UNROLL &&
           !kl_sched_loop(s, p->tp - 1)->reduce &&
           p->ntile * kl_sched_loop(s, p->tp - 1)->extent <= 32) {
        p->tp--;
        p->ntile *= kl_sched_loop(s, p->tp)->extent;
    }
}

/* The row of acc of accumulator t ("" for the block's own m and b):
 * m, or b * rows + m when batched; heap string. */
static char *s_acc_row(const kl_codegen__tzp_t *p, const char *t)
{
    if (p->tz->it_b < 0)
        return kl_xasprintf("m%s", t);
    return kl_xasprintf("(b%s * %lld + m%s)", t, (long long)p->rows, t);
}

/* The register tile's accumulators, each with its m, n0 (and b), guard,
 * start value and activation row, the tile's loops unrolled at their
 * values. */
static void s_tzp_tile(kl_codegen__tzp_t *p)
{
    kl_buf_t g = {0};
    kl_codegen__tz_guards(p->s, 0, p->hp, p->bpos, &g);
    bool bat = p->tz->it_b >= 0;
    for (int64_t t = 0; t < p->ntile; t++) {
        char ts[32];
        snprintf(ts, sizeof ts, "_%lld", (long long)t);
        char *ar = s_acc_row(p, ts);
        char *ba = bat ? kl_xasprintf("bc_%lld * %lld + ", (long long)t,
                                      (long long)p->M)
                       : kl_xstrdup("");
        const kl_codegen__kv_t kv[] = {
            KL_CG_S("i", p->ind),
            KL_CG_I("t", t),
            KL_CG_S("em", p->em.data),
            KL_CG_S("en", p->en.data),
            KL_CG_S("g", g.data ? g.data : ""),
            KL_CG_I("np", p->np),
            KL_CG_S("at", p->fam->a_type),
            KL_CG_S("ab", p->ab),
            KL_CG_I("as", p->as),
            KL_CG_I("M", p->M),
            KL_CG_I("M1", p->M - 1),
            KL_CG_S("ar", ar),
            KL_CG_S("ba", ba),
            KL_CG_S("eb", p->eb.data ? p->eb.data : ""),
            KL_CG_I("nb", p->nb),
            KL_CG_I("nb1", p->nb - 1),
            KL_CG_END};
        kl_codegen__template(
            &p->b,
            bat ? "${i}int64_t m_${t}, n0_${t}, b_${t};\n${i}int ok_${t};\n"
                  "${i}{\n"
                : "${i}int64_t m_${t}, n0_${t};\n${i}int ok_${t};\n${i}{\n",
            kv);
        int64_t rem = t;
        for (int q = p->hp - 1; q >= p->tp; q--) {
            const kl_loop_t *lq = kl_sched_loop(p->s, q);
            kl_buf_printf(&p->b, "%s    const int64_t l%d = %lld;\n", p->ind,
                          lq->id, (long long)(rem % lq->extent));
            rem /= lq->extent;
        }
        kl_codegen__template(
            &p->b,
            "${i}    m_${t} = ${em};\n${i}    n0_${t} = ${en};\n"
            "${i}    ok_${t} = 1${g};\n",
            kv);
        /* Batches past nb (an imperfect split) read the last one: their
         * sums are never stored (ok_t is 0). */
        if (bat)
            kl_codegen__template(&p->b,
                                 "${i}    b_${t} = ${eb};\n${i}}\n"
                                 "${i}const int64_t bc_${t} = b_${t} < ${nb} "
                                 "? b_${t} : ${nb1};\n",
                                 kv);
        else
            kl_buf_printf(&p->b, "%s}\n", p->ind);
        kl_codegen__template(
            &p->b,
            p->full ? "${i}kl_vacc_t c_${t} = KL_VZERO();\n"
                    : "${i}kl_vacc_t c_${t} = ok_${t} ? KL_VLOAD(acc + ${ar} "
                      "* ${np} + n0_${t}) : KL_VZERO();\n",
            kv);
        /* Rows past M (an imperfect split) read row M-1: their sums are
         * never stored (ok_t is 0). */
        kl_codegen__template(&p->b,
                             "${i}const ${at} *a_${t} = ${ab} + (${ba}(m_${t} "
                             "< ${M} ? m_${t} : ${M1})) * ${as};\n",
                             kv);
        free(ar);
        free(ba);
    }
    kl_buf_free(&g);
}

/* Template tmpl at accumulator t with the block's names: ${i}, ${t},
 * ${em}, ${en}, ${ek}, ${eb}, ${g} (the guards), ${np}, ${ab} (ab, or
 * p->ab when NULL), ${as}. */
static void s_tzp_emit(kl_codegen__tzp_t *p, const char *tmpl, int64_t t,
                       const kl_buf_t *g, const char *ab)
{
    const kl_codegen__kv_t kv[] = {KL_CG_S("i", p->ind),
                                   KL_CG_I("t", t),
                                   KL_CG_S("em", p->em.data),
                                   KL_CG_S("en", p->en.data),
                                   KL_CG_S("ek", p->ek.data),
                                   KL_CG_S("eb", p->eb.data ? p->eb.data : ""),
                                   KL_CG_S("g", g->data ? g->data : ""),
                                   KL_CG_I("np", p->np),
                                   KL_CG_S("ab", ab ? ab : p->ab),
                                   KL_CG_I("as", p->as),
                                   KL_CG_END};
    kl_codegen__template(&p->b, tmpl, kv);
}

/* The block: one intrinsic call per accumulator (through acc when no
 * reduction loop runs right above it). Batched, the block reads batch b's
 * activation rows and packed weights (KL_WBAT). */
static void s_tzp_block(kl_codegen__tzp_t *p)
{
    kl_buf_t g = {0};
    kl_codegen__tz_guards(p->s, p->hp, p->bpos, p->bpos, &g);
    bool bat = p->tz->it_b >= 0;
    if (p->hp == p->bpos) {
        kl_codegen__tz_guards(p->s, 0, p->hp, p->bpos, &g);
        char *ar = s_acc_row(p, "");
        char *ab = bat ? kl_xasprintf("(%s + b * %lld)", p->ab,
                                      (long long)(p->M * p->as))
                       : NULL;
        char *dot = kl_xasprintf(
            "${i}const int64_t m = ${em}, n0 = ${en}, k0 = ${ek};\n%s"
            "${i}if (1${g}) {\n"
            "${i}    kl_vacc_t c = KL_VLOAD(acc + %s * ${np} + n0);\n"
            "${i}    c = kl_dot(c, %s, wp + %sKL_WOFF(k0, n0));\n"
            "${i}    KL_VSTORE(acc + %s * ${np} + n0, c);\n${i}}\n",
            bat ? "${i}const int64_t b = ${eb};\n" : "", ar, p->fam->a_at,
            bat ? "KL_WBAT(b) + " : "", ar);
        s_tzp_emit(p, dot, 0, &g, ab);
        free(dot);
        free(ab);
        free(ar);
    } else {
        s_tzp_emit(p, "${i}const int64_t k0 = ${ek};\n${i}if (1${g}) {\n", 0,
                   &g, NULL);
        char *dot =
            kl_xasprintf("${i}    c_${t} = kl_dot(c_${t}, %s, wp + "
                         "%sKL_WOFF(k0, n0_${t}));\n",
                         p->fam->a_tile, bat ? "KL_WBAT(bc_${t}) + " : "");
        for (int64_t t = 0; t < p->ntile; t++)
            s_tzp_emit(p, dot, t, &g, NULL);
        free(dot);
        kl_buf_printf(&p->b, "%s}\n", p->ind);
    }
    kl_buf_free(&g);
}

int kl_codegen__tzp_nest(kl_codegen__tzp_t *p, char *err)
{
    bool tiled = p->hp < p->bpos;
    for (int q = 0; q < p->bpos; q++) {
        if (q == p->tp && tiled)
            s_tzp_tile(p);
        if (q >= p->tp && q < p->hp && tiled)
            continue; /* the tile: unrolled above */
        kl_codegen__tz_open(&p->b, kl_sched_loop(p->s, q), p->ind, &p->par);
    }
    s_tzp_block(p);
    int rc = KL_OK;
    for (int q = p->bpos - 1; q >= 0; q--) {
        if (!(q >= p->tp && q < p->hp && tiled))
            kl_codegen__tz_close(&p->b, p->ind);
        if (q == p->tp && tiled)
            rc = p->fam->tile_store(p, err);
    }
    return rc;
}

char *kl_codegen__tzp_acc_alloc(const kl_codegen__tzp_t *p)
{
    if (p->fused)
        return NULL;
    int64_t n = p->nb * p->rows * p->np;
    return p->full ? kl_xasprintf("malloc(%lld)", (long long)(n * 4))
                   : kl_xasprintf("calloc(%lld, 4)", (long long)n);
}

int kl_codegen__tzp_finish(kl_codegen__tzp_t *p, int rc, kl_kernel_t *out)
{
    kl_buf_free(&p->em);
    kl_buf_free(&p->en);
    kl_buf_free(&p->ek);
    kl_buf_free(&p->eb);
    kl_buf_t b = p->b;
    const char *e = p->entry;
    free(p);
    return kl_codegen__tz_kernel(&b, e, rc, out);
}

/* The access of tensor t in the body (a load). */
const kl_access_t *kl_codegen__tzc_find_access(const kl_expr_t *e, int t)
{
    if (!e)
        return NULL;
    if (e->kind == KL_EX_LOAD && e->access.tensor == t)
        return &e->access;
    const kl_access_t *a = kl_codegen__tzc_find_access(e->a, t);
    return a ? a : kl_codegen__tzc_find_access(e->b, t);
}

/* Declares, for tile t, the values v<it>_t of the spatial iterators with
 * the tile loops [tp, hp) at t's constants, and ok_t (t's guards). */
static void s_tzc_tile_setup(kl_buf_t *b, const conv_t *c, int64_t t,
                             const char *ind)
{
    const kl_workload_t *w = c->w;
    for (int it = 0; it < w->niters; it++)
        if (!w->iters[it].reduce)
            kl_buf_printf(b, "%sint64_t v%d_%lld;\n", ind, it, (long long)t);
    kl_buf_printf(b, "%sint ok_%lld;\n%s{\n", ind, (long long)t, ind);
    int64_t rem = t;
    for (int q = c->hp - 1; q >= c->tp; q--) {
        const kl_loop_t *lq = kl_sched_loop(c->s, q);
        kl_buf_printf(b, "%s    const int64_t l%d = %lld;\n", ind, lq->id,
                      (long long)(rem % lq->extent));
        rem /= lq->extent;
    }
    for (int it = 0; it < w->niters; it++) {
        if (w->iters[it].reduce)
            continue;
        kl_buf_t e = {0};
        int64_t mx;
        kl_codegen__tz_iter_expr(c->s, it, c->hp, &e, &mx);
        kl_buf_printf(b, "%s    v%d_%lld = %s;\n", ind, it, (long long)t,
                      e.data);
        kl_buf_free(&e);
    }
    kl_buf_t g = {0};
    kl_codegen__tz_guards(c->s, 0, c->hp, c->bpos, &g);
    kl_buf_printf(b, "%s    ok_%lld = 1%s;\n%s}\n", ind, (long long)t,
                  g.data ? g.data : "", ind);
    kl_buf_free(&g);
    kl_buf_printf(b, "%skl_vacc_t c_%lld = KL_VZERO();\n", ind, (long long)t);
}

/* sum of coef * value over the iterators of a of one kind (reduce or
 * spatial), tile t's values for spatial ones, rv<it> for reductions. */
static void s_affine_part(kl_buf_t *b, const kl_workload_t *w,
                          const kl_affine_t *a, bool reduce, int64_t t)
{
    for (int it = 0; it < w->niters; it++) {
        if (!a->coef[it] || w->iters[it].reduce != reduce)
            continue;
        if (reduce)
            kl_buf_printf(b, " + %lld * rv%d", (long long)a->coef[it], it);
        else
            kl_buf_printf(b, " + %lld * v%d_%lld", (long long)a->coef[it], it,
                          (long long)t);
    }
}

/* At cp: the taps' values, the tap index and, per tile, the row pointer
 * a_t (X at the pixel's input point, or the za row outside X) and the
 * weight pointer w_t of the tap. */
static void s_tzc_tap_setup(kl_buf_t *b, const conv_t *c, int64_t ntap,
                            int64_t cg, const char *ind)
{
    const kl_workload_t *w = c->w;
    const kl_tensor_t *X = &w->tensors[c->xa->tensor],
                      *W = &w->tensors[c->wa->tensor];
    for (int it = 0; it < w->niters; it++) {
        if (!w->iters[it].reduce || it == c->tz->it_k)
            continue;
        kl_buf_t e = {0};
        int64_t mx;
        kl_codegen__tz_iter_expr(c->s, it, c->bpos, &e, &mx);
        kl_buf_printf(b, "%sconst int64_t rv%d = %s;\n", ind, it, e.data);
        kl_buf_free(&e);
    }
    /* tap = the W index over its tap dimensions, row-major. */
    kl_buf_printf(b, "%sconst int64_t tap = (int64_t)0", ind);
    int64_t st = 1;
    for (int d = W->ndim - 1; d >= 0; d--) {
        int it = kl_codegen__tzc_iter_of(w, &c->wa->idx[d]);
        if (it == c->tz->it_k || it == c->tz->it_n)
            continue;
        kl_buf_printf(b, " + %lld * rv%d", (long long)st, it);
        st *= W->shape[d];
    }
    kl_buf_puts(b, ";\n");
    (void)ntap;
    for (int64_t t = 0; t < c->ntile; t++) {
        kl_buf_printf(b, "%sconst %s *a_%lld;\n%s{\n", ind, c->fam->a_type,
                      (long long)t, ind);
        kl_buf_printf(b, "%s    int in_ = 1;\n%s    int64_t o_ = 0;\n", ind,
                      ind);
        for (int d = 0; d < X->ndim; d++) {
            if (d == c->dc)
                continue;
            kl_buf_printf(b, "%s    { int64_t h = (int64_t)%lld", ind,
                          (long long)(c->xa->idx[d].offset + c->lo[d]));
            s_affine_part(b, w, &c->xa->idx[d], false, t);
            s_affine_part(b, w, &c->xa->idx[d], true, t);
            kl_buf_printf(b,
                          "; in_ &= h >= 0 && h < %lld; o_ = o_ * %lld + h; "
                          "}\n",
                          (long long)c->sh[d], (long long)c->sh[d]);
        }
        if (c->repack)
            kl_buf_printf(b,
                          "%s    a_%lld = in_ ? kl_scr + o_ * %lld : "
                          "kl_zrow;\n%s}\n",
                          ind, (long long)t, (long long)c->cpad, ind);
        else
            kl_buf_printf(
                b, "%s    a_%lld = in_ ? t%d + o_ * %lld : kl_zrow;\n%s}\n",
                ind, (long long)t, c->xa->tensor,
                (long long)X->shape[X->ndim - 1], ind);
        kl_buf_printf(b,
                      "%sconst %s *w_%lld = wp + ((v%d_%lld / %d) * "
                      "%lldLL + tap) * %lldLL;\n",
                      ind, c->fam->w_type, (long long)t, c->tz->it_n,
                      (long long)t, c->in->lanes, (long long)ntap,
                      (long long)(cg * c->fam->cgrp * c->in->lanes));
        if (c->pfg && c->pft[t])
            kl_buf_printf(b,
                          "%sconst %s *pf_%lld = wp + ((((v%d_%lld / %d) "
                          "+ %d) %% %lld) * %lldLL + tap) * %lldLL;\n",
                          ind, c->fam->w_type, (long long)t, c->tz->it_n,
                          (long long)t, c->in->lanes, c->pfg, (long long)c->nkb,
                          (long long)ntap,
                          (long long)(cg * c->fam->cgrp * c->in->lanes));
    }
}

/* The packing of prepare: W's flat index for (tap, c, f), tap decomposed
 * over W's tap dimensions. */
void kl_codegen__tzc_widx(kl_buf_t *b, const conv_t *c)
{
    const kl_workload_t *w = c->w;
    const kl_tensor_t *W = &w->tensors[c->wa->tensor];
    int64_t tst = 1, wst = 1;
    kl_buf_puts(b, "(int64_t)0");
    for (int d = W->ndim - 1; d >= 0; d--) {
        int it = kl_codegen__tzc_iter_of(w, &c->wa->idx[d]);
        if (it == c->tz->it_n)
            kl_buf_printf(b, " + f * %lldLL", (long long)wst);
        else if (it == c->tz->it_k)
            kl_buf_printf(b, " + c * %lldLL", (long long)wst);
        else {
            kl_buf_printf(b, " + (tap / %lld %% %lld) * %lldLL", (long long)tst,
                          (long long)W->shape[d], (long long)wst);
            tst *= W->shape[d];
        }
        wst *= W->shape[d];
    }
}

/* The block's loops: hp, the reduction run; cp, the innermost loops that
 * run the channels only; [tp, hp) the register tile. */
void kl_codegen__tzc_plan_loops(conv_t *c)
{
    const kl_sched_t *s = c->s;
    c->bpos = kl_sched_loop_pos(s, c->tz->loop);
    c->hp = c->bpos;
    while (c->hp > 0 && kl_sched_loop(s, c->hp - 1)->reduce)
        c->hp--;
    c->cp = c->bpos;
    while (c->cp > c->hp) {
        const kl_loop_t *l = kl_sched_loop(s, c->cp - 1);
        bool only_c = true;
        for (int p = 0; p < l->nparts; p++)
            only_c = only_c && l->parts[p].iter == c->tz->it_k;
        if (!only_c)
            break;
        c->cp--;
    }
    /* The register tile: unrolled spatial loops right above hp. */
    c->tp = c->hp;
    c->ntile = 1;
    while (c->tp > 0 && kl_sched_loop(s, c->tp - 1)->kind == KL_LOOP_UNROLL &&
           !kl_sched_loop(s, c->tp - 1)->reduce &&
           c->ntile * kl_sched_loop(s, c->tp - 1)->extent <= MAXT) {
        c->tp--;
        c->ntile *= kl_sched_loop(s, c->tp)->extent;
    }
}

/* The block: the weight prefetches, one intrinsic call per accumulator
 * (c0: ek). */
static void s_tzc_block(kl_buf_t *b, const conv_t *c, const char *ek,
                        const char *ind)
{
    int L = c->in->lanes;
    kl_buf_t g = {0};
    kl_codegen__tz_guards(c->s, c->hp, c->bpos, c->bpos, &g);
    kl_buf_printf(b, "%sconst int64_t c0 = %s;\n%sif (1%s) {\n", ind, ek, ind,
                  g.data ? g.data : "");
    kl_buf_free(&g);
    for (int64_t t = 0; t < c->ntile; t++)
        if (c->pfg && c->pft[t])
            kl_buf_printf(
                b, "%s    __builtin_prefetch(pf_%lld + c0 * %d, 0, 2);\n", ind,
                (long long)t, L);
    for (int64_t t = 0; t < c->ntile; t++) {
        const kl_codegen__kv_t kv[] = {KL_CG_I("t", t), KL_CG_END};
        kl_buf_printf(b, "%s    c_%lld = kl_dot(c_%lld, ", ind, (long long)t,
                      (long long)t);
        kl_codegen__template(b, c->fam->a_dot, kv);
        kl_buf_printf(b, ", w_%lld + c0 * %d);\n", (long long)t, L);
    }
    kl_buf_printf(b, "%s}\n", ind);
}

int kl_codegen__tzc_nest(kl_buf_t *b, const conv_t *c, const char *ek,
                         int64_t ntap, int64_t cg, char *err)
{
    char ind[256] = "    ";
    bool par = false;
    for (int p = 0; p < c->tp; p++)
        kl_codegen__tz_open(b, kl_sched_loop(c->s, p), ind, &par);
    for (int64_t t = 0; t < c->ntile; t++)
        s_tzc_tile_setup(b, c, t, ind);
    for (int p = c->hp; p < c->cp; p++)
        kl_codegen__tz_open(b, kl_sched_loop(c->s, p), ind, &par);
    s_tzc_tap_setup(b, c, ntap, cg, ind);
    for (int p = c->cp; p < c->bpos; p++)
        kl_codegen__tz_open(b, kl_sched_loop(c->s, p), ind, &par);
    s_tzc_block(b, c, ek, ind);
    for (int p = c->bpos - 1; p >= c->hp; p--)
        kl_codegen__tz_close(b, ind);
    int rc = c->fam->stores(b, c, ind, err);
    for (int p = c->tp - 1; p >= 0; p--)
        kl_codegen__tz_close(b, ind);
    return rc;
}
