/* target_test.c - the kind table and target strings (common/kl_target.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kl_err.h"
#include "kl_target.h"

/* The features the kernels of an int8 and of a bf16 workload may use
 * (coordinator/ir's kl_workload_cpu_feats, which common/ cannot call). */
#define S_INT8 (KL_CPU_FEAT_VNNI | KL_CPU_FEAT_AVXVNNI | KL_CPU_FEAT_AMX)
#define S_BF16 (KL_CPU_FEAT_BF16 | KL_CPU_FEAT_AMX)

static void test_kinds(void **state)
{
    (void)state;
    for (int k = 0; k < KL_TARGET__KINDS; k++) {
        const kl_target_kind_t *row = kl_target_kind_info((kl_target_kind)k);
        assert_non_null(row->name);
        assert_non_null(row->forms);
        assert_non_null(row->parse);
        /* A bare kind either names this machine's device or says why not. */
        assert_true((row->here != NULL) != (row->bare_hint != NULL));
        char text[64];
        kl_target_kind got = KL_TARGET__KINDS;
        assert_int_equal(kl_target_kind_of(row->name, &got), KL_OK);
        assert_int_equal(got, k);
        snprintf(text, sizeof text, "%s/anything", row->name);
        assert_int_equal(kl_target_kind_of(text, &got), KL_OK);
        assert_int_equal(got, k);
    }
    kl_target_kind got;
    assert_int_equal(kl_target_kind_of("cudax/sm_90", &got), KL_ERR_NOTFOUND);
    assert_int_equal(kl_target_kind_of("", &got), KL_ERR_NOTFOUND);
    assert_int_equal(kl_target_kind_of(NULL, &got), KL_ERR_NOTFOUND);
}

static void test_parse(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_target_t t;
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512", &t, err), KL_OK);
    assert_int_equal(t.kind, KL_TARGET_CPU);
    assert_string_equal(t.name, "cpu/x86_64-avx512");
    assert_string_equal(t.isa, "x86_64-avx512");
    assert_int_equal(t.vec_lanes, 16);
    assert_int_equal(t.vec_regs, 32);
    assert_int_equal(t.cores, 2);
    assert_int_equal(kl_target_parse("cpu/generic", &t, err), KL_OK);
    assert_int_equal(t.vec_lanes, 4);
    assert_int_equal(kl_target_parse("cpu", &t, err), KL_OK);
    assert_int_equal(t.kind, KL_TARGET_CPU);
    assert_int_equal(strncmp(t.name, "cpu/x86_64-avx", 14), 0);
    assert_int_equal(kl_target_parse("cuda/sm_80", &t, err), KL_OK);
    assert_int_equal(t.kind, KL_TARGET_CUDA);
    assert_string_equal(t.isa, "sm_80");
    assert_int_equal(t.sm, 80);
    assert_int_equal(t.vec_lanes, 1);
    assert_int_equal(t.max_threads_per_block, 1024);
    assert_int_equal(t.max_shared_bytes, 99 * 1024);
    assert_int_equal(t.cores, 2);
    assert_int_equal(kl_target_parse("cuda/sm_75", &t, err), KL_OK);
    assert_int_equal(t.max_shared_bytes, 48 * 1024);

    /* Unknown text names every kind's forms. */
    const char *unknown[] = {"cuda", "cuda/",  "cuda/gfx90a",
                             "cpu/", "rocm/x", "cpu/x86_64"};
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        assert_int_equal(kl_target_parse(unknown[i], &t, err), KL_ERR_INVAL);
        assert_non_null(strstr(err, "unknown target"));
        assert_non_null(strstr(err, "cpu/generic, cuda/sm_NN"));
    }
    assert_int_equal(kl_target_parse("cuda/sm_9x", &t, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "expected cuda/sm_NN"));
    char lng[100];
    memset(lng, 'x', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    assert_int_equal(kl_target_parse(lng, &t, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "too long"));
}

static void test_resolve(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    assert_string_equal(kl_target_resolve(NULL), kl_cpu_target());
    assert_string_equal(kl_target_resolve("cpu"), kl_cpu_target());
    assert_string_equal(kl_target_resolve("cuda"), "cuda");
    assert_string_equal(kl_target_resolve("cuda/sm_90"), "cuda/sm_90");
    assert_int_equal(kl_target_check_exact("cuda/sm_90", err), KL_OK);
    assert_int_equal(kl_target_check_exact("cpu", err), KL_OK);
    assert_int_equal(kl_target_check_exact("cuda", err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "target 'cuda': name the GPU's architecture"));
    const kl_target_kind_t *cuda = kl_target_kind_info(KL_TARGET_CUDA);
    assert_string_equal(cuda->agent_device, "cuda:all");
    assert_null(kl_target_kind_info(KL_TARGET_CPU)->agent_device);
}

/* CPU features refine a target after '+': parsed per ISA, canonical,
 * never on the bare kind; an integer workload's "cpu" carries this CPU's
 * features (KILN_CPU_FEATURES plays the CPU), a float one's never. */
static void test_features(void **state)
{
    (void)state;
    kl_target_t t;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512+vnni", &t, err), KL_OK);
    assert_string_equal(t.name, "cpu/x86_64-avx512+vnni");
    assert_string_equal(t.isa, "x86_64-avx512");
    assert_int_equal(t.features, KL_CPU_FEAT_VNNI);
    assert_int_equal(t.vec_lanes, 16);
    assert_int_equal(kl_target_parse("cpu/x86_64-avx2+avxvnni", &t, err),
                     KL_OK);
    assert_string_equal(t.name, "cpu/x86_64-avx2+avxvnni");
    assert_int_equal(t.features, KL_CPU_FEAT_AVXVNNI);
    assert_int_equal(t.vec_lanes, 8);
    /* The matrix units: AVX512-BF16 and AMX, in the canonical order. */
    assert_int_equal(
        kl_target_parse("cpu/x86_64-avx512+vnni+bf16+amx", &t, err), KL_OK);
    assert_int_equal(t.features,
                     KL_CPU_FEAT_VNNI | KL_CPU_FEAT_BF16 | KL_CPU_FEAT_AMX);
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512+bf16", &t, err), KL_OK);
    assert_int_equal(t.features, KL_CPU_FEAT_BF16);
    assert_int_equal(kl_target_parse("cpu/x86_64-avx512", &t, err), KL_OK);
    assert_int_equal(t.features, 0);
    assert_string_equal(t.name, "cpu/x86_64-avx512");
    /* A feature of another ISA, an unknown one, a repeat, an empty one. */
    const char *bad[] = {"cpu/x86_64-avx2+vnni",
                         "cpu/x86_64-avx512+avxvnni",
                         "cpu/x86_64-avx512+sme",
                         "cpu/x86_64-avx512+vnni+vnni",
                         "cpu/x86_64-avx512+bf16+vnni",
                         "cpu/x86_64-avx2+amx",
                         "cpu/x86_64-avx512+",
                         "cpu/generic+vnni",
                         "cuda/sm_90+vnni"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kl_target_parse(bad[i], &t, err), KL_ERR_INVAL);
        assert_non_null(strstr(err, bad[i]));
    }
    assert_int_equal(kl_target_unrefined_len("cpu/x86_64-avx512+vnni"), 17);
    assert_int_equal(kl_target_unrefined_len("sim/cpu/x86_64-avx2+avxvnni"),
                     19);
    assert_int_equal(kl_target_unrefined_len("cpu"), 3);
    assert_true(kl_target_features_match("cpu/x86_64-avx512", NULL));
    assert_true(kl_target_features_match("cpu/x86_64-avx512+vnni", "vnni"));
    assert_true(
        kl_target_features_match("cpu/x86_64-avx512+vnni", "avxvnni,vnni"));
    assert_false(kl_target_features_match("cpu/x86_64-avx512+vnni", "avxvnni"));
    assert_false(kl_target_features_match("cpu/x86_64-avx512+vnni", ""));
    assert_false(kl_target_features_match("cpu/x86_64-avx512+vnni", "vnnix"));

    /* This machine, played with and without the features. */
    const char *here = kl_cpu_target();
    bool avx512 = !strcmp(here, "cpu/x86_64-avx512");
    bool avx2 = !strcmp(here, "cpu/x86_64-avx2");
    char buf[64];
    setenv("KILN_CPU_FEATURES", "vnni,avxvnni", 1);
    assert_int_equal(kl_cpu_features(), KL_CPU_FEAT_VNNI | KL_CPU_FEAT_AVXVNNI);
    assert_string_equal(
        kl_cpu_features_text(kl_cpu_features(), buf, sizeof buf),
        "vnni,avxvnni");
    const char *want = avx512 ? "cpu/x86_64-avx512+vnni"
                       : avx2 ? "cpu/x86_64-avx2+avxvnni"
                              : here;
    assert_string_equal(kl_cpu_target_for(S_INT8), want);
    assert_string_equal(kl_target_resolve_for("cpu", S_INT8), want);
    assert_string_equal(kl_target_resolve_for(NULL, S_INT8), want);
    assert_string_equal(kl_target_resolve_for("cpu", 0), here);
    assert_string_equal(kl_target_resolve_for(NULL, 0), here);
    assert_string_equal(kl_target_resolve_for("cpu/x86_64-avx2", S_INT8),
                        "cpu/x86_64-avx2");
    snprintf(buf, sizeof buf, "sim/%s", want);
    assert_string_equal(kl_target_resolve_for("sim/cpu", S_INT8), buf);
    char sim[80];
    assert_string_equal(kl_target_sim_for("cpu", S_INT8, sim, sizeof sim), buf);
    snprintf(buf, sizeof buf, "sim/%s", here);
    assert_string_equal(kl_target_sim("cpu", sim, sizeof sim), buf);
    assert_string_equal(kl_target_sim_for("cpu", 0, sim, sizeof sim), buf);
    setenv("KILN_CPU_FEATURES", "", 1);
    assert_int_equal(kl_cpu_features(), 0);
    assert_string_equal(kl_target_resolve_for("cpu", S_INT8), here);
    setenv("KILN_CPU_FEATURES", "avxvnni", 1);
    assert_int_equal(kl_cpu_features(), KL_CPU_FEAT_AVXVNNI);
    assert_string_equal(kl_target_resolve_for("cpu", S_INT8),
                        avx2 ? "cpu/x86_64-avx2+avxvnni" : here);
    unsetenv("KILN_CPU_FEATURES");
}

/* What "cpu" resolves to for float, int8 and bf16 work (the features each
 * one's kernels may use) on the CPUs KILN_CPU_FEATURES plays: this
 * machine's ISA refined by the features it has of those, in the order
 * +vnni+bf16+amx; an explicit target stays itself. */
static void test_refine(void **state)
{
    (void)state;
    if (strcmp(kl_cpu_target(), "cpu/x86_64-avx512") != 0)
        skip(); /* the features refine x86_64-avx512 only */
    static const struct {
        const char *cpu, *f32, *int8, *bf16;
    } rows[] = {
        {"", "", "", ""},
        {"vnni", "", "+vnni", ""},
        {"vnni,bf16", "", "+vnni", "+bf16"},
        {"bf16", "", "", "+bf16"},
        {"vnni,bf16,amx", "", "+vnni+amx", "+bf16+amx"},
        {"amx,bf16,vnni", "", "+vnni+amx", "+bf16+amx"},
        {"vnni,avxvnni", "", "+vnni", ""},
    };
    const unsigned masks[3] = {0, S_INT8, S_BF16};
    char want[64], sim[96], got[96];
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        setenv("KILN_CPU_FEATURES", rows[i].cpu, 1);
        const char *suffix[3] = {rows[i].f32, rows[i].int8, rows[i].bf16};
        for (int k = 0; k < 3; k++) {
            snprintf(want, sizeof want, "cpu/x86_64-avx512%s", suffix[k]);
            assert_string_equal(kl_target_resolve_for("cpu", masks[k]), want);
            assert_string_equal(kl_target_resolve_for(NULL, masks[k]), want);
            assert_string_equal(kl_cpu_target_for(masks[k]), want);
            snprintf(sim, sizeof sim, "sim/%s", want);
            assert_string_equal(kl_target_resolve_for("sim/cpu", masks[k]),
                                sim);
            assert_string_equal(
                kl_target_sim_for("cpu", masks[k], got, sizeof got), sim);
            /* What it resolves to parses back to itself. */
            kl_target_t t;
            char err[KL_ERRMSG_LEN];
            assert_int_equal(kl_target_parse(want, &t, err), KL_OK);
            assert_string_equal(t.name, want);
            assert_string_equal(
                kl_target_resolve_for("cpu/x86_64-avx512", masks[k]),
                "cpu/x86_64-avx512");
            assert_string_equal(kl_target_resolve_for("cuda/sm_90", masks[k]),
                                "cuda/sm_90");
        }
    }
    unsetenv("KILN_CPU_FEATURES");
    /* Only a device with every feature of a task's target serves it. */
    assert_true(
        kl_target_features_match("cpu/x86_64-avx512+bf16", "vnni,bf16"));
    assert_false(kl_target_features_match("cpu/x86_64-avx512+bf16", "vnni"));
    assert_false(kl_target_features_match("cpu/x86_64-avx512+bf16", NULL));
    assert_false(
        kl_target_features_match("cpu/x86_64-avx512+bf16+amx", "vnni,bf16"));
    assert_true(kl_target_features_match("cpu/x86_64-avx512+bf16+amx",
                                         "vnni,bf16,amx"));
    assert_false(
        kl_target_features_match("cpu/x86_64-avx512+vnni+amx", "vnni,bf16"));
    assert_true(
        kl_target_features_match("cpu/x86_64-avx512+vnni+amx", "amx,vnni"));
    assert_true(kl_target_features_match("cpu/x86_64-avx512", "bf16"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),   cmocka_unit_test(test_parse),
        cmocka_unit_test(test_resolve), cmocka_unit_test(test_features),
        cmocka_unit_test(test_refine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
