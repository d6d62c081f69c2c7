/* kl_metrics_int.h - the registry's insides: its HTTP server (kl_http.h,
 * which holds the snapshot served) and what the tuning loop's side keeps
 * between updates. */
#ifndef KL_METRICS_INT_H
#define KL_METRICS_INT_H

#include "kl_http.h"
#include "kl_metrics.h"

struct kl_metrics_s {
    kl_http_t *http;
    char job[64];
    char *store_dir;
    double t0, last_update, min_interval_s;
};

#endif
