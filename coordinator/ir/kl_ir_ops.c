/* kl_ir_ops.c - named operators. Each one writes its workload in the
 * expression language (every tensor declared) and parses it, so a named
 * operator and the same text typed by hand are one workload with one key.
 * One table lists them (name, builder, parameters): the lookup, the list
 * of names in the unknown-operator error and kl_workload_op are read from
 * it. Here: the matmul family, pooling and the elementwise ops; the
 * convolutions are kl_ir_ops_conv.c's, the spec readers kl_ir_spec.c's. */
#include "kl_ir_ops_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"

/* qmatmul / qdense: A[M,K] u8 x B[K,N] const s8 (qdense: X[N,I] x W[O,I]). */
static int s_qmatmul(kl_ir__spec_t *s, kl_workload_t **out)
{
    bool dense = strcmp(s->op, "qdense") == 0;
    int64_t M, N, K, bias;
    kl_ir__act_t act;
    kl_ir__quant_t q;
    int rc = dense ? (kl_ir__spec_int(s, "N", -1, 1, &M) ?: kl_ir__spec_int(s, "I", -1, 1, &K)
                                               ?: kl_ir__spec_int(s, "O", -1, 1, &N)
                                               ?: kl_ir__spec_flag(s, "bias", 1, &bias))
                   : (kl_ir__spec_int(s, "M", -1, 1, &M) ?: kl_ir__spec_int(s, "N", -1, 1, &N)
                                               ?: kl_ir__spec_int(s, "K", -1, 1, &K)
                                               ?: kl_ir__spec_flag(s, "bias", 0, &bias));
    if (rc || (rc = kl_ir__spec_act(s, &act)) ||
        (rc = kl_ir__spec_quant(s, &q, &act)))
        return rc;
    kl_buf_t t = {0}, n = {0};
    char *ysh = kl_xasprintf("%lld,%lld", (long long)M, (long long)N);
    if (dense) {
        kl_buf_puts(&t, "Y[n,o] += ");
        kl_ir__qinput(&t, &q, "X[n,i]");
        kl_buf_puts(&t, " * W[o,i]");
        kl_ir__qepilogue(&t, &q, &act, bias, "o");
        kl_buf_printf(&t,
                      " where n=%lld, o=%lld, i=%lld; X: u8[%lld,%lld], "
                      "W: const s8[%lld,%lld]",
                      (long long)M, (long long)N, (long long)K, (long long)M,
                      (long long)K, (long long)N, (long long)K);
        kl_ir__qdecls(&t, &q, bias, N, "Y", ysh);
        kl_buf_printf(&n, "qdense_%lld_%lld_%lld", (long long)M, (long long)K,
                      (long long)N);
    } else {
        kl_buf_puts(&t, "C[i,j] += ");
        kl_ir__qinput(&t, &q, "A[i,k]");
        kl_buf_puts(&t, " * B[k,j]");
        kl_ir__qepilogue(&t, &q, &act, bias, "j");
        kl_buf_printf(&t,
                      " where i=%lld, j=%lld, k=%lld; A: u8[%lld,%lld], "
                      "B: const s8[%lld,%lld]",
                      (long long)M, (long long)N, (long long)K, (long long)M,
                      (long long)K, (long long)K, (long long)N);
        kl_ir__qdecls(&t, &q, bias, N, "C", ysh);
        kl_buf_printf(&n, "qmatmul_%lld_%lld_%lld", (long long)M, (long long)N,
                      (long long)K);
    }
    free(ysh);
    if (bias)
        kl_buf_puts(&n, "_bias");
    kl_ir__qname(&n, &q);
    kl_ir__act_name(&n, &act);
    return kl_ir__spec_finish(s, kl_buf_take(&t), s->op, kl_buf_take(&n), out);
}

/* matmul: C = A x B. const_b=1 declares B (and the bias) const, as a
 * model's matmul by a weight has them: a kernel may pack them once in
 * its prepare step (docs/architecture.md, "constant inputs"). */
static int s_matmul(kl_ir__spec_t *s, kl_workload_t **out)
{
    int64_t M, N, K, bias, res, cb;
    kl_ir__act_t act;
    const char *in;
    int rc = kl_ir__spec_int(s, "M", -1, 1, &M) ?: kl_ir__spec_int(s, "N", -1, 1, &N)
                                        ?: kl_ir__spec_int(s, "K", -1, 1, &K)
                                        ?: kl_ir__spec_flag(s, "bias", 0, &bias)
                                        ?: kl_ir__spec_flag(s, "residual", 0, &res)
                                        ?: kl_ir__spec_flag(s, "const_b", 0, &cb)
                                        ?: kl_ir__spec_act(s, &act)
                                        ?: kl_ir__spec_in_dtype(s, &in);
    if (rc)
        return rc;
    kl_buf_t t = {0}, n = {0};
    kl_buf_printf(&t, "C[i,j] += A[i,k] * B[k,j]%s%s",
                  bias ? " | + bias[j]" : "", res ? " | + Res[i,j]" : "");
    kl_ir__act_epilogue(&t, &act);
    kl_buf_printf(&t, " where i=%lld, j=%lld, k=%lld", (long long)M,
                  (long long)N, (long long)K);
    bool half = strcmp(in, "f32") != 0;
    if (half)
        kl_buf_printf(&t, "; A: %s[%lld,%lld]", in, (long long)M, (long long)K);
    if (half || cb)
        kl_buf_printf(&t, "%s B: %s%s[%lld,%lld]", half ? "," : ";",
                      cb ? "const " : "", in, (long long)K, (long long)N);
    if (cb && bias)
        kl_buf_printf(&t, ", bias: const f32[%lld]", (long long)N);
    kl_buf_printf(&n, "matmul_%lld_%lld_%lld%s%s%s", (long long)M, (long long)N,
                  (long long)K, bias ? "_bias" : "", res ? "_res" : "",
                  cb ? "_constb" : "");
    kl_ir__act_name(&n, &act);
    if (strcmp(in, "f32"))
        kl_buf_printf(&n, "_%s", in);
    return kl_ir__spec_finish(s, kl_buf_take(&t), "matmul", kl_buf_take(&n),
                              out);
}

static int s_batch_matmul(kl_ir__spec_t *s, kl_workload_t **out)
{
    int64_t B, M, N, K;
    const char *in;
    int rc = kl_ir__spec_int(s, "B", -1, 1, &B) ?: kl_ir__spec_int(s, "M", -1, 1, &M)
                                        ?: kl_ir__spec_int(s, "N", -1, 1, &N)
                                        ?: kl_ir__spec_int(s, "K", -1, 1, &K)
                                        ?: kl_ir__spec_in_dtype(s, &in);
    if (rc)
        return rc;
    bool half = strcmp(in, "f32") != 0;
    char decl[160] = "";
    if (half)
        snprintf(decl, sizeof decl,
                 "; A: %s[%lld,%lld,%lld], B: %s[%lld,%lld,"
                 "%lld]",
                 in, (long long)B, (long long)M, (long long)K, in, (long long)B,
                 (long long)K, (long long)N);
    char *text = kl_xasprintf("C[b,i,j] += A[b,i,k] * B[b,k,j] where b=%lld, "
                              "i=%lld, j=%lld, k=%lld%s",
                              (long long)B, (long long)M, (long long)N,
                              (long long)K, decl);
    char *name = kl_xasprintf("batch_matmul_%lld_%lld_%lld_%lld%s%s",
                              (long long)B, (long long)M, (long long)N,
                              (long long)K, half ? "_" : "", half ? in : "");
    return kl_ir__spec_finish(s, text, "batch_matmul", name, out);
}

static int s_dense(kl_ir__spec_t *s, kl_workload_t **out)
{
    int64_t N, I, O, bias, res;
    kl_ir__act_t act;
    const char *in;
    int rc = kl_ir__spec_int(s, "N", -1, 1, &N) ?: kl_ir__spec_int(s, "I", -1, 1, &I)
                                        ?: kl_ir__spec_int(s, "O", -1, 1, &O)
                                        ?: kl_ir__spec_flag(s, "bias", 1, &bias)
                                        ?: kl_ir__spec_flag(s, "residual", 0, &res)
                                        ?: kl_ir__spec_act(s, &act)
                                        ?: kl_ir__spec_in_dtype(s, &in);
    if (rc)
        return rc;
    kl_buf_t t = {0}, n = {0};
    kl_buf_printf(&t, "Y[n,o] += X[n,i] * W[o,i]%s%s", bias ? " | + b[o]" : "",
                  res ? " | + Res[n,o]" : "");
    kl_ir__act_epilogue(&t, &act);
    kl_buf_printf(&t, " where n=%lld, o=%lld, i=%lld; W: const %s[%lld,%lld]",
                  (long long)N, (long long)O, (long long)I, in, (long long)O,
                  (long long)I);
    if (strcmp(in, "f32"))
        kl_buf_printf(&t, ", X: %s[%lld,%lld]", in, (long long)N, (long long)I);
    if (bias)
        kl_buf_printf(&t, ", b: const f32[%lld]", (long long)O);
    kl_buf_printf(&n, "dense_%lld_%lld_%lld%s%s", (long long)N, (long long)I,
                  (long long)O, bias ? "_bias" : "", res ? "_res" : "");
    kl_ir__act_name(&n, &act);
    if (strcmp(in, "f32"))
        kl_buf_printf(&n, "_%s", in);
    return kl_ir__spec_finish(s, kl_buf_take(&t), "dense", kl_buf_take(&n),
                              out);
}

/* max_pool2d / avg_pool2d, NCHW. max: out-of-range window points are
 * skipped (-inf padding). avg: sum times 1/(R*S), padding counted
 * (count_include_pad). */
static int s_pool(kl_ir__spec_t *s, kl_workload_t **out)
{
    bool is_max = strcmp(s->op, "max_pool2d") == 0;
    int64_t N, C, H, W, R, S, st, pad, P = 0, Q = 0;
    int rc = kl_ir__spec_int(s, "N", -1, 1, &N) ?: kl_ir__spec_int(s, "C", -1, 1, &C)
                                        ?: kl_ir__spec_int(s, "H", -1, 1, &H)
                                        ?: kl_ir__spec_int(s, "W", -1, 1, &W)
                                        ?: kl_ir__spec_int(s, "R", -1, 1, &R)
                                        ?: kl_ir__spec_int(s, "S", -1, 1, &S);
    if (!rc)
        rc = kl_ir__spec_int(s, "stride", R, 1, &st)
                 ?: kl_ir__spec_int(s, "pad", 0, 0, &pad);
    if (rc)
        return rc;
    if (pad >= R || pad >= S)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: pad=%lld must be less than the window (R=%lld, "
                         "S=%lld)",
                         s->op, (long long)pad, (long long)R, (long long)S);
    if ((rc = kl_ir__spec_outsize(s, "height", H, R, st, pad, 1, &P)) ||
        (rc = kl_ir__spec_outsize(s, "width", W, S, st, pad, 1, &Q)))
        return rc;
    char *iy = kl_ir__window("y", st, "r", 1, pad);
    char *ix = kl_ir__window("x", st, "s", 1, pad);
    kl_buf_t b = {0};
    kl_buf_printf(&b, "Y[n,c,y,x] %s X[n,c,%s,%s]", is_max ? "max=" : "+=", iy,
                  ix);
    if (!is_max)
        kl_buf_printf(&b, " | * %.17g", 1.0 / (double)(R * S));
    kl_buf_printf(&b,
                  " where n=%lld, c=%lld, y=%lld, x=%lld, r=%lld, s=%lld; "
                  "X: f32[%lld,%lld,%lld,%lld]",
                  (long long)N, (long long)C, (long long)P, (long long)Q,
                  (long long)R, (long long)S, (long long)N, (long long)C,
                  (long long)H, (long long)W);
    free(iy);
    free(ix);
    char *name =
        kl_xasprintf("%s_%lld_%lld_%lld_%lld_%lld_%lld_s%lld_p%lld", s->op,
                     (long long)N, (long long)C, (long long)H, (long long)W,
                     (long long)R, (long long)S, (long long)st, (long long)pad);
    return kl_ir__spec_finish(s, kl_buf_take(&b), s->op, name, out);
}

/* add / relu / clip over shape=AxBxC; clip's bounds are lo= and hi=,
 * its workload the clip(lo, hi) epilogue on a copy. */
static int s_elementwise(kl_ir__spec_t *s, kl_workload_t **out)
{
    bool is_add = strcmp(s->op, "add") == 0;
    kl_ir__act_t clip = {.clip = strcmp(s->op, "clip") == 0};
    char lo[40] = "", hi[40] = "";
    if (clip.clip) {
        int rc = kl_ir__spec_num(s, "lo", &clip.lo)
                     ?: kl_ir__spec_num(s, "hi", &clip.hi);
        if (rc)
            return rc;
        kl_ir__num_text(lo, clip.lo);
        kl_ir__num_text(hi, clip.hi);
        if (clip.lo > clip.hi)
            return kl_seterr(s->err, KL_ERR_INVAL, "clip: lo=%s is above hi=%s",
                             lo, hi);
    }
    kl_ir__kv_t *kv = kl_ir__spec_find(s, "shape");
    if (!kv)
        return kl_seterr(s->err, KL_ERR_INVAL, "%s: missing shape", s->op);
    int64_t dims[KL_IR_MAX_DIMS];
    int nd = 0;
    const char *p = kv->val;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > KL_IR__INT_MAX ||
            nd == KL_IR_MAX_DIMS || (*end && *end != 'x') ||
            (*end == 'x' && !end[1]) || *p == '+' || *p == ' ')
            return kl_seterr(s->err, KL_ERR_INVAL,
                             "%s: bad value '%s' for shape (expected AxBxC, "
                             "at most %d positive sizes)",
                             s->op, kv->val, KL_IR_MAX_DIMS);
        dims[nd++] = v;
        p = *end ? end + 1 : end;
    }
    kl_buf_t idx = {0}, where = {0}, shp = {0};
    for (int d = 0; d < nd; d++) {
        kl_buf_printf(&idx, "%sd%d", d ? "," : "", d);
        kl_buf_printf(&where, "%sd%d=%lld", d ? ", " : "", d,
                      (long long)dims[d]);
        kl_buf_printf(&shp, "%s%lld", d ? "x" : "", (long long)dims[d]);
    }
    kl_buf_t t = {0}, n = {0};
    if (is_add)
        kl_buf_printf(&t, "Y[%s] = A[%s] + B[%s]", idx.data, idx.data,
                      idx.data);
    else if (clip.clip)
        kl_buf_printf(&t, "Y[%s] = X[%s]", idx.data, idx.data);
    else
        kl_buf_printf(&t, "Y[%s] = max(X[%s], 0)", idx.data, idx.data);
    kl_ir__act_epilogue(&t, &clip);
    kl_buf_printf(&t, " where %s", where.data);
    kl_buf_printf(&n, "%s_%s", s->op, shp.data);
    if (clip.clip)
        kl_buf_printf(&n, "_%s_%s", lo, hi);
    char *text = kl_buf_take(&t), *name = kl_buf_take(&n);
    kl_buf_free(&idx);
    kl_buf_free(&where);
    kl_buf_free(&shp);
    return kl_ir__spec_finish(s, text, s->op, name, out);
}

/* The named operators, in the order the unknown-operator error lists
 * them; params is the parameter list of kl_workload_from_op's manual
 * (kl_ir.h), defaults in brackets. */
static const struct {
    const char *name;
    kl_ir__build_fn *build;
    const char *params;
} s_ops[] = {
    {"matmul", s_matmul,
     "M N K [bias=0 residual=0 const_b=0 relu=0 clip=LO,HI act=A in=f32]"},
    {"batch_matmul", s_batch_matmul, "B M N K [in=f32]"},
    {"dense", s_dense,
     "N I O [bias=1 residual=0 relu=0 clip=LO,HI act=A in=f32]"},
    {"conv2d", kl_ir__conv2d,
     "N C H W K R S [stride=1 pad=0 dilation=1 groups=1 layout=NCHW|NHWC "
     "bias=0 relu=0 clip=LO,HI act=A residual=0]"},
    {"depthwise_conv2d", kl_ir__depthwise,
     "N C H W R S [stride=1 pad=0 dilation=1 multiplier=1 bias=0 relu=0 "
     "clip=LO,HI act=A residual=0]"},
    {"conv2d_transpose", kl_ir__conv2d_transpose,
     "N C H W K R S [stride=1 pad=0 output_pad=0]"},
    {"max_pool2d", s_pool, "N C H W R S [stride=R pad=0]"},
    {"avg_pool2d", s_pool, "N C H W R S [stride=R pad=0]"},
    {"add", s_elementwise, "shape=AxBxC"},
    {"relu", s_elementwise, "shape=AxBxC"},
    {"clip", s_elementwise, "shape=AxBxC lo=LO hi=HI"},
    {"qmatmul", s_qmatmul,
     "M N K [bias=0 za=0 zo=0 out=u8|s8|s32 scale=channel|NUMBER relu=0 "
     "clip=LO,HI]"},
    {"qdense", s_qmatmul,
     "N I O [bias=1 za=0 zo=0 out=u8|s8|s32 scale=channel|NUMBER relu=0 "
     "clip=LO,HI]"},
    {"qconv2d", kl_ir__conv2d,
     "conv2d's parameters (no residual) and za=0 zo=0 out=u8|s8|s32 "
     "scale=channel|NUMBER"},
    {"qdepthwise_conv2d", kl_ir__depthwise,
     "depthwise_conv2d's parameters (no residual) and za=0 zo=0 "
     "out=u8|s8|s32 scale=channel|NUMBER"},
};
#define S_NOPS ((int)(sizeof(s_ops) / sizeof(s_ops[0])))

/* The row of the op named by the n bytes at name, or -1. */
static int s_op_index(const char *name, size_t n)
{
    for (int i = 0; i < S_NOPS; i++)
        if (strlen(s_ops[i].name) == n && strncmp(name, s_ops[i].name, n) == 0)
            return i;
    return -1;
}

const char *kl_workload_op(int i, const char **params)
{
    if (i < 0 || i >= S_NOPS)
        return NULL;
    if (params)
        *params = s_ops[i].params;
    return s_ops[i].name;
}

int kl_workload_from_op(const char *spec, kl_workload_t **out, char *err)
{
    *out = NULL;
    kl_ir__spec_t s = {.err = err};
    if (!spec)
        return kl_seterr(err, KL_ERR_INVAL, "no operator given");
    int rc = kl_ir__spec_split(spec, &s);
    if (rc)
        return rc;
    int i = s_op_index(s.op, strlen(s.op));
    if (i >= 0)
        return s_ops[i].build(&s, out);
    /* "expected matmul, ..., qconv2d or qdepthwise_conv2d" */
    kl_buf_t names = {0};
    for (i = 0; i < S_NOPS; i++)
        kl_buf_printf(&names, "%s%s",
                      i == 0           ? ""
                      : i < S_NOPS - 1 ? ", "
                                       : " or ",
                      s_ops[i].name);
    rc = kl_seterr(err, KL_ERR_INVAL, "unknown operator '%s' (expected %s)",
                   s.op, names.data);
    kl_buf_free(&names);
    return rc;
}

int kl_workload_from_string(const char *s, kl_workload_t **out, char *err)
{
    *out = NULL;
    if (!s)
        return kl_seterr(err, KL_ERR_INVAL, "no workload given");
    while (*s == ' ' || *s == '\t' || *s == '\n')
        s++;
    if (s_op_index(s, strcspn(s, " \t\n")) >= 0)
        return kl_workload_from_op(s, out, err);
    return kl_workload_parse(s, out, err);
}
