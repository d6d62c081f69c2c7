/* kl_search_priv.h - what kl_search.c and kl_evolve.c share. */
#ifndef KL_SEARCH_PRIV_H
#define KL_SEARCH_PRIV_H

#include "kl_costmodel.h"
#include "kl_hashset.h"
#include "kl_search.h"

typedef struct {
    uint8_t *trace; /* kiln.Trace bytes: far smaller than a kl_trace_t */
    size_t len;
    double latency; /* seconds; INFINITY when failed */
} kl_search__meas_t;

struct kl_search_s {
    const kl_space_t *sp;
    kl_search_cfg_t cfg;
    kl_rng_t rng;
    kl_costmodel_t *model;
    uint32_t group;
    kl_search__meas_t *m;
    size_t nm, capm;
    bool sorted;
};

typedef struct {
    kl_search_cand_t *v;
    int n, cap;
    kl_hashset_t set;
} kl_search__pool_t;

void kl_search__pool_free(kl_search__pool_t *p);
/* Takes ownership of trace and sched; drops them when the hash is in the
 * pool already. Returns whether added. */
bool kl_search__pool_add(kl_search__pool_t *p, const kl_space_t *sp,
                         kl_trace_t *tr, kl_sched_t *s);
/* Moves a candidate's trace and schedule out of src into dst. */
void kl_search__move_out(kl_search_cand_t *dst, kl_search_cand_t *src);
/* Draws random valid samples that known() does not know and that are not
 * in avoid (may be NULL) into p until it holds want of them.
 * KL_ERR_EXHAUSTED when the rejection or the known bound was hit (p keeps
 * what it got). */
int kl_search__random(kl_search_t *self, kl_search__pool_t *p, int want,
                      kl_search_known_fn known, void *ctx,
                      const kl_hashset_t *avoid, char *err);
void kl_search__maybe_train(kl_search_t *self);
int kl_search__propose_evolve(kl_search_t *self, int n,
                              kl_search_known_fn known, void *ctx,
                              kl_search_cand_t *out, int *nout, char *err);

#endif
