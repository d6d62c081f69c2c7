/* codegen_wino.c - a Winograd convolution kernel (kl_wino.h): the derived
 * batched product's scheduled nest, wrapped in the three transforms.
 *
 *   ENTRY_prepare   U = G g G^T of the constant weights, once, and the
 *                   product's own prepared packs of it into the block
 *                   (U itself, when the product reads it unpacked);
 *   ENTRY           the input copied channel-innermost and padded (xt,
 *                   rows of 16 pixels x 16 channels turned by a 16 x 16
 *                   register transpose), V = B^T d B of each input tile
 *                   from it (tiles shared out over the threads, 16
 *                   channels a vector), the product M[e] = V[e] U[e]
 *                   (ENTRY_gemm, the schedule's nest), then Y = A^T M A
 *                   per output tile, 16 output channels a vector, each
 *                   row of tiles turned back to rows of pixels by the same
 *                   transpose and stored with the epilogue.
 *
 * F(2x2,3x3) and F(4x4,3x3) differ only in their matrices (s_f2, s_f4,
 * printed as sums over named inputs) and in the tile sizes; the code
 * around them is the same.
 *
 * The NCHW tensors have their channels far apart; gathering a tile's 16
 * channels one float at a time cost more than the transforms' arithmetic
 * (the two transforms took 120-130 of 520-580 us on the 256-channel 14x14
 * layer; 84-103 us with the transposes).
 *
 * V, M and xt live in the library's shared scratch (kl_scratch_claim,
 * the prelude): allocating them on each call cost more than the product
 * itself (glibc hands the freed pages back and faults them in again on
 * the next call), and one scratch per layer (they lived in each layer's
 * prepared block) meant every Winograd layer of a model first fetched
 * megabytes of lines from memory only to overwrite them: ResNet-50's
 * 64-channel 56x56 layer ran 0.27 ms (68 %) slower in the model than
 * tuned, one such layer's 4.7 MB of scratch at memory speed. A second,
 * concurrent call finds the scratch taken and allocates its own.
 *
 * Every number is printed into the source: the loops have constant trip
 * counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_act.h"
#include "cg_priv.h"
#include "kl_abi.h"
#include "kl_err.h"
#include "kl_wino.h"

/* Closes n blocks opened with g->ind++. */
static void s_close(cg_t *g, int n)
{
    while (n-- > 0) {
        g->ind--;
        kl_codegen__c_line(g, "}");
    }
}

/* The three transforms, one row of each matrix per line, over inputs #0,
 * #1, ... (s_apply puts names in): G (alpha x 3) for the weights, B^T
 * (alpha x alpha) for the input, A^T (m x alpha) for the output. G is
 * applied once, in double. m = 4 interpolates at 0, 1, -1, 2, -1/2 and
 * infinity rather than the usual 0, +-1, +-2: in a float emulation of the
 * 256-channel 14x14 layer its largest error against the exact result was
 * 2.5e-4 instead of 6.9e-4 (the plain float reference's own: 1.5e-4). */
typedef struct {
    const char *g[6], *bt[6], *at[4];
} wmat_t;

static const wmat_t s_f2 = {
    {"#0", "0.5 * (#0 + #1 + #2)", "0.5 * (#0 - #1 + #2)", "#2"},
    {"#0 - #2", "#1 + #2", "#2 - #1", "#1 - #3"},
    {"#0 + #1 + #2", "#1 - #2 - #3"},
};

static const wmat_t s_f4 = {
    {"#0", "(-1.0 / 3) * (#0 + #1 + #2)", "(1.0 / 3) * (#0 - #1 + #2)",
     "(1.0 / 15) * #0 + (2.0 / 15) * #1 + (4.0 / 15) * #2",
     "(-16.0 / 15) * #0 + (8.0 / 15) * #1 - (4.0 / 15) * #2", "#2"},
    {"#0 + 1.5f * #1 - 2.0f * #2 - 1.5f * #3 + #4",
     "#4 - #1 - 2.5f * #2 - 0.5f * #3", "#4 + #1 + 0.5f * #2 - 2.5f * #3",
     "#4 - #2 - 0.5f * #1 + 0.5f * #3", "#4 - #2 + 2.0f * (#1 - #3)",
     "#1 + 1.5f * #2 - 2.0f * #3 - 1.5f * #4 + #5"},
    {"#0 + (#1 + #2) + (#3 + #4)", "(#1 - #2) + 2.0f * #3 - 0.5f * #4",
     "(#1 + #2) + 4.0f * #3 + 0.25f * #4",
     "(#1 - #2) + 8.0f * #3 - 0.125f * #4 + #5"},
};

static const wmat_t *s_mat(const kl_wino_t *z)
{
    return z->m == 4 ? &s_f4 : &s_f2;
}

/* row with each #i replaced by pat printed with i (pat has one %d), into
 * out (cleared first). */
static void s_apply(kl_buf_t *out, const char *row, const char *pat)
{
    out->len = 0;
    kl_buf_puts(out, "");
    for (const char *c = row; *c; c++) {
        if (*c == '#' && c[1] >= '0' && c[1] <= '9') {
            kl_buf_printf(out, pat, c[1] - '0');
            c++;
        } else {
            kl_buf_append(out, c, 1);
        }
    }
}

/* One line "t[i][j] = row i over in;" per row, the first step of a 2-D
 * transform (in names input #i, e.g. "d%d"). */
static void s_rows(cg_t *g, const char *const *rows, int n, const char *in)
{
    kl_buf_t x = {0};
    for (int i = 0; i < n; i++) {
        s_apply(&x, rows[i], in);
        kl_codegen__c_line(g, "t[%d][j] = %s;", i, x.data);
    }
    kl_buf_free(&x);
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
        kl_codegen__epilogue_op(g, w, ep, "o", idx.data ? idx.data : "");
        kl_buf_free(&idx);
    }
}

/* The padded, channel-innermost copy of the input that the input
 * transform reads: xt[n][r][q][c] = X[n][c][r - ph][q - pw], zero outside,
 * r < m TH + 2, q < m TW + 2; rows of the channels padded to a multiple of
 * 16 plus 16 floats (a multiple of 64 would put a tile's 16 reads in a
 * few cache sets). */
static int64_t s_xt_stride(const kl_wino_t *z)
{
    return (z->c + 15) / 16 * 16 + 16;
}

static int64_t s_xt_rows(const kl_wino_t *z)
{
    return z->m * z->th + 2;
}

static int64_t s_xt_cols(const kl_wino_t *z)
{
    return z->m * z->tw + 2;
}

static int64_t s_xt_elems(const kl_wino_t *z)
{
    return z->n * s_xt_rows(z) * s_xt_cols(z) * s_xt_stride(z);
}

/* The prepared block's size (floats): the product's packs of U when it
 * has any (U itself then only lives during the prepare step), else U; and
 * the offsets into the per-call scratch (kl_scratch_claim: V at 0, M, 16
 * floats longer since the last block of channels is read as a whole
 * vector, then xt) and its size. 16-float (64-byte) aligned. */
typedef struct {
    int64_t size, m, xt, scratch;
} wlay_t;

static int64_t s_up(int64_t n)
{
    return (n + 15) / 16 * 16;
}

static wlay_t s_layout(const cg_t *g, const kl_wino_t *z)
{
    wlay_t l;
    int64_t e = (int64_t)z->alpha * z->alpha;
    l.size = g->prep_elems ? s_up(g->prep_elems) : s_up(e * z->c * z->k);
    l.m = s_up(e * z->tiles * z->c);
    l.xt = l.m + s_up(e * z->tiles * z->k + 16);
    l.scratch = l.xt + s_up(s_xt_elems(z));
    return l;
}

/* ENTRY_prepare: U[e][c][k] = (G g G^T)[i][j], e = alpha i + j, then the
 * product's packs of U into the block (U in a buffer freed at the end), or
 * U into the block when the product has no packs. */
static void s_prepare(cg_t *g, const kl_workload_t *w, const kl_wino_t *z,
                      const char *entry, const wlay_t *lay)
{
    const kl_tensor_t *W = &w->tensors[z->wt];
    const wmat_t *mt = s_mat(z);
    long long C = z->c, K = z->k, ck = (long long)(z->c * z->k), al = z->alpha;
    long long s1 = W->shape[1], s2 = W->shape[2], s3 = W->shape[3];
    int64_t bytes = lay->size * 4;
    kl_buf_t x = {0};
    kl_buf_printf(&g->b,
                  "\n/* The weights' transform G g G^T, once (kl_abi.h), "
                  "then the product's\n * prepared packs of it. */\nvoid "
                  "*%s" KL_ABI_PREPARE_SUFFIX "(void *const *args)\n{\n",
                  entry);
    g->ind = 1;
    kl_codegen__c_line(g, "const float *restrict %s = (const float *)args[%d];",
                       W->name, z->wt);
    kl_codegen__c_line(g, "float *kl_pre = kl_alloc_block(%lld);",
                       (long long)bytes);
    kl_codegen__c_line(g, "if (!kl_pre)");
    kl_codegen__c_line(g, "    return NULL;");
    if (g->prep_elems) {
        kl_codegen__c_line(g, "float *kl_u = (float *)malloc((size_t)%lld);",
                           (long long)al * al * ck * 4);
        kl_codegen__c_line(g, "if (!kl_u) {");
        kl_codegen__c_line(g, "    free(kl_pre);");
        kl_codegen__c_line(g, "    return NULL;");
        kl_codegen__c_line(g, "}");
    } else {
        kl_codegen__c_line(g, "float *kl_u = kl_pre;");
    }
    kl_codegen__c_line(g, "#pragma omp parallel for");
    kl_codegen__c_line(g, "for (int64_t c = 0; c < %lld; ++c)", C);
    kl_codegen__c_line(g, "    for (int64_t k = 0; k < %lld; ++k) {", K);
    g->ind = 3;
    kl_codegen__c_line(g, "const float *w = %s + (k * %lld + c) * %lld;",
                       W->name, s1, s2 * s3);
    kl_codegen__c_line(g, "double t[%lld][3];", al);
    kl_codegen__c_line(g, "for (int j = 0; j < 3; ++j) {");
    g->ind++;
    kl_codegen__c_line(
        g, "double g0 = w[j], g1 = w[%lld + j], g2 = w[%lld + j];", s3, 2 * s3);
    s_rows(g, mt->g, z->alpha, "g%d");
    s_close(g, 1);
    kl_codegen__c_line(g, "for (int i = 0; i < %lld; ++i) {", al);
    g->ind++;
    kl_codegen__c_line(g, "float *u = kl_u + (i * %lld + c) * %lld + k;",
                       al * C, K);
    for (int j = 0; j < z->alpha; j++) {
        s_apply(&x, mt->g[j], "t[i][%d]");
        kl_codegen__c_line(g, "u[%lld] = (float)(%s);", j * ck, x.data);
    }
    s_close(g, 2);
    kl_buf_free(&x);
    g->ind = 1;
    if (g->prep_elems) {
        kl_codegen__c_line(g, "void *kl_ga[4] = {NULL, kl_u, NULL, NULL};");
        kl_codegen__c_line(g, "%s_gemm_prepare_into(kl_ga, kl_pre);", entry);
        kl_codegen__c_line(g, "free(kl_u);");
    }
    kl_codegen__c_line(g, "return kl_pre;");
    kl_buf_puts(&g->b, "}\n");
}

/* The 16 x 16 transpose the transforms use to turn rows of one channel
 * into vectors of 16 channels and back (the depthwise channel vectors
 * too, cg_priv.h): four rounds of two-source shuffles, each swapping one
 * bit of the row index with the same bit of the lane index. */
void kl_codegen__transpose16_fn(cg_t *g)
{
    kl_buf_puts(&g->b,
                "\n#ifndef KL_SHUF16\n#if defined(__clang__)\n"
                "#define KL_SHUF16(a, b, ...) __builtin_shufflevector(a, b, "
                "__VA_ARGS__)\n"
                "#else\n"
                "#define KL_SHUF16(a, b, ...) __builtin_shuffle(a, b, "
                "(kl_m16){__VA_ARGS__})\n"
                "#endif\n#endif\n\n"
                "#ifndef KL_TR16_H\n"
                "#define KL_TR16_H\n"
                "/* r[i][j] = r[j][i]. */\n"
                "static inline void kl_tr16(kl_v16 *r)\n{\n");
    for (int bit = 1; bit < 16; bit <<= 1) {
        kl_buf_t lo = {0}, hi = {0};
        for (int j = 0; j < 16; j++) {
            kl_buf_printf(&lo, "%s%d", j ? ", " : "",
                          j & bit ? 16 + (j ^ bit) : j);
            kl_buf_printf(&hi, "%s%d", j ? ", " : "",
                          j & bit ? 16 + j : j ^ bit);
        }
        for (int i = 0; i < 16; i++) {
            if (i & bit)
                continue;
            kl_buf_printf(&g->b,
                          "    {\n"
                          "        kl_v16 lo = KL_SHUF16(r[%d], r[%d], %s);\n"
                          "        kl_v16 hi = KL_SHUF16(r[%d], r[%d], %s);\n"
                          "        r[%d] = lo;\n"
                          "        r[%d] = hi;\n"
                          "    }\n",
                          i, i | bit, lo.data, i, i | bit, hi.data, i, i | bit);
        }
        kl_buf_free(&lo);
        kl_buf_free(&hi);
    }
    kl_buf_puts(&g->b, "}\n#endif\n");
}

/* Phase 1 of the input transform: xt from X, a block of 16 channels times
 * one padded row per iteration, 16 pixels at a time through kl_tr16. */
static void s_input_copy(cg_t *g, const kl_workload_t *w, const kl_wino_t *z)
{
    const kl_tensor_t *X = &w->tensors[z->x];
    long long C = z->c, H = z->h, W = z->w, HP = s_xt_rows(z),
              WP = s_xt_cols(z), CS = s_xt_stride(z), CB = (z->c + 15) / 16,
              ph = z->ph, pw = z->pw, end = z->n * z->c * z->h * z->w;
    kl_codegen__c_line(g, "#pragma omp for");
    kl_codegen__c_line(g, "for (int64_t it = 0; it < %lld; ++it) {",
                       z->n * CB * HP);
    g->ind++;
    kl_codegen__c_line(
        g,
        "int64_t n = it / %lld, c0 = it / %lld %% %lld * 16, r = it %% "
        "%lld, y = r - %lld;",
        CB * HP, HP, CB, HP, ph);
    kl_codegen__c_line(g, "float *row = kl_xt + (n * %lld + r) * %lld + c0;",
                       HP, WP * CS);
    kl_codegen__c_line(g, "if (y < 0 || y >= %lld) {", H);
    kl_codegen__c_line(g, "    for (int64_t q = 0; q < %lld; ++q)", WP);
    kl_codegen__c_line(g, "        kl_st16(row + q * %lld, kl_bc16(0.0f));",
                       CS);
    kl_codegen__c_line(g, "    continue;");
    kl_codegen__c_line(g, "}");
    if (pw) {
        kl_codegen__c_line(g, "for (int64_t q = 0; q < %lld; ++q)", pw);
        kl_codegen__c_line(g, "    kl_st16(row + q * %lld, kl_bc16(0.0f));",
                           CS);
    }
    if (WP > pw + W) {
        kl_codegen__c_line(g, "for (int64_t q = %lld; q < %lld; ++q)", pw + W,
                           WP);
        kl_codegen__c_line(g, "    kl_st16(row + q * %lld, kl_bc16(0.0f));",
                           CS);
    }
    kl_codegen__c_line(
        g, "const float *src = %s + ((n * %lld + c0) * %lld + y) * %lld;",
        X->name, C, H, W);
    kl_codegen__rows_to_pixels(g, X->name, C, H * W, W, end, "row", pw, CS);
    s_close(g, 1);
}

void kl_codegen__rows_to_pixels(cg_t *g, const char *x, long long c,
                                long long plane, long long w, long long end,
                                const char *dst, long long pw, long long cs)
{
    kl_codegen__c_line(g, "for (int64_t x0 = 0; x0 < %lld; x0 += 16) {", w);
    g->ind++;
    kl_codegen__c_line(g, "kl_v16 v[16];");
    kl_codegen__c_line(g, "for (int l = 0; l < 16; ++l) {");
    g->ind++;
    if (c % 16) {
        kl_codegen__c_line(g, "v[l] = kl_bc16(0.0f);");
        kl_codegen__c_line(g, "if (c0 + l >= %lld)", c);
        kl_codegen__c_line(g, "    continue;");
    }
    /* A whole vector unless it would read past the end of X (the last
     * row of the last channel): the lanes past the row are never
     * stored. */
    kl_codegen__c_line(g, "const float *s = src + l * %lld + x0;", plane);
    kl_codegen__c_line(g, "if (s + 16 <= %s + %lld) {", x, end);
    kl_codegen__c_line(g, "    v[l] = kl_ld16(s);");
    kl_codegen__c_line(g, "} else {");
    kl_codegen__c_line(g, "    kl_v16 t = kl_bc16(0.0f);");
    kl_codegen__c_line(g, "    memcpy(&t, s, (size_t)(%s + %lld - s) * 4);", x,
                       end);
    kl_codegen__c_line(g, "    v[l] = t;");
    kl_codegen__c_line(g, "}");
    g->ind--;
    kl_codegen__c_line(g, "}");
    kl_codegen__c_line(g, "kl_tr16(v);");
    kl_codegen__c_line(g, "for (int64_t j = 0; j < 16 && x0 + j < %lld; ++j)",
                       w);
    kl_codegen__c_line(g, "    kl_st16(%s + (x0 + j + %lld) * %lld, v[j]);",
                       dst, pw, cs);
    s_close(g, 1);
}

/* Stores the 16 lanes of val at dst, or the first n (not a multiple of
 * 16: the last block of channels). */
static void s_store(cg_t *g, const char *dst, const char *val, int64_t n)
{
    if (n >= 16)
        kl_codegen__c_line(g, "kl_st16(%s, %s);", dst, val);
    else
        kl_codegen__c_line(g, "{ kl_v16 kl_s = %s; memcpy(%s, &kl_s, %lld); }",
                           val, dst, (long long)n * 4);
}

/* The body of phase 2 for the n channels (16, or the last block's
 * fewer) from c0 of one tile: its alpha^2 loads, B^T d B, alpha^2
 * stores. */
static void s_tile_block(cg_t *g, const kl_wino_t *z, int64_t n)
{
    const wmat_t *mt = s_mat(z);
    long long C = z->c, TP = z->tiles, WP = s_xt_cols(z), CS = s_xt_stride(z),
              al = z->alpha;
    kl_buf_t x = {0};
    kl_codegen__c_line(g, "kl_v16 t[%lld][%lld];", al, al);
    kl_codegen__c_line(g, "for (int j = 0; j < %lld; ++j) {", al);
    g->ind++;
    for (int i = 0; i < z->alpha; i++)
        kl_codegen__c_line(
            g, "kl_v16 d%d = kl_ld16(dp + (%d * %lld + j) * %lld + c0);", i, i,
            WP, CS);
    s_rows(g, mt->bt, z->alpha, "d%d");
    s_close(g, 1);
    kl_codegen__c_line(g, "for (int i = 0; i < %lld; ++i) {", al);
    g->ind++;
    kl_codegen__c_line(g, "float *v = kl_wv + (i * %lld + p) * %lld + c0;",
                       al * TP, C);
    for (int j = 0; j < z->alpha; j++) {
        char dst[64];
        snprintf(dst, sizeof dst, "v + %lld", j * TP * C);
        s_apply(&x, mt->bt[j], "t[i][%d]");
        s_store(g, j ? dst : "v", x.data, n);
    }
    s_close(g, 1);
    kl_buf_free(&x);
}

/* Phase 2: V[e][p][c] = (B^T d B)[i][j] of each alpha x alpha tile d of
 * xt, tiles
 * over the threads, 16 channels a vector. */
static void s_input_tiles(cg_t *g, const kl_wino_t *z)
{
    long long th = z->th, tw = z->tw, HP = s_xt_rows(z), WP = s_xt_cols(z),
              full = z->c / 16 * 16, m = z->m;
    kl_codegen__c_line(g, "#pragma omp for");
    kl_codegen__c_line(g, "for (int64_t p = 0; p < %lld; ++p) {",
                       (long long)z->tiles);
    g->ind++;
    kl_codegen__c_line(
        g, "int64_t n = p / %lld, ty = p / %lld %% %lld, tx = p %% %lld;",
        th * tw, tw, th, tw);
    kl_codegen__c_line(
        g,
        "const float *dp = kl_xt + ((n * %lld + %lld * ty) * %lld + %lld "
        "* tx) * %lld;",
        HP, m, WP, m, (long long)s_xt_stride(z));
    if (full) {
        kl_codegen__c_line(g, "for (int64_t c0 = 0; c0 < %lld; c0 += 16) {",
                           full);
        g->ind++;
        s_tile_block(g, z, 16);
        s_close(g, 1);
    }
    if (z->c > full) {
        kl_codegen__c_line(g, "{");
        g->ind++;
        kl_codegen__c_line(g, "const int64_t c0 = %lld;", full);
        s_tile_block(g, z, z->c - full);
        s_close(g, 1);
    }
    s_close(g, 1);
}

/* V from X: one parallel region, the copy then the tiles. */
static void s_input(cg_t *g, const kl_workload_t *w, const kl_wino_t *z)
{
    kl_codegen__c_line(g, "#pragma omp parallel");
    kl_codegen__c_line(g, "{");
    g->ind++;
    s_input_copy(g, w, z);
    s_input_tiles(g, z);
    g->ind--;
    kl_codegen__c_line(g, "}");
}

/* One row of output tiles into Y: per row of Y and 16 points, a 16x16
 * transpose, then the epilogue per point (opens 4 blocks it closes). */
static void s_output_store(cg_t *g, const kl_workload_t *w, const kl_wino_t *z)
{
    const kl_tensor_t *Y = &w->tensors[z->y];
    long long K = z->k, m = z->m, P = z->p, Q = z->q;
    kl_codegen__c_line(g, "for (int a = 0; a < %lld; ++a) {", m);
    g->ind++;
    kl_codegen__c_line(g, "int64_t y = %lld * ty + a;", m);
    if (P % m) {
        kl_codegen__c_line(g, "if (y >= %lld)", P);
        kl_codegen__c_line(g, "    break;");
    }
    kl_codegen__c_line(g, "for (int64_t x0 = 0; x0 < %lld; x0 += 16) {", Q);
    g->ind++;
    kl_codegen__c_line(g, "float tr[16][16] __attribute__((aligned(64)));");
    kl_codegen__c_line(g, "kl_v16 v[16];");
    kl_codegen__c_line(g, "for (int l = 0; l < 16; ++l)");
    kl_codegen__c_line(g, "    v[l] = yt[a][x0 + l];");
    kl_codegen__c_line(g, "kl_tr16(v);");
    kl_codegen__c_line(g, "for (int l = 0; l < 16; ++l)");
    kl_codegen__c_line(g, "    kl_st16(tr[l], v[l]);");
    kl_codegen__c_line(g, "int64_t nx = %lld - x0 < 16 ? %lld - x0 : 16;", Q,
                       Q);
    kl_codegen__c_line(g, "for (int64_t l = 0; l < 16 && k0 + l < %lld; ++l) {",
                       K);
    g->ind++;
    kl_codegen__c_line(g, "int64_t k = k0 + l;");
    kl_codegen__c_line(
        g, "float *out = %s + ((n * %lld + k) * %lld + y) * %lld + x0;",
        Y->name, (long long)Y->shape[1], (long long)Y->shape[2],
        (long long)Y->shape[3]);
    kl_codegen__c_line(g, "for (int64_t xi = 0; xi < nx; ++xi) {");
    g->ind++;
    kl_codegen__c_line(g, "int64_t x = x0 + xi;");
    kl_codegen__c_line(g, "float o = tr[l][xi];");
    s_epilogue(g, w, z);
    kl_codegen__c_line(g, "(void)x;");
    kl_codegen__c_line(g, "out[xi] = o;");
    s_close(g, 4);
}

/* Y = A^T M A per output tile, with the epilogue: an iteration per block
 * of 16 output channels and row of tiles; its m output rows are
 * transposed back to rows of pixels 16 at a time and stored with the
 * epilogue (rows and columns past the edge of an output whose size is
 * not a multiple of m are not stored). */
static void s_output(cg_t *g, const kl_workload_t *w, const kl_wino_t *z)
{
    const wmat_t *mt = s_mat(z);
    long long K = z->k, TP = z->tiles, th = z->th, tw = z->tw, m = z->m,
              al = z->alpha, KB = (z->k + 15) / 16,
              XW = (m * z->tw + 15) / 16 * 16;
    kl_buf_t x = {0};
    kl_codegen__c_line(g, "#pragma omp parallel for");
    kl_codegen__c_line(g, "for (int64_t it = 0; it < %lld; ++it) {",
                       z->n * KB * th);
    g->ind++;
    kl_codegen__c_line(
        g,
        "int64_t n = it / %lld, k0 = it / %lld %% %lld * 16, ty = it "
        "%% %lld;",
        KB * th, th, KB, th);
    kl_codegen__c_line(g, "kl_v16 yt[%lld][%lld];", m, XW);
    if (XW > m * tw) {
        kl_codegen__c_line(g, "for (int a = 0; a < %lld; ++a)", m);
        kl_codegen__c_line(g, "    for (int64_t q = %lld; q < %lld; ++q)",
                           m * tw, XW);
        kl_codegen__c_line(g, "        yt[a][q] = kl_bc16(0.0f);");
    }
    kl_codegen__c_line(g, "for (int64_t tx = 0; tx < %lld; ++tx) {", tw);
    g->ind++;
    kl_codegen__c_line(
        g,
        "const float *s = kl_wm + ((n * %lld + ty) * %lld + tx) * "
        "%lld + k0;",
        th, tw, K);
    kl_codegen__c_line(g, "kl_v16 m[%lld][%lld], t[%lld][%lld];", al, al, m,
                       al);
    kl_codegen__c_line(g, "for (int e = 0; e < %lld; ++e)", al * al);
    kl_codegen__c_line(g, "    m[e / %lld][e %% %lld] = kl_ld16(s + e * %lld);",
                       al, al, TP * K);
    kl_codegen__c_line(g, "for (int j = 0; j < %lld; ++j) {", al);
    g->ind++;
    s_rows(g, mt->at, z->m, "m[%d][j]");
    s_close(g, 1);
    kl_codegen__c_line(g, "for (int a = 0; a < %lld; ++a) {", m);
    g->ind++;
    for (int b = 0; b < z->m; b++) {
        s_apply(&x, mt->at[b], "t[a][%d]");
        if (b)
            kl_codegen__c_line(g, "yt[a][%lld * tx + %d] = %s;", m, b, x.data);
        else
            kl_codegen__c_line(g, "yt[a][%lld * tx] = %s;", m, x.data);
    }
    s_close(g, 2);
    kl_buf_free(&x);
    s_output_store(g, w, z);
    s_close(g, 1);
}

int kl_codegen__emit_winograd(cg_t *g, const char *entry)
{
    const kl_workload_t *w = kl_sched_origin(g->s);
    kl_wino_t z;
    char e[KL_ERRMSG_LEN];
    if (kl_workload_winograd(w, kl_sched_winograd_m(g->s), NULL, &z, e))
        return kl_codegen__c_fail(g, KL_ERR_INVAL, "%s", e);
    kl_buf_puts(&g->b, kl_codegen__prelude);
    kl_codegen__act_prelude_for(&g->b, w);
    kl_buf_printf(&g->b,
                  "\n/* Winograd F(%dx%d,3x3) of %s: the product M[e] = V[e] "
                  "U[e] of\n * the %d transformed tiles (its schedule), "
                  "wrapped in the transforms. */\n",
                  z.m, z.m, w->name ? w->name : "a convolution",
                  z.alpha * z.alpha);
    kl_codegen__transpose16_fn(g);
    char *gemm = kl_xasprintf("%s_gemm", entry);
    g->nested = true;
    kl_codegen__emit_function(g, gemm);
    free(gemm);
    wlay_t lay = s_layout(g, &z);
    s_prepare(g, w, &z, entry, &lay);
    kl_buf_printf(&g->b, "\nvoid %s(void *const *args)\n{\n", entry);
    g->ind = 1;
    for (int t = 0; t < w->ntensors; t++)
        kl_codegen__c_line(g, "%sfloat *restrict %s = (%sfloat *)args[%d];",
                           t == z.y ? "" : "const ", w->tensors[t].name,
                           t == z.y ? "" : "const ", t);
    kl_codegen__c_line(g, "(void)%s;", w->tensors[z.wt].name);
    kl_codegen__c_line(g, "float *kl_pre = (float *)args[%d];", w->ntensors);
    kl_codegen__c_line(g, "float *kl_scr = (float *)kl_scratch_claim(%lld);",
                       (long long)(lay.scratch * 4));
    kl_codegen__c_line(g, "int kl_own = !kl_scr;");
    kl_codegen__c_line(g, "float *kl_wv = kl_own ? kl_alloc(%lld) : kl_scr;",
                       (long long)(z.alpha * z.alpha * z.tiles * z.c));
    kl_codegen__c_line(
        g, "float *kl_wm = kl_own ? kl_alloc(%lld) : kl_scr + %lld;",
        (long long)(z.alpha * z.alpha * z.tiles * z.k + 16), (long long)lay.m);
    kl_codegen__c_line(
        g, "float *kl_xt = kl_own ? kl_alloc(%lld) : kl_scr + %lld;",
        (long long)s_xt_elems(&z), (long long)lay.xt);
    s_input(g, w, &z);
    kl_codegen__c_line(g, "void *kl_ga[4] = {kl_wv, %s, kl_wm, kl_pre};",
                       g->prep_elems ? "NULL" : "kl_pre");
    kl_codegen__c_line(g, "%s_gemm(kl_ga);", entry);
    s_output(g, w, &z);
    kl_codegen__c_line(g, "if (kl_own) {");
    kl_codegen__c_line(g, "    free(kl_wv);");
    kl_codegen__c_line(g, "    free(kl_wm);");
    kl_codegen__c_line(g, "    free(kl_xt);");
    kl_codegen__c_line(g, "} else {");
    kl_codegen__c_line(g, "    kl_scratch_release();");
    kl_codegen__c_line(g, "}");
    kl_buf_puts(&g->b, "}\n");
    return KL_OK;
}
