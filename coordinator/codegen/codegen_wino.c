/* codegen_wino.c - a Winograd convolution kernel (kl_wino.h): the derived
 * batched product's scheduled nest, wrapped in the three transforms.
 *
 *   ENTRY_prepare   U = G g G^T of the constant weights, once, into the
 *                   block, followed by the product's own prepared packs
 *                   and room for V and M;
 *   ENTRY           V = B^T d B of each input tile (tiles shared out over
 *                   the threads, channels in blocks of up to 16), the
 *                   product M[e] = V[e] U[e] (ENTRY_gemm, the schedule's
 *                   nest), then Y = A^T M A per output tile with the
 *                   epilogue.
 *
 * V and M live in the prepared block: allocating them on each call cost
 * more than the product itself (glibc hands the freed pages back and
 * faults them in again on the next call). A flag in the block keeps a
 * second, concurrent call with the same block off them: it allocates its
 * own.
 *
 * Every number is printed into the source: the loops have constant trip
 * counts and the compiler unrolls and vectorizes the channel blocks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_priv.h"
#include "kl_abi.h"
#include "kl_err.h"
#include "kl_wino.h"

/* Largest of 16, 8, 4, 2, 1 that divides n. */
static int s_block(int64_t n)
{
    int b = 16;
    while (b > 1 && n % b)
        b /= 2;
    return b;
}

/* Flat index of an epilogue read, as C over the variables n, k, y, x (the
 * output's iterators z->it[0..3]). */
static void s_epi_index(const kl_workload_t *w, const kl_wino_t *z,
                        const kl_access_t *a, kl_buf_t *out)
{
    static const char *names[4] = {"n", "k", "y", "x"};
    const kl_tensor_t *t = &w->tensors[a->tensor];
    for (int d = 0; d < t->ndim; d++)
        kl_buf_puts(out, "(");
    kl_buf_puts(out, "0");
    for (int d = 0; d < t->ndim; d++) {
        kl_buf_printf(out, " * %lld + (%lld", (long long)t->shape[d],
                      (long long)a->idx[d].offset);
        for (int it = 0; it < w->niters; it++) {
            if (!a->idx[d].coef[it])
                continue;
            for (int v = 0; v < 4; v++)
                if (z->it[v] == it)
                    kl_buf_printf(out, " + %lld * %s",
                                  (long long)a->idx[d].coef[it], names[v]);
        }
        kl_buf_puts(out, "))");
    }
}

static void s_epilogue(cg_t *g, const kl_workload_t *w, const kl_wino_t *z)
{
    for (int i = 0; i < w->nepi; i++) {
        kl_buf_t idx = {0};
        const kl_epilogue_t *ep = &w->epi[i];
        if (ep->kind == KL_EPI_ADD_TENSOR || ep->kind == KL_EPI_MUL_TENSOR)
            s_epi_index(w, z, &ep->access, &idx);
        cg_epilogue_op(g, w, ep, "o", idx.data ? idx.data : "");
        kl_buf_free(&idx);
    }
}

/* Offsets (floats) into the prepared block: U, the product's packs, the
 * busy flag, V, M; and its size. 16-float (64-byte) aligned. */
typedef struct {
    int64_t pk, flag, v, m, size;
} wlay_t;

static int64_t s_up(int64_t n)
{
    return (n + 15) / 16 * 16;
}

static wlay_t s_layout(const cg_t *g, const kl_wino_t *z)
{
    wlay_t l;
    l.pk = s_up(16 * z->c * z->k);
    l.flag = l.pk + s_up(g->prep_elems);
    l.v = l.flag + 16;
    l.m = l.v + s_up(16 * z->tiles * z->c);
    l.size = l.m + s_up(16 * z->tiles * z->k);
    return l;
}

/* ENTRY_prepare: U[e][c][k] = (G g G^T)[i][j], e = 4 i + j, then the
 * product's packs of U. */
static void s_prepare(cg_t *g, const kl_workload_t *w, const kl_wino_t *z,
                      const char *entry, const wlay_t *lay)
{
    const kl_tensor_t *W = &w->tensors[z->wt];
    long long C = z->c, K = z->k, ck = (long long)(z->c * z->k);
    long long s1 = W->shape[1], s2 = W->shape[2], s3 = W->shape[3];
    int64_t bytes = lay->size * 4;
    kl_buf_printf(&g->b,
                  "\n/* The weights' transform G g G^T, once (kl_abi.h), "
                  "then the product's\n * prepared packs of it. */\nvoid "
                  "*%s" KL_ABI_PREPARE_SUFFIX "(void *const *args)\n{\n",
                  entry);
    g->ind = 1;
    cg_line(g, "const float *restrict %s = (const float *)args[%d];", W->name,
            z->wt);
    cg_line(g, "float *kl_pre = (float *)aligned_alloc(64, %lld);",
            (long long)bytes);
    cg_line(g, "if (!kl_pre)");
    cg_line(g, "    return NULL;");
    cg_line(g, "*(int *)(kl_pre + %lld) = 0;", (long long)lay->flag);
    cg_line(g, "#pragma omp parallel for");
    cg_line(g, "for (int64_t c = 0; c < %lld; ++c)", C);
    cg_line(g, "    for (int64_t k = 0; k < %lld; ++k) {", K);
    g->ind = 3;
    cg_line(g, "const float *w = %s + (k * %lld + c) * %lld;", W->name, s1,
            s2 * s3);
    cg_line(g, "float t[4][3];");
    cg_line(g, "for (int j = 0; j < 3; ++j) {");
    cg_line(g, "    t[0][j] = w[j];");
    cg_line(g, "    t[1][j] = 0.5f * (w[j] + w[%lld + j] + w[%lld + j]);", s3,
            2 * s3);
    cg_line(g, "    t[2][j] = 0.5f * (w[j] - w[%lld + j] + w[%lld + j]);", s3,
            2 * s3);
    cg_line(g, "    t[3][j] = w[%lld + j];", 2 * s3);
    cg_line(g, "}");
    cg_line(g, "for (int i = 0; i < 4; ++i) {");
    cg_line(g, "    float *u = kl_pre + (i * %lld + c) * %lld + k;", 4 * C, K);
    cg_line(g, "    u[0] = t[i][0];");
    cg_line(g, "    u[%lld] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);", ck);
    cg_line(g, "    u[%lld] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);", 2 * ck);
    cg_line(g, "    u[%lld] = t[i][2];", 3 * ck);
    cg_line(g, "}");
    g->ind = 2;
    cg_line(g, "}");
    g->ind = 1;
    if (g->prep_elems) {
        cg_line(g, "void *kl_ga[4] = {NULL, kl_pre, NULL, NULL};");
        cg_line(g, "%s_gemm_prepare_into(kl_ga, kl_pre + %lld);", entry,
                (long long)lay->pk);
    }
    cg_line(g, "return kl_pre;");
    kl_buf_puts(&g->b, "}\n");
}

/* Opens the transforms' loops over blocks of blk channels (variable ch0)
 * and tiles (ty, tx, and p), in parallel. Tiles outer (the input: each
 * tile's 16 planes of V are written along the channels, which keeps the
 * stores sequential) or channel blocks outer (the output: each block
 * reads M along its channels for every tile). Closed by s_close_tiles. */
static void s_open_tiles(cg_t *g, const kl_wino_t *z, int64_t channels, int blk,
                         const char *ch0, bool tiles_outer)
{
    long long th = z->th, tw = z->tw;
    cg_line(g, "#pragma omp parallel for");
    if (tiles_outer) {
        cg_line(g, "for (int64_t p = 0; p < %lld; ++p) {", (long long)z->tiles);
        g->ind++;
        cg_line(g,
                "int64_t n = p / %lld, ty = p / %lld %% %lld, tx = p %% %lld;",
                th * tw, tw, th, tw);
        cg_line(g, "for (int64_t %s = 0; %s < %lld; %s += %d) {", ch0, ch0,
                (long long)channels, ch0, blk);
        g->ind++;
        return;
    }
    long long nb = (long long)(channels / blk);
    cg_line(g, "for (int64_t nb = 0; nb < %lld; ++nb) {", (long long)z->n * nb);
    g->ind++;
    cg_line(g, "int64_t n = nb / %lld, %s = nb %% %lld * %d;", nb, ch0, nb,
            blk);
    cg_line(g, "for (int64_t ty = 0; ty < %lld; ++ty)", th);
    cg_line(g, "    for (int64_t tx = 0; tx < %lld; ++tx) {", tw);
    g->ind += 2;
    cg_line(g, "int64_t p = (n * %lld + ty) * %lld + tx;", th, tw);
}

static void s_close_tiles(cg_t *g, bool tiles_outer)
{
    if (tiles_outer) {
        g->ind--;
        cg_line(g, "}");
    } else {
        g->ind -= 2;
        cg_line(g, "    }");
    }
    g->ind--;
    cg_line(g, "}");
}

/* V[e][p][c] = (B^T d B)[i][j] of each 4x4 input tile d, zero outside. */
static void s_input(cg_t *g, const kl_workload_t *w, const kl_wino_t *z)
{
    const kl_tensor_t *X = &w->tensors[z->x];
    int cb = s_block(z->c);
    long long C = z->c, TP = z->tiles, xc = X->shape[1], xh = X->shape[2],
              xw = X->shape[3];
    s_open_tiles(g, z, z->c, cb, "c0", true);
    cg_line(g, "float d[4][4][%d], t[4][4][%d];", cb, cb);
    cg_line(g, "for (int i = 0; i < 4; ++i)");
    cg_line(g, "    for (int j = 0; j < 4; ++j) {");
    g->ind += 2;
    cg_line(g, "int64_t y = 2 * ty + i - %lld, x = 2 * tx + j - %lld;",
            (long long)z->ph, (long long)z->pw);
    cg_line(g, "int in = y >= 0 && y < %lld && x >= 0 && x < %lld;", xh, xw);
    cg_line(g,
            "const float *s = %s + ((n * %lld + c0) * %lld + (in ? y : 0)) * "
            "%lld + (in ? x : 0);",
            X->name, xc, xh, xw);
    cg_line(g, "for (int l = 0; l < %d; ++l)", cb);
    cg_line(g, "    d[i][j][l] = in ? s[l * %lld] : 0.0f;", xh * xw);
    g->ind -= 2;
    cg_line(g, "    }");
    cg_line(g, "for (int j = 0; j < 4; ++j)");
    cg_line(g, "    for (int l = 0; l < %d; ++l) {", cb);
    cg_line(g, "        t[0][j][l] = d[0][j][l] - d[2][j][l];");
    cg_line(g, "        t[1][j][l] = d[1][j][l] + d[2][j][l];");
    cg_line(g, "        t[2][j][l] = d[2][j][l] - d[1][j][l];");
    cg_line(g, "        t[3][j][l] = d[1][j][l] - d[3][j][l];");
    cg_line(g, "    }");
    cg_line(g, "for (int i = 0; i < 4; ++i) {");
    cg_line(g, "    float *v = kl_wv + (i * %lld + p) * %lld + c0;", 4 * TP, C);
    cg_line(g, "    for (int l = 0; l < %d; ++l) {", cb);
    cg_line(g, "        v[l] = t[i][0][l] - t[i][2][l];");
    cg_line(g, "        v[%lld + l] = t[i][1][l] + t[i][2][l];", TP * C);
    cg_line(g, "        v[%lld + l] = t[i][2][l] - t[i][1][l];", 2 * TP * C);
    cg_line(g, "        v[%lld + l] = t[i][1][l] - t[i][3][l];", 3 * TP * C);
    cg_line(g, "    }");
    cg_line(g, "}");
    s_close_tiles(g, true);
}

/* Y = A^T M A per output tile, with the epilogue; tiles past the edge of
 * an odd-sized output write only their inside. */
static void s_output(cg_t *g, const kl_workload_t *w, const kl_wino_t *z)
{
    const kl_tensor_t *Y = &w->tensors[z->y];
    int kb = s_block(z->k);
    long long K = z->k, TP = z->tiles;
    s_open_tiles(g, z, z->k, kb, "k0", false);
    cg_line(g, "float m[4][4][%d], t[2][4][%d];", kb, kb);
    cg_line(g, "for (int e = 0; e < 16; ++e) {");
    cg_line(g, "    const float *s = kl_wm + (e * %lld + p) * %lld + k0;", TP,
            K);
    cg_line(g, "    for (int l = 0; l < %d; ++l)", kb);
    cg_line(g, "        m[e / 4][e %% 4][l] = s[l];");
    cg_line(g, "}");
    cg_line(g, "for (int j = 0; j < 4; ++j)");
    cg_line(g, "    for (int l = 0; l < %d; ++l) {", kb);
    cg_line(g, "        t[0][j][l] = m[0][j][l] + m[1][j][l] + m[2][j][l];");
    cg_line(g, "        t[1][j][l] = m[1][j][l] - m[2][j][l] - m[3][j][l];");
    cg_line(g, "    }");
    cg_line(g, "for (int a = 0; a < 2; ++a)");
    cg_line(g, "    for (int b = 0; b < 2; ++b) {");
    g->ind += 2;
    cg_line(g, "int64_t y = 2 * ty + a, x = 2 * tx + b;");
    cg_line(g, "if (y >= %lld || x >= %lld)", (long long)z->p, (long long)z->q);
    cg_line(g, "    continue;");
    cg_line(g, "for (int l = 0; l < %d; ++l) {", kb);
    g->ind++;
    cg_line(g, "int64_t k = k0 + l;");
    cg_line(g, "float o = b == 0 ? t[a][0][l] + t[a][1][l] + t[a][2][l]");
    cg_line(g, "                 : t[a][1][l] - t[a][2][l] - t[a][3][l];");
    s_epilogue(g, w, z);
    cg_line(g, "%s[((n * %lld + k) * %lld + y) * %lld + x] = o;", Y->name,
            (long long)Y->shape[1], (long long)Y->shape[2],
            (long long)Y->shape[3]);
    g->ind--;
    cg_line(g, "}");
    g->ind -= 2;
    cg_line(g, "    }");
    s_close_tiles(g, false);
}

int cg_emit_winograd(cg_t *g, const char *entry)
{
    const kl_workload_t *w = kl_sched_origin(g->s);
    kl_wino_t z;
    char e[KL_ERRMSG_LEN];
    if (kl_workload_winograd(w, kl_sched_winograd_m(g->s), NULL, &z, e))
        return cg_fail(g, KL_ERR_INVAL, "%s", e);
    kl_buf_puts(&g->b, cg_prelude);
    kl_buf_printf(&g->b,
                  "\n/* Winograd F(2x2,3x3) of %s: the product M[e] = V[e] "
                  "U[e] of\n * the 16 transformed tiles (its schedule), "
                  "wrapped in the transforms. */\n",
                  w->name ? w->name : "a convolution");
    char *gemm = kl_xasprintf("%s_gemm", entry);
    g->nested = true;
    cg_emit_function(g, gemm);
    free(gemm);
    wlay_t lay = s_layout(g, &z);
    s_prepare(g, w, &z, entry, &lay);
    kl_buf_printf(&g->b, "\nvoid %s(void *const *args)\n{\n", entry);
    g->ind = 1;
    for (int t = 0; t < w->ntensors; t++)
        cg_line(g, "%sfloat *restrict %s = (%sfloat *)args[%d];",
                t == z.y ? "" : "const ", w->tensors[t].name,
                t == z.y ? "" : "const ", t);
    cg_line(g, "(void)%s;", w->tensors[z.wt].name);
    cg_line(g, "float *kl_pre = (float *)args[%d];", w->ntensors);
    cg_line(g, "int *kl_busy = (int *)(kl_pre + %lld);", (long long)lay.flag);
    cg_line(g, "int kl_own = __atomic_exchange_n(kl_busy, 1, "
               "__ATOMIC_ACQUIRE);");
    cg_line(g, "float *kl_wv = kl_own ? kl_alloc(%lld) : kl_pre + %lld;",
            (long long)(16 * z.tiles * z.c), (long long)lay.v);
    cg_line(g, "float *kl_wm = kl_own ? kl_alloc(%lld) : kl_pre + %lld;",
            (long long)(16 * z.tiles * z.k), (long long)lay.m);
    s_input(g, w, &z);
    cg_line(g, "void *kl_ga[4] = {kl_wv, kl_pre, kl_wm, kl_pre + %lld};",
            (long long)lay.pk);
    cg_line(g, "%s_gemm(kl_ga);", entry);
    s_output(g, w, &z);
    cg_line(g, "if (kl_own) {");
    cg_line(g, "    free(kl_wv);");
    cg_line(g, "    free(kl_wm);");
    cg_line(g, "} else {");
    cg_line(g, "    __atomic_store_n(kl_busy, 0, __ATOMIC_RELEASE);");
    cg_line(g, "}");
    kl_buf_puts(&g->b, "}\n");
    return KL_OK;
}
