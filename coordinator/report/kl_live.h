/* kl_live.h - the live view of `kiln tune` on a stream (stderr).
 *
 * On a terminal the view is one block of lines that is redrawn in place
 * (ANSI: cursor up over the previous block, each line cleared and
 * written again, the rest of the screen cleared), with a progress bar;
 * lines wider than the terminal are cut so that none wraps.
 * On anything else (a log file, a pipe) each update is one plain line,
 * and updates come at most once per `min_interval_s` (the last one, with
 * done set, always comes).
 *
 * The view only writes to its stream; it never reads from it. A view is
 * used by one thread.
 */
#ifndef KL_LIVE_H
#define KL_LIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kl_tasksched.h"
#include "kl_job.h"

typedef enum {
    KL_LIVE_AUTO = 0, /* a block when isatty(fileno(f)), else lines */
    KL_LIVE_BLOCK,    /* always the redrawn block */
    KL_LIVE_LINES,    /* always plain lines */
} kl_live_mode;

typedef struct kl_live_s kl_live_t;

/* A view on f (borrowed; must outlive the view). min_interval_s: at most
 * one plain line per this many seconds (<= 0: 2 s); blocks are redrawn at
 * most 5 times a second. Never fails. */
kl_live_t *kl_live_new(FILE *f, kl_live_mode mode, double min_interval_s);
/* Leaves the last block on screen and frees the view. Safe on NULL. */
void kl_live_destroy(kl_live_t **self_p);

/* Whether the view redraws a block (false: plain lines). */
bool kl_live_is_block(const kl_live_t *l);

/* Shows the progress of one task (kl_job_progress of a job's task):
 * name (may be NULL), trials of the cap, valid, restored and in-flight
 * counts, the best speed and latency, elapsed time and ETA. */
void kl_live_tune(kl_live_t *l, const char *name, const kl_job_progress_t *p);

/* Shows the task table of a model job: a heading line (e.g. "round 12:
 * task 3 (conv2d_...)"; may be NULL), the trials of the job against its
 * global cap with a progress bar, and kl_ts_print_table of the rows. In
 * plain mode only the heading and a one-line total are written. done:
 * the last update (never skipped). */
void kl_live_tasks(kl_live_t *l, const char *heading, const kl_ts_row_t *rows,
                   int n, int64_t total_trials, int64_t cap, bool done);

/* Shows any text (one or more lines; a final newline is optional): the
 * general form of the two above. force: do not skip this update. */
void kl_live_text(kl_live_t *l, const char *text, bool force);

/* A progress bar of `width` cells for done of total into buf (size >=
 * width + 8): "[#####.....]  50%". total <= 0 gives an empty bar. */
void kl_live_bar(char *buf, size_t size, int width, int64_t done,
                 int64_t total);

/* A duration of s seconds for a person into buf: "42s" under two minutes,
 * "12m05s" under two hours, "3.5h" after; "?" when s is negative or not
 * finite (an ETA not known yet). The view's elapsed time and ETA. */
void kl_live_time(double s, char *buf, size_t n);

#endif
