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

#include "cg_emit.h"
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

typedef kl_codegen__tzp_t tzp_t;

static int s_emit_tile_store(tzp_t *p, char *err);

/* The int8 family: activations as bytes, 4 a step (kl_a4). */
static const kl_codegen__tzfam_t s_fam = {
    .a_type = "uint8_t",
    .a_at = "kl_a4(${ab} + m * ${as}, k0)",
    .a_tile = "kl_a4(a_${t}, k0)",
    .tile_store = s_emit_tile_store,
};

/* The shared plan, then the int8 packed weights' and compensation's
 * bytes and whether a fused store is one vector. */
static void s_plan(tzp_t *p)
{
    kl_codegen__tzp_plan(p);
    p->wbytes = (p->kg * p->np * p->in->red + 63) / 64 * 64;
    p->cbytes = (p->np * 4 + 63) / 64 * 64;
    p->vstore =
        p->fused && s_plain_s32_out(p->w, p->tz->it_m, p->tz->it_n, p->M, p->N);
    snprintf(p->ab, sizeof p->ab, "t%d", p->tz->ta);
    p->as = p->K;
}

/* The file's head: includes, the intrinsic and kl_a4. */
static void s_emit_head(tzp_t *p)
{
    const kl_intrin_t *in = p->in;
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("name", in->name),     KL_CG_S("layout", in->layout),
        KL_CG_S("pragma", in->pragma), KL_CG_I("K", p->K),
        KL_CG_I("k4", p->K % 4 == 0),  KL_CG_END};
    kl_codegen__template(
        &p->b,
        "/* Tensorized with ${name}: the weights packed once, in prepare, as "
        "column panels in the ${layout} layout. */\n"
        "#pragma GCC target(\"${pragma}\")\n#include <immintrin.h>\n"
        "#include <stdlib.h>\n#include <string.h>\n",
        kv);
    kl_buf_puts(&p->b, kl_codegen__int_prelude());
    kl_codegen__tz_intrin_macros(&p->b, in->name);
    kl_codegen__template(
        &p->b,
        "/* 4 activations from k0 on, zeros past the end (${K}). */\n"
        "static inline int32_t kl_a4(const uint8_t *row, int64_t k0)\n"
        "{\n    int32_t v = 0;\n    if (${k4} || k0 + 4 <= ${K}) {\n"
        "        memcpy(&v, row + k0, 4);\n        return v;\n    }\n"
        "    uint32_t u = 0;\n"
        "    for (int64_t j = 0; k0 + j < ${K}; j++)\n"
        "        u |= (uint32_t)row[k0 + j] << (8 * j);\n"
        "    return (int32_t)u;\n}\n\n",
        kv);
}

/* ENTRY_prepare. The packed weights: column panels of `lanes` columns,
 * each over all of K in the intrinsic's [K/4][lanes][4] layout, so that
 * one panel is read contiguously as k advances (KL_WOFF: the offset of
 * (k0, n0), both multiples of the block); then comp[n]. */
static void s_emit_prepare(tzp_t *p)
{
    const kl_intrin_t *in = p->in;
    const char *bidx = p->tz->b_nk ? "n * K_ + k" : "k * N_ + n";
    const kl_codegen__kv_t kv[] = {KL_CG_S("entry", p->entry),
                                   KL_CG_S("builtin", in->builtin),
                                   KL_CG_I("tb", p->tz->tb),
                                   KL_CG_I("blk_bytes", p->wbytes + p->cbytes),
                                   KL_CG_I("wbytes", p->wbytes),
                                   KL_CG_I("kg", p->kg),
                                   KL_CG_I("np", p->np),
                                   KL_CG_I("red", in->red),
                                   KL_CG_I("lanes", in->lanes),
                                   KL_CG_I("panel", in->lanes * in->red),
                                   KL_CG_I("K", p->K),
                                   KL_CG_I("N", p->N),
                                   KL_CG_S("bidx", bidx),
                                   KL_CG_I("za", p->tz->za),
                                   KL_CG_END};
    kl_codegen__template(
        &p->b,
        "#define K_ ${K}LL\n#define N_ ${N}LL\n"
        "#define KL_WOFF(k0, n0) ((((n0) / ${lanes}) * ${kg}LL + (k0) / "
        "${red}) * ${panel})\n"
        "void *${entry}_prepare(void *const *args)\n{\n"
        "    /* Refuse (NULL) on a CPU without the intrinsic. */\n"
        "    if (!__builtin_cpu_supports(\"${builtin}\"))\n"
        "        return NULL;\n"
        "    const int8_t *B = (const int8_t *)args[${tb}];\n"
        "    char *blk = (char *)aligned_alloc(64, ${blk_bytes});\n"
        "    if (!blk)\n        return NULL;\n"
        "    int8_t *wp = (int8_t *)blk;\n"
        "    int32_t *comp = (int32_t *)(blk + ${wbytes});\n"
        "    for (int64_t g = 0; g < ${kg}; g++)\n"
        "        for (int64_t n = 0; n < ${np}; n++)\n"
        "            for (int64_t j = 0; j < ${red}; j++) {\n"
        "                int64_t k = g * ${red} + j;\n"
        "                wp[KL_WOFF(g * ${red}, n - n % ${lanes}) + n % "
        "${lanes} * ${red} + j] =\n"
        "                    k < ${K} && n < ${N} ? B[${bidx}] : 0;\n"
        "            }\n"
        "    for (int64_t n = 0; n < ${np}; n++) {\n"
        "        int64_t sum = 0;\n"
        "        for (int64_t k = 0; n < ${N} && k < ${K}; k++)\n"
        "            sum += B[${bidx}];\n"
        "        comp[n] = (int32_t)(uint32_t)(uint64_t)(sum * ${za});\n"
        "    }\n"
        "    return blk;\n}\n\n",
        kv);
}

/* The kernel's signature, its tensors, the prepared block and acc. */
static void s_emit_kernel_open(tzp_t *p)
{
    kl_buf_printf(&p->b, "void %s(void *const *args)\n{\n", p->entry);
    kl_codegen__tz_tensor_args(&p->b, p->w);
    char *alloc = kl_codegen__tzp_acc_alloc(p);
    const kl_codegen__kv_t kv[] = {
        KL_CG_I("nt", p->nt), KL_CG_I("wbytes", p->wbytes),
        KL_CG_S("alloc", alloc ? alloc : ""), KL_CG_END};
    kl_codegen__template(&p->b,
                         "    const int8_t *wp = (const int8_t *)args[${nt}];\n"
                         "    const int32_t *comp = (const int32_t *)((const "
                         "char *)args[${nt}] + ${wbytes});\n",
                         kv);
    if (alloc)
        kl_codegen__template(&p->b,
                             "    int32_t *acc = (int32_t *)${alloc};\n"
                             "    if (!acc)\n        return;\n",
                             kv);
    free(alloc);
}

/* Accumulator t stored as acc - comp, one vector store (lanes past N,
 * an imperfect last block, take the scalar path). */
static void s_emit_store_vec(tzp_t *p, int64_t t)
{
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("i", p->ind), KL_CG_I("t", t),      KL_CG_I("L", p->in->lanes),
        KL_CG_I("N", p->N),   KL_CG_I("ot", p->ot), KL_CG_END};
    kl_codegen__template(&p->b,
                         "${i}if (ok_${t} && n0_${t} + ${L} <= ${N})\n"
                         "${i}    KL_VSTORE(t${ot} + m_${t} * ${N} + n0_${t}, "
                         "KL_VSUB(c_${t}, KL_VLOAD(comp + n0_${t})));\n",
                         kv);
    if (p->N % p->in->lanes)
        kl_codegen__template(
            &p->b,
            "${i}else if (ok_${t}) {\n${i}    int32_t lane[${L}];\n"
            "${i}    KL_VSTORE(lane, c_${t});\n"
            "${i}    for (int64_t q = 0; n0_${t} + q < ${N}; q++)\n"
            "${i}        t${ot}[m_${t} * ${N} + n0_${t} + q] = "
            "(int32_t)((uint32_t)lane[q] - (uint32_t)comp[n0_${t} + q]);\n"
            "${i}}\n",
            kv);
}

/* Accumulator t's lanes through the scalar epilogue (ok_t implies
 * m_t < M: the guards of m's splits). */
static int s_emit_store_epi(tzp_t *p, int64_t t, char *err)
{
    const kl_codegen__kv_t kv[] = {KL_CG_S("i", p->ind),
                                   KL_CG_I("t", t),
                                   KL_CG_I("L", p->in->lanes),
                                   KL_CG_I("N", p->N),
                                   KL_CG_I("im", p->tz->it_m),
                                   KL_CG_I("in", p->tz->it_n),
                                   KL_CG_END};
    kl_codegen__template(
        &p->b,
        "${i}if (ok_${t}) {\n${i}    int32_t lane[${L}];\n"
        "${i}    KL_VSTORE(lane, c_${t});\n"
        "${i}    for (int64_t q = 0; q < ${L} && n0_${t} + q < ${N}; q++) {\n"
        "${i}        const int64_t i${im} = m_${t}, i${in} = n0_${t} + q;\n"
        "${i}        int64_t x = (int32_t)((uint32_t)lane[q] - "
        "(uint32_t)comp[i${in}]);\n",
        kv);
    char ind2[300];
    snprintf(ind2, sizeof ind2, "%s        ", p->ind);
    int rc = kl_codegen__int_epilogue(&p->b, p->w, ind2, err);
    kl_buf_printf(&p->b, "%s    }\n%s}\n", p->ind, p->ind);
    return rc;
}

/* The register tile's stores, after its reduction run: the output
 * (fused) or acc. */
static int s_emit_tile_store(tzp_t *p, char *err)
{
    int rc = KL_OK;
    for (int64_t t = 0; t < p->ntile && !rc; t++) {
        if (p->fused && p->vstore)
            s_emit_store_vec(p, t);
        else if (p->fused)
            rc = s_emit_store_epi(p, t, err);
        else
            kl_buf_printf(&p->b,
                          "%sif (ok_%lld)\n%s    KL_VSTORE(acc + m_%lld * "
                          "%lld + n0_%lld, c_%lld);\n",
                          p->ind, (long long)t, p->ind, (long long)t,
                          (long long)p->np, (long long)t, (long long)t);
    }
    return rc;
}

/* Not fused: every output point from acc, through the epilogue. */
static int s_emit_epilogue_pass(tzp_t *p, char *err)
{
    if (p->par)
        kl_buf_puts(&p->b, "    #pragma omp parallel for\n");
    const kl_codegen__kv_t kv[] = {
        KL_CG_I("im", p->tz->it_m), KL_CG_I("in", p->tz->it_n),
        KL_CG_I("M", p->M),         KL_CG_I("N", p->N),
        KL_CG_I("np", p->np),       KL_CG_END};
    kl_codegen__template(
        &p->b,
        "    for (int64_t i${im} = 0; i${im} < ${M}; ++i${im})\n"
        "        for (int64_t i${in} = 0; i${in} < ${N}; ++i${in}) {\n"
        "            int64_t x = (int32_t)((uint32_t)acc[i${im} * ${np} + "
        "i${in}] - (uint32_t)comp[i${in}]);\n",
        kv);
    strcpy(p->ind, "            ");
    int rc = kl_codegen__int_epilogue(&p->b, p->w, p->ind, err);
    kl_buf_puts(&p->b, "        }\n    free(acc);\n}\n");
    return rc;
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
    if (kl_intrin_find(tz.intrin)->ntiles)
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "codegen: %s: AMX tile kernels are not generated "
                         "yet",
                         tz.intrin);
    if (kl_intrin_find(tz.intrin)->acc_dtype == KL_DT_F32)
        return kl_codegen__tensorized_bf16(s, &tz, entry, out, err);
    if (tz.conv)
        return kl_codegen_tensorized_conv(s, &tz, entry, out, err);
    tzp_t *p = kl_xcalloc(1, sizeof *p);
    p->s = s;
    p->w = kl_sched_workload(s);
    p->tz = &tz;
    p->in = kl_intrin_find(tz.intrin);
    p->fam = &s_fam;
    p->entry = entry ? entry : "kl_main";
    s_plan(p);
    s_emit_head(p);
    s_emit_prepare(p);
    s_emit_kernel_open(p);
    strcpy(p->ind, "    ");
    rc = kl_codegen__tzp_nest(p, err);
    if (p->fused)
        kl_buf_puts(&p->b, "}\n");
    else
        rc = s_emit_epilogue_pass(p, err);
    return kl_codegen__tzp_finish(p, rc, out);
}
