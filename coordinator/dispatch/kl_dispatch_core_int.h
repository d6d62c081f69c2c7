/* kl_dispatch_core_int.h - the core's tables, shared by kl_dispatch_core.c
 * (requests, queues, credit, results) and kl_dispatch_agents.c (agents,
 * their registration and loss, names bound to keys). Private to the core:
 * everything else goes through kl_dispatch_core.h. */
#ifndef KL_DISPATCH_CORE_INT_H
#define KL_DISPATCH_CORE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_dispatch_core.h"

/* A uint64 -> pointer map: linear probing, backward-shift delete
 * (kl_dispatch_core.c). */
typedef struct {
    uint64_t *keys; /* 0: empty */
    void **vals;
    size_t cap; /* power of two */
    size_t n;
} kl_dcore__map_t;

/* An agent name bound to the CURVE key of the agent that registered it
 * (kl_dcore_bind_names); gone_at is 0 while an agent of that name is
 * live. */
typedef struct {
    char *name;
    char key[41];
    double gone_at;
} kl_dcore__bind_t;

struct kl_dcore_s {
    int retries;
    double compile_s, margin_s;
    double hold_s; /* > 0: names bound to keys this long after */
    kl_dcore__bind_t *binds;
    size_t n_binds, cap_binds;
    kl_dcore__map_t reqs;  /* request id -> kl_dreq_t */
    kl_dcore__map_t peers; /* hash of routing id -> slot + 1 */
    kl_dagent_t *agents;
    size_t n_slots, cap_slots, n_live, rr;
    struct kl_dcore__queue_s *queues; /* kl_dispatch_core.c's */
    size_t n_queues, rr_queue;
    uint32_t *pick_idx;
    size_t pick_cap;
    kl_dispatch_result_t **out;
    size_t n_out, cap_out;
    double *lat;
    uint64_t n_lat;
    size_t queued, in_flight;
    uint64_t agents_gen; /* grows when an agent joins, leaves, is drained */
    kl_dispatch_stats_t st;
    double t_first_submit, t_last_result;
};

/* Sets (or adds) key -> val; the value of key or NULL; removes key. Keys
 * are never 0. */
void kl_dcore__map_put(kl_dcore__map_t *m, uint64_t key, void *val);
void *kl_dcore__map_get(const kl_dcore__map_t *m, uint64_t key);
void kl_dcore__map_del(kl_dcore__map_t *m, uint64_t key);

/* A lost candidate goes back to the front of its queue, or becomes
 * AGENT_LOST once it was sent 1 + retries times (kl_dispatch_core.c). */
void kl_dcore__requeue(kl_dcore_t *c, kl_dreq_t *req, size_t idx,
                       const char *why, double now);
/* Frees what an agent's slot holds and zeroes it (kl_dispatch_agents.c). */
void kl_dcore__agent_clear(kl_dagent_t *a);

#endif
