/* kl_ir_act.c - the smooth activations of an epilogue (kl_act, kl_ir.h):
 * their names and their definitions in double, which the reference
 * interpreter computes. */
#include <math.h>
#include <string.h>

#include "kl_ir.h"

static const char *const s_names[KL_ACT_COUNT] = {
    [KL_ACT_SIGMOID] = "sigmoid",
    [KL_ACT_SILU] = "silu",
    [KL_ACT_HARD_SWISH] = "hard_swish",
    [KL_ACT_HARD_SIGMOID] = "hard_sigmoid",
    [KL_ACT_GELU] = "gelu",
    [KL_ACT_GELU_TANH] = "gelu_tanh",
};

const char *kl_act_name(kl_act a)
{
    return (unsigned)a < KL_ACT_COUNT ? s_names[a] : NULL;
}

bool kl_act_parse(const char *name, kl_act *out)
{
    for (int i = 0; i < KL_ACT_COUNT; i++)
        if (strcmp(name, s_names[i]) == 0) {
            *out = (kl_act)i;
            return true;
        }
    return false;
}

const char *kl_act_list(void)
{
    return "sigmoid, silu, hard_swish, hard_sigmoid, gelu or gelu_tanh";
}

static double s_sigmoid(double x)
{
    /* Either form keeps e^t finite for t <= 0. */
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static double s_clamp(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

double kl_act_eval(kl_act a, double alpha, double beta, double x)
{
    switch (a) {
    case KL_ACT_SIGMOID:
        return s_sigmoid(x);
    case KL_ACT_SILU:
        return x * s_sigmoid(x);
    case KL_ACT_HARD_SWISH:
        return x * s_clamp(x + 3.0, 0.0, 6.0) / 6.0;
    case KL_ACT_HARD_SIGMOID:
        return s_clamp(alpha * x + beta, 0.0, 1.0);
    case KL_ACT_GELU:
        return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case KL_ACT_GELU_TANH:
        return 0.5 * x *
               (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case KL_ACT_COUNT:
        break;
    }
    return NAN;
}
