/* codegen_amx.c - C of an AMX tile kernel for a product (kl_intrin.h rows
 * amx_bf16 and amx_int8; docs/architecture.md, "The tensorize primitive").
 *
 * Not driven by a schedule yet: one fixed tiling, a grid of 2 x 2
 * accumulator tiles (tmm0-3, 16 x 16 f32 or s32 each: a 32 x 32 output
 * block) fed by 2 A tiles (tmm4-5, 16 rows x 64 bytes: 32 bf16 or 64 u8
 * reduction points) and 2 B tiles (tmm6-7, 16 rows of 16 columns x red
 * values, i.e. the [K/red][N][red] layout), the 32 x 32 blocks parallel
 * (OpenMP), the reduction stepped by 64 bytes of A. The tile
 * configuration is one 64-byte palette-1 struct (rows and bytes per row
 * of each of the 8 tiles) loaded by every thread (_tile_loadconfig) and
 * released at its end (_tile_release).
 *
 * ENTRY_prepare checks the CPU (amx-tile and the row's amx-bf16 /
 * amx-int8) and asks Linux for the tile state, arch_prctl(
 * ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): NULL when either fails, so
 * a kernel fails cleanly instead of trapping. It packs B (const) into
 * column panels [Np/16][Kp/red][16][red] (bf16 bits rounded to nearest
 * even for amx_bf16, zeros past K and N) and, for amx_int8, the
 * zero-point compensation comp[n] = za * sum_k B[k][n]. Each call packs A
 * into [Mp][Kp] (bf16 bits, or the u8 bytes), zeros past M and K, and
 * every output point of a block goes from the stored tiles through the
 * workload's epilogue (f32 for bf16; the integer epilogue and saturating
 * store of codegen_int.c for int8, after acc - comp). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_act.h"
#include "cg_emit.h"
#include "cg_int.h"
#include "cg_tz.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_util.h"

typedef struct {
    const kl_workload_t *w;
    const kl_intrin_t *in;
    kl_tensorize_t tz;
    bool bf; /* amx_bf16 (else amx_int8) */
    int64_t M, N, K, Mp, Np, Kp;
    int64_t esz; /* bytes of one A / B element: 2 or 1 */
    kl_buf_t b;
} amx_t;

/* The product's iterators and tensors: tensorize's match on a nest
 * i, jo, ko, [ji ki] (its refusals name what differs). */
static int s_match(amx_t *p, char *err)
{
    kl_sched_t *s = NULL;
    int rc = kl_sched_create(&s, p->w, err);
    if (rc)
        return rc;
    if (kl_sched_nloops(s) != 3) {
        kl_sched_destroy(&s);
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "codegen: %s: not a product (3 loops wanted)",
                         p->in->name);
    }
    int j2[2], k2[2];
    int64_t N = kl_sched_loop(s, 1)->extent, K = kl_sched_loop(s, 2)->extent;
    int64_t fj[2] = {(N + 15) / 16, 16},
            fk[2] = {(K + p->in->red - 1) / p->in->red, p->in->red};
    rc = kl_sched_split(s, kl_sched_loop(s, 1)->id, fj, 2, j2, err);
    if (!rc)
        rc = kl_sched_split(s, kl_sched_loop(s, 3)->id, fk, 2, k2, err);
    int o[3] = {k2[0], j2[1], k2[1]};
    if (!rc)
        rc = kl_sched_reorder(s, o, 3, err);
    if (!rc)
        rc = kl_sched_tensorize(s, j2[1], p->in->name, err);
    if (!rc)
        rc = kl_sched_tensorized(s, &p->tz, err);
    kl_sched_destroy(&s);
    return rc;
}

/* Includes, the tile configuration and the packers. */
static void s_emit_head(amx_t *p)
{
    int64_t kstep = 64 / p->esz; /* reduction points per A tile row */
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("name", p->in->name),
        KL_CG_S("pragma", p->in->pragma),
        KL_CG_I("M", p->M),
        KL_CG_I("N", p->N),
        KL_CG_I("K", p->K),
        KL_CG_I("Mp", p->Mp),
        KL_CG_I("Kp", p->Kp),
        KL_CG_I("red", p->in->red),
        KL_CG_I("kg", p->Kp / p->in->red),
        KL_CG_I("kstep", kstep),
        KL_CG_S("et", p->bf ? "uint16_t" : "uint8_t"),
        KL_CG_END};
    kl_codegen__template(
        &p->b,
        "/* AMX ${name}: 2 x 2 accumulator tiles, 2 A and 2 B tiles, A "
        "rows of ${kstep} reduction points; B packed once as column "
        "panels [Np/16][Kp/${red}][16][${red}]. */\n"
        "#pragma GCC target(\"${pragma}\")\n#include <immintrin.h>\n"
        "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
        "#include <unistd.h>\n#include <sys/syscall.h>\n"
        "/* The tile configuration (palette 1): tmm0-3 the accumulators, "
        "tmm4-5 A, tmm6-7 B; 16 rows x 64 bytes each. */\n"
        "typedef struct {\n    uint8_t palette_id, start_row;\n"
        "    uint8_t reserved[14];\n    uint16_t colsb[16];\n"
        "    uint8_t rows[16];\n} kl_tilecfg_t;\n"
        "static void kl_tiles_config(void)\n{\n"
        "    kl_tilecfg_t c;\n    memset(&c, 0, sizeof c);\n"
        "    c.palette_id = 1;\n"
        "    for (int t = 0; t < 8; t++) {\n"
        "        c.rows[t] = 16;\n        c.colsb[t] = 64;\n    }\n"
        "    _tile_loadconfig(&c);\n}\n"
        "#define KL_WOFF(k0, n0) ((((n0) / 16) * ${kg}LL + (k0) / ${red}) "
        "* 16 * ${red})\n",
        kv);
    if (p->bf)
        kl_codegen__template(
            &p->b,
            "static inline uint16_t kl_cv(float v)\n{\n    uint32_t x;\n"
            "    memcpy(&x, &v, 4);\n"
            "    if ((x & 0x7fffffffu) > 0x7f800000u)\n"
            "        return (uint16_t)((x >> 16) | 0x40);\n"
            "    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> "
            "16);\n}\n",
            kv);
    else
        kl_buf_printf(&p->b, "#define kl_cv(v) (v)\n%s",
                      kl_codegen__int_prelude());
    kl_codegen__act_prelude_for(&p->b, p->w);
    kl_codegen__template(
        &p->b,
        "/* A as [Mp][Kp], zeros past M and K. */\n"
        "static void kl_packa(const void *A_, ${et} *ap)\n{\n"
        "    #pragma omp parallel for\n"
        "    for (int64_t m = 0; m < ${Mp}; m++)\n"
        "        for (int64_t k = 0; k < ${Kp}; k++)\n"
        "            ap[m * ${Kp} + k] = m < ${M} && k < ${K} ? "
        "kl_cv(((const KL_AT *)A_)[m * ${K} + k]) : 0;\n}\n\n",
        kv);
}

/* ENTRY_prepare: the CPU check, the tile state, the packed B (+ comp). */
static void s_emit_prepare(amx_t *p, const char *entry)
{
    const char *bidx = p->tz.b_nk ? "n * ${K} + k" : "k * ${N} + n";
    int64_t wbytes = (p->Np * p->Kp * p->esz + 63) / 64 * 64;
    char *body = kl_xasprintf(
        "    for (int64_t n = 0; n < ${Np}; n++) {\n"
        "        int64_t sum = 0;\n"
        "        for (int64_t k = 0; k < ${Kp}; k++) {\n"
        "            int in = k < ${K} && n < ${N};\n"
        "            wp[KL_WOFF(k - k %% ${red}, n - n %% 16) + n %% 16 * "
        "${red} + k %% ${red}] = in ? kl_cv(B[%s]) : 0;\n"
        "            sum += in ? (int64_t)B[%s] : 0;\n"
        "        }\n"
        "        comp[n] = (int32_t)(uint32_t)(uint64_t)(sum * ${za});\n"
        "    }\n"
        "    return blk;\n}\n\n",
        bidx, bidx);
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("entry", entry),
        KL_CG_S("builtin", p->in->builtin),
        KL_CG_I("tb", p->tz.tb),
        KL_CG_I("wbytes", wbytes),
        KL_CG_I("blk", wbytes + (p->Np * 4 + 63) / 64 * 64),
        KL_CG_S("et", p->bf ? "uint16_t" : "int8_t"),
        KL_CG_S("bt", p->bf ? "float" : "int8_t"),
        KL_CG_I("Np", p->Np),
        KL_CG_I("Kp", p->Kp),
        KL_CG_I("K", p->K),
        KL_CG_I("N", p->N),
        KL_CG_I("red", p->in->red),
        KL_CG_I("za", p->tz.za),
        KL_CG_END};
    kl_codegen__template(
        &p->b,
        "void *${entry}_prepare(void *const *args)\n{\n"
        "    /* Refuse (NULL) without AMX or without Linux's permission for "
        "the tile state (arch_prctl ARCH_REQ_XCOMP_PERM = 0x1023, "
        "XFEATURE_XTILEDATA = 18): never SIGILL. */\n"
        "    if (!__builtin_cpu_supports(\"amx-tile\") ||\n"
        "        !__builtin_cpu_supports(\"${builtin}\"))\n"
        "        return NULL;\n"
        "    if (syscall(SYS_arch_prctl, 0x1023, 18))\n"
        "        return NULL;\n"
        "    const ${bt} *B = (const ${bt} *)args[${tb}];\n"
        "    char *blk = (char *)aligned_alloc(64, ${blk});\n"
        "    if (!blk)\n        return NULL;\n"
        "    ${et} *wp = (${et} *)blk;\n"
        "    int32_t *comp = (int32_t *)(blk + ${wbytes});\n",
        kv);
    kl_codegen__template(&p->b, body, kv);
    free(body);
}

/* One output point x of the stored block through the epilogue. */
static int s_emit_point(amx_t *p, char *err)
{
    const kl_workload_t *w = p->w;
    kl_buf_printf(&p->b, "                const int64_t i%d = m, i%d = n;\n",
                  p->tz.it_m, p->tz.it_n);
    char ind[] = "                ";
    if (!p->bf) {
        kl_buf_puts(&p->b, "                int64_t x = (int32_t)((uint32_t)"
                           "cb[r][c] - (uint32_t)comp[n]);\n");
        return kl_codegen__int_epilogue(&p->b, w, ind, err);
    }
    kl_buf_puts(&p->b, "                float x = cb[r][c];\n");
    return kl_codegen__bf16_epilogue(&p->b, w, ind, err);
}

/* The kernel: pack A, the parallel 32 x 32 blocks, the tiles. */
static int s_emit_kernel(amx_t *p, const char *entry, char *err)
{
    int64_t kstep = 64 / p->esz;
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("entry", entry),
        KL_CG_I("nt", p->w->ntensors),
        KL_CG_I("ta", p->tz.ta),
        KL_CG_I("abytes", p->Mp * p->Kp * p->esz),
        KL_CG_I("wbytes", (p->Np * p->Kp * p->esz + 63) / 64 * 64),
        KL_CG_S("et", p->bf ? "uint16_t" : "uint8_t"),
        KL_CG_S("ct", p->bf ? "float" : "int32_t"),
        KL_CG_S("dp", p->bf ? "_tile_dpbf16ps" : "_tile_dpbusd"),
        KL_CG_I("Mb", p->Mp / 32),
        KL_CG_I("Nb", p->Np / 32),
        KL_CG_I("Kp", p->Kp),
        KL_CG_I("ks", kstep),
        KL_CG_I("astr", p->Kp * p->esz),
        KL_CG_I("red", p->in->red),
        KL_CG_I("M", p->M),
        KL_CG_I("N", p->N),
        KL_CG_END};
    kl_buf_printf(&p->b, "void %s(void *const *args)\n{\n", entry);
    kl_codegen__tz_tensor_args(&p->b, p->w);
    kl_codegen__template(
        &p->b,
        "    const char *blk = (const char *)args[${nt}];\n"
        "    const char *wp = blk;\n"
        "    const int32_t *comp = (const int32_t *)(blk + ${wbytes});\n"
        "    (void)comp;\n"
        "    ${et} *ap = (${et} *)aligned_alloc(64, ${abytes});\n"
        "    if (!ap)\n        return;\n"
        "    kl_packa(t${ta}, ap);\n"
        "    #pragma omp parallel\n    {\n"
        "    kl_tiles_config();\n"
        "    ${ct} cb[32][32];\n"
        "    #pragma omp for schedule(static)\n"
        "    for (int64_t bl = 0; bl < ${Mb} * ${Nb}; bl++) {\n"
        "        const int64_t m0 = bl / ${Nb} * 32, n0 = bl % ${Nb} * 32;\n"
        "        _tile_zero(0);\n        _tile_zero(1);\n"
        "        _tile_zero(2);\n        _tile_zero(3);\n"
        "        for (int64_t k0 = 0; k0 < ${Kp}; k0 += ${ks}) {\n"
        "            _tile_loadd(4, ap + m0 * ${Kp} + k0, ${astr});\n"
        "            _tile_loadd(5, ap + (m0 + 16) * ${Kp} + k0, ${astr});\n"
        "            _tile_loadd(6, wp + KL_WOFF(k0, n0) * sizeof(*ap), 64);\n"
        "            _tile_loadd(7, wp + KL_WOFF(k0, n0 + 16) * sizeof(*ap), "
        "64);\n"
        "            ${dp}(0, 4, 6);\n            ${dp}(1, 4, 7);\n"
        "            ${dp}(2, 5, 6);\n            ${dp}(3, 5, 7);\n"
        "        }\n"
        "        _tile_stored(0, &cb[0][0], 128);\n"
        "        _tile_stored(1, &cb[0][16], 128);\n"
        "        _tile_stored(2, &cb[16][0], 128);\n"
        "        _tile_stored(3, &cb[16][16], 128);\n"
        "        for (int64_t r = 0; r < 32 && m0 + r < ${M}; r++)\n"
        "            for (int64_t c = 0; c < 32 && n0 + c < ${N}; c++) {\n"
        "                const int64_t m = m0 + r, n = n0 + c;\n",
        kv);
    int rc = s_emit_point(p, err);
    kl_buf_puts(&p->b, "            }\n    }\n    _tile_release();\n    }\n"
                       "    free(ap);\n}\n");
    return rc;
}

int kl_codegen_amx_product(const kl_workload_t *w, const char *intrin,
                           const char *entry, kl_kernel_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    amx_t *p = kl_xcalloc(1, sizeof *p);
    p->w = w;
    p->in = kl_intrin_find(intrin);
    if (!p->in || !p->in->ntiles) {
        free(p);
        return kl_seterr(err, KL_ERR_INVAL, "codegen: %s is not an AMX row",
                         intrin ? intrin : "?");
    }
    p->bf = p->in->acc_dtype == KL_DT_F32;
    p->esz = p->bf ? 2 : 1;
    int rc = s_match(p, err);
    if (!rc && !p->bf && !w->tensors[p->tz.tb].is_const)
        rc =
            kl_seterr(err, KL_ERR_INVAL, "codegen: %s: B is not const", intrin);
    if (!rc && p->bf && !w->tensors[p->tz.tb].is_const)
        rc = kl_seterr(err, KL_ERR_UNSUPPORTED,
                       "codegen: %s: B is an input (AMX kernels pack B once, "
                       "in prepare: dense, not matmul, for now)",
                       intrin);
    if (rc) {
        free(p);
        return rc;
    }
    p->M = w->iters[p->tz.it_m].extent;
    p->N = w->iters[p->tz.it_n].extent;
    p->K = w->iters[p->tz.it_k].extent;
    int64_t ks = 64 / p->esz;
    p->Mp = (p->M + 31) / 32 * 32;
    p->Np = (p->N + 31) / 32 * 32;
    p->Kp = (p->K + ks - 1) / ks * ks;
    const char *e = entry ? entry : "kl_main";
    kl_buf_printf(&p->b, "#define KL_AT %s\n", p->bf ? "float" : "uint8_t");
    s_emit_head(p);
    s_emit_prepare(p, e);
    rc = s_emit_kernel(p, e, err);
    kl_buf_t b = p->b;
    free(p);
    return kl_codegen__tz_kernel(&b, e, rc, out);
}
