/* Unit tests of traces (kl_trace.h): sampling, decisions, replay, proto
 * and text round trips, reject_if and if/else, predicates, and the CPU
 * design space's programs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_sched.h"
#include "kl_space.h"
#include "kl_trace.h"
#include "wl_fx.h"

/* Runs program p on a fresh schedule of w; returns the executed trace or
 * NULL when rejected. */
static kl_trace_t *s_run(const kl_workload_t *w, const kl_trace_t *p,
                         kl_rng_t *rng, kl_sched_t **sched)
{
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    kl_trace_t *ex = NULL;
    bool rej = false;
    int rc = kl_trace_apply(p, s, rng, &ex, &rej, err);
    if (rc)
        fail_msg("apply: %s", err);
    if (rej) {
        assert_null(ex);
        kl_sched_destroy(&s);
        return NULL;
    }
    if (sched)
        *sched = s;
    else
        kl_sched_destroy(&s);
    return ex;
}

static void test_predicates(void **state)
{
    (void)state;
    kl_pred_t *p = NULL;
    char err[KL_ERRMSG_LEN];
    int64_t v;
    assert_int_equal(kl_pred_parse("(2 + 3) * 4 % 7 == 6 && !(1 > 2)", &p, err),
                     KL_OK);
    assert_int_equal(kl_pred_eval(p, NULL, NULL, &v, err), KL_OK);
    assert_int_equal(v, 1);
    kl_pred_free(&p);
    assert_null(p);
    assert_int_equal(kl_pred_parse("1 / 0", &p, err), KL_OK);
    assert_int_equal(kl_pred_eval(p, NULL, NULL, &v, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "division by zero"));
    kl_pred_free(&p);
    /* Parse errors name the column. */
    assert_int_equal(kl_pred_parse("v3 * > 4", &p, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "column 6"));
    assert_int_equal(kl_pred_parse("(v1 < 2", &p, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "column 8"));
    assert_int_equal(kl_pred_parse("v1 < 2 x", &p, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "column 8"));
}

/* A program with reject_if(v0 > 4) never yields v0 > 4. */
static void test_reject_if(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=8 N=8 K=8");
    kl_trace_t *p = kl_trace_new("test");
    int64_t vals[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    double probs[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int64_t v = kl_tr_sample_categorical(p, vals, probs, 8);
    char pred[32], err[KL_ERRMSG_LEN];
    snprintf(pred, sizeof pred, "v%lld > 4", (long long)v);
    assert_int_equal(kl_tr_reject_if(p, pred, err), KL_OK);
    assert_int_equal(kl_tr_reject_if(p, "v0 >", err), KL_ERR_INVAL);
    kl_rng_t rng;
    kl_rng_seed(&rng, 5);
    int accepted = 0, rejected = 0;
    for (int i = 0; i < 1000; i++) {
        kl_trace_t *ex = s_run(w, p, &rng, NULL);
        if (!ex) {
            rejected++;
            continue;
        }
        accepted++;
        const kl_inst_t *in = kl_trace_inst_c(ex, 0);
        assert_true(in->has_decision);
        assert_true(vals[in->dec[0]] <= 4);
        kl_trace_free(&ex);
    }
    /* Half the values are rejected: both outcomes must occur. */
    assert_true(accepted > 350 && rejected > 350);
    kl_trace_free(&p);
    kl_workload_free(&w);
}

/* if/else: the branch taken follows the sampled value, and the nest shows
 * the branch's instructions. */
static void test_if_else(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=16 N=16 K=16");
    kl_trace_t *p = kl_trace_new("test");
    int64_t l[3], v[2], li[2];
    char err[KL_ERRMSG_LEN];
    kl_tr_get_loops(p, 3, l);
    kl_tr_sample_perfect_tile(p, l[0], 2, 16, v);
    kl_tr_split(p, l[0], v, 2, li);
    char pred[32];
    snprintf(pred, sizeof pred, "v%lld >= 4", (long long)v[1]);
    assert_int_equal(kl_tr_if(p, pred, err), KL_OK);
    int64_t ord1[2] = {l[1], li[0]};
    kl_tr_reorder(p, ord1, 2); /* j before i0 */
    assert_int_equal(kl_tr_else(p, err), KL_OK);
    kl_tr_parallel(p, li[0]);
    assert_int_equal(kl_tr_end(p, err), KL_OK);
    assert_int_equal(kl_tr_end(p, err), KL_ERR_INVAL);
    kl_rng_t rng;
    kl_rng_seed(&rng, 11);
    int thens = 0, elses = 0;
    for (int i = 0; i < 200; i++) {
        kl_sched_t *s = NULL;
        kl_trace_t *ex = s_run(w, p, &rng, &s);
        assert_non_null(ex);
        int64_t inner = kl_trace_inst_c(ex, 1)->dec[1];
        const kl_inst_t *ifi = kl_trace_inst_c(ex, 3);
        assert_int_equal(ifi->op, KL_OP_IF);
        assert_true(ifi->has_decision);
        assert_int_equal(ifi->dec[0], inner >= 4);
        if (inner >= 4) {
            thens++;
            /* reorder happened: loop 0 is j, nothing parallel */
            assert_int_equal(kl_sched_loop(s, 0)->parts[0].iter, 1);
            assert_int_equal(kl_sched_loop(s, 1)->kind, KL_LOOP_SERIAL);
        } else {
            elses++;
            assert_int_equal(kl_sched_loop(s, 0)->kind, KL_LOOP_PARALLEL);
            assert_int_equal(kl_sched_loop(s, 0)->parts[0].iter, 0);
        }
        /* The trace replays the same branch without an RNG. */
        kl_sched_t *s2 = NULL;
        kl_trace_t *ex2 = s_run(w, ex, NULL, &s2);
        char *a = kl_sched_print(s), *b = kl_sched_print(s2);
        assert_string_equal(a, b);
        free(a);
        free(b);
        /* A decision that contradicts the predicate is an error. */
        kl_inst_t *bad = kl_trace_inst(ex2, 3);
        bad->dec[0] = !bad->dec[0];
        kl_sched_t *s3 = NULL;
        bool rej;
        assert_int_equal(kl_sched_create(&s3, w, err), KL_OK);
        assert_int_equal(kl_trace_apply(ex2, s3, NULL, NULL, &rej, err),
                         KL_ERR_INVAL);
        assert_non_null(strstr(err, "recorded branch"));
        kl_sched_destroy(&s3);
        kl_sched_destroy(&s2);
        kl_trace_free(&ex2);
        kl_sched_destroy(&s);
        kl_trace_free(&ex);
    }
    assert_true(thens > 0 && elses > 0);
    kl_trace_free(&p);
    kl_workload_free(&w);
}

static const char s_text[] =
    "l0, l1, l2 = get_loops()\n"
    "v3, v4, v5, v6 = sample_perfect_tile(l0, n=4, max_innermost=16) -> "
    "[4, 8, 2, 16]\n"
    "l7, l8, l9, l10 = split(l0, v3, v4, v5, v6)\n"
    "v11 = sample_categorical(values=[8, 16], probs=[0.25, 0.75]) -> 1\n"
    "l12, l13 = split(l1, ?, v11)\n"
    "reject_if(v6 * v11 > 512)\n"
    "if (v6 >= 8) { reorder(l7, l12, l8, l13); if (v4 == 8) { unroll(l9) } "
    "else { } -> 1 } else { reorder(l12, l7, l13, l8) } -> 1\n"
    "b14 = cache_write(scope=\"local\")\n"
    "b15 = cache_read(tensor=\"B\", scope=\"packed\")\n"
    "l16 = sample_compute_location(b15, l8, l9) -> 1\n"
    "compute_at(b15, l16)\n"
    "l17 = fuse(l7, l12)\n"
    "parallel(l17)\n"
    "annotate(l17, key=\"unroll_max_step\", value=64)\n";

static void test_text_proto_round_trip(void **state)
{
    (void)state;
    kl_trace_t *t = NULL, *t2 = NULL, *t3 = NULL;
    char err[KL_ERRMSG_LEN];
    if (kl_trace_from_text(s_text, &t, err))
        fail_msg("%s", err);
    assert_int_equal(kl_trace_ninsts(t), 14);
    char *txt = kl_trace_to_text(t);
    assert_int_equal(kl_trace_from_text(txt, &t2, err), KL_OK);
    char *txt2 = kl_trace_to_text(t2);
    assert_string_equal(txt, txt2);
    uint8_t *buf, *buf2;
    size_t len, len2;
    kl_trace_to_proto(t, &buf, &len);
    assert_int_equal(kl_trace_from_proto(buf, len, &t3, err), KL_OK);
    kl_trace_to_proto(t3, &buf2, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    char *txt3 = kl_trace_to_text(t3);
    assert_string_equal(txt, txt3);
    uint8_t h1[16], h2[16];
    kl_trace_hash(t, h1);
    kl_trace_hash(t3, h2);
    assert_memory_equal(h1, h2, 16);
    /* A changed decision changes the hash. */
    kl_trace_inst(t3, 1)->dec[0] = 8;
    kl_trace_hash(t3, h2);
    assert_memory_not_equal(h1, h2, 16);
    /* Truncated bytes do not decode. */
    kl_trace_t *t4 = NULL;
    assert_int_equal(kl_trace_from_proto(buf, len / 2, &t4, err), KL_ERR_PROTO);
    assert_null(t4);
    /* Bad text names line and column. */
    assert_int_equal(
        kl_trace_from_text("l0 = get_loops()\nsplit(l0, ,)", &t4, err),
        KL_ERR_INVAL);
    assert_non_null(strstr(err, "line 2 column 11"));
    assert_int_equal(kl_trace_from_text("frobnicate(l0)", &t4, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "unknown instruction"));
    assert_int_equal(kl_trace_from_text("if (v1 >) { }", &t4, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "predicate column"));
    free(buf);
    free(buf2);
    free(txt);
    free(txt2);
    free(txt3);
    kl_trace_free(&t);
    kl_trace_free(&t2);
    kl_trace_free(&t3);
}

static void test_perfect_tile_and_decisions(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=360 N=8 K=8");
    kl_trace_t *p = kl_trace_new("test");
    int64_t l[3], v[3], o[3];
    kl_tr_get_loops(p, 3, l);
    kl_tr_sample_perfect_tile(p, l[0], 3, 8, v);
    kl_tr_split(p, l[0], v, 3, o);
    kl_rng_t rng;
    kl_rng_seed(&rng, 3);
    for (int i = 0; i < 300; i++) {
        kl_trace_t *ex = s_run(w, p, &rng, NULL);
        const kl_inst_t *in = kl_trace_inst_c(ex, 1);
        assert_int_equal(in->ndec, 3);
        assert_int_equal(in->dec[0] * in->dec[1] * in->dec[2], 360);
        assert_true(in->dec[2] <= 8);
        kl_trace_free(&ex);
    }
    /* A decision whose product is wrong is refused on replay. */
    kl_trace_t *ex = s_run(w, p, &rng, NULL);
    kl_trace_inst(ex, 1)->dec[0] += 1;
    kl_sched_t *s = NULL;
    char err[KL_ERRMSG_LEN];
    bool rej;
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_trace_apply(ex, s, NULL, NULL, &rej, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "multiply"));
    kl_sched_destroy(&s);
    /* Without decisions and without an RNG there is nothing to replay. */
    kl_trace_strip_decisions(ex);
    assert_int_equal(kl_trace_ndecisions(ex), 0);
    assert_int_equal(kl_sched_create(&s, w, err), KL_OK);
    assert_int_equal(kl_trace_apply(ex, s, NULL, NULL, &rej, err),
                     KL_ERR_INVAL);
    assert_non_null(strstr(err, "no decision"));
    kl_sched_destroy(&s);
    kl_trace_free(&ex);
    kl_trace_free(&p);
    kl_workload_free(&w);
}

/* sample_perfect_tile's whole: the percent chance of [1, .., extent];
 * kept through text and proto, and absent from the text when 0. */
static void test_perfect_tile_whole(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=360 N=8 K=8");
    int64_t pct[3] = {100, 50, 0}, got[3] = {0, 0, 0};
    for (int c = 0; c < 3; c++) {
        kl_trace_t *p = kl_trace_new("test");
        int64_t l[3], v[3], o[3];
        kl_tr_get_loops(p, 3, l);
        kl_tr_sample_perfect_tile_whole(p, l[0], 3, 0, pct[c], v);
        kl_tr_split(p, l[0], v, 3, o);
        kl_rng_t rng;
        kl_rng_seed(&rng, 5);
        for (int i = 0; i < 200; i++) {
            kl_trace_t *ex = s_run(w, p, &rng, NULL);
            const kl_inst_t *in = kl_trace_inst_c(ex, 1);
            assert_int_equal(in->dec[0] * in->dec[1] * in->dec[2], 360);
            got[c] += in->dec[2] == 360;
            kl_trace_free(&ex);
        }
        char *txt = kl_trace_to_text(p), err[KL_ERRMSG_LEN];
        assert_int_equal(strstr(txt, "whole=") != NULL, pct[c] > 0);
        kl_trace_t *t2 = NULL, *t3 = NULL;
        assert_int_equal(kl_trace_from_text(txt, &t2, err), KL_OK);
        uint8_t *buf;
        size_t len;
        kl_trace_to_proto(t2, &buf, &len);
        assert_int_equal(kl_trace_from_proto(buf, len, &t3, err), KL_OK);
        char *txt3 = kl_trace_to_text(t3);
        assert_string_equal(txt, txt3);
        free(buf);
        free(txt);
        free(txt3);
        kl_trace_free(&t2);
        kl_trace_free(&t3);
        kl_trace_free(&p);
    }
    /* 360 = 2^3 3^2 5: spread at random, all six primes land innermost
     * with chance 3^-6. */
    assert_int_equal(got[0], 200);
    assert_in_range(got[1], 70, 130);
    assert_in_range(got[2], 0, 3);
    kl_workload_free(&w);
}

/* A model's matmul (B const, 1 MiB or more) samples its rows' tiles with
 * whole=30: some schedules keep every row tile below the outer loops. A
 * matmul whose B is a plain input, or small, does not. */
static void test_cpu_whole_rows(void **state)
{
    (void)state;
    const char *ops[] = {"matmul M=128 N=768 K=768 const_b=1 bias=1",
                         "matmul M=128 N=768 K=768 bias=1",
                         "matmul M=128 N=64 K=64 const_b=1", NULL};
    for (int o = 0; ops[o]; o++) {
        kl_workload_t *w = fx_wl(ops[o]);
        kl_space_t *sp = NULL;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_space_for_target("cpu/x86_64-avx2", w, &sp, err),
                         KL_OK);
        kl_rng_t rng;
        kl_rng_seed(&rng, 11);
        int marked = 0, whole = 0;
        for (int i = 0; i < 40; i++) {
            kl_trace_t *tr = NULL;
            kl_sched_t *s = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", ops[o], err);
            for (int k = 0; k < kl_trace_ninsts(tr); k++) {
                const kl_inst_t *in = kl_trace_inst_c(tr, k);
                if (in->op != KL_OP_SAMPLE_PERFECT_TILE || in->nints < 3)
                    continue;
                assert_int_equal(in->ints[2], 30);
                marked++;
                whole += in->dec[0] == 1 && in->dec[1] == 1;
            }
            kl_sched_destroy(&s);
            kl_trace_free(&tr);
        }
        if (o == 0) {
            assert_int_equal(marked, 40);
            assert_in_range(whole, 6, 24);
        } else {
            assert_int_equal(marked, 0);
        }
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
}

/* The CPU space: samples replay to byte-identical source, through text
 * and proto; stripped decisions sample afresh. */
static void test_cpu_space_replay(void **state)
{
    (void)state;
    const char *ops[] = {"matmul M=1024 N=1024 K=1024",
                         "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 pad=1",
                         "dense N=1 I=512 O=1000", NULL};
    for (int o = 0; ops[o]; o++) {
        kl_workload_t *w = fx_wl(ops[o]);
        kl_space_t *sp = NULL;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                         KL_OK);
        kl_rng_t rng;
        kl_rng_seed(&rng, 42 + (uint64_t)o);
        int distinct = 0;
        uint8_t prev[16] = {0};
        for (int i = 0; i < 20; i++) {
            kl_trace_t *tr = NULL, *tt = NULL, *tp = NULL;
            kl_sched_t *s = NULL, *s2 = NULL, *s3 = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", ops[o], err);
            kl_kernel_t k1, k2, k3;
            assert_int_equal(
                kl_codegen_c(s, kl_space_target(sp), "f", &k1, err), KL_OK);
            char *txt = kl_trace_to_text(tr);
            assert_int_equal(kl_trace_from_text(txt, &tt, err), KL_OK);
            uint8_t *buf;
            size_t len;
            kl_trace_to_proto(tr, &buf, &len);
            assert_int_equal(kl_trace_from_proto(buf, len, &tp, err), KL_OK);
            assert_int_equal(kl_space_replay(sp, tt, &s2, err), KL_OK);
            assert_int_equal(kl_space_replay(sp, tp, &s3, err), KL_OK);
            assert_int_equal(
                kl_codegen_c(s2, kl_space_target(sp), "f", &k2, err), KL_OK);
            assert_int_equal(
                kl_codegen_c(s3, kl_space_target(sp), "f", &k3, err), KL_OK);
            assert_string_equal(k1.source, k2.source);
            assert_string_equal(k1.source, k3.source);
            /* Without its decisions the trace samples fresh ones. */
            kl_trace_t *fresh = kl_trace_clone(tr), *ex = NULL;
            kl_trace_strip_decisions(fresh);
            assert_int_equal(kl_trace_ndecisions(fresh), 0);
            for (int tries = 0; tries < 1000 && !ex; tries++) {
                kl_sched_t *sf = NULL;
                bool rej = false;
                assert_int_equal(kl_sched_create(&sf, w, err), KL_OK);
                if (kl_trace_apply(fresh, sf, &rng, &ex, &rej, err) == KL_OK &&
                    !rej)
                    assert_true(kl_trace_ndecisions(ex) > 0);
                kl_sched_destroy(&sf);
            }
            assert_non_null(ex);
            kl_trace_free(&ex);
            kl_trace_free(&fresh);
            uint8_t h[16];
            kl_trace_hash(tr, h);
            distinct += memcmp(h, prev, 16) != 0;
            memcpy(prev, h, 16);
            kl_kernel_free(&k1);
            kl_kernel_free(&k2);
            kl_kernel_free(&k3);
            free(buf);
            free(txt);
            kl_sched_destroy(&s);
            kl_sched_destroy(&s2);
            kl_sched_destroy(&s3);
            kl_trace_free(&tr);
            kl_trace_free(&tt);
            kl_trace_free(&tp);
        }
        assert_true(distinct >= 15);
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
}

/* The iterator of s's vectorized loop, or -1. */
static int s_vec_iter_of(const kl_sched_t *s)
{
    for (int p = 0; p < kl_sched_nloops(s); p++)
        if (kl_sched_loop(s, p)->kind == KL_LOOP_VECTORIZE)
            return kl_sched_loop(s, p)->parts[0].iter;
    return -1;
}

/* A conv2d whose 14-wide rows do not fill 16-lane vectors also gets
 * schedules vectorized over its output channels (f, K in the spec), and so
 * does a stride-2 one whose 32-wide rows do (they read every other input
 * column); never over its output rows y, though 32 rows fill vectors
 * too. A matmul whose rows fill them never does. */
static void test_cpu_channel_vectors(void **state)
{
    (void)state;
    const char *ops[] = {"conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 pad=1",
                         "matmul M=64 N=64 K=64",
                         "conv2d N=1 C=3 H=64 W=64 K=16 R=7 S=7 stride=2 "
                         "pad=3"};
    const char *want[] = {"f", "j", "f"};
    for (int o = 0; o < 3; o++) {
        kl_workload_t *w = fx_wl(ops[o]);
        kl_space_t *sp = NULL;
        char err[KL_ERRMSG_LEN];
        assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                         KL_OK);
        kl_rng_t rng;
        kl_rng_seed(&rng, 7);
        int other = 0, chan = 0, n = 40;
        for (int i = 0; i < n; i++) {
            kl_trace_t *tr = NULL;
            kl_sched_t *s = NULL;
            if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
                fail_msg("%s: %s", ops[o], err);
            int it = s_vec_iter_of(s);
            assert_true(it >= 0);
            if (kl_sched_winograd_m(s))
                ; /* the derived product's iterators */
            else if (!strcmp(w->iters[it].name, want[o]))
                chan++;
            else if (!strcmp(w->iters[it].name, "y"))
                fail_msg("%s: vectorized over its output rows", ops[o]);
            else
                other++;
            kl_sched_destroy(&s);
            kl_trace_free(&tr);
        }
        /* Of the direct ones (p 0.4 for a 3x3 convolution). */
        if (o != 1 && (chan < (chan + other) / 3 || other < 1))
            fail_msg("%s: %d of %d direct ones vectorized over %s", ops[o],
                     chan, chan + other, want[o]);
        if (o == 1)
            assert_int_equal(chan, n);
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
}

/* A convolution with 7x7 outputs (ResNet's last stage, or a stride-2
 * layer leading to it): its channel-vector schedules may unroll a row
 * tile of all 7 output rows or columns over the channel vectors, the
 * register tile such a layer needs (it was 1 row: 7 is prime and the
 * tiles of 4 did not divide it). */
static void test_cpu_row_tile_of_seven(void **state)
{
    (void)state;
    kl_workload_t *w =
        fx_wl("conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 stride=2 pad=1");
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                     KL_OK);
    kl_rng_t rng;
    kl_rng_seed(&rng, 3);
    int chan = 0, seven = 0;
    for (int i = 0; i < 60; i++) {
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        if (kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err))
            fail_msg("%s", err);
        int it = s_vec_iter_of(s);
        if (it >= 0 && !strcmp(w->iters[it].name, "f")) {
            chan++;
            for (int p = 0; p < kl_sched_nloops(s); p++) {
                const kl_loop_t *l = kl_sched_loop(s, p);
                const char *nm = w->iters[l->parts[0].iter].name;
                if (l->kind == KL_LOOP_UNROLL && l->extent == 7 &&
                    l->nparts == 1 && (!strcmp(nm, "y") || !strcmp(nm, "x")))
                    seven++;
            }
        }
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
    }
    if (chan < 10 || seven < 2)
        fail_msg("%d channel-vector schedules, %d with a 7-row tile", chan,
                 seven);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
}

/* Packed buffers are bounded at 8 MB when made on every call, but a
 * constant packed once (ENTRY_prepare) may be larger: the weights of a
 * 512-channel 3x3 conv2d are 9.4 MB, and packing them on every call made
 * the same schedule twice as slow. */
static void test_cpu_pack_limits(void **state)
{
    (void)state;
    static const struct {
        const char *op, *trace, *err;
    } cases[] = {
        {"conv2d N=1 C=512 H=7 W=7 K=512 R=3 S=3 pad=1",
         "l0, l1, l2, l3, l4, l5, l6 = get_loops()\n"
         "b7 = cache_read(tensor=\"W\", scope=\"packed\")",
         NULL},
        {"matmul M=64 N=2048 K=2048",
         "l0, l1, l2 = get_loops()\n"
         "b3 = cache_read(tensor=\"B\", scope=\"packed\")",
         "packed buffer of B needs 16777216 bytes (at most 8388608 per "
         "call)"},
    };
    for (int c = 0; c < 2; c++) {
        kl_workload_t *w = fx_wl(cases[c].op);
        kl_space_t *sp = NULL;
        kl_trace_t *tr = NULL;
        kl_sched_t *s = NULL;
        char err[KL_ERRMSG_LEN] = "";
        assert_int_equal(kl_space_for_target("cpu/x86_64-avx512", w, &sp, err),
                         KL_OK);
        assert_int_equal(kl_trace_from_text(cases[c].trace, &tr, err), KL_OK);
        int rc = kl_space_replay(sp, tr, &s, err);
        if (!cases[c].err) {
            if (rc)
                fail_msg("%s: %s", cases[c].op, err);
            kl_kernel_t k;
            assert_int_equal(kl_codegen_c(s, kl_space_target(sp), "f", &k, err),
                             KL_OK);
            assert_true(k.prepare);
            kl_kernel_free(&k);
        } else {
            assert_int_not_equal(rc, KL_OK);
            if (!strstr(err, cases[c].err))
                fail_msg("%s: %s", cases[c].op, err);
        }
        kl_sched_destroy(&s);
        kl_trace_free(&tr);
        kl_space_destroy(&sp);
        kl_workload_free(&w);
    }
}

static void test_cuda_hook(void **state)
{
    (void)state;
    kl_workload_t *w = fx_wl("matmul M=64 N=64 K=64");
    kl_space_t *sp = NULL;
    char err[KL_ERRMSG_LEN];
    int rc = kl_space_for_target("cuda/sm_90", w, &sp, err);
    /* Either the CUDA rules are built in, or the hook says they are not. */
    if (rc) {
        assert_int_equal(rc, KL_ERR_UNSUPPORTED);
        assert_non_null(strstr(err, "CUDA"));
    } else {
        kl_space_destroy(&sp);
    }
    assert_int_equal(kl_space_for_target("tpu/v5", w, &sp, err), KL_ERR_INVAL);
    kl_workload_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predicates),
        cmocka_unit_test(test_reject_if),
        cmocka_unit_test(test_if_else),
        cmocka_unit_test(test_text_proto_round_trip),
        cmocka_unit_test(test_perfect_tile_and_decisions),
        cmocka_unit_test(test_perfect_tile_whole),
        cmocka_unit_test(test_cpu_whole_rows),
        cmocka_unit_test(test_cpu_space_replay),
        cmocka_unit_test(test_cpu_channel_vectors),
        cmocka_unit_test(test_cpu_row_tile_of_seven),
        cmocka_unit_test(test_cpu_pack_limits),
        cmocka_unit_test(test_cuda_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
