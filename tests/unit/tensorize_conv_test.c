/* Unit tests of tensorized convolutions (qconv2d NHWC; rules_cpu_int.c,
 * codegen_tensorize_conv.c): schedules sampled from the CPU design space
 * of several shapes (3x3 pad 1 stride 1 and 2, 1x1 stride 2, 7x7 stride 2
 * with C=3, dilation, K not a multiple of the lanes, relu / clip, u8 / s8 /
 * s32 outputs, zero points with padding) are compiled with the real
 * compiler, prepared and run, and their output compared bit for bit with
 * the reference interpreter (kl_workload_eval_typed); a trace's text
 * replays to the same source; a kernel whose padding row is wrong (zeros
 * instead of the zero point: the compensation then takes za * W away from
 * border pixels that never added it) is caught, and so is a vector
 * requant that rounds toward zero. NCHW convolutions (the importer's
 * layout: X repacked per call into a padded scratch, Y stored at the
 * channel stride) of the same shapes too, and a repack that pads with
 * zeros instead of za is caught; depthwise and grouped convolutions are
 * refused with their reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_abi.h"
#include "kl_cgrun.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_intrin.h"
#include "kl_ir.h"
#include "kl_space.h"
#include "kl_trace.h"
#include "kl_util.h"

static char s_dir[64];

static int s_setup(void **state)
{
    (void)state;
    /* Keep libgomp loaded: its idle threads outlive the kernel's dlclose. */
    if (!dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE))
        return -1;
    strcpy(s_dir, "/tmp/kl_tzconv_test_XXXXXX");
    return mkdtemp(s_dir) ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(s_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", s_dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(s_dir);
    return 0;
}

/* Builds source (a kernel with prepare), runs it on fresh inputs and
 * compares with the interpreter; returns whether they are bit-equal (-1
 * when this CPU lacks the intrinsic's feature: built, not run). */
static int s_run(const kl_workload_t *w, const char *source, const char *entry,
                 const kl_intrin_t *in)
{
    char err[KL_ERRMSG_LEN];
    kl_cgrun_t r;
    if (kl_cgrun_load(&r, source, entry, s_dir, err))
        fail_msg("%s\n%s", err, source);
    if (!kl_intrin_cpu_has(in)) {
        kl_cgrun_close(&r);
        return -1;
    }
    assert_non_null(r.prep);
    void **a = NULL, **b = NULL;
    int same = kl_cgrun_compare(&r, w, 11, &a, &b, err) == KL_OK;
    assert_non_null(a[w->ntensors]);
    if (same) {
        /* a second call on the same prepared block gives the same */
        assert_true(kl_cgrun_again(&r, w, a, b));
        assert_true(kl_cgrun_varied(w, a));
    }
    kl_cgrun_free(w, a);
    kl_cgrun_free(w, b);
    kl_cgrun_close(&r);
    return same;
}

static const char *s_specs[] = {
    /* 3x3 pad 1 stride 1, u8 out, bias, per-tensor requant */
    "qconv2d N=1 C=16 H=9 W=9 K=32 R=3 S=3 pad=1 za=7 bias=1 layout=NHWC",
    /* stride 2, s8 out with its zero point, za > 127 */
    "qconv2d N=1 C=8 H=10 W=11 K=16 R=3 S=3 pad=1 stride=2 za=200 out=s8 "
    "zo=-3 scale=0.0037 bias=1 layout=NHWC",
    /* 1x1 stride 2, N=2, K not a multiple of 16, s32 out (vector stores
     * and the lanes of the last partial block) */
    "qconv2d N=2 C=32 H=8 W=8 K=24 R=1 S=1 stride=2 za=5 out=s32 "
    "layout=NHWC",
    /* the first conv of ResNet: C=3 (one group of 4, the 4th zero), 7x7
     * stride 2 pad 3, relu */
    "qconv2d N=1 C=3 H=14 W=14 K=16 R=7 S=7 pad=3 stride=2 za=128 relu=1 "
    "layout=NHWC",
    /* clip, C not a multiple of 4, dilation 2 */
    "qconv2d N=1 C=6 H=9 W=9 K=20 R=3 S=3 pad=2 dilation=2 za=90 "
    "clip=10,200 layout=NHWC",
    /* plain s32, zero point with padding at every border pixel */
    "qconv2d N=1 C=8 H=7 W=7 K=32 R=3 S=3 pad=1 za=100 out=s32 "
    "layout=NHWC",
    /* NCHW (the importer's layout): X repacked per call into the padded
     * scratch, Y stored at the channel stride. 3x3 pad 1 stride 1 with
     * the importer's per-channel scale, bias and relu */
    "qconv2d N=1 C=16 H=9 W=9 K=32 R=3 S=3 pad=1 za=7 scale=channel "
    "bias=1 relu=1",
    /* stride 2, s8 out */
    "qconv2d N=1 C=8 H=10 W=11 K=16 R=3 S=3 pad=1 stride=2 za=200 out=s8 "
    "zo=-3 scale=0.0037 bias=1",
    /* 1x1 stride 2, N=2, K not a multiple of 16, s32 out */
    "qconv2d N=2 C=32 H=8 W=8 K=24 R=1 S=1 stride=2 za=5 out=s32",
    /* ResNet's first conv: C=3, 7x7 stride 2 pad 3, relu */
    "qconv2d N=1 C=3 H=14 W=14 K=16 R=7 S=7 pad=3 stride=2 za=128 relu=1",
    /* s32 with za at the padding, C not a multiple of 4, dilation 2 */
    "qconv2d N=1 C=6 H=7 W=7 K=20 R=3 S=3 pad=2 dilation=2 za=100 "
    "out=s32",
    /* 1x1 stride 2 pad 1: the taps read the odd rows and columns only
     * (the repack skips the others) and the za border */
    "qconv2d N=1 C=8 H=9 W=10 K=16 R=1 S=1 stride=2 pad=1 za=3 bias=1",
    /* C = 32: the repack 16 channels x 16 points a step, rows of 20 (the
     * last step overlapping the one before) */
    "qconv2d N=1 C=32 H=5 W=20 K=16 R=3 S=3 pad=1 za=9 bias=1 relu=1",
    /* 295 KB of packed weights (256 KiB or more): every inner step
     * prefetches the next K group's weights */
    "qconv2d N=1 C=256 H=3 W=3 K=128 R=3 S=3 pad=1 za=4 scale=channel "
    "bias=1",
};

/* The first NCHW spec (index) */
#define NCHW0 6

/* avx_vnni: built always, run where the CPU has AVX-VNNI. */
static const char *s_targets[] = {"cpu/x86_64-avx512+vnni", "cpu/x86_64-avx2",
                                  "cpu/x86_64-avx2+avxvnni"};
static const char *s_intrins[] = {"avx512_vnni", "avx2_i8", "avx_vnni"};

static void test_space_conv(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    int ran = 0, ntr = 0;
    for (int ti = 0; ti < 3; ti++)
        for (size_t i = 0; i < sizeof s_specs / sizeof s_specs[0]; i++) {
            kl_workload_t *w = NULL;
            if (kl_workload_from_string(s_specs[i], &w, err))
                fail_msg("%s: %s", s_specs[i], err);
            kl_space_t *sp = NULL;
            if (kl_space_for_target(s_targets[ti], w, &sp, err))
                fail_msg("%s: %s", s_specs[i], err);
            kl_rng_t rng;
            kl_rng_seed(&rng, 7 + i);
            for (int n = 0; n < (ti ? ti == 1 ? 2 : 1 : 5); n++) {
                kl_trace_t *tr = NULL;
                kl_sched_t *s = NULL;
                if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                    fail_msg("%s: %s", s_specs[i], err);
                char *text = kl_trace_to_text(tr);
                assert_non_null(strstr(text, s_intrins[ti]));
                kl_tensorize_t tz;
                assert_int_equal(kl_sched_tensorized(s, &tz, err), KL_OK);
                assert_true(tz.conv);
                kl_kernel_t k;
                if (kl_codegen_c(s, NULL, "kl_tz", &k, err))
                    fail_msg("%s: %s\n%s", s_specs[i], err, text);
                /* u8 / s8 outputs of the q-op form: the AVX-512 vector
                 * epilogue (one masked byte store per block) */
                kl_dtype odt = w->tensors[kl_workload_output(w)].dtype;
                assert_int_equal(
                    strstr(k.source, i < NCHW0
                                         ? "_mm512_mask_cvtepi32_storeu_epi8"
                                         : "_mm512_cvtepi32_epi8") != NULL,
                    ti == 0 && odt != KL_DT_S32);
                /* NCHW: the per-call repack into the scratch */
                assert_int_equal(strstr(k.source, "kl_scr") != NULL,
                                 i >= NCHW0);
                /* NCHW, C a multiple of 16, every point read, rows of 16
                 * points or more: the repack by 16x16 transposes */
                assert_int_equal(strstr(k.source, "kl_tr16(r)") != NULL,
                                 i >= NCHW0 && strstr(s_specs[i], "C=32 H=5"));
                /* NCHW 1x1 stride 2: the repack skips the rows and columns
                 * no tap reads */
                assert_int_equal(strstr(k.source, "rd_ &=") != NULL,
                                 i >= NCHW0 && strstr(s_specs[i], "R=1 ") &&
                                     strstr(s_specs[i], "stride=2"));
                /* packed weights of 256 KiB or more: the prefetch of the
                 * next K group */
                assert_int_equal(strstr(k.source, "__builtin_prefetch(pf_") !=
                                     NULL,
                                 strstr(s_specs[i], "C=256") != NULL);
                int r =
                    s_run(w, k.source, k.entry, kl_intrin_find(s_intrins[ti]));
                if (r == 0)
                    fail_msg("%s: tensorized conv and the interpreter "
                             "differ\n%s\n%s",
                             s_specs[i], text, k.source);
                ran += r > 0;
                /* NCHW u8 / s8, register tile over pixels of a row: the
                 * codes stored by 8-pixel transposes, one masked store a
                 * channel */
                bool tt = strstr(k.source, "_mm_unpacklo_epi32(b0, b4)");
                ntr += tt;
                /* its masked stores are AVX-512 VL: prepare refuses a CPU
                 * without it */
                assert_int_equal(
                    tt, strstr(k.source,
                               "__builtin_cpu_supports(\"avx512vl\")") != NULL);
                /* the trace's text replays to the same source */
                kl_trace_t *back = NULL;
                assert_int_equal(kl_trace_from_text(text, &back, err), KL_OK);
                kl_sched_t *s2 = NULL;
                if (kl_space_replay(sp, back, &s2, err))
                    fail_msg("%s: replay: %s", s_specs[i], err);
                kl_kernel_t k2;
                assert_int_equal(kl_codegen_c(s2, NULL, "kl_tz", &k2, err),
                                 KL_OK);
                assert_string_equal(k.source, k2.source);
                kl_kernel_free(&k2);
                kl_sched_destroy(&s2);
                kl_trace_free(&back);
                kl_kernel_free(&k);
                free(text);
                kl_trace_free(&tr);
                kl_sched_destroy(&s);
            }
            kl_space_destroy(&sp);
            kl_workload_free(&w);
        }
    print_message("ran %d tensorized convolutions\n", ran);
    assert_true(ran > 0);
    printf("# %d sampled kernels store by tile transpose\n", ntr);
    assert_true(ntr > 0);
}

/* A kernel sampled for one spec on the AVX-512 target, and whether it
 * ran bit-equal with the interpreter (s_run). */
typedef struct {
    kl_workload_t *w;
    kl_space_t *sp;
    kl_trace_t *tr;
    kl_sched_t *s;
    kl_kernel_t k;
    const kl_intrin_t *in;
    int good;
} s_case_t;

static void s_case(s_case_t *c, const char *spec, uint64_t seed)
{
    char err[KL_ERRMSG_LEN];
    memset(c, 0, sizeof *c);
    assert_int_equal(kl_workload_from_string(spec, &c->w, err), KL_OK);
    assert_int_equal(kl_space_for_target(s_targets[0], c->w, &c->sp, err),
                     KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    assert_int_equal(kl_space_sample(c->sp, &rng, &c->tr, &c->s, 0, NULL, err),
                     KL_OK);
    assert_int_equal(kl_codegen_c(c->s, NULL, "kl_tz", &c->k, err), KL_OK);
    c->in = kl_intrin_find(s_intrins[0]);
    c->good = s_run(c->w, c->k.source, c->k.entry, c->in);
}

/* The broken source differs from the interpreter where the kernel as
 * generated ran equal (on a CPU with the feature). */
static void s_case_caught(const s_case_t *c, const char *broken)
{
    int bad = s_run(c->w, broken, c->k.entry, c->in);
    if (c->good >= 0) {
        assert_int_equal(c->good, 1);
        assert_int_equal(bad, 0);
    }
}

static void s_case_free(s_case_t *c)
{
    kl_kernel_free(&c->k);
    kl_trace_free(&c->tr);
    kl_sched_destroy(&c->s);
    kl_space_destroy(&c->sp);
    kl_workload_free(&c->w);
}

/* A padding row of zeros instead of za: border pixels lose za * W. */
static void test_broken_padding_caught(void **state)
{
    (void)state;
    s_case_t c;
    s_case(&c, s_specs[5], 3);
    char *p = strstr(c.k.source, "memset(kl_zrow, 100,");
    assert_non_null(p);
    memcpy(p, "memset(kl_zrow,   0,", 20);
    s_case_caught(&c, c.k.source);
    s_case_free(&c);
}

/* NCHW: a repack that fills the scratch's padding with zeros instead of
 * za (every memset of the row's border), caught at the border pixels. */
static void test_broken_repack_caught(void **state)
{
    (void)state;
    s_case_t c;
    s_case(&c, s_specs[NCHW0 + 4], 3);
    int n = 0;
    for (char *p = c.k.source; (p = strstr(p, "memset(d, 100,")); n++)
        memcpy(p, "memset(d,   0,", 14);
    for (char *p = c.k.source; (p = strstr(p, "memset(d + ")); n++) {
        p = strstr(p, ", 100,");
        memcpy(p, ",   0,", 6);
    }
    assert_int_equal(n, 3);
    s_case_caught(&c, c.k.source);
    s_case_free(&c);
}

/* The vector requant rounding toward zero instead of to nearest even. */
static void test_broken_requant_caught(void **state)
{
    (void)state;
    s_case_t c;
    s_case(&c, s_specs[0], 5);
    const char *from = "_MM_FROUND_TO_NEAREST_INT", *to = "_MM_FROUND_TO_ZERO";
    kl_buf_t b = {0};
    int n = 0;
    const char *p = c.k.source, *q;
    while ((q = strstr(p, from))) {
        kl_buf_append(&b, p, (size_t)(q - p));
        kl_buf_puts(&b, to);
        p = q + strlen(from);
        n++;
    }
    kl_buf_puts(&b, p);
    assert_true(n > 0);
    s_case_caught(&c, b.data);
    kl_buf_free(&b);
    s_case_free(&c);
}

static void s_refused(const char *spec, const char *want)
{
    char err[KL_ERRMSG_LEN];
    kl_workload_t *w = NULL;
    if (kl_workload_from_string(spec, &w, err))
        fail_msg("%s: %s", spec, err);
    kl_space_t *sp = NULL;
    int rc = kl_space_for_target(s_targets[0], w, &sp, err);
    assert_int_not_equal(rc, KL_OK);
    if (!strstr(err, want))
        fail_msg("%s: '%s' does not say '%s'", spec, err, want);
    kl_workload_free(&w);
}

static void test_refusals(void **state)
{
    (void)state;
    /* A plain one is tuned in the depthwise row family (dw_test.c); a
     * channel multiplier above 1 has no integer schedule. */
    s_refused("qdepthwise_conv2d N=1 C=8 H=6 W=6 R=3 S=3 pad=1 za=3 "
              "multiplier=2",
              "is a depthwise convolution");
    s_refused("qconv2d N=1 C=8 H=6 W=6 K=16 R=3 S=3 pad=1 groups=2 "
              "layout=NHWC",
              "NCHW convolutions with groups=1 only");
    s_refused("qconv2d N=1 C=8 H=6 W=6 K=16 R=3 S=3 pad=1 groups=2",
              "NCHW convolutions with groups=1 only");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_space_conv, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown(test_broken_padding_caught, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_broken_requant_caught, s_setup,
                                        s_teardown),
        cmocka_unit_test_setup_teardown(test_broken_repack_caught, s_setup,
                                        s_teardown),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
