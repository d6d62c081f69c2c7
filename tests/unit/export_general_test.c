/* Unit tests of the exported library's general layers (kl_mop_is_general,
 * a broadcasting add; export_general.c and the helpers of
 * export_text_general.c): a graph using every one of them is built with
 * the system compiler into libkiln_model.so, loaded with dlopen and run,
 * and its output checked against the same graph computed here in double
 * by plain index arithmetic (numpy's broadcasting rules, no dims merged):
 *  - every op on shapes where broadcasting happens ([1,C,H,W] * [1,C,1,1],
 *    [4,1] - [3], a [1,1,H,W] condition of where, a const operand),
 *    reductions with the last dim reduced and kept, both keepdims, slices
 *    with a step, gathers with repeats, concat along an inner axis; below
 *    the threads' size and above it with rows longer than a piece
 *    (S_RUN);
 *  - max and min propagate NaN;
 *  - a const that is the graph's output is its parameter, copied;
 *  - oneDNN's baseline names the general layers it does not build, and
 *    runs gelu approximate=tanh as oneDNN's tanh GELU. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_export.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

#include "export_fx.h"

typedef struct {
    char dir[512];
    char err[KL_ERRMSG_LEN];
} fx_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    if (!kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-export-gen-XXXXXX"))
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    s_rmrf(fx->dir);
    free(fx);
    return 0;
}

typedef struct {
    void *h;
    int (*nparams)(void);
    const char *(*pname)(int);
    const float *(*pdata)(int);
    long long (*onumel)(void);
    int (*infer_n)(const float *const *, float *);
    int (*nlayers)(void);
    const char *(*lname)(int);
    int (*ltask)(int);
} lib_t;

/* Exports graph text with reference kernels into fx->dir/sub, builds it
 * and opens the library into l. */
static void s_build(fx_t *fx, const char *text, const char *sub, lib_t *l)
{
    kl_model_t *m = NULL;
    if (kl_model_parse(text, "test.graph", &m, fx->err))
        fail_msg("%s", fx->err);
    int n = kl_model_ntasks(m);
    kl_kernel_t *ks = kl_xcalloc((size_t)n, sizeof *ks);
    for (int t = 0; t < n; t++) {
        char entry[32];
        snprintf(entry, sizeof entry, "kiln_task_%02d", t);
        assert_int_equal(kl_codegen_reference(kl_model_task(m, t)->w, entry,
                                              &ks[t], fx->err),
                         KL_OK);
    }
    char *dir = kl_xasprintf("%s/%s", fx->dir, sub);
    assert_int_equal(kl_mkdirs(dir, fx->err), KL_OK);
    int rc = kl_export_write_graph(text, "test.graph", m, ks, false, NULL, dir,
                                   true, NULL, fx->err);
    for (int t = 0; t < n; t++)
        kl_kernel_free(&ks[t]);
    free(ks);
    kl_model_destroy(&m);
    if (rc)
        fail_msg("%s", fx->err);
    char *p = kl_xasprintf("%s/libkiln_model.so", dir);
    free(dir);
    memset(l, 0, sizeof *l);
    l->h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!l->h)
        fail_msg("dlopen %s: %s", p, dlerror());
    free(p);
    *(void **)&l->nparams = dlsym(l->h, "kiln_model_nparams");
    *(void **)&l->pname = dlsym(l->h, "kiln_model_param_name");
    *(void **)&l->pdata = dlsym(l->h, "kiln_model_param_data");
    *(void **)&l->onumel = dlsym(l->h, "kiln_model_output_numel");
    *(void **)&l->infer_n = dlsym(l->h, "kiln_model_infer_n");
    *(void **)&l->nlayers = dlsym(l->h, "kiln_model_nlayers");
    *(void **)&l->lname = dlsym(l->h, "kiln_model_layer_name");
    *(void **)&l->ltask = dlsym(l->h, "kiln_model_layer_task");
    assert_true(l->nparams && l->pname && l->pdata && l->onumel && l->infer_n &&
                l->nlayers && l->lname && l->ltask);
}

/* ---- the reference: tensors of doubles ---- */

typedef struct {
    int nd;
    int64_t sh[8];
    double *v;
} t_t;

static int64_t t_numel(const t_t *x)
{
    int64_t n = 1;
    for (int d = 0; d < x->nd; d++)
        n *= x->sh[d];
    return n;
}

static t_t t_new(int nd, const int64_t *sh)
{
    t_t t = {.nd = nd};
    memcpy(t.sh, sh, (size_t)nd * sizeof *sh);
    t.v = kl_xcalloc((size_t)t_numel(&t), sizeof *t.v);
    return t;
}

static t_t t_from(const float *x, int nd, const int64_t *sh)
{
    t_t t = t_new(nd, sh);
    for (int64_t i = 0; i < t_numel(&t); i++)
        t.v[i] = x[i];
    return t;
}

/* Flat index f of shape sh as its nd indices. */
static void t_unravel(int64_t f, int nd, const int64_t *sh, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = f % sh[d];
        f /= sh[d];
    }
}

/* x's value at index idx of a broadcast output of nd dims. */
static double t_at(const t_t *x, int nd, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < x->nd; d++)
        off = off * x->sh[d] + (x->sh[d] == 1 ? 0 : idx[d + nd - x->nd]);
    return x->v[off];
}

/* The broadcast shape of the n tensors ts (numpy's rule; they do). */
static t_t t_bnew(int n, const t_t *const *ts)
{
    int nd = 0;
    int64_t sh[8];
    for (int k = 0; k < n; k++)
        nd = ts[k]->nd > nd ? ts[k]->nd : nd;
    for (int d = 0; d < nd; d++) {
        sh[d] = 1;
        for (int k = 0; k < n; k++) {
            int xd = d - (nd - ts[k]->nd);
            if (xd >= 0 && ts[k]->sh[xd] != 1)
                sh[d] = ts[k]->sh[xd];
        }
    }
    return t_new(nd, sh);
}

static double t_op(char op, double a, double b)
{
    switch (op) {
    case '+':
        return a + b;
    case '-':
        return a - b;
    case '*':
        return a * b;
    case '/':
        return a / b;
    case '^':
        return pow(a, b);
    case 'M':
        return isnan(a) || isnan(b) ? NAN : fmax(a, b);
    default:
        return isnan(a) || isnan(b) ? NAN : fmin(a, b);
    }
}

/* a OP b, broadcast; where c a b when op is '?'. */
static t_t t_bin(char op, const t_t *a, const t_t *b, const t_t *c)
{
    const t_t *ts[3] = {a, b, c};
    t_t y = t_bnew(c ? 3 : 2, ts);
    int64_t idx[8];
    for (int64_t i = 0; i < t_numel(&y); i++) {
        t_unravel(i, y.nd, y.sh, idx);
        double u = t_at(a, y.nd, idx), v = t_at(b, y.nd, idx);
        y.v[i] = op == '?' ? (t_at(c, y.nd, idx) != 0 ? u : v) : t_op(op, u, v);
    }
    return y;
}

static t_t t_un(double (*f)(double), const t_t *x)
{
    t_t y = t_new(x->nd, x->sh);
    for (int64_t i = 0; i < t_numel(x); i++)
        y.v[i] = f(x->v[i]);
    return y;
}

static double s_neg(double v)
{
    return -v;
}

static double s_recip(double v)
{
    return 1 / v;
}

static double s_gelu_tanh(double v)
{
    return 0.5 * v *
           (1 + tanh(sqrt(2 / 3.14159265358979323846) *
                     (v + 0.044715 * v * v * v)));
}

/* x expanded to sh (nd dims): broadcast both ways. */
static t_t t_expand(const t_t *x, int nd, const int64_t *sh)
{
    t_t s = {.nd = nd};
    memcpy(s.sh, sh, (size_t)nd * sizeof *sh);
    const t_t *ts[2] = {x, &s};
    t_t y = t_bnew(2, ts);
    int64_t idx[8];
    for (int64_t i = 0; i < t_numel(&y); i++) {
        t_unravel(i, y.nd, y.sh, idx);
        y.v[i] = t_at(x, y.nd, idx);
    }
    return y;
}

/* a and b joined along axis. */
static t_t t_concat(const t_t *a, const t_t *b, int axis)
{
    int64_t sh[8], idx[8];
    memcpy(sh, a->sh, sizeof sh);
    sh[axis] += b->sh[axis];
    t_t y = t_new(a->nd, sh);
    for (int64_t i = 0; i < t_numel(&y); i++) {
        t_unravel(i, y.nd, y.sh, idx);
        const t_t *x = idx[axis] < a->sh[axis] ? a : b;
        if (x == b)
            idx[axis] -= a->sh[axis];
        y.v[i] = t_at(x, y.nd, idx);
    }
    return y;
}

/* x at n positions ix of axis (slice and gather alike). */
static t_t t_take(const t_t *x, int axis, int n, const int64_t *ix)
{
    int64_t sh[8], idx[8];
    memcpy(sh, x->sh, sizeof sh);
    sh[axis] = n;
    t_t y = t_new(x->nd, sh);
    for (int64_t i = 0; i < t_numel(&y); i++) {
        t_unravel(i, y.nd, y.sh, idx);
        idx[axis] = ix[idx[axis]];
        y.v[i] = t_at(x, y.nd, idx);
    }
    return y;
}

/* The sum (mean when mean) of x over the axes of mask. */
static t_t t_reduce(const t_t *x, unsigned mask, bool mean, bool keepdims)
{
    int64_t sh[8], idx[8], count = 1;
    int nd = 0;
    for (int d = 0; d < x->nd; d++) {
        if (mask & 1u << d)
            count *= x->sh[d];
        if (!(mask & 1u << d) || keepdims)
            sh[nd++] = mask & 1u << d ? 1 : x->sh[d];
    }
    if (!nd)
        sh[nd++] = 1;
    t_t y = t_new(nd, sh);
    for (int64_t i = 0; i < t_numel(x); i++) {
        t_unravel(i, x->nd, x->sh, idx);
        int64_t o = 0;
        for (int d = 0; d < x->nd; d++)
            if (!(mask & 1u << d))
                o = o * x->sh[d] + idx[d];
        y.v[o] += x->v[i] / (mean ? (double)count : 1.0);
    }
    return y;
}

/* ---- every general op ---- */

/* Inputs x [1,C,H,W], the gate g and the exponents p [1,C,1,1], s [4,1],
 * t [3], the condition m [1,1,H,W], the const k [1,C,1,1]; y = x + x is
 * the graph's task; r3 reduces a [2,C,H,W] with two kept dims apart. Each
 * result is flattened (reshape, a view) and the output is all of them
 * concatenated along axis 1, in s_pieces' order. */
static const char s_fmt[] = "model general\n"
                            "input x 1x%dx%dx%d\n"
                            "input g 1x%dx1x1\n"
                            "input s 4x1\n"
                            "input t 3\n"
                            "input m 1x1x%dx%d\n"
                            "input p 1x%dx1x1\n"
                            "k = const shape=1x%dx1x1\n"
                            "y = add x x\n"
                            "mu = mul y g\n"
                            "su = sub s t\n"
                            "dv = div y k\n"
                            "ex = exp mu\n"
                            "pw = pow ex p\n"
                            "mx = max y g\n"
                            "mn = min dv y\n"
                            "wh = where m y mu\n"
                            "sq = sqrt ex\n"
                            "er = erf y\n"
                            "ng = neg y\n"
                            "rc = reciprocal ex\n"
                            "gt = gelu y approximate=tanh\n"
                            "cc = concat y mu axis=2\n"
                            "sl = slice cc axis=2 start=1 end=%d step=3\n"
                            "ga = gather y axis=1 indices=%d,0,%d,1\n"
                            "e1 = expand s shape=2x4x3\n"
                            "e2 = expand t shape=4x1\n"
                            "rm = reduce_mean y axes=2,3\n"
                            "rs = reduce_sum y axes=1 keepdims=0\n"
                            "r0 = reduce_mean mu axes=0,2 keepdims=0\n"
                            "ba = add y g\n"
                            "e3 = expand mu shape=2x1x1x1\n"
                            "r3 = reduce_sum e3 axes=1,3\n";

static const char *const s_pieces[] = {
    "mu", "su", "dv", "pw", "mx", "mn", "wh", "sq", "er", "ng", "rc", "gt",
    "sl", "ga", "e1", "e2", "rm", "rs", "r0", "ba", "e3", "r3", "k"};
#define S_NPIECES ((int)(sizeof s_pieces / sizeof s_pieces[0]))

static char *s_text(int C, int H, int W)
{
    kl_buf_t b = {0};
    kl_buf_printf(&b, s_fmt, C, H, W, C, H, W, C, C, 2 * H, C - 1, C - 1);
    for (int k = 0; k < S_NPIECES; k++)
        kl_buf_printf(&b, "f_%s = reshape %s shape=1x-1\n", s_pieces[k],
                      s_pieces[k]);
    kl_buf_printf(&b, "o1 = concat f_%s f_%s axis=1\n", s_pieces[0],
                  s_pieces[1]);
    for (int k = 2; k < S_NPIECES; k++)
        kl_buf_printf(&b, "o%d = concat o%d f_%s axis=1\n", k, k - 1,
                      s_pieces[k]);
    kl_buf_printf(&b, "output o%d\n", S_NPIECES - 1);
    return kl_buf_take(&b);
}

/* s_fmt in double into want (its pieces in order); returns their count. */
static int64_t s_ref(int C, int H, int W, const float *const *in,
                     const float *kv, double *want)
{
    int64_t sx[] = {1, C, H, W}, sg[] = {1, C, 1, 1}, ss[] = {4, 1}, st[] = {3},
            sm[] = {1, 1, H, W};
    t_t x = t_from(in[0], 4, sx), g = t_from(in[1], 4, sg),
        s = t_from(in[2], 2, ss), t = t_from(in[3], 1, st),
        m = t_from(in[4], 4, sm), p = t_from(in[5], 4, sg),
        k = t_from(kv, 4, sg);
    t_t y = t_bin('+', &x, &x, NULL);
    t_t r[S_NPIECES];
    r[0] = t_bin('*', &y, &g, NULL);
    r[1] = t_bin('-', &s, &t, NULL);
    r[2] = t_bin('/', &y, &k, NULL);
    t_t ex = t_un(exp, &r[0]);
    r[3] = t_bin('^', &ex, &p, NULL);
    r[4] = t_bin('M', &y, &g, NULL);
    r[5] = t_bin('m', &r[2], &y, NULL);
    r[6] = t_bin('?', &y, &r[0], &m);
    r[7] = t_un(sqrt, &ex);
    r[8] = t_un(erf, &y);
    r[9] = t_un(s_neg, &y);
    r[10] = t_un(s_recip, &ex);
    r[11] = t_un(s_gelu_tanh, &y);
    t_t cc = t_concat(&y, &r[0], 2);
    int64_t ix[64];
    int n = 0;
    for (int64_t i = 1; i < 2 * H; i += 3)
        ix[n++] = i;
    r[12] = t_take(&cc, 2, n, ix);
    int64_t gi[] = {C - 1, 0, C - 1, 1};
    r[13] = t_take(&y, 1, 4, gi);
    int64_t e1[] = {2, 4, 3}, e2[] = {4, 1};
    r[14] = t_expand(&s, 3, e1);
    r[15] = t_expand(&t, 2, e2);
    r[16] = t_reduce(&y, 1u << 2 | 1u << 3, true, true);
    r[17] = t_reduce(&y, 1u << 1, false, false);
    r[18] = t_reduce(&r[0], 1u << 0 | 1u << 2, true, false);
    r[19] = t_bin('+', &y, &g, NULL);
    int64_t e3[] = {2, 1, 1, 1};
    r[20] = t_expand(&r[0], 4, e3);
    r[21] = t_reduce(&r[20], 1u << 1 | 1u << 3, false, true);
    r[22] = k;
    int64_t o = 0;
    for (int i = 0; i < S_NPIECES; i++) {
        memcpy(want + o, r[i].v, (size_t)t_numel(&r[i]) * sizeof *want);
        o += t_numel(&r[i]);
    }
    for (int i = 0; i < S_NPIECES; i++)
        free(r[i].v);
    free(x.v);
    free(g.v);
    free(s.v);
    free(t.v);
    free(m.v);
    free(p.v);
    free(y.v);
    free(ex.v);
    free(cc.v);
    return o;
}

static void s_general(fx_t *fx, int C, int H, int W)
{
    char *text = s_text(C, H, W), sub[32];
    snprintf(sub, sizeof sub, "g%d", C * H * W);
    lib_t l;
    s_build(fx, text, sub, &l);
    free(text);
    /* the inputs, then the const's parameter */
    assert_int_equal(l.nparams(), 7);
    assert_string_equal(l.pname(6), "k.weight");
    /* y is the task; the general layers have none; reshapes are views */
    assert_string_equal(l.lname(0), "y");
    assert_int_equal(l.ltask(0), 0);
    assert_string_equal(l.lname(1), "mu");
    assert_int_equal(l.ltask(1), -1);
    assert_int_equal(l.nlayers(), 25 + S_NPIECES - 1);

    int64_t nx = (int64_t)C * H * W, nin[6] = {nx, C, 4, 3, H * W, C};
    float *in[6];
    for (int k = 0; k < 6; k++)
        in[k] = kl_xmalloc((size_t)nin[k] * sizeof(float));
    for (int64_t i = 0; i < nx; i++)
        in[0][i] = (float)((i * 37 + i / 11) % 97) / 48.0f - 1.0f;
    static const float pv[] = {2.0f, 3.0f, 0.5f, 1.7f};
    for (int c = 0; c < C; c++) {
        in[1][c] = (float)(c * 7 % 5) / 4.0f - 0.6f; /* none 0 */
        in[5][c] = pv[c % 4];
    }
    for (int i = 0; i < 4; i++)
        in[2][i] = (float)i * 0.75f - 1.0f;
    for (int i = 0; i < 3; i++)
        in[3][i] = 0.5f - (float)i * 0.625f;
    static const float mv[] = {0.0f, 1.0f, -2.0f, 0.0f, 0.5f};
    for (int64_t i = 0; i < H * W; i++)
        in[4][i] = mv[i % 5];

    long long n = l.onumel();
    float *got = kl_xmalloc((size_t)n * sizeof *got);
    double *want = kl_xmalloc((size_t)n * sizeof *want);
    const float *const ins[6] = {in[0], in[1], in[2], in[3], in[4], in[5]};
    assert_int_equal(l.infer_n(ins, got), 0);
    assert_int_equal(s_ref(C, H, W, ins, l.pdata(6), want), n);
    for (long long i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 2e-5 * (1 + fabs(want[i]))))
            fail_msg("%s: output %lld is %.9g, expected %.9g", sub, i, got[i],
                     want[i]);
    for (int k = 0; k < 6; k++)
        free(in[k]);
    free(got);
    free(want);
    dlclose(l.h);
}

/* Below the threads' size (60 elements a tensor) and above it (40000),
 * rows of 5000 being two pieces. */
static void test_general_layers(void **state)
{
    s_general(*state, 3, 4, 5);
    s_general(*state, 4, 2, 5000);
}

/* max and min of values with NaN in either operand: NaN there, fmax /
 * fmin elsewhere; b broadcast along a's rows. */
static void test_nan(void **state)
{
    fx_t *fx = *state;
    lib_t l;
    s_build(fx,
            "input a 2x4\ninput b 4\ny = add a a\nmx = max a b\n"
            "mn = min b a\no = concat mx mn axis=1\noutput o\n",
            "nan", &l);
    const float a[8] = {1, NAN, -1, 2, -3, 4, NAN, 0};
    const float b[4] = {0, 1, 2, NAN};
    const float *const ins[2] = {a, b};
    float got[16];
    assert_int_equal(l.onumel(), 16);
    assert_int_equal(l.infer_n(ins, got), 0);
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 4; j++) {
            float u = a[r * 4 + j], v = b[j];
            float gx = got[r * 8 + j], gn = got[r * 8 + 4 + j];
            if (isnan(u) || isnan(v)) {
                if (!isnan(gx) || !isnan(gn))
                    fail_msg("[%d,%d]: max %g, min %g, expected NaN", r, j, gx,
                             gn);
            } else if (gx != fmaxf(u, v) || gn != fminf(u, v)) {
                fail_msg("[%d,%d]: max %g, min %g of %g and %g", r, j, gx, gn,
                         u, v);
            }
        }
    dlclose(l.h);
}

/* A const that is the output: its parameter's values. */
static void test_const_output(void **state)
{
    fx_t *fx = *state;
    lib_t l;
    s_build(fx, "input x 2x3\ny = add x x\nk = const shape=3x2\noutput k\n",
            "const", &l);
    assert_int_equal(l.nparams(), 2);
    assert_string_equal(l.pname(1), "k.weight");
    assert_int_equal(l.nlayers(), 1);
    float x[6] = {0}, got[6];
    const float *const ins[1] = {x};
    assert_int_equal(l.onumel(), 6);
    assert_int_equal(l.infer_n(ins, got), 0);
    assert_memory_equal(got, l.pdata(1), sizeof got);
    dlclose(l.h);
}

/* oneDNN's baseline refuses the general layers (and a broadcasting add),
 * naming each, and runs a gelu approximate=tanh as its own tanh GELU. */
static void test_dnnl(void **state)
{
    fx_t *fx = *state;
    char *path = kl_xasprintf("%s/g.graph", fx->dir);
    static const char refused[] = "input x 2x3\ninput g 3\n"
                                  "y = add x x\nb = add x g\nm = mul y g\n";
    assert_int_equal(kl_write_file(path, refused, strlen(refused), fx->err),
                     KL_OK);
    float x[8], g[3] = {1, 2, 3};
    float *p[2] = {x, g};
    kl_dnnl_net_t *net = NULL;
    int rc = kl_export_dnnl_open(path, p, 2, &net, fx->err);
    assert_null(net);
    assert_int_equal(rc, KL_ERR_UNSUPPORTED);
    if (!strstr(fx->err, "built without libdnnl") &&
        !strstr(fx->err, "oneDNN cannot express 2 layer(s) as built here: "
                         "'b' (add, broadcast), 'm' (mul)"))
        fail_msg("%s", fx->err);

    static const char gelu[] = "input x 2x4\ny = gelu x approximate=tanh\n";
    assert_int_equal(kl_write_file(path, gelu, strlen(gelu), fx->err), KL_OK);
    float want[8];
    for (int i = 0; i < 8; i++) {
        x[i] = (float)i * 0.75f - 3.0f;
        want[i] = (float)s_gelu_tanh(x[i]);
    }
    rc = kl_export_dnnl_open(path, p, 1, &net, fx->err);
    if (rc == KL_ERR_UNSUPPORTED && strstr(fx->err, "built without libdnnl")) {
        assert_null(net);
    } else {
        if (rc)
            fail_msg("oneDNN: %s", fx->err);
        double rel = 1;
        if (kl_export_dnnl_check(net, want, 8, 1e-5, &rel, fx->err))
            fail_msg("oneDNN: %s", fx->err);
        kl_export_dnnl_close(net);
    }
    free(path);
}

int main(void)
{
    if (system("${CC:-cc} --version >/dev/null 2>&1") != 0) {
        printf("SKIP: no C compiler (cc or $CC) to build the library\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_general_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_const_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dnnl, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
