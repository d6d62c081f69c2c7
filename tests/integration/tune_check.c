/* tune_check DB [MIN_RECORDS] - checks a store written by `kiln tune`:
 * every (workload, target) has no trace measured twice (distinct
 * trace_hash), every record carries a trace and the job's evaluator (one
 * measurement condition for all), and its best record of that condition
 * is a valid one (kl_record_valid: status OK, verified, not simulated)
 * with the lowest median of the valid records. Prints "records=N ok=M dups=D
 * best_us=X" per group and exits 1 on any violation (or fewer than MIN_RECORDS
 * records). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_store.h"
#include "kl_util.h"

typedef struct {
    uint8_t key[16];
    char target[64];
    size_t n, ok, dups, notrace, noeval, mixed;
    kl_cond_t cond;
    double best;
    uint64_t best_seq;
    uint8_t (*hashes)[16];
} group_t;

static int s_rec(const Kiln__TuningRecord *r, void *arg)
{
    group_t *g = arg;
    if (g->n == 0) {
        memcpy(g->key, r->workload_key.data, 16);
        snprintf(g->target, sizeof g->target, "%s", r->target);
        g->cond = kl_record_cond(r);
    }
    if (memcmp(g->key, r->workload_key.data, 16) ||
        strcmp(g->target, r->target))
        return 2; /* a second group: this checker handles one */
    g->hashes = kl_xrealloc(g->hashes, (g->n + 1) * sizeof *g->hashes);
    memset(g->hashes[g->n], 0, 16);
    if (r->trace_hash.len == 16)
        memcpy(g->hashes[g->n], r->trace_hash.data, 16);
    for (size_t i = 0; i < g->n; i++)
        if (!memcmp(g->hashes[i], g->hashes[g->n], 16))
            g->dups++;
    g->notrace += r->trace.len == 0;
    g->noeval += r->evaluator == NULL;
    g->mixed += kl_record_cond(r) != g->cond;
    g->n++;
    if (kl_record_valid(r)) {
        g->ok++;
        if (r->median_s < g->best) {
            g->best = r->median_s;
            g->best_seq = r->seq;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tune_check DB [MIN_RECORDS]\n");
        return 2;
    }
    size_t min = argc > 2 ? (size_t)atol(argv[2]) : 1;
    char err[KL_ERRMSG_LEN];
    kl_store_t *st = NULL;
    if (kl_store_open(&st, argv[1], KL_STORE_RDONLY, err)) {
        fprintf(stderr, "tune_check: %s\n", err);
        return 1;
    }
    group_t g = {.best = INFINITY};
    int rc = kl_store_foreach_record(st, NULL, NULL, s_rec, &g, err);
    int bad = 0;
    if (rc == 2) {
        fprintf(stderr, "tune_check: more than one (workload, target)\n");
        bad = 1;
    } else if (rc) {
        fprintf(stderr, "tune_check: %s\n", err);
        bad = 1;
    }
    printf("records=%zu ok=%zu dups=%zu best_us=%.3f\n", g.n, g.ok, g.dups,
           g.best * 1e6);
    if (g.n < min || g.dups || g.notrace || g.noeval || g.mixed) {
        fprintf(stderr,
                "tune_check: %zu records (want >= %zu), %zu measured twice, "
                "%zu without a trace, %zu without an evaluator, %zu of "
                "another condition\n",
                g.n, min, g.dups, g.notrace, g.noeval, g.mixed);
        bad = 1;
    }
    Kiln__TuningRecord *b = NULL;
    if (g.n && g.ok) {
        if (kl_store_best(st, g.key, g.target, g.cond, &b, err)) {
            fprintf(stderr, "tune_check: best: %s\n", err);
            bad = 1;
        } else if (!kl_record_valid(b) || b->seq != g.best_seq) {
            fprintf(stderr,
                    "tune_check: best is seq %llu (%s), the fastest verified "
                    "record is seq %llu\n",
                    (unsigned long long)b->seq,
                    b->status == KILN__STATUS__STATUS_OK ? "OK" : "not OK",
                    (unsigned long long)g.best_seq);
            bad = 1;
        }
        if (b)
            kiln__tuning_record__free_unpacked(b, NULL);
    } else if (g.n &&
               kl_store_best(st, g.key, g.target, g.cond, &b, err) == KL_OK) {
        fprintf(stderr, "tune_check: a best record without a verified one\n");
        kiln__tuning_record__free_unpacked(b, NULL);
        bad = 1;
    }
    free(g.hashes);
    kl_store_close(&st);
    return bad;
}
