/* kl_report.h - what a record store says about a tuning job, as one
 * self-contained HTML page with inline SVG plots (`kiln report`).
 *
 * A report covers one target and a set of tasks:
 *  - with a model (kl_model_load: a built-in or a graph file), the model's
 *    tasks with their weights, in the model's order, whether the store has
 *    records of them or not;
 *  - without one, every workload of the store that has at least one
 *    record on the target, weight 1 each.
 * Only records whose target is exactly the report's target are used. The
 * target "cpu" means this machine's exact CPU target (kl_report_target).
 * Of those, only measurements of the report's condition (kl_record.h: warm
 * unless asked for cold) are trials and latencies: simulated records of a
 * real target, unverified ones (skip_verify) and those of the other
 * condition are counted apart and the page says how many it left out. A
 * simulated target ("sim/...") can be reported on; its page says that its
 * latencies are synthetic.
 *
 * Per task the page shows the best GFLOP/s so far against the trials
 * (records in commit order, failures included) and against the wall time
 * since the task's first record, and the distribution of the medians of
 * its valid records (a histogram over logarithmic bins). For the whole
 * job it shows the weighted latency sum(weight x best latency so far)
 * against the wall time since the first record of any task: the curve
 * starts when every task has a valid record, and the plot says so (and
 * says which tasks have none when the curve cannot start).
 *
 * The page needs nothing from the network: no script, no external style
 * or font. Every SVG is well-formed XML with its own xmlns, and the page
 * as a whole parses as XML too.
 */
#ifndef KL_REPORT_H
#define KL_REPORT_H

#include <stdint.h>

#include "kl_record.h"
#include "kl_store.h"

typedef struct {
    const char *target; /* "cpu" (this machine), "cpu/x86_64-avx2", ... */
    const char *model;  /* NULL: every workload with records, weight 1 */
    const char *source; /* shown in the page's header (e.g. the store dir) */
    kl_cond_t cond;     /* measurement condition; 0 is warm */
    /* The model's inputs resized (kl_model_opts_t); 0 keeps its own. */
    int64_t batch, seq;
} kl_report_cfg_t;

typedef struct kl_report_s kl_report_t;

/* The exact target string a user's target means: "cpu" becomes this
 * machine's CPU target as kiln-agent reports it (kl_cpu_target of
 * kl_export.h: "cpu/x86_64-avx512" with AVX-512F, "cpu/x86_64-avx2" with
 * AVX2 and FMA, else "cpu/x86_64"); anything else is returned as is.
 * Static storage or `target` itself. */
const char *kl_report_target(const char *target);

/* Reads the tasks and their records from store. Errors: a model that
 * does not load (its own error), a store error, and KL_ERR_NOTFOUND when
 * there is no task at all (no model given and no record on the target;
 * the message names the target and lists the targets the store has).
 * *out is the caller's (kl_report_destroy). */
int kl_report_load(kl_report_t **out, kl_store_t *store,
                   const kl_report_cfg_t *cfg, char *err);
void kl_report_destroy(kl_report_t **self_p);

/* Number of tasks, and records of task i (on the target). */
int kl_report_ntasks(const kl_report_t *r);
size_t kl_report_nrecords(const kl_report_t *r, int i);
/* The exact target of the report. */
const char *kl_report_exact_target(const kl_report_t *r);
/* Records of the target that the report left out, over all tasks:
 * simulated (of a real target), unverified, and of the other condition. */
void kl_report_left_out(const kl_report_t *r, size_t *sim, size_t *unverified,
                        size_t *other_cond);

/* The page (heap string): a summary table, the weighted-latency plot (one
 * SVG, id "weighted") and one SVG per task (id "task-I", three plots). */
char *kl_report_html(const kl_report_t *r);
/* The SVG of task i (the same as in the page) and of the weighted
 * latency; heap strings. */
char *kl_report_task_svg(const kl_report_t *r, int i);
char *kl_report_weighted_svg(const kl_report_t *r);

/* Writes weighted.svg and task-I.svg (I = 0, 1, ...) into dir (created
 * when missing). KL_ERR_IO naming the file that cannot be written. */
int kl_report_write_svgs(const kl_report_t *r, const char *dir, char *err);

#endif
