/* kl_port.h - the one interface between a tuning job and its fleet.
 *
 * A job (kl_job.h) sends batches of candidates and receives their results
 * through a port and nothing else, so that the fleets behind it are
 * interchangeable: the embedded local fleet and `--listen` are both a
 * kl_dispatch_t (kl_port_dispatch below); a head node shared by several
 * jobs is another implementation of the same four calls.
 *
 * The calls have kl_dispatch.h's contracts (the batch and result types are
 * dispatch's): submit queues a batch and gives its request id; recv waits
 * up to timeout_ms for one result (KL_ERR_TIMEOUT when none came); cancel
 * drops what is queued of a request and tells the agents that hold the
 * rest (their answers still arrive); agents counts the live agents that
 * can run target. A port is used by one thread at a time.
 */
#ifndef KL_PORT_H
#define KL_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_dispatch.h"

typedef struct {
    void *ctx;
    int (*submit)(void *ctx, const kl_dispatch_batch_t *batch,
                  uint64_t *request_id, char *err);
    int (*recv)(void *ctx, kl_dispatch_result_t **out, int timeout_ms,
                char *err);
    int (*cancel)(void *ctx, uint64_t request_id, char *err);
    int (*agents)(void *ctx, const char *target, size_t *n, char *err);
    /* Optional (NULL: none). Where the fleet is, for messages ("tcp://..."),
     * and its counters, for the metrics. */
    const char *(*where)(void *ctx);
    int (*stats)(void *ctx, kl_dispatch_stats_t *out, char *err);
} kl_port_t;

/* The port of a dispatch (borrowed: d must outlive the port's use). */
kl_port_t kl_port_dispatch(kl_dispatch_t *d);

/* The calls, with the optional ones answered when a port lacks them:
 * where "the fleet", stats KL_ERR_UNSUPPORTED. */
int kl_port_submit(const kl_port_t *p, const kl_dispatch_batch_t *batch,
                   uint64_t *request_id, char *err);
int kl_port_recv(const kl_port_t *p, kl_dispatch_result_t **out, int timeout_ms,
                 char *err);
int kl_port_cancel(const kl_port_t *p, uint64_t request_id, char *err);
int kl_port_agents(const kl_port_t *p, const char *target, size_t *n,
                   char *err);
const char *kl_port_where(const kl_port_t *p);
int kl_port_stats(const kl_port_t *p, kl_dispatch_stats_t *out, char *err);

#endif
