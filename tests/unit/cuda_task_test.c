/* cuda_task_test - tuning tasks for a CUDA target, up to the batch that
 * would be sent (kl_task_preview; nothing is measured, no GPU needed):
 * every candidate is CUDA C that NVRTC compiles for sm_90, with the launch
 * its trace regenerates, the reference is the agent's naive kernel and
 * computes what the interpreter computes (CPU emulation), and sources of
 * stored traces come back in the target's language. NVRTC missing: the
 * batch case (which compiles with NVRTC) skips. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_check.h"
#include "cuda_emu.h"
#include "kl_codegen_cuda.h"
#include "kl_task.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

#define OP "matmul M=512 N=256 K=128"
#define BATCH 24

static char s_workdir[512];

typedef struct {
    size_t n;
    kl_kernel_t k[BATCH + 1]; /* candidates (entries renamed), then ref */
    uint8_t *trace[BATCH];
    size_t trace_len[BATCH];
    char *ref_entry;
    const char *target;
} got_t;

static void s_collect(void *ctx, const kl_dispatch_batch_t *b)
{
    got_t *g = ctx;
    assert_true(b->n_candidates <= BATCH);
    assert_string_equal(b->target, g->target);
    for (size_t i = 0; i < b->n_candidates; i++) {
        const Kiln__Candidate *c = b->candidates[i];
        kl_kernel_t *k = &g->k[i];
        k->source = kl_xstrdup(c->source);
        k->entry = kl_xstrdup(c->entry);
        if (c->n_grid == 3 && c->n_block == 3)
            for (int d = 0; d < 3; d++) {
                k->grid[d] = c->grid[d];
                k->block[d] = c->block[d];
            }
        k->shared_bytes = c->shared_bytes;
        g->trace[i] = kl_xmalloc(c->trace.len);
        memcpy(g->trace[i], c->trace.data, c->trace.len);
        g->trace_len[i] = c->trace.len;
    }
    g->k[b->n_candidates].source = kl_xstrdup(b->reference_source);
    g->k[b->n_candidates].entry = kl_xstrdup(b->reference_entry);
    g->n = b->n_candidates;
}

static void s_got_free(got_t *g)
{
    for (size_t i = 0; i <= g->n; i++)
        kl_kernel_free(&g->k[i]);
    for (size_t i = 0; i < g->n; i++)
        free(g->trace[i]);
}

static kl_task_t *s_task(const char *op, const char *target, int strategy)
{
    kl_task_cfg_t cfg;
    kl_task_cfg_default(&cfg);
    cfg.target = target;
    cfg.search.strategy = strategy;
    cfg.search.seed = 3;
    char err[KL_ERRMSG_LEN];
    kl_task_t *t = NULL;
    int rc = kl_task_new(&t, op, &cfg, NULL, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, KL_OK);
    return t;
}

static int s_feature(const char *name)
{
    for (int i = 0; i < KL_FEATURES_N; i++)
        if (!strcmp(kl_features_name(i), name))
            return i;
    fail_msg("no feature %s", name);
    return -1;
}

/* The features of a GPU nest see its launch: threads per block in the
 * target slot, the grid as the parallel extent. */
static void s_check_features(const kl_sched_t *s, const kl_target_t *tg,
                             const kl_kernel_t *k)
{
    float f[KL_FEATURES_N];
    kl_features_extract(s, tg, f);
    float threads = (float)(k->block[0] * k->block[1] * k->block[2]);
    double grid = (double)(k->grid[0] * k->grid[1] * k->grid[2]);
    assert_true(f[s_feature("target.lanes")] == threads);
    assert_true(f[s_feature("par.extent")] == (float)log2(1.0 + grid));
    assert_true(f[s_feature("par.n")] >= 2); /* blockIdx and threadIdx */
}

/* Every candidate: the launch and the code its trace regenerates. */
static void s_check_launches(const got_t *g, const kl_task_t *t)
{
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    assert_int_equal(
        kl_space_for_target("cuda/sm_90", kl_task_workload(t), &sp, err),
        KL_OK);
    for (size_t i = 0; i < g->n; i++) {
        const kl_kernel_t *c = &g->k[i];
        assert_string_equal(c->entry, "kl_main");
        assert_non_null(strstr(c->source, "extern \"C\" __global__"));
        int64_t threads = c->block[0] * c->block[1] * c->block[2];
        assert_true(threads >= 1 && threads <= 1024);
        assert_true(c->grid[0] >= 1 && c->grid[1] >= 1 && c->grid[2] >= 1);
        /* Dynamic shared memory only above the static 48 KiB. */
        assert_true(c->shared_bytes == 0 || c->shared_bytes > 49152);
        kl_trace_t *tr = NULL, *ex = NULL;
        kl_sched_t *s = NULL;
        kl_rng_t r;
        kl_rng_seed(&r, 1);
        assert_int_equal(
            kl_trace_from_proto(g->trace[i], g->trace_len[i], &tr, err), KL_OK);
        assert_int_equal(kl_space_fix(sp, tr, &r, &ex, &s, err), KL_OK);
        s_check_features(s, kl_space_target(sp), c);
        kl_kernel_t k;
        assert_int_equal(
            kl_codegen_cuda(s, kl_space_target(sp), "kl_main", &k, err), KL_OK);
        assert_string_equal(k.source, c->source);
        for (int d = 0; d < 3; d++) {
            assert_int_equal(k.grid[d], c->grid[d]);
            assert_int_equal(k.block[d], c->block[d]);
        }
        assert_int_equal(k.shared_bytes, c->shared_bytes);
        /* kiln db best --source regenerates the same CUDA text. */
        char *src = NULL;
        assert_int_equal(kl_trace_source(OP, "cuda/sm_90", g->trace[i],
                                         g->trace_len[i], &src, err),
                         KL_OK);
        assert_string_equal(src, c->source);
        free(src);
        kl_kernel_free(&k);
        kl_sched_destroy(&s);
        kl_trace_free(&ex);
        kl_trace_free(&tr);
    }
    kl_space_destroy(&sp);
}

/* Candidates and reference as one NVRTC program for sm_90 (entries
 * renamed apart): it compiles and ptxas reports on every kernel. */
static void s_check_nvrtc(got_t *g)
{
    char err[KL_ERRMSG_LEN];
    kl_nvrtc_t *nv = kl_nvrtc_default(err);
    assert_non_null(nv);
    kl_kernel_t ks[BATCH + 1];
    for (size_t i = 0; i <= g->n; i++) {
        ks[i] = g->k[i];
        char name[32];
        snprintf(name, sizeof name, "cand%zu", i);
        const char *from = i < g->n ? "kl_main(" : "kl_ref(";
        char *at = strstr(g->k[i].source, from);
        assert_non_null(at);
        ks[i].source = kl_xasprintf("%.*s%s(%s", (int)(at - g->k[i].source),
                                    g->k[i].source, name, at + strlen(from));
        ks[i].entry = kl_xstrdup(name);
    }
    int rcs[BATCH + 1];
    char(*why)[KL_ERRMSG_LEN] = kl_xcalloc(BATCH + 1, sizeof *why);
    kl_nvrtc_kernel_t res[BATCH + 1];
    int rc =
        kl_cuda_check_many(nv, ks, (int)g->n + 1, "sm_90", rcs, why, res, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, KL_OK);
    int fit = 0;
    for (size_t i = 0; i <= g->n; i++) {
        /* "no resource report" would mean the kernel was not built. */
        assert_null(strstr(why[i], "no resource report"));
        fit += rcs[i] == KL_OK;
        free(ks[i].source);
        free(ks[i].entry);
    }
    assert_int_equal(rcs[g->n], KL_OK); /* the reference fits */
    assert_true(fit >= 2);
    free(why);
}

static void test_cuda_batch(void **state)
{
    (void)state;
    char why[KL_ERRMSG_LEN];
    if (!kl_nvrtc_default(why)) {
        printf("SKIP: NVRTC not available: %s\n", why);
        skip();
    }
    kl_task_t *t = s_task(OP, "cuda/sm_90", KL_STRATEGY_EVOLUTIONARY);
    assert_string_equal(kl_task_target(t), "cuda/sm_90");
    got_t g = {.target = "cuda/sm_90"};
    size_t n = 0;
    char err[KL_ERRMSG_LEN];
    int rc = kl_task_preview(t, BATCH, s_collect, &g, &n, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, KL_OK);
    assert_int_equal(n, BATCH);
    assert_int_equal(g.n, BATCH);
    /* Nothing counts or stays in flight. */
    assert_int_equal(kl_task_in_flight(t), 0);
    assert_int_equal(kl_task_trials(t), 0);
    /* Deduped by code: every source differs. */
    for (size_t i = 0; i < g.n; i++)
        for (size_t j = i + 1; j < g.n; j++)
            assert_string_not_equal(g.k[i].source, g.k[j].source);
    const kl_kernel_t *ref = &g.k[g.n];
    assert_string_equal(ref->entry, "kl_ref");
    assert_non_null(strstr(ref->source, "__launch_bounds__(256)"));
    s_check_launches(&g, t);
    s_check_nvrtc(&g);
    s_got_free(&g);
    kl_task_destroy(&t);
}

/* The reference follows agent/cuda/kla_cuda.h: block 256, grid ceil(n / 256),
 * also below one block, and computes the interpreter's values. */
static void test_cuda_reference(void **state)
{
    (void)state;
    static const char *ops[] = {
        "matmul M=4 N=8 K=3", "matmul M=33 N=65 K=17 bias=1 relu=1",
        "conv2d N=1 C=3 H=9 W=9 K=4 R=3 S=3 stride=2 pad=1",
        "max_pool2d N=1 C=2 H=8 W=8 R=2 S=2"};
    enum { NOPS = sizeof ops / sizeof *ops };
    char err[KL_ERRMSG_LEN];
    kl_target_t tg;
    assert_int_equal(kl_target_parse("cuda/sm_90", &tg, err), KL_OK);
    kl_workload_t *ws[NOPS];
    kl_kernel_t ks[NOPS];
    for (int i = 0; i < NOPS; i++) {
        int rc = kl_workload_from_string(ops[i], &ws[i], err);
        if (rc)
            fprintf(stderr, "%s: %s\n", ops[i], err);
        assert_int_equal(rc, KL_OK);
        char entry[16];
        snprintf(entry, sizeof entry, "ref%d", i);
        assert_int_equal(
            kl_codegen_cuda_reference(ws[i], &tg, entry, &ks[i], err), KL_OK);
        int64_t n = kl_tensor_numel(&ws[i]->tensors[kl_workload_output(ws[i])]);
        assert_int_equal(ks[i].block[0], 256);
        assert_int_equal(ks[i].block[1] * ks[i].block[2], 1);
        assert_int_equal(ks[i].grid[0], (n + 255) / 256);
        assert_int_equal(ks[i].grid[1] * ks[i].grid[2], 1);
        assert_int_equal(ks[i].shared_bytes, 0);
        assert_non_null(strstr(ks[i].source, "__launch_bounds__(256)"));
    }
    assert_int_equal(kl_emu_check_all(ks, NOPS,
                                      (const kl_workload_t *const *)ws,
                                      s_workdir, 5, 1e-4, 1e-4, err),
                     KL_OK);
    for (int i = 0; i < NOPS; i++) {
        kl_kernel_free(&ks[i]);
        kl_workload_free(&ws[i]);
    }
}

/* The CPU path is untouched: C candidates without a launch, C reference. */
static void test_cpu_batch_unchanged(void **state)
{
    (void)state;
    kl_task_t *t = s_task(OP, "cpu/x86_64-avx2", KL_STRATEGY_REPLAY);
    got_t g = {.target = "cpu/x86_64-avx2"};
    size_t n = 0;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_task_preview(t, 4, s_collect, &g, &n, err), KL_OK);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        assert_null(strstr(g.k[i].source, "__global__"));
        assert_int_equal(g.k[i].grid[0], 0); /* no launch sent */
        char *src = NULL;
        assert_int_equal(kl_trace_source(OP, "cpu/x86_64-avx2", g.trace[i],
                                         g.trace_len[i], &src, err),
                         KL_OK);
        assert_string_equal(src, g.k[i].source);
        free(src);
    }
    assert_null(strstr(g.k[n].source, "__global__"));
    assert_non_null(strstr(g.k[n].source, "kl_ref"));
    s_got_free(&g);
    kl_task_destroy(&t);
}

/* "cuda" alone names no architecture: a clear error. */
static void test_cuda_needs_arch(void **state)
{
    (void)state;
    kl_task_cfg_t cfg;
    kl_task_cfg_default(&cfg);
    cfg.target = "cuda";
    kl_task_t *t = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_task_new(&t, OP, &cfg, NULL, err), KL_ERR_INVAL);
    assert_null(t);
    assert_non_null(strstr(err, "cuda/sm_90"));
}

int main(void)
{
    if (!kl_test_mkdtemp(s_workdir, sizeof s_workdir,
                         "kiln-cuda-task-XXXXXX")) {
        perror("kl_test_mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_batch),
        cmocka_unit_test(test_cuda_reference),
        cmocka_unit_test(test_cpu_batch_unchanged),
        cmocka_unit_test(test_cuda_needs_arch),
    };
    int rc = cmocka_run_group_tests_name("cuda_task", tests, NULL, NULL);
    kl_test_rmdir(s_workdir);
    return rc;
}
