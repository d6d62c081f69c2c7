/* kl_target.c - the kind table and target strings; see kl_target.h. */
#include "kl_target.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kl_err.h"

/* This machine's CPU target, or its simulated twin: literals, so that
 * both are static strings. */
#define S_CPU(sim, t) ((sim) ? KL_TARGET_SIM t : t)

static const char *s_cpu(bool sim)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return S_CPU(sim, "cpu/x86_64-avx512");
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return S_CPU(sim, "cpu/x86_64-avx2");
    return S_CPU(sim, "cpu/x86_64");
#elif defined(__aarch64__)
    return S_CPU(sim, "cpu/aarch64");
#else
    return S_CPU(sim, "cpu/unknown");
#endif
}

const char *kl_cpu_target(void)
{
    return s_cpu(false);
}

/* ---- the kinds ----------------------------------------------------------- */

static bool s_cpu_has_avx512(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

/* The bare "cpu" of a design space is the widest x86 vector ISA of this
 * machine, which kl_cpu_target does not always name (a CPU without FMA). */
static int s_parse_cpu(const char *text, kl_target_t *out, char *err)
{
    (void)text;
    (void)err;
    static const struct {
        const char *isa;
        int lanes, regs;
    } isas[] = {
        {"x86_64-avx512", 16, 32},
        {"x86_64-avx2", 8, 16},
        {"generic", 4, 16},
    };
    if (!out->isa[0])
        snprintf(out->isa, sizeof out->isa, "%s",
                 s_cpu_has_avx512() ? "x86_64-avx512" : "x86_64-avx2");
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
        if (!strcmp(out->isa, isas[i].isa)) {
            out->vec_lanes = isas[i].lanes;
            out->vec_regs = isas[i].regs;
            return KL_OK;
        }
    return KL_ERR_NOTFOUND;
}

static int s_parse_cuda(const char *text, kl_target_t *out, char *err)
{
    if (strncmp(out->isa, "sm_", 3) != 0)
        return KL_ERR_NOTFOUND;
    int sm = 0;
    char tail = 0;
    if (sscanf(out->isa + 3, "%d%c", &sm, &tail) != 1 || sm < 30 || sm > 200)
        return kl_seterr(err, KL_ERR_INVAL, "target '%s': expected cuda/sm_NN",
                         text);
    out->sm = sm;
    out->vec_lanes = 1;
    out->max_threads_per_block = 1024;
    out->max_shared_bytes = sm >= 80 ? 99 * 1024 : 48 * 1024;
    return KL_OK;
}

static const kl_target_kind_t s_kinds[] = {
    [KL_TARGET_CPU] = {.name = "cpu",
                       .forms = "cpu, cpu/x86_64-avx512, cpu/x86_64-avx2, "
                                "cpu/generic",
                       .parse = s_parse_cpu,
                       .here = kl_cpu_target},
    [KL_TARGET_CUDA] = {.name = "cuda",
                        .forms = "cuda/sm_NN",
                        .parse = s_parse_cuda,
                        .bare_hint =
                            "name the GPU's architecture, e.g. cuda/sm_90 "
                            "(nvidia-smi --query-gpu=compute_cap); the "
                            "coordinator does not query devices",
                        .agent_device = "cuda:all"},
};
_Static_assert(sizeof s_kinds / sizeof s_kinds[0] == KL_TARGET__KINDS,
               "one row per kind");

const kl_target_kind_t *kl_target_kind_info(kl_target_kind k)
{
    return &s_kinds[k];
}

int kl_target_kind_of(const char *text, kl_target_kind *out)
{
    if (!text)
        return KL_ERR_NOTFOUND;
    text = kl_target_base(text);
    size_t n = strcspn(text, "/");
    for (int k = 0; k < KL_TARGET__KINDS; k++)
        if (strlen(s_kinds[k].name) == n &&
            !strncmp(text, s_kinds[k].name, n)) {
            *out = (kl_target_kind)k;
            return KL_OK;
        }
    return KL_ERR_NOTFOUND;
}

static int s_unknown(const char *text, char *err)
{
    char forms[512] = "";
    size_t n = 0;
    for (int k = 0; k < KL_TARGET__KINDS && n < sizeof forms; k++)
        n += (size_t)snprintf(forms + n, sizeof forms - n, "%s%s",
                              k ? ", " : "", s_kinds[k].forms);
    return kl_seterr(err, KL_ERR_INVAL, "unknown target '%s' (%s)", text,
                     forms);
}

int kl_target_parse(const char *text, kl_target_t *out, char *err)
{
    memset(out, 0, sizeof *out);
    out->cores = 2;
    if (strlen(text) >= sizeof out->name)
        return kl_seterr(err, KL_ERR_INVAL, "target '%s': too long", text);
    if (kl_target_kind_of(text, &out->kind))
        return s_unknown(text, err);
    const char *slash = strchr(text, '/');
    if (slash && !slash[1])
        return s_unknown(text, err);
    snprintf(out->isa, sizeof out->isa, "%s", slash ? slash + 1 : "");
    int rc = s_kinds[out->kind].parse(text, out, err);
    if (rc == KL_ERR_NOTFOUND)
        return s_unknown(text, err);
    if (rc)
        return rc;
    if (snprintf(out->name, sizeof out->name, "%s/%s", s_kinds[out->kind].name,
                 out->isa) >= (int)sizeof out->name)
        return kl_seterr(err, KL_ERR_INVAL, "target '%s': too long", text);
    return KL_OK;
}

const char *kl_target_resolve(const char *user_target)
{
    kl_target_kind k = KL_TARGET_CPU;
    if (!user_target)
        return s_kinds[k].here();
    if (!strcmp(user_target, KL_TARGET_SIM "cpu"))
        return s_cpu(true);
    if (!strchr(user_target, '/') && !kl_target_kind_of(user_target, &k) &&
        s_kinds[k].here)
        return s_kinds[k].here();
    return user_target;
}

int kl_target_check_exact(const char *text, char *err)
{
    kl_target_kind k;
    text = kl_target_base(text);
    if (text && !strchr(text, '/') && !kl_target_kind_of(text, &k) &&
        s_kinds[k].bare_hint)
        return kl_seterr(err, KL_ERR_INVAL, "target '%s': %s", text,
                         s_kinds[k].bare_hint);
    return KL_OK;
}

bool kl_target_is_sim(const char *target)
{
    return target && !strncmp(target, KL_TARGET_SIM, strlen(KL_TARGET_SIM));
}

const char *kl_target_base(const char *target)
{
    return kl_target_is_sim(target) ? target + strlen(KL_TARGET_SIM) : target;
}

char *kl_target_sim(const char *target, char *buf, size_t len)
{
    const char *t = kl_target_resolve(target);
    snprintf(buf, len, "%s%s", kl_target_is_sim(t) ? "" : KL_TARGET_SIM, t);
    return buf;
}
