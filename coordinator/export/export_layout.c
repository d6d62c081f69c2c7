/* export_layout.c - permutations and layouts in an exported model
 * (export_int.h): a transpose layer's perm= and its simplified form, and
 * the layout conversions of kiln_model.c (kl_export__layout_helpers_c): a
 * value that one reader
 * wants NHWC and its producer wrote NCHW, or the other way round
 * (kl_model_layout.c says which), is copied once into the other layout.
 * 16 x 16 blocks of bytes go through an SSE2 transpose (four rounds of
 * unpacks); the edges of a block go one at a time, 4-byte elements (f32
 * values) as moves of a constant size. */
#include <stdlib.h>
#include <string.h>

#include "export_int.h"
#include "kl_err.h"

const char kl_export__layout_helpers_c[] =
    "#if defined(__SSE2__)\n"
    "#include <emmintrin.h>\n"
    "/* 16 rows of 16 bytes at s (row stride ss) to 16 rows at d (stride\n"
    " * ds): d[j][i] = s[i][j]. */\n"
    "static inline void s_tr16(const uint8_t *s, long long ss, uint8_t *d,\n"
    "                          long long ds)\n"
    "{\n"
    "    __m128i a[16], b[16];\n"
    "    for (int i = 0; i < 16; i++)\n"
    "        a[i] = _mm_loadu_si128((const __m128i *)(s + i * ss));\n"
    "    /* b[8h + i]: rows 2i, 2i+1, columns 8h.., 16 bits a column */\n"
    "    for (int i = 0; i < 8; i++) {\n"
    "        b[i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);\n"
    "        b[8 + i] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);\n"
    "    }\n"
    "    /* a[4hq + k]: rows 4k.., columns 4hq.., 32 bits a column */\n"
    "    for (int h = 0; h < 2; h++)\n"
    "        for (int k = 0; k < 4; k++) {\n"
    "            a[h * 8 + k] =\n"
    "                _mm_unpacklo_epi16(b[h * 8 + 2 * k], b[h * 8 + 2 * k + "
    "1]);\n"
    "            a[h * 8 + 4 + k] =\n"
    "                _mm_unpackhi_epi16(b[h * 8 + 2 * k], b[h * 8 + 2 * k + "
    "1]);\n"
    "        }\n"
    "    /* b[4hq + 2z + m]: rows 8m.., columns 4hq + 2z.., 64 bits a "
    "column */\n"
    "    for (int hq = 0; hq < 4; hq++)\n"
    "        for (int m = 0; m < 2; m++) {\n"
    "            b[hq * 4 + m] =\n"
    "                _mm_unpacklo_epi32(a[hq * 4 + 2 * m], a[hq * 4 + 2 * m + "
    "1]);\n"
    "            b[hq * 4 + 2 + m] =\n"
    "                _mm_unpackhi_epi32(a[hq * 4 + 2 * m], a[hq * 4 + 2 * m + "
    "1]);\n"
    "        }\n"
    "    for (int hq = 0; hq < 4; hq++)\n"
    "        for (int z = 0; z < 2; z++) {\n"
    "            long long j = 4 * hq + 2 * z;\n"
    "            __m128i lo = b[hq * 4 + 2 * z], hi = b[hq * 4 + 2 * z + 1];\n"
    "            _mm_storeu_si128((__m128i *)(d + j * ds),\n"
    "                             _mm_unpacklo_epi64(lo, hi));\n"
    "            _mm_storeu_si128((__m128i *)(d + (j + 1) * ds),\n"
    "                             _mm_unpackhi_epi64(lo, hi));\n"
    "        }\n"
    "}\n"
    "#define S_TR16 1\n"
    "#else\n"
    "#define S_TR16 0\n"
    "#endif\n\n"
    "/* Rows x cols elements of E bytes at x (row stride sx) to d (row\n"
    " * stride sd) transposed, over the whole 16 x 16 blocks of bytes by\n"
    " * s_tr16. */\n"
    "static void s_tr_block(const char *x, long long sx, char *y, long long "
    "sy,\n"
    "                       long long rows, long long cols, int E)\n"
    "{\n"
    "    long long r0 = 0;\n"
    "    if (S_TR16 && E == 1)\n"
    "        for (; r0 + 16 <= rows; r0 += 16) {\n"
    "            long long c0 = 0;\n"
    "#if defined(__SSE2__)\n"
    "            for (; c0 + 16 <= cols; c0 += 16)\n"
    "                s_tr16((const uint8_t *)x + r0 * sx + c0, sx,\n"
    "                       (uint8_t *)y + c0 * sy + r0, sy);\n"
    "#endif\n"
    "            for (long long r = r0; r < r0 + 16; r++)\n"
    "                for (long long c = c0; c < cols; c++)\n"
    "                    y[c * sy + r] = x[r * sx + c];\n"
    "        }\n"
    "    if (E == 4) { /* f32: a constant size, one move, not a call */\n"
    "        for (long long r = r0; r < rows; r++)\n"
    "            for (long long c = 0; c < cols; c++)\n"
    "                memcpy(y + (c * sy + r) * 4, x + (r * sx + c) * 4, 4);\n"
    "        return;\n"
    "    }\n"
    "    for (long long r = r0; r < rows; r++)\n"
    "        for (long long c = 0; c < cols; c++)\n"
    "            memcpy(y + (c * sy + r) * E, x + (r * sx + c) * E, "
    "(size_t)E);\n"
    "}\n\n"
    "/* NCHW <-> NHWC: per image, C rows of HW points to HW rows of C\n"
    " * channels (nhwc) or back, in bands of 64 points (the threads'\n"
    " * share). */\n"
    "static void s_convert(const void *x, void *y, long long N, long long "
    "C,\n"
    "                      long long HW, int E, int nhwc)\n"
    "{\n"
    "    long long nb = (HW + 63) / 64;\n"
    "#pragma omp parallel for if (N * C * HW >= S_PAR) schedule(static)\n"
    "    for (long long t = 0; t < N * nb; t++) {\n"
    "        long long n = t / nb, p0 = t % nb * 64;\n"
    "        long long np = HW - p0 < 64 ? HW - p0 : 64;\n"
    "        long long cs = (n * C * HW + p0) * E, ps = (n * HW + p0) * C * "
    "E;\n"
    "        if (nhwc)\n"
    "            s_tr_block((const char *)x + cs, HW, (char *)y + ps, C, C, "
    "np, E);\n"
    "        else\n"
    "            s_tr_block((const char *)x + ps, C, (char *)y + cs, HW, np, "
    "C, E);\n"
    "    }\n"
    "}\n\n"
    "static void s_to_nhwc(const void *x, void *y, long long N, long long "
    "C,\n"
    "                      long long HW, int E)\n"
    "{\n    s_convert(x, y, N, C, HW, E, 1);\n}\n\n"
    "static void s_to_nchw(const void *x, void *y, long long N, long long "
    "C,\n"
    "                      long long HW, int E)\n"
    "{\n    s_convert(x, y, N, C, HW, E, 0);\n}\n\n";

int kl_export__perm(const char *text, const kl_mnode_t *nd, int *perm,
                    char *err)
{
    const char *l = text;
    for (int k = 1; l && k < nd->line; k++) {
        l = strchr(l, '\n');
        l = l ? l + 1 : NULL;
    }
    const char *end = l ? strchr(l, '\n') : NULL;
    const char *p = l ? strstr(l, "perm=") : NULL;
    if (!p || (end && p > end))
        return kl_seterr(err, KL_ERR_INTERNAL,
                         "line %d: layer '%s': no perm= found", nd->line,
                         nd->name);
    p += 5;
    for (int k = 0; k < nd->ndim; k++) {
        char *q;
        long v = strtol(p, &q, 10);
        if (q == p || v < 0 || v >= nd->ndim)
            return kl_seterr(err, KL_ERR_INTERNAL,
                             "line %d: layer '%s': bad perm=", nd->line,
                             nd->name);
        perm[k] = (int)v;
        p = *q == ',' ? q + 1 : q;
    }
    return KL_OK;
}

/* The permutation perm of a tensor of nd dims shape, simplified into sh
 * and pm: the dims of size 1 dropped, then each run of x's dims that stay
 * neighbours in the output merged into one. Returns the number of dims
 * left; 0 or 1 when the transpose keeps every element where it was (a
 * view of its input). */
int kl_export__perm_reduce(int nd, const int64_t *shape, const int *perm,
                           long long *sh, int *pm)
{
    int map[KL_MODEL_MAX_DIMS], p[KL_MODEL_MAX_DIMS], k = 0, m = 0;
    long long s[KL_MODEL_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        map[d] = shape[d] == 1 ? -1 : k;
        if (shape[d] != 1)
            s[k++] = shape[d];
    }
    for (int j = 0; j < nd; j++)
        if (map[perm[j]] >= 0)
            p[m++] = map[perm[j]];
    /* Runs of the output whose x dims follow each other: run r covers
     * x's dims first[r] .. first[r] + len[r] - 1. */
    int first[KL_MODEL_MAX_DIMS], len[KL_MODEL_MAX_DIMS], nr = 0;
    for (int j = 0; j < m; j++) {
        if (j && p[j] == p[j - 1] + 1) {
            len[nr - 1]++;
            continue;
        }
        first[nr] = p[j];
        len[nr++] = 1;
    }
    for (int r = 0; r < nr; r++) {
        int rank = 0;
        for (int q = 0; q < nr; q++)
            rank += first[q] < first[r];
        pm[r] = rank;
        sh[rank] = 1;
        for (int d = first[r]; d < first[r] + len[r]; d++)
            sh[rank] *= s[d];
    }
    return nr;
}
