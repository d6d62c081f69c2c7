/* kl_metrics_int.h - the registry's insides, shared by kl_metrics.c (the
 * tuning loop's side) and kl_metrics_http.c (the server's side). */
#ifndef KL_METRICS_INT_H
#define KL_METRICS_INT_H

#include <pthread.h>

#include "kl_metrics.h"

struct MHD_Daemon;

struct kl_metrics_s {
    /* The snapshot served. Why a mutex and not an inproc ZeroMQ actor
     * (CONVENTIONS.md habit 9): libmicrohttpd calls us back on its own
     * thread and wants the answer from inside the callback, while the
     * tuning loop that owns the sources sits in kl_dispatch_recv for up to
     * 250 ms; a request/reply to it would stall every scrape and add a
     * poll to a loop that is not ours. Publishing instead swaps one
     * pointer under this lock (the loop never waits for a render longer
     * than the render of one page), and the snapshot is the only thing
     * the two threads share. */
    pthread_mutex_t lock;
    kl_metrics_snap_t *snap;
    char job[64];
    char *store_dir;
    double t0, last_update, min_interval_s;
    struct MHD_Daemon *daemon;
    bool started; /* atomic: the daemon runs (messages go to the log) */
    char url[96];
    char log[256]; /* libmicrohttpd's last message while starting */
};

#endif
