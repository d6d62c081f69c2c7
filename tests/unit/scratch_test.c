/* Unit tests of the generated kernels' shared per-call scratch
 * (kl_scratch_claim in the C prelude): two Winograd kernels of different
 * sizes, each its own translation unit, built into one library the way
 * `kiln export` builds a model (kl_export_cc), with a third unit that
 * names the scratch object from outside. One object serves both kernels
 * and grows to the larger one's need; it is given back after each call;
 * both kernels called at the same time from two threads (one of them
 * then finds it taken and allocates its own) still match the reference
 * on every call. */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_abi.h"
#include "kl_check.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_export.h"
#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_space.h"
#include "kl_test_tmp.h"
#include "kl_trace.h"
#include "kl_util.h"
#include "wl_fx.h"

/* Reads the scratch object of the library it is linked into. */
static const char s_probe_src[] =
    "#include <stddef.h>\n" KL_ABI_SCRATCH_DECL
    "size_t kl_probe_n(void) { return kl_scratch_g.n; }\n"
    "int kl_probe_busy(void) { return kl_scratch_g.busy; }\n";

/* One kernel of the library: its workload, inputs, reference output and
 * prepared block. */
typedef struct {
    kl_workload_t *w;
    float **bufs, *ref;
    void (*fn)(void *const *);
    void *block;
    int64_t scratch, on;
    int bad;
} s_kern_t;

/* A Winograd schedule of w's generated source (entry), and the scratch it
 * claims (bytes). */
static char *s_wino_source(const kl_workload_t *w, const char *entry,
                           uint64_t seed, int64_t *scratch)
{
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_space_for_target("cpu", w, &sp, err), KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, seed);
    char *src = NULL;
    for (int tries = 0; !src && tries < 400; tries++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("%s", err);
        if (kl_sched_winograd_m(s)) {
            kl_kernel_t k;
            if (kl_codegen_c(s, kl_space_target(sp), entry, &k, err))
                fail_msg("%s", err);
            src = k.source;
            free(k.entry);
        }
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    assert_non_null(src);
    const char *c = strstr(src, "(float *)kl_scratch_claim(");
    assert_non_null(c);
    *scratch = strtoll(c + strlen("(float *)kl_scratch_claim("), NULL, 10);
    assert_true(*scratch > 0);
    kl_space_destroy(&sp);
    return src;
}

static void s_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void s_kern_init(s_kern_t *k, void *dl, const char *spec,
                        const char *entry, int64_t scratch)
{
    char err[KL_ERRMSG_LEN];
    memset(k, 0, sizeof *k);
    k->w = fx_wl(spec);
    k->scratch = scratch;
    k->bufs = kl_check_alloc(k->w, 3, err);
    assert_non_null(k->bufs);
    int out = kl_workload_output(k->w);
    k->on = kl_tensor_numel(&k->w->tensors[out]);
    k->ref = kl_xmalloc((size_t)k->on * sizeof(float));
    float *o = k->bufs[out];
    k->bufs[out] = k->ref;
    kl_workload_eval(k->w, k->bufs);
    k->bufs[out] = o;
    *(void **)(&k->fn) = dlsym(dl, entry);
    assert_non_null(k->fn);
    void *args[KL_IR_MAX_TENSORS + 1] = {0};
    bool cst[KL_IR_MAX_TENSORS] = {0};
    for (int t = 0; t < k->w->ntensors; t++) {
        args[t] = k->bufs[t];
        cst[t] = k->w->tensors[t].is_const;
    }
    kl_abi_prepare_fn prep = kl_abi_find_prepare(dl, entry);
    assert_non_null(prep);
    k->block = kl_abi_prepare(prep, k->w->ntensors, args, cst);
    assert_non_null(k->block);
}

/* One call into out (NaN first); 1 when it differs from the reference. */
static int s_kern_call(s_kern_t *k, float *out)
{
    void *args[KL_IR_MAX_TENSORS + 1] = {0};
    int o = kl_workload_output(k->w);
    for (int t = 0; t < k->w->ntensors; t++)
        args[t] = t == o ? (void *)out : (void *)k->bufs[t];
    args[k->w->ntensors] = k->block;
    for (int64_t i = 0; i < k->on; i++)
        out[i] = NAN;
    k->fn((void *const *)args);
    for (int64_t i = 0; i < k->on; i++) {
        double d = out[i] - k->ref[i];
        if (!(d <= 1e-4 + 1e-4 * fabs(k->ref[i]) &&
              d >= -(1e-4 + 1e-4 * fabs(k->ref[i]))))
            return 1;
    }
    return 0;
}

static void s_kern_free(s_kern_t *k)
{
    free(k->block);
    free(k->ref);
    kl_check_free(k->w, &k->bufs);
    kl_workload_free(&k->w);
}

static void *s_loop(void *arg)
{
    s_kern_t *k = arg;
    float *out = kl_xmalloc((size_t)k->on * sizeof(float));
    for (int i = 0; i < 30; i++)
        k->bad += s_kern_call(k, out);
    free(out);
    return NULL;
}

static void test_shared(void **state)
{
    (void)state;
    const char *spec[2] = {
        "conv2d N=1 C=16 H=14 W=14 K=16 R=3 S=3 pad=1 bias=1 relu=1",
        "conv2d N=1 C=32 H=22 W=20 K=24 R=3 S=3 pad=1 bias=1",
    };
    const char *entry[2] = {"kl_sa", "kl_sb"};
    char dir[256];
    assert_non_null(
        kl_test_mkdtemp(dir, sizeof dir, "kiln-scratch-test-XXXXXX"));
    char *paths[3];
    int64_t need[2];
    for (int i = 0; i < 2; i++) {
        kl_workload_t *w = fx_wl(spec[i]);
        char *src = s_wino_source(w, entry[i], 7 + (uint64_t)i, &need[i]);
        paths[i] = kl_xasprintf("%s/k%d.c", dir, i);
        s_write(paths[i], src);
        free(src);
        kl_workload_free(&w);
    }
    assert_true(need[1] > need[0]);
    paths[2] = kl_xasprintf("%s/probe.c", dir);
    s_write(paths[2], s_probe_src);
    char *lib = kl_xasprintf("%s/libk.so", dir);
    char err[KL_ERRMSG_LEN];
    if (kl_export_cc(NULL, paths, 3, lib, err))
        fail_msg("%s", err);
    void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(dl);
    size_t (*probe_n)(void);
    int (*probe_busy)(void);
    *(void **)(&probe_n) = dlsym(dl, "kl_probe_n");
    *(void **)(&probe_busy) = dlsym(dl, "kl_probe_busy");
    assert_non_null(probe_n);
    assert_non_null(probe_busy);

    s_kern_t k[2];
    for (int i = 0; i < 2; i++)
        s_kern_init(&k[i], dl, spec[i], entry[i], need[i]);
    assert_int_equal(probe_n(), 0);
    float *out = kl_xmalloc((size_t)k[1].on * sizeof(float));
    /* The small kernel sizes the one scratch, the large one grows it, the
     * small one then uses it as it is; each gives it back. */
    assert_int_equal(s_kern_call(&k[0], out), 0);
    assert_int_equal(probe_n(), (size_t)need[0]);
    assert_int_equal(probe_busy(), 0);
    assert_int_equal(s_kern_call(&k[1], out), 0);
    assert_int_equal(probe_n(), (size_t)need[1]);
    assert_int_equal(s_kern_call(&k[0], out), 0);
    assert_int_equal(probe_n(), (size_t)need[1]);
    assert_int_equal(probe_busy(), 0);
    free(out);

    /* Both at once, 30 calls each. */
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, s_loop, &k[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(k[0].bad, 0);
    assert_int_equal(k[1].bad, 0);
    assert_int_equal(probe_busy(), 0);

    for (int i = 0; i < 2; i++)
        s_kern_free(&k[i]);
    for (int i = 0; i < 3; i++) {
        unlink(paths[i]);
        free(paths[i]);
    }
    unlink(lib);
    free(lib);
    kl_test_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
