/* kl_report_int.h - the report's data, shared by kl_report.c (loading)
 * and kl_report_html.c (page and plots). Not a public header. */
#ifndef KL_REPORT_INT_H
#define KL_REPORT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kl_record.h"

typedef struct {
    char *name;
    char *target; /* its records' target: the report's, refined by this
                   * CPU's features for an integer task given "cpu" */
    uint8_t key[16];
    double flop, weight;
    size_t nrec, nok, cap;
    uint64_t *time_us; /* commit time of each record, in seq order */
    double *lat_s;     /* median of each record; NAN when not valid */
    double best_s;     /* INFINITY when no valid record */
    /* Records of the target left out: simulated ones (of a real target),
     * unverified ones, and measurements of the other condition. */
    size_t nsim, nunverified, nother;
} krep_task_t;

struct kl_report_s {
    char *target, *source, *title;
    kl_cond_t cond; /* the measurement condition shown */
    bool weighted;  /* weights from a model */
    krep_task_t *tasks;
    int n;
};

#endif
