/* kl_ir_ops_conv.c - the convolutions among the named operators: conv2d
 * (grouped, NHWC), depthwise_conv2d, conv2d_transpose and their q-op
 * forms, written in the expression language like every named operator. */
#include "kl_ir_ops_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"

typedef struct {
    int64_t N, C, H, W, K, R, S, stride, pad, dil, groups, bias, res;
    kl_ir__act_t act;
    bool nhwc;
    kl_ir__quant_t q; /* q.on for qconv2d / qdepthwise_conv2d */
    const char *in;   /* conv2d's in=: X and W's dtype ("f32" / "bf16") */
} s_conv_t;

static int s_conv_params(kl_ir__spec_t *s, s_conv_t *c, bool has_k)
{
    int rc = kl_ir__spec_int(s, "N", -1, 1, &c->N) ?: kl_ir__spec_int(s, "C", -1, 1, &c->C)
                                           ?: kl_ir__spec_int(s, "H", -1, 1, &c->H)
                                           ?: kl_ir__spec_int(s, "W", -1, 1, &c->W)
                                           ?: kl_ir__spec_int(s, "R", -1, 1, &c->R)
                                           ?: kl_ir__spec_int(s, "S", -1, 1, &c->S)
                                           ?: kl_ir__spec_int(s, "stride", 1, 1,
                                                    &c->stride)
                                           ?: kl_ir__spec_int(s, "pad", 0, 0, &c->pad)
                                           ?: kl_ir__spec_int(s, "dilation", 1, 1,
                                                    &c->dil)
                                           ?: kl_ir__spec_flag(s, "bias", 0, &c->bias)
                                           ?: kl_ir__spec_act(s, &c->act)
                                           ?: kl_ir__spec_flag(s, "residual", 0,
                                                     &c->res);
    if (!rc && has_k)
        rc = kl_ir__spec_int(s, "K", -1, 1, &c->K);
    if (!rc && s->op[0] == 'q') {
        rc = kl_ir__spec_quant(s, &c->q, &c->act);
        if (!rc && c->res)
            rc = kl_seterr(s->err, KL_ERR_INVAL,
                           "%s: residual=1 is not supported (a quantized "
                           "residual needs its own scale)",
                           s->op);
    }
    return rc;
}

/* Epilogue text of bias / residual / relu or clip; ch is the output
 * channel index expression, outidx the output access indices. */
static void s_conv_epilogue(kl_buf_t *b, const s_conv_t *c, const char *ch,
                            const char *outidx)
{
    if (c->q.on) {
        kl_ir__qepilogue(b, &c->q, &c->act, c->bias, ch);
        return;
    }
    if (c->bias)
        kl_buf_printf(b, " | + bias[%s]", ch);
    if (c->res)
        kl_buf_printf(b, " | + Res[%s]", outidx);
    kl_ir__act_epilogue(b, &c->act);
}

static char *s_conv_name(const char *op, const s_conv_t *c, bool has_k)
{
    kl_buf_t b = {0};
    kl_buf_printf(&b, "%s_%lld_%lld_%lld_%lld", op, (long long)c->N,
                  (long long)c->C, (long long)c->H, (long long)c->W);
    if (has_k)
        kl_buf_printf(&b, "_%lld", (long long)c->K);
    kl_buf_printf(&b, "_%lld_%lld_s%lld_p%lld", (long long)c->R,
                  (long long)c->S, (long long)c->stride, (long long)c->pad);
    if (c->dil != 1)
        kl_buf_printf(&b, "_d%lld", (long long)c->dil);
    if (c->groups > 1)
        kl_buf_printf(&b, "_g%lld", (long long)c->groups);
    if (c->nhwc)
        kl_buf_puts(&b, "_nhwc");
    if (c->bias)
        kl_buf_puts(&b, "_bias");
    if (c->res)
        kl_buf_puts(&b, "_res");
    if (c->q.on)
        kl_ir__qname(&b, &c->q);
    kl_ir__act_name(&b, &c->act);
    if (c->in && strcmp(c->in, "f32"))
        kl_buf_printf(&b, "_%s", c->in);
    return kl_buf_take(&b);
}

/* layout=NCHW (the default) or NHWC into c->nhwc. */
static int s_layout(kl_ir__spec_t *s, s_conv_t *c)
{
    kl_ir__kv_t *lay = kl_ir__spec_find(s, "layout");
    if (lay && strcmp(lay->val, "NHWC") == 0)
        c->nhwc = true;
    else if (lay && strcmp(lay->val, "NCHW") != 0)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: bad value '%s' for layout (NCHW or NHWC)", s->op,
                         lay->val);
    return KL_OK;
}

/* conv2d. With groups > 1 the output channel is split into (g, f) so that
 * the output access stays a list of iterators: Y is then declared
 * [N,G,K/G,P,Q] (NCHW) or [N,P,Q,G,K/G] (NHWC), the same memory as the
 * 4-D tensor. NHWC takes its weight as [R,S,C/G,K]. in=bf16 (or f16)
 * declares X and W with that dtype (the output, bias and residual stay
 * f32); qconv2d has no in= (its dtypes are the quantization's). */
int kl_ir__conv2d(kl_ir__spec_t *s, kl_workload_t **out)
{
    s_conv_t c = {0};
    int rc = s_conv_params(s, &c, true)
                 ?: kl_ir__spec_int(s, "groups", 1, 1, &c.groups);
    if (!rc && !c.q.on)
        rc = kl_ir__spec_in_dtype(s, &c.in);
    if (rc)
        return rc;
    if ((rc = s_layout(s, &c)))
        return rc;
    if (c.C % c.groups)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: groups=%lld does not divide C=%lld", s->op,
                         (long long)c.groups, (long long)c.C);
    if (c.K % c.groups)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "%s: groups=%lld does not divide K=%lld", s->op,
                         (long long)c.groups, (long long)c.K);
    int64_t P = 0, Q = 0, G = c.groups, Cg = c.C / G, Kg = c.K / G;
    if ((rc = kl_ir__spec_outsize(s, "height", c.H, c.R, c.stride, c.pad, c.dil,
                                  &P)) ||
        (rc = kl_ir__spec_outsize(s, "width", c.W, c.S, c.stride, c.pad, c.dil,
                                  &Q)))
        return rc;
    char *iy = kl_ir__window("y", c.stride, "r", c.dil, c.pad);
    char *ix = kl_ir__window("x", c.stride, "s", c.dil, c.pad);
    char cin[64] = "c", cout[64] = "f";
    if (G > 1) {
        snprintf(cin, sizeof(cin), "g*%lld+c", (long long)Cg);
        snprintf(cout, sizeof(cout), "g*%lld+f", (long long)Kg);
    }
    const char *oi = c.nhwc ? (G > 1 ? "n,y,x,g,f" : "n,y,x,f")
                            : (G > 1 ? "n,g,f,y,x" : "n,f,y,x");
    kl_buf_t b = {0}, xa = {0};
    if (c.nhwc)
        kl_buf_printf(&xa, "X[n,%s,%s,%s]", iy, ix, cin);
    else
        kl_buf_printf(&xa, "X[n,%s,%s,%s]", cin, iy, ix);
    kl_buf_printf(&b, "Y[%s] += ", oi);
    if (c.q.on)
        kl_ir__qinput(&b, &c.q, xa.data);
    else
        kl_buf_puts(&b, xa.data);
    kl_buf_free(&xa);
    if (c.nhwc)
        kl_buf_printf(&b, " * W[r,s,c,%s]", cout);
    else
        kl_buf_printf(&b, " * W[%s,c,r,s]", cout);
    const char *xt = c.q.on ? "u8" : c.in, *wt = c.q.on ? "s8" : c.in;
    s_conv_epilogue(&b, &c, cout, oi);
    kl_buf_printf(&b,
                  " where n=%lld, f=%lld, y=%lld, x=%lld, c=%lld, r=%lld, "
                  "s=%lld",
                  (long long)c.N, (long long)Kg, (long long)P, (long long)Q,
                  (long long)Cg, (long long)c.R, (long long)c.S);
    if (G > 1)
        kl_buf_printf(&b, ", g=%lld", (long long)G);
    if (c.nhwc)
        kl_buf_printf(
            &b,
            "; X: %s[%lld,%lld,%lld,%lld], W: const %s[%lld,%lld,%lld,"
            "%lld]",
            xt, (long long)c.N, (long long)c.H, (long long)c.W, (long long)c.C,
            wt, (long long)c.R, (long long)c.S, (long long)Cg, (long long)c.K);
    else
        kl_buf_printf(
            &b,
            "; X: %s[%lld,%lld,%lld,%lld], W: const %s[%lld,%lld,%lld,"
            "%lld]",
            xt, (long long)c.N, (long long)c.C, (long long)c.H, (long long)c.W,
            wt, (long long)c.K, (long long)Cg, (long long)c.R, (long long)c.S);
    if (c.q.on) {
        char *ysh;
        if (c.nhwc)
            ysh =
                G > 1
                    ? kl_xasprintf("%lld,%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)P, (long long)Q, (long long)G,
                                   (long long)Kg)
                    : kl_xasprintf("%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)P, (long long)Q, (long long)c.K);
        else
            ysh =
                G > 1
                    ? kl_xasprintf("%lld,%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)G, (long long)Kg, (long long)P,
                                   (long long)Q)
                    : kl_xasprintf("%lld,%lld,%lld,%lld", (long long)c.N,
                                   (long long)c.K, (long long)P, (long long)Q);
        kl_ir__qdecls(&b, &c.q, c.bias, c.K, "Y", ysh);
        free(ysh);
    } else if (c.bias) {
        kl_buf_printf(&b, ", bias: const f32[%lld]", (long long)c.K);
    }
    free(iy);
    free(ix);
    return kl_ir__spec_finish(s, kl_buf_take(&b), s->op,
                              s_conv_name(s->op, &c, true), out);
}

/* depthwise_conv2d: each input channel c makes `multiplier` output
 * channels c*M+m, weight [C*M,1,R,S]. With M > 1 the output is declared
 * [N,C,M,P,Q], the same memory as [N,C*M,P,Q]. layout=NHWC (float,
 * multiplier 1) reads X [N,H,W,C] and writes Y [N,P,Q,C], the weight
 * unchanged; the iterators keep the order n, c, y, x, r, s. */
int kl_ir__depthwise(kl_ir__spec_t *s, kl_workload_t **out)
{
    s_conv_t c = {0};
    int64_t M, P = 0, Q = 0;
    int rc = s_conv_params(s, &c, false)
                 ?: kl_ir__spec_int(s, "multiplier", 1, 1, &M)
                 ?: s_layout(s, &c);
    if (!rc && c.nhwc && (M > 1 || c.q.on))
        rc = kl_seterr(s->err, KL_ERR_INVAL,
                       "%s: layout=NHWC is for the float depthwise_conv2d of "
                       "multiplier 1",
                       s->op);
    if (rc ||
        (rc = kl_ir__spec_outsize(s, "height", c.H, c.R, c.stride, c.pad, c.dil,
                                  &P)) ||
        (rc = kl_ir__spec_outsize(s, "width", c.W, c.S, c.stride, c.pad, c.dil,
                                  &Q)))
        return rc;
    char *iy = kl_ir__window("y", c.stride, "r", c.dil, c.pad);
    char *ix = kl_ir__window("x", c.stride, "s", c.dil, c.pad);
    char ch[64] = "c";
    if (M > 1)
        snprintf(ch, sizeof(ch), "c*%lld+m", (long long)M);
    const char *oi = M > 1 ? "n,c,m,y,x" : c.nhwc ? "n,y,x,c" : "n,c,y,x";
    kl_buf_t b = {0}, xa = {0};
    if (c.nhwc)
        kl_buf_printf(&xa, "X[n,%s,%s,c]", iy, ix);
    else
        kl_buf_printf(&xa, "X[n,c,%s,%s]", iy, ix);
    kl_buf_printf(&b, "Y[%s] += ", oi);
    if (c.q.on)
        kl_ir__qinput(&b, &c.q, xa.data);
    else
        kl_buf_puts(&b, xa.data);
    kl_buf_free(&xa);
    kl_buf_printf(&b, " * W[%s,0,r,s]", ch);
    const char *xt = c.q.on ? "u8" : "f32", *wt = c.q.on ? "s8" : "f32";
    s_conv_epilogue(&b, &c, ch, oi);
    kl_buf_printf(&b, " where n=%lld, c=%lld, y=%lld, x=%lld, r=%lld, s=%lld",
                  (long long)c.N, (long long)c.C, (long long)P, (long long)Q,
                  (long long)c.R, (long long)c.S);
    if (M > 1)
        kl_buf_printf(&b, ", m=%lld", (long long)M);
    if (c.nhwc)
        kl_buf_printf(&b, "; X: %s[%lld,%lld,%lld,%lld]", xt, (long long)c.N,
                      (long long)c.H, (long long)c.W, (long long)c.C);
    else
        kl_buf_printf(&b, "; X: %s[%lld,%lld,%lld,%lld]", xt, (long long)c.N,
                      (long long)c.C, (long long)c.H, (long long)c.W);
    kl_buf_printf(&b, ", W: const %s[%lld,1,%lld,%lld]", wt,
                  (long long)(c.C * M), (long long)c.R, (long long)c.S);
    if (c.q.on) {
        char *ysh =
            M > 1 ? kl_xasprintf("%lld,%lld,%lld,%lld,%lld", (long long)c.N,
                                 (long long)c.C, (long long)M, (long long)P,
                                 (long long)Q)
                  : kl_xasprintf("%lld,%lld,%lld,%lld", (long long)c.N,
                                 (long long)c.C, (long long)P, (long long)Q);
        kl_ir__qdecls(&b, &c.q, c.bias, c.C * M, "Y", ysh);
        free(ysh);
    } else if (c.bias) {
        kl_buf_printf(&b, ", bias: const f32[%lld]", (long long)(c.C * M));
    }
    free(iy);
    free(ix);
    char *name = s_conv_name(s->op, &c, false);
    if (M > 1) {
        char *n2 = kl_xasprintf("%s_m%lld", name, (long long)M);
        free(name);
        name = n2;
    }
    return kl_ir__spec_finish(s, kl_buf_take(&b), s->op, name, out);
}

/* conv2d_transpose: X [N,C,H,W], W [C,K,R,S] (PyTorch's ConvTranspose2d),
 * Y [N,K,Ho,Wo] with Ho = (H-1)*stride - 2*pad + R + output_pad. Output
 * row y gathers input row (y+pad-r)/stride where that divides exactly. */
int kl_ir__conv2d_transpose(kl_ir__spec_t *s, kl_workload_t **out)
{
    int64_t N, C, H, W, K, R, S, st, pad, opad;
    int rc = kl_ir__spec_int(s, "N", -1, 1, &N) ?: kl_ir__spec_int(s, "C", -1, 1, &C)
                                        ?: kl_ir__spec_int(s, "H", -1, 1, &H)
                                        ?: kl_ir__spec_int(s, "W", -1, 1, &W)
                                        ?: kl_ir__spec_int(s, "K", -1, 1, &K)
                                        ?: kl_ir__spec_int(s, "R", -1, 1, &R)
                                        ?: kl_ir__spec_int(s, "S", -1, 1, &S)
                                        ?: kl_ir__spec_int(s, "stride", 1, 1, &st)
                                        ?: kl_ir__spec_int(s, "pad", 0, 0, &pad)
                                        ?: kl_ir__spec_int(s, "output_pad", 0, 0, &opad);
    if (rc)
        return rc;
    if (opad >= st)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "conv2d_transpose: output_pad=%lld must be less than "
                         "stride=%lld",
                         (long long)opad, (long long)st);
    int64_t Ho = (H - 1) * st - 2 * pad + R + opad;
    int64_t Wo = (W - 1) * st - 2 * pad + S + opad;
    if (Ho < 1 || Wo < 1)
        return kl_seterr(s->err, KL_ERR_INVAL,
                         "conv2d_transpose: pad=%lld leaves an empty output "
                         "(%lldx%lld)",
                         (long long)pad, (long long)Ho, (long long)Wo);
    char *text = kl_xasprintf(
        "Y[n,k,y,x] += X[n,c,(y+%lld-r)/%lld,(x+%lld-s)/%lld] * W[c,k,r,s] "
        "where n=%lld, k=%lld, y=%lld, x=%lld, c=%lld, r=%lld, s=%lld; "
        "X: f32[%lld,%lld,%lld,%lld], W: const f32[%lld,%lld,%lld,%lld]",
        (long long)pad, (long long)st, (long long)pad, (long long)st,
        (long long)N, (long long)K, (long long)Ho, (long long)Wo, (long long)C,
        (long long)R, (long long)S, (long long)N, (long long)C, (long long)H,
        (long long)W, (long long)C, (long long)K, (long long)R, (long long)S);
    char *name = kl_xasprintf(
        "conv2d_transpose_%lld_%lld_%lld_%lld_%lld_%lld_%lld_s%lld_p%lld%s",
        (long long)N, (long long)C, (long long)H, (long long)W, (long long)K,
        (long long)R, (long long)S, (long long)st, (long long)pad,
        opad ? "_op" : "");
    return kl_ir__spec_finish(s, text, "conv2d_transpose", name, out);
}
