/* codegen_cuda_mma.c - tensor-core (mma.sync) schedules -> CUDA C: the
 * plan is kl_cuda_mma_plan (coordinator/space/kl_cuda_plan.h); the
 * CUDA-core kernels are codegen_cuda.c's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_cuda_priv.h"
#include "kl_err.h"

/* The flat offset of a plain access (kl_cuda_mma_match: one iterator per
 * dimension) with iterator values named by names[]. */
static void s_mma_offset(const kl_workload_t *w, const kl_access_t *a,
                         char names[][24], kl_buf_t *b)
{
    const kl_tensor_t *t = &w->tensors[a->tensor];
    int64_t st = 1;
    bool any = false;
    kl_buf_puts(b, "(");
    for (int d = t->ndim - 1; d >= 0; d--) {
        for (int k = 0; k < w->niters; k++) {
            if (!a->idx[d].coef[k])
                continue;
            kl_buf_printf(b, "%s%s", any ? " + " : "", names[k]);
            if (st != 1)
                kl_buf_printf(b, " * %" PRId64, st);
            any = true;
        }
        st *= t->shape[d];
    }
    kl_buf_puts(b, any ? ")" : "0)");
}

/* Copies the block's m (or n) x BK slab of input tensor ti into shared
 * array dst (row r = m or n offset, column = k offset; zero outside). The
 * threads walk the slab along the tensor's unit-stride iterator (k, or the
 * row iterator of a tensor stored k-major, as B of a row-major matmul), so
 * that neighbouring threads read neighbouring elements. */
static void s_mma_copy(g_t *g, const kl_cuda_mma_plan_t *p, int ti, int row_it,
                       int64_t rows, const char *dst, char names[][24])
{
    const kl_workload_t *w = g->w;
    const kl_cuda_mma_match_t *mm = &p->mm;
    const char *base = row_it == mm->m ? "kl_m0" : "kl_n0";
    const int64_t *st = ti == mm->a ? mm->sa : mm->sb;
    bool rows_inner = st[row_it] == 1;
    kl_codegen__cuda_line(
        g, "for (int f = kl_tid; f < %" PRId64 "; f += %" PRId64 ") {",
        rows * p->bk, p->threads);
    g->ind++;
    char rr[64], cc[64];
    if (rows_inner) {
        snprintf(rr, sizeof rr, "f %% %" PRId64, rows);
        snprintf(cc, sizeof cc, "f / %" PRId64, rows);
    } else {
        snprintf(rr, sizeof rr, "f / %" PRId64, p->bk);
        snprintf(cc, sizeof cc, "f %% %" PRId64, p->bk);
    }
    kl_codegen__cuda_line(g, "const %s r = %s + %s, c = k0 * %" PRId64 " + %s;",
                          g->ity, base, rr, p->bk, cc);
    char saved_r[24], saved_k[24];
    memcpy(saved_r, names[row_it], 24);
    memcpy(saved_k, names[mm->k], 24);
    snprintf(names[row_it], 24, "r");
    snprintf(names[mm->k], 24, "c");
    kl_buf_t off = {0};
    const kl_access_t *a =
        &(g->w->body->a->access.tensor == ti ? g->w->body->a : g->w->body->b)
             ->access;
    s_mma_offset(w, a, names, &off);
    kl_codegen__cuda_line(g,
                          "%s[%s * %" PRId64 " + %s] = r < %" PRId64
                          " && c < %" PRId64 " ? a%d[%s] : (unsigned short)0;",
                          dst, rr, p->pitch, cc, w->iters[row_it].extent,
                          w->iters[mm->k].extent, ti, off.data);
    kl_buf_free(&off);
    memcpy(names[row_it], saved_r, 24);
    memcpy(names[mm->k], saved_k, 24);
    kl_codegen__cuda_close(g);
}

static void s_mma_epilogue(g_t *g, char names[][24])
{
    for (int i = 0; i < g->w->nepi; i++) {
        const kl_epilogue_t *ep = &g->w->epi[i];
        kl_buf_t x = {0};
        if (ep->kind == KL_EPI_ADD_TENSOR || ep->kind == KL_EPI_MUL_TENSOR) {
            kl_buf_t off = {0};
            s_mma_offset(g->w, &ep->access, names, &off);
            kl_buf_printf(&x, "a%d[%s]", ep->access.tensor, off.data);
            kl_buf_free(&off);
        }
        kl_codegen__cuda_epi(g, ep, x.data);
        kl_buf_free(&x);
    }
}

/* The device functions the kernel calls: kl_mma_ENTRY, and kl_ldsm_ENTRY
 * with ldmatrix. */
static void s_mma_device_fns(g_t *g, const kl_cuda_mma_plan_t *p,
                             const char *entry)
{
    const kl_cuda_mma_match_t *mm = &p->mm;
    const char *dt = mm->in == KL_DT_BF16 ? "bf16" : "f16";
    /* One warp-wide m16n8k16: d (this lane's C/D fragment, c0..c3) +=
     * A (a0..a7 in 4 registers) * B (b0..b3 in 2). The CPU emulation of
     * the tests (KL_CUDA_EMU) runs the same fragments through a C model
     * of the instruction. */
    kl_buf_printf(
        &g->b,
        "static __device__ __forceinline__ void kl_mma_%s(float *d, "
        "const unsigned *a, const unsigned *b)\n{\n"
        "#if defined(KL_CUDA_EMU)\n"
        "    kl_emu_mma_m16n8k16(%d, d, a, b);\n"
        "#else\n"
        "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.%s."
        "%s.f32 {%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, {%%8, "
        "%%9}, {%%0, %%1, %%2, %%3};\"\n"
        "                 : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), "
        "\"+f\"(d[3])\n"
        "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), "
        "\"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
        "#endif\n}\n",
        entry, mm->in == KL_DT_BF16 ? 1 : 0, dt, dt);
    if (p->ldmatrix)
        /* ldmatrix.sync m8n8 .xN: lanes 8j..8j+7 give the row addresses of
         * matrix j; lane 4g+t receives row g, elements 2t, 2t+1 of each
         * matrix in register j. */
        kl_buf_printf(
            &g->b,
            "static __device__ __forceinline__ void kl_ldsm_%s(int x, unsigned "
            "*r, const unsigned short *p)\n{\n"
            "#if defined(KL_CUDA_EMU)\n"
            "    kl_emu_ldmatrix(x, r, p);\n"
            "#else\n"
            "    unsigned a;\n"
            "    asm(\"{ .reg .u64 s; cvta.to.shared.u64 s, %%1; cvt.u32.u64 "
            "%%0, s; }\" : \"=r\"(a) : \"l\"(p));\n"
            "    if (x == 4)\n"
            "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
            "{%%0, %%1, %%2, %%3}, [%%4];\"\n"
            "                     : \"=r\"(r[0]), \"=r\"(r[1]), "
            "\"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(a));\n"
            "    else\n"
            "        asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 "
            "{%%0, %%1}, [%%2];\"\n"
            "                     : \"=r\"(r[0]), \"=r\"(r[1]) : "
            "\"r\"(a));\n"
            "#endif\n}\n",
            entry);
}

/* The signature, the thread's ids, the block's origin, the shared tiles
 * and the accumulators at 0. */
static void s_mma_prologue(g_t *g, const kl_cuda_mma_plan_t *p,
                           const char *entry, char names[][24])
{
    const kl_workload_t *w = g->w;
    const kl_cuda_mma_match_t *mm = &p->mm;
    const char *dt = mm->in == KL_DT_BF16 ? "bf16" : "f16";
    kl_buf_printf(&g->b,
                  "extern \"C\" __global__ void __launch_bounds__(%" PRId64
                  ")\n%s(",
                  p->threads, entry);
    for (int i = 0; i < w->ntensors; i++) {
        bool half = w->tensors[i].dtype != KL_DT_F32;
        kl_buf_printf(&g->b, "%s%s%s *__restrict__ a%d", i ? ", " : "",
                      i == g->out ? "" : "const ",
                      half ? "unsigned short" : "float", i);
    }
    kl_buf_puts(&g->b, ")\n{\n");
    g->ind = 1;
    kl_codegen__cuda_line(g, "/* %s, %s: %s bits; lane = 4 * group + t */",
                          w->tensors[mm->a].name, w->tensors[mm->b].name, dt);
    kl_codegen__cuda_line(
        g, "const int kl_tid = threadIdx.x, kl_lane = kl_tid %% 32, "
           "kl_warp = kl_tid / 32;");
    kl_codegen__cuda_line(g,
                          "const int kl_g = kl_lane / 4, kl_t = kl_lane %% 4;");
    kl_codegen__cuda_line(g,
                          "const int kl_wm = kl_warp / %" PRId64
                          ", kl_wn = kl_warp %% %" PRId64 ";",
                          p->warps_n, p->warps_n);
    const kl_loop_t *blk = kl_sched_loop(g->s, 0);
    kl_codegen__cuda_line(g, "const %s l%d = blockIdx.x;", g->ity, blk->id);
    for (int q = 0; q < blk->nparts; q++) {
        kl_buf_t x = {0};
        kl_codegen__cuda_part(g, &x, 0, q);
        int it = blk->parts[q].iter;
        const char *nm = it == mm->m ? "kl_m0" : it == mm->n ? "kl_n0" : NULL;
        if (nm)
            kl_codegen__cuda_line(g, "const %s %s = %s * %" PRId64 ";", g->ity,
                                  nm, x.data, blk->parts[q].stride);
        else
            kl_codegen__cuda_line(g, "const %s %s = %s;", g->ity, names[it],
                                  x.data);
        kl_buf_free(&x);
    }
    kl_codegen__cuda_line(
        g, "__shared__ __align__(16) unsigned short kl_sa[%" PRId64 "];",
        p->bm * p->pitch);
    kl_codegen__cuda_line(
        g, "__shared__ __align__(16) unsigned short kl_sb[%" PRId64 "];",
        p->bn * p->pitch);
    kl_codegen__cuda_line(g, "float acc[%" PRId64 "][%" PRId64 "][4];",
                          p->tiles_m, p->tiles_n);
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int i = 0; i < %" PRId64 "; ++i)",
                          p->tiles_m * p->tiles_n * 4);
    kl_codegen__cuda_line(g, "    (&acc[0][0][0])[i] = 0.0f;");
}

/* A's fragments of step k1 for the warp's m tiles. */
static void s_mma_frag_a(g_t *g, const kl_cuda_mma_plan_t *p, const char *entry)
{
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int mt = 0; mt < %" PRId64 "; ++mt) {",
                          p->tiles_m);
    g->ind++;
    kl_codegen__cuda_line(
        g, "/* A 16x16 row: a0,a1 (g, 2t..2t+1) a2,a3 (g+8, 2t..) a4,a5 "
           "(g, 2t+8..) a6,a7 (g+8, 2t+8..) */");
    if (p->ldmatrix) {
        kl_codegen__cuda_line(
            g, "/* matrices (rows 0-7, k 0-7) (8-15, 0-7) (0-7, 8-15) "
               "(8-15, 8-15) */");
        kl_codegen__cuda_line(g,
                              "kl_ldsm_%s(4, fa[mt], &kl_sa[(kl_wm * %" PRId64
                              " + mt * 16 + kl_lane %% 16) * %" PRId64
                              " + k1 * 16 + kl_lane / 16 * 8]);",
                              entry, 16 * p->tiles_m, p->pitch);
    } else {
        kl_codegen__cuda_line(
            g,
            "const unsigned short *s = &kl_sa[(kl_wm * %" PRId64
            " + mt * 16 + kl_g) * %" PRId64 " + k1 * 16 + kl_t * 2];",
            16 * p->tiles_m, p->pitch);
        kl_codegen__cuda_line(g, "fa[mt][0] = s[0] | (unsigned)s[1] << 16;");
        kl_codegen__cuda_line(
            g, "fa[mt][1] = s[%" PRId64 "] | (unsigned)s[%" PRId64 "] << 16;",
            8 * p->pitch, 8 * p->pitch + 1);
        kl_codegen__cuda_line(g, "fa[mt][2] = s[8] | (unsigned)s[9] << 16;");
        kl_codegen__cuda_line(
            g, "fa[mt][3] = s[%" PRId64 "] | (unsigned)s[%" PRId64 "] << 16;",
            8 * p->pitch + 8, 8 * p->pitch + 9);
    }
    kl_codegen__cuda_close(g);
}

/* B's fragments of step k1 for the warp's n tiles. */
static void s_mma_frag_b(g_t *g, const kl_cuda_mma_plan_t *p, const char *entry)
{
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int nt = 0; nt < %" PRId64 "; ++nt) {",
                          p->tiles_n);
    g->ind++;
    kl_codegen__cuda_line(
        g, "/* B 16x8 col: b0,b1 (k 2t..2t+1, n g) b2,b3 (k 2t+8.., n g) "
           "*/");
    if (p->ldmatrix) {
        kl_codegen__cuda_line(g,
                              "/* matrices (n 0-7, k 0-7) (n 0-7, k 8-15) */");
        kl_codegen__cuda_line(g,
                              "kl_ldsm_%s(2, fb[nt], &kl_sb[(kl_wn * %" PRId64
                              " + nt * 8 + kl_lane %% 8) * %" PRId64
                              " + k1 * 16 + kl_lane / 8 %% 2 * 8]);",
                              entry, 8 * p->tiles_n, p->pitch);
    } else {
        kl_codegen__cuda_line(
            g,
            "const unsigned short *s = &kl_sb[(kl_wn * %" PRId64
            " + nt * 8 + kl_g) * %" PRId64 " + k1 * 16 + kl_t * 2];",
            8 * p->tiles_n, p->pitch);
        kl_codegen__cuda_line(g, "fb[nt][0] = s[0] | (unsigned)s[1] << 16;");
        kl_codegen__cuda_line(g, "fb[nt][1] = s[8] | (unsigned)s[9] << 16;");
    }
    kl_codegen__cuda_close(g);
}

/* The reduction: per k0 the shared tiles copied, per k1 the fragments
 * loaded and every (m tile, n tile) multiplied. */
static void s_mma_kloop(g_t *g, const kl_cuda_mma_plan_t *p, const char *entry,
                        char names[][24])
{
    const kl_workload_t *w = g->w;
    const kl_cuda_mma_match_t *mm = &p->mm;
    kl_codegen__cuda_line(g, "for (int k0 = 0; k0 < %" PRId64 "; ++k0) {",
                          p->kouter);
    g->ind++;
    kl_codegen__cuda_line(g, "__syncthreads();");
    kl_codegen__cuda_line(g,
                          "/* %s: rows m, columns k; %s: rows n, columns k */",
                          w->tensors[mm->a].name, w->tensors[mm->b].name);
    s_mma_copy(g, p, mm->a, mm->m, p->bm, "kl_sa", names);
    s_mma_copy(g, p, mm->b, mm->n, p->bn, "kl_sb", names);
    kl_codegen__cuda_line(g, "__syncthreads();");
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int k1 = 0; k1 < %" PRId64 "; ++k1) {",
                          p->ksteps);
    g->ind++;
    kl_codegen__cuda_line(g, "unsigned fa[%" PRId64 "][4], fb[%" PRId64 "][2];",
                          p->tiles_m, p->tiles_n);
    s_mma_frag_a(g, p, entry);
    s_mma_frag_b(g, p, entry);
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int mt = 0; mt < %" PRId64 "; ++mt)",
                          p->tiles_m);
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "    for (int nt = 0; nt < %" PRId64 "; ++nt)",
                          p->tiles_n);
    kl_codegen__cuda_line(g, "        kl_mma_%s(acc[mt][nt], fa[mt], fb[nt]);",
                          entry);
    kl_codegen__cuda_close(g);
    kl_codegen__cuda_close(g);
}

/* Each accumulator through the epilogue into the output, in bounds. */
static void s_mma_store(g_t *g, const kl_cuda_mma_plan_t *p, char names[][24])
{
    const kl_workload_t *w = g->w;
    const kl_cuda_mma_match_t *mm = &p->mm;
    kl_codegen__cuda_line(
        g, "/* C/D 16x8: c0,c1 (g, 2t..2t+1) c2,c3 (g+8, 2t..) */");
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int mt = 0; mt < %" PRId64 "; ++mt)",
                          p->tiles_m);
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int nt = 0; nt < %" PRId64 "; ++nt)",
                          p->tiles_n);
    kl_codegen__cuda_line(g, "#pragma unroll");
    kl_codegen__cuda_line(g, "for (int i = 0; i < 4; ++i) {");
    g->ind++;
    snprintf(names[mm->m], sizeof names[mm->m], "m");
    snprintf(names[mm->n], sizeof names[mm->n], "n");
    kl_codegen__cuda_line(g,
                          "const %s m = kl_m0 + kl_wm * %" PRId64
                          " + mt * 16 + kl_g + i / 2 * 8;",
                          g->ity, 16 * p->tiles_m);
    kl_codegen__cuda_line(g,
                          "const %s n = kl_n0 + kl_wn * %" PRId64
                          " + nt * 8 + kl_t * 2 + i %% 2;",
                          g->ity, 8 * p->tiles_n);
    kl_codegen__cuda_line(g, "if (m < %" PRId64 " && n < %" PRId64 ") {",
                          w->iters[mm->m].extent, w->iters[mm->n].extent);
    g->ind++;
    kl_codegen__cuda_line(g, "float v = acc[mt][nt][i];");
    s_mma_epilogue(g, names);
    kl_buf_t off = {0};
    s_mma_offset(w, &w->out, names, &off);
    kl_codegen__cuda_line(g, "a%d[%s] = v;", g->out, off.data);
    kl_buf_free(&off);
    kl_codegen__cuda_close(g);
    kl_codegen__cuda_close(g);
    kl_buf_puts(&g->b, "}\n");
}

static void s_emit_mma(g_t *g, const kl_cuda_mma_plan_t *p, const char *entry)
{
    const kl_workload_t *w = g->w;
    const kl_cuda_mma_match_t *mm = &p->mm;
    const char *dt = mm->in == KL_DT_BF16 ? "bf16" : "f16";
    const kl_codegen__kv_t kv[] = {
        KL_CG_S("name", w->name ? w->name : w->op_kind),
        KL_CG_I("grid", p->grid),
        KL_CG_I("threads", p->threads),
        KL_CG_I("smem", p->smem_bytes),
        KL_CG_S("dt", dt),
        KL_CG_I("bm", p->bm),
        KL_CG_I("bn", p->bn),
        KL_CG_I("bk", p->bk),
        KL_CG_I("wm", p->warps_m),
        KL_CG_I("wn", p->warps_n),
        KL_CG_I("tm", p->tiles_m),
        KL_CG_I("tn", p->tiles_n),
        KL_CG_END};
    kl_codegen__template(
        &g->b,
        "/* kiln cuda kernel: ${name}; grid (${grid}, 1, 1), block "
        "(${threads}, 1, 1), ${smem} bytes shared; tensor cores: mma.sync "
        "m16n8k16 ${dt} x ${dt} -> f32, block tile ${bm}x${bn}x${bk}, "
        "${wm}x${wn} warps of ${tm}x${tn} tiles */\n",
        kv);
    s_mma_device_fns(g, p, entry);
    char names[KL_IR_MAX_ITERS][24];
    for (int k = 0; k < w->niters; k++)
        snprintf(names[k], sizeof names[k], "kl_i%d", k);
    s_mma_prologue(g, p, entry, names);
    s_mma_kloop(g, p, entry, names);
    s_mma_store(g, p, names);
}

/* Generates a tensor-core schedule; KL_ERR_NOTFOUND when s is not one. */
int kl_codegen__cuda_mma(const kl_sched_t *s, const kl_target_t *t,
                         const char *entry, kl_kernel_t *out, char *err)
{
    kl_cuda_mma_plan_t p;
    int rc = kl_cuda_mma_plan(s, t, &p, err);
    if (rc)
        return rc;
    g_t g;
    memset(&g, 0, sizeof g);
    g.s = s;
    g.w = kl_sched_workload(s);
    g.out = kl_workload_output(g.w);
    g.p.nloops = kl_sched_nloops(s);
    g.ity = "int";
    for (int i = 0; i < g.w->ntensors; i++)
        if (kl_tensor_numel(&g.w->tensors[i]) >= ((int64_t)1 << 31))
            g.ity = "long long";
    s_emit_mma(&g, &p, entry);
    out->source = kl_buf_take(&g.b);
    out->entry = kl_xstrdup(entry);
    out->launched = true;
    out->grid[0] = p.grid;
    out->grid[1] = out->grid[2] = 1;
    out->block[0] = p.threads;
    out->block[1] = out->block[2] = 1;
    out->shared_bytes = 0;
    return KL_OK;
}
