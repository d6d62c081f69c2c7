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
    assert_string_equal(kl_cpu_target_int(), want);
    assert_string_equal(kl_target_resolve_for("cpu", true), want);
    assert_string_equal(kl_target_resolve_for(NULL, true), want);
    assert_string_equal(kl_target_resolve_for("cpu", false), here);
    assert_string_equal(kl_target_resolve_for("cpu/x86_64-avx2", true),
                        "cpu/x86_64-avx2");
    snprintf(buf, sizeof buf, "sim/%s", want);
    assert_string_equal(kl_target_resolve_for("sim/cpu", true), buf);
    char sim[80];
    assert_string_equal(kl_target_sim_for("cpu", true, sim, sizeof sim), buf);
    snprintf(buf, sizeof buf, "sim/%s", here);
    assert_string_equal(kl_target_sim("cpu", sim, sizeof sim), buf);
    setenv("KILN_CPU_FEATURES", "", 1);
    assert_int_equal(kl_cpu_features(), 0);
    assert_string_equal(kl_target_resolve_for("cpu", true), here);
    setenv("KILN_CPU_FEATURES", "avxvnni", 1);
    assert_int_equal(kl_cpu_features(), KL_CPU_FEAT_AVXVNNI);
    assert_string_equal(kl_target_resolve_for("cpu", true),
                        avx2 ? "cpu/x86_64-avx2+avxvnni" : here);
    unsetenv("KILN_CPU_FEATURES");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_features),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
