/* kl_target.c - the kind table and target strings; see kl_target.h. */
#include "kl_target.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---- CPU features that refine a target ---------------------------------- */

/* A feature is a refinement of one ISA: "+vnni", "+bf16" and "+amx" only
 * follow "x86_64-avx512", "+avxvnni" only "x86_64-avx2". The table order is the
 * canonical order of a suffix. */
static const struct {
    const char *name; /* the suffix token and DeviceInfo.features entry */
    const char *isa;  /* the ISA it refines */
    unsigned bit;     /* detected in s_cpu_supports */
} s_feats[] = {
    {"vnni", "x86_64-avx512", KL_CPU_FEAT_VNNI},
    {"bf16", "x86_64-avx512", KL_CPU_FEAT_BF16},
    {"amx", "x86_64-avx512", KL_CPU_FEAT_AMX},
    {"avxvnni", "x86_64-avx2", KL_CPU_FEAT_AVXVNNI},
};
#define S_NFEATS (sizeof s_feats / sizeof s_feats[0])

static bool s_cpu_supports(size_t i)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    /* __builtin_cpu_supports takes a literal. */
    switch (s_feats[i].bit) {
    case KL_CPU_FEAT_VNNI:
        return __builtin_cpu_supports("avx512vnni");
    case KL_CPU_FEAT_AVXVNNI:
        return __builtin_cpu_supports("avxvnni");
    case KL_CPU_FEAT_BF16:
        return __builtin_cpu_supports("avx512bf16");
    case KL_CPU_FEAT_AMX:
        return __builtin_cpu_supports("amx-tile") &&
               __builtin_cpu_supports("amx-bf16") &&
               __builtin_cpu_supports("amx-int8");
    }
#endif
    (void)i;
    return false;
}

/* KILN_CPU_FEATURES (a comma list, "" for none) stands in for detection:
 * tests use it to play a CPU with or without a feature. */
unsigned kl_cpu_features(void)
{
    const char *env = getenv("KILN_CPU_FEATURES");
    unsigned bits = 0;
    for (size_t i = 0; i < S_NFEATS; i++) {
        if (env) {
            size_t n = strlen(s_feats[i].name);
            for (const char *p = env; (p = strstr(p, s_feats[i].name)); p += n)
                if ((p == env || p[-1] == ',') && (!p[n] || p[n] == ','))
                    bits |= s_feats[i].bit;
        } else if (s_cpu_supports(i))
            bits |= s_feats[i].bit;
    }
    return bits;
}

const char *kl_cpu_feature_name(int i)
{
    return i >= 0 && (size_t)i < S_NFEATS ? s_feats[i].name : NULL;
}

unsigned kl_cpu_feature_bit(int i)
{
    return i >= 0 && (size_t)i < S_NFEATS ? s_feats[i].bit : 0;
}

/* The features of the suffix text ("+vnni+..."), each of which must
 * refine isa, in table order without repeats: 0 and *bits, or
 * KL_ERR_NOTFOUND. */
static int s_parse_feats(const char *text, const char *isa, unsigned *bits)
{
    *bits = 0;
    size_t next = 0;
    while (*text == '+') {
        text++;
        size_t n = strcspn(text, "+");
        size_t i = next;
        while (i < S_NFEATS && (strlen(s_feats[i].name) != n ||
                                strncmp(text, s_feats[i].name, n) ||
                                strcmp(s_feats[i].isa, isa)))
            i++;
        if (i == S_NFEATS)
            return KL_ERR_NOTFOUND;
        *bits |= s_feats[i].bit;
        next = i + 1;
        text += n;
    }
    return *text ? KL_ERR_NOTFOUND : KL_OK;
}

/* The features of bits that refine isa, as a suffix "+vnni" ("" for
 * none), into buf. */
static void s_suffix(const char *isa, unsigned bits, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < S_NFEATS && n < len; i++)
        if ((bits & s_feats[i].bit) && !strcmp(s_feats[i].isa, isa))
            n += (size_t)snprintf(buf + n, len - n, "+%s", s_feats[i].name);
}

/* This machine's CPU target refined by its features, or its simulated
 * twin: literals, so that all are static strings. */
static const char *s_cpu_int(bool sim)
{
    const char *t = s_cpu(sim);
    unsigned f = kl_cpu_features();
    if (!strcmp(kl_target_base(t), "cpu/x86_64-avx512") &&
        (f & KL_CPU_FEAT_VNNI))
        return S_CPU(sim, "cpu/x86_64-avx512+vnni");
    if (!strcmp(kl_target_base(t), "cpu/x86_64-avx2") &&
        (f & KL_CPU_FEAT_AVXVNNI))
        return S_CPU(sim, "cpu/x86_64-avx2+avxvnni");
    return t;
}

const char *kl_cpu_target_int(void)
{
    return s_cpu_int(false);
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
    /* "x86_64-avx512+vnni": the ISA, then the features that refine it. */
    char *plus = strchr(out->isa, '+');
    char feats[64] = "";
    if (plus) {
        snprintf(feats, sizeof feats, "%s", plus);
        *plus = 0;
    }
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
        if (!strcmp(out->isa, isas[i].isa)) {
            if (s_parse_feats(feats, out->isa, &out->features))
                return KL_ERR_NOTFOUND;
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
                       .forms = "cpu, cpu/x86_64-avx512[+vnni], "
                                "cpu/x86_64-avx2[+avxvnni], cpu/generic",
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
    char suffix[48];
    s_suffix(out->isa, out->features, suffix, sizeof suffix);
    if (snprintf(out->name, sizeof out->name, "%s/%s%s",
                 s_kinds[out->kind].name, out->isa,
                 suffix) >= (int)sizeof out->name)
        return kl_seterr(err, KL_ERR_INVAL, "target '%s': too long", text);
    return KL_OK;
}

const char *kl_target_resolve_for(const char *user_target, bool integer)
{
    if (!integer)
        return kl_target_resolve(user_target);
    if (!user_target || !strcmp(user_target, "cpu"))
        return s_cpu_int(false);
    if (!strcmp(user_target, KL_TARGET_SIM "cpu"))
        return s_cpu_int(true);
    return kl_target_resolve(user_target);
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
    return kl_target_sim_for(target, false, buf, len);
}

char *kl_target_sim_for(const char *target, bool integer, char *buf, size_t len)
{
    const char *t = kl_target_resolve_for(target, integer);
    snprintf(buf, len, "%s%s", kl_target_is_sim(t) ? "" : KL_TARGET_SIM, t);
    return buf;
}

bool kl_target_features_match(const char *task_target, const char *dev_features)
{
    const char *slash = task_target ? strchr(task_target, '/') : NULL;
    const char *f = slash ? strchr(slash, '+') : NULL;
    while (f && *f == '+') {
        f++;
        size_t n = strcspn(f, "+");
        bool has = false;
        for (const char *p = dev_features ? dev_features : ""; *p && !has;) {
            p += strspn(p, "+,");
            size_t m = strcspn(p, "+,");
            has = m == n && m && !strncmp(p, f, n);
            p += m;
        }
        if (!has)
            return false;
        f += n;
    }
    return true;
}

size_t kl_target_unrefined_len(const char *target)
{
    const char *slash = strchr(target, '/');
    return slash ? (size_t)(slash - target) + strcspn(slash, "+")
                 : strlen(target);
}

char *kl_cpu_features_text(unsigned bits, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < S_NFEATS && n < len; i++)
        if (bits & s_feats[i].bit)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "",
                                  s_feats[i].name);
    return buf;
}
