/* kiln tune - tunes one operator (--op) or every task of a model (--model)
 * on a local fleet (agents started here) or on remote agents (--listen),
 * recording every result in the store (--db) and continuing from what the
 * store holds. Both are one tuning job (coordinator/tune/kl_job.h) of one
 * task or many; this file only parses options, starts the fleet and
 * prints. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_fleet_coord.h"
#include "kiln_cmds.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_eval.h"
#include "kl_job.h"
#include "kl_live.h"
#include "kl_log.h"
#include "kl_metrics.h"
#include "kl_model.h"
#include "kl_opt.h"
#include "kl_port_fleet.h"
#include "kl_record.h"
#include "kl_space.h"
#include "kl_store.h"
#include "kl_target.h"
#include "kl_util.h"

/* Trials per task when no cap is given: the cap of --op, and per task of
 * a model's global cap. */
#define DEF_TRIALS_PER_TASK 1000

static const kl_opt_t s_opts[] = {
    {"op", KL_OPT_STR, NULL, KL_NOBOUNDS, "TEXT",
     "one workload: \"matmul M=1024 N=1024 K=1024\", \"conv2d N=1 C=64 ...\" "
     "or an expression (kiln's workload language)"},
    {"model", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME|FILE",
     "every task of a built-in model (resnet18, resnet50, mobilenet_v2, "
     "bert_base) or of a graph or ONNX file (docs/models.md)"},
    {"precision", KL_OPT_STR, "f32", KL_NOBOUNDS, "f32|bf16",
     "--model: the precision the model computes in; bf16 tunes its conv2d, "
     "dense, matmul and batch_matmul tasks in their in=bf16 forms "
     "(docs/cli.md)"},
    KILN_DIM_OPTS,
    {"condition", KL_OPT_STR, NULL, KL_NOBOUNDS, "warm|cold|auto",
     "measurement condition (docs/cli.md): warm, the evaluator options as "
     "given; cold, one run on flushed caches a sample (--min-repeat-ms 0) "
     "for every task; auto (--model), cold for the tasks whose layers' "
     "parameters take 1 MiB or more, warm for the others (default: as the "
     "evaluator options say)"},
    {"max-trials-per-task", KL_OPT_INT, NULL, 0, 1e12, "N",
     "hard cap on each task, records already in --db included; a failed "
     "candidate counts as a trial (default: " KL_OPT_DEF(
         DEF_TRIALS_PER_TASK) " with --op, none beyond the global cap with "
                              "--model)"},
    {"max-trials-global", KL_OPT_INT, NULL, 1, 1e12, "N",
     "--model: hard cap on the trials of the whole job, records already in "
     "--db included (default: " KL_OPT_DEF(
         DEF_TRIALS_PER_TASK) " x the number of tasks)"},
    KL_JOB_OPTS KL_SEARCH_OPTS KL_TS_OPTS KL_EVAL_OPTS{
        "source-out", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
        "--op: write the best kernel's source here (default: "
        "DB/sources/NAME.TARGET.c, or ./NAME.TARGET.c without --db; .cu for "
        "a cuda target)"},
    {"summary-json", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "--model: also write the summary as JSON here (after every round)"},
    KL_FLEET_OPTS{
        "simulate", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
        "local agents answer with synthetic latencies (for trying kiln out); "
        "the tasks' target becomes sim/TARGET, so that their records are "
        "never taken for measurements of TARGET"},
    {"quiet", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "no progress lines or tables, only the result"},
    KL_HEAD_OPTS KL_METRICS_OPTS,
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln tune (--op TEXT | --model NAME|FILE [--precision f32|bf16]\n"
    "                  [--batch N] [--seq N])\n"
    "                 [--condition warm|cold|auto]\n"
    "                 [--target cpu]\n"
    "                 [--max-trials-per-task N] [--max-trials-global N] "
    "[--trials-per-iter K]\n"
    "                 [--strategy evolutionary|replay] [--scheduler "
    "gradient|round-robin]\n"
    "                 [--db DIR] [fleet options]\n"
    "Tunes one operator (--op) or every task of a model (--model): proposes "
    "schedules,\nmeasures them on kiln agents, records every result. Caps are "
    "hard: the last batch\nis cut to fit, failed candidates count as trials, "
    "records in --db count too. A\ntask is done at its cap, when its design "
    "space is exhausted or when it stopped\nimproving (--early-stop-rounds); "
    "the job ends when every task is done or the\nglobal cap is reached. "
    "--op prints the best latency, its trace and where its\nsource is; "
    "--model prints the task table.\n"
    "Exit codes: 0 ok, 1 job failed, 2 usage, 69 no CUDA device for a "
    "cuda target's local agents.";

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

typedef struct {
    kl_opts_t *o;
    kl_model_t *model; /* --model */
    kl_store_t *store;
    kl_fleet_t *fleet;
    kl_dispatch_t *disp;
    kl_port_t port;
    kl_port_fleet_t *head; /* --fleet */
    kl_job_t *job;
    int *mtask;           /* --model: the model's task of each job task */
    kl_model_cond_t cond; /* --condition; warm when not given */
    int64_t global;
    double last_print;
    kl_metrics_t *metrics; /* --http */
    kl_live_t *live;
} cmd_t;

/* ---- printing ------------------------------------------------------------ */

/* --op: the progress of the task, at most once a second (and at the end).
 * On a terminal it is one block redrawn in place (kl_live.h). */
static void s_op_progress(cmd_t *c, bool done)
{
    double now = kl_now_s();
    if (kl_opts_bool(c->o, "quiet") || (!done && now - c->last_print < 1))
        return;
    c->last_print = now;
    kl_job_progress_t p;
    kl_job_progress(c->job, 0, &p);
    p.done = p.done || done;
    if (!c->live)
        c->live = kl_live_new(stderr, KL_LIVE_AUTO, 0);
    if (kl_live_is_block(c->live)) {
        kl_live_tune(c->live, kl_task_workload(kl_job_task(c->job, 0))->name,
                     &p);
        return;
    }
    char el[32], eta[32], best[64] = "no valid candidate yet";
    kl_live_time(p.elapsed_s, el, sizeof el);
    kl_live_time(p.eta_s, eta, sizeof eta);
    if (isfinite(p.best_s))
        snprintf(best, sizeof best, "best %.2f GFLOP/s (%.2f us)", p.gflops,
                 p.best_s * 1e6);
    fprintf(stderr,
            "kiln tune: trials %lld/%lld (%lld valid, %lld restored, %lld "
            "in flight)  %s  elapsed %s  ETA %s\n",
            (long long)p.trials, (long long)p.cap, (long long)p.valid,
            (long long)p.restored, (long long)p.in_flight, best, el,
            p.done ? "-" : eta);
}

/* --model: the task table, to f and to --summary-json. */
static void s_summary(cmd_t *c, FILE *f)
{
    const kl_ts_t *ts = kl_job_tasksched(c->job);
    int n = kl_job_ntasks(c->job);
    kl_ts_row_t *rows = kl_xcalloc((size_t)n, sizeof(kl_ts_row_t));
    kl_ts_rows(ts, rows);
    kl_ts_print_table(f, rows, n);
    const char *path = kl_opts_str(c->o, "summary-json");
    FILE *jf = path ? fopen(path, "w") : NULL;
    if (path && !jf)
        kl_warn("--summary-json %s: cannot write it", path);
    if (jf) {
        kl_ts_print_json(jf, rows, n);
        fclose(jf);
    }
    free(rows);
}

/* --model: after every round, the round line and the table; on a terminal
 * one block redrawn in place with a progress bar (kl_live.h). */
static void s_model_round(cmd_t *c, int round, int i)
{
    if (kl_opts_bool(c->o, "quiet"))
        return;
    const char *name = kl_task_workload(kl_job_task(c->job, i))->name;
    const kl_ts_t *ts = kl_job_tasksched(c->job);
    if (!c->live)
        c->live = kl_live_new(stderr, KL_LIVE_AUTO, 0);
    if (!kl_live_is_block(c->live)) {
        fprintf(stderr,
                "\nkiln tune: round %d: task %d (%s), %lld trials; "
                "%lld of %lld in all\n",
                round, i, name, (long long)kl_ts_trials(ts, i),
                (long long)kl_ts_total_trials(ts), (long long)c->global);
        s_summary(c, stderr);
        return;
    }
    FILE *sink = fopen("/dev/null", "w"); /* --summary-json still written */
    if (sink) {
        s_summary(c, sink);
        fclose(sink);
    }
    int n = kl_job_ntasks(c->job);
    kl_ts_row_t *rows = kl_xcalloc((size_t)n, sizeof(kl_ts_row_t));
    kl_ts_rows(ts, rows);
    char *head = kl_xasprintf("kiln tune: model %s, round %d: task %d (%s)",
                              kl_model_name(c->model), round, i, name);
    kl_live_tasks(c->live, head, rows, n, kl_ts_total_trials(ts), c->global,
                  kl_ts_finished(ts));
    free(head);
    free(rows);
}

static void s_event(void *ctx, kl_job_t *job, const kl_job_event_t *ev)
{
    cmd_t *c = ctx;
    (void)job;
    kl_metrics_update(c->metrics, &c->port, c->job, false, false);
    if (!c->model && ev->kind != KL_JOB_ROUND)
        s_op_progress(c, ev->kind == KL_JOB_END);
    else if (c->model && ev->kind == KL_JOB_ROUND)
        s_model_round(c, ev->round, ev->task);
}

/* Where the best source of --op goes; heap string. */
static char *s_source_path(const cmd_t *c)
{
    const char *given = kl_opts_str(c->o, "source-out");
    if (given)
        return kl_xstrdup(given);
    const kl_task_t *t = kl_job_task(c->job, 0);
    const kl_workload_t *w = kl_task_workload(t);
    kl_target_kind kind = KL_TARGET_CPU;
    kl_target_kind_of(kl_task_target(t), &kind);
    const char *ext = kl_codegen_source_ext(kind);
    char *tg = kl_xstrdup(kl_task_target(t));
    for (char *p = tg; *p; p++)
        if (*p == '/')
            *p = '_';
    const char *db = kl_opts_str(c->o, "db");
    char *path = db ? kl_xasprintf("%s/sources/%s.%s.%s", db, w->name, tg, ext)
                    : kl_xasprintf("%s.%s.%s", w->name, tg, ext);
    free(tg);
    return path;
}

/* --op: the result of the one task, its trace, its source written. */
static int s_op_report(cmd_t *c, char *err)
{
    kl_task_t *t = kl_job_task(c->job, 0);
    const kl_workload_t *w = kl_task_workload(t);
    const kl_trace_t *best = kl_task_best_trace(t);
    printf("workload   %s (%s)\n", w->name, kl_task_target(t));
    printf("trials     %lld (%lld valid, %lld restored from the store)%s\n",
           (long long)kl_task_trials(t), (long long)kl_task_valid(t),
           (long long)kl_task_restored(t),
           kl_task_exhausted(t) ? "; design space exhausted" : "");
    if (!best) {
        printf("best       none: no candidate was verified\n");
        return KL_OK;
    }
    double b = kl_task_best_s(t);
    printf("best       %.3f us, %.2f GFLOP/s (record seq %llu)%s\n", b * 1e6,
           w->flop / b / 1e9, (unsigned long long)kl_task_best_seq(t),
           kl_target_is_sim(kl_task_target(t)) ? ", simulated" : "");
    char *text = kl_trace_to_text(best);
    printf("trace\n%s", text);
    if (text[0] && text[strlen(text) - 1] != '\n')
        printf("\n");
    free(text);
    char *src = NULL, *path = s_source_path(c);
    int rc = kl_task_source(t, best, &src, err);
    if (!rc && kl_opts_str(c->o, "db") && !kl_opts_given(c->o, "source-out")) {
        char *dir = kl_xasprintf("%s/sources", kl_opts_str(c->o, "db"));
        rc = kl_mkdirs(dir, err);
        free(dir);
    }
    if (!rc)
        rc = kl_write_file(path, src, strlen(src), err);
    if (!rc)
        printf("source     %s\n", path);
    free(src);
    free(path);
    fflush(stdout);
    return rc;
}

static void s_warn_unreached(cmd_t *c)
{
    const kl_ts_t *ts = kl_job_tasksched(c->job);
    int k = kl_ts_unreached(ts, NULL, 0);
    if (k == 0)
        return;
    int *idx = kl_xcalloc((size_t)k, sizeof(int));
    kl_ts_unreached(ts, idx, k);
    kl_buf_t b = {0};
    for (int i = 0; i < k; i++)
        kl_buf_printf(&b, "%s%d (%s)", i ? ", " : "", idx[i],
                      kl_model_task(c->model, c->mtask[idx[i]])->w->name);
    kl_warn("the global cap (%lld) is smaller than what one round of every "
            "task needs; %d task%s may get no trial at all: %s",
            (long long)c->global, k, k > 1 ? "s" : "", b.data);
    kl_buf_free(&b);
    free(idx);
}

/* ---- the job ------------------------------------------------------------- */

static bool s_alive(void *ctx)
{
    cmd_t *c = ctx;
    return !c->fleet || kl_fleet_running(c->fleet) > 0 ||
           kl_opts_str(c->o, "listen") || c->head;
}

/* --model: whether the target's design space takes model task i; a task
 * it refuses (KL_ERR_UNSUPPORTED: a depthwise qconv2d, ...) is skipped with
 * a warning that names it and the reason: the model's other tasks are
 * tuned, and `kiln export --fallback naive` runs the skipped one. Any
 * other error is kl_job_new's to report. */
static bool s_tunable(cmd_t *c, int i, const char *target)
{
    const kl_model_task_t *mt = kl_model_task(c->model, i);
    char err[KL_ERRMSG_LEN];
    kl_space_t *sp = NULL;
    const char *t = kl_target_resolve_for(target, kl_workload_cpu_feats(mt->w));
    int rc = kl_space_for_target(t, mt->w, &sp, err);
    kl_space_destroy(&sp);
    if (rc != KL_ERR_UNSUPPORTED)
        return true;
    kl_warn("task %d (%s) skipped: no design space: %s; `kiln export "
            "--fallback naive` runs it",
            i, mt->w->name, err);
    return false;
}

/* --model --condition auto: which tasks are measured cold. */
static void s_print_cold(const cmd_t *c)
{
    if (c->cond != KL_MODEL_COND_AUTO)
        return;
    kl_buf_t b = {0};
    int n = kl_job_ntasks(c->job), ncold = 0;
    for (int i = 0; i < n; i++) {
        const kl_model_task_t *mt = kl_model_task(c->model, c->mtask[i]);
        if (!kl_model_task_cold(mt, c->cond))
            continue;
        kl_buf_printf(&b, "%s%s (%.1f MiB)", ncold++ ? ", " : "", mt->w->name,
                      (double)mt->param_bytes / (1 << 20));
    }
    fprintf(stderr,
            "kiln tune: --condition auto: %d of %d tasks measured cold "
            "(parameters of 1 MiB or more)%s%s\n",
            ncold, n, ncold ? ": " : "", ncold ? b.data : "");
    kl_buf_free(&b);
}

/* The job's tasks and caps from --op or --model. */
static int s_job(cmd_t *c, char *err)
{
    kl_opts_t *o = c->o;
    int n = 1;
    kl_job_task_t one = {kl_opts_str(o, "op"), 1.0,
                         c->cond == KL_MODEL_COND_COLD},
                  *tasks = &one;
    if (c->model) {
        const char *target = kl_opts_str(o, "target");
        int nm = kl_model_ntasks(c->model);
        tasks = kl_xcalloc((size_t)nm, sizeof *tasks);
        c->mtask = kl_xcalloc((size_t)nm, sizeof *c->mtask);
        n = 0;
        for (int i = 0; i < nm; i++) {
            const kl_model_task_t *mt = kl_model_task(c->model, i);
            if (!s_tunable(c, i, target))
                continue;
            c->mtask[n] = i;
            tasks[n++] = (kl_job_task_t){mt->spec, (double)mt->weight,
                                         kl_model_task_cold(mt, c->cond)};
        }
        if (!n) {
            free(tasks);
            return kl_seterr(err, KL_ERR_UNSUPPORTED,
                             "model %s: no task has a design space on this "
                             "target (the warnings above say why)",
                             kl_model_name(c->model));
        }
    }
    int64_t per = kl_opts_given(o, "max-trials-per-task")
                      ? kl_opts_int(o, "max-trials-per-task")
                  : c->model ? 0
                             : DEF_TRIALS_PER_TASK;
    c->global = c->model ? (kl_opts_given(o, "max-trials-global")
                                ? kl_opts_int(o, "max-trials-global")
                                : DEF_TRIALS_PER_TASK * (int64_t)n)
                         : per;
    kl_job_cfg_t cfg;
    int rc = KL_OK;
    if (!c->model && per < 1)
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "--max-trials-per-task must be >= 1 with --op");
    if (!rc)
        rc = kl_job_cfg_from_opts(o, c->global, c->model ? per : 0, &cfg, err);
    /* Keyed apart (kl_target.h); kl_task_new copies the target and
     * resolves "sim/cpu" per workload (an integer one gets the features
     * of this CPU). */
    char sim[160];
    if (!rc && kl_opts_bool(o, "simulate")) {
        const char *t = cfg.task.target ? cfg.task.target : "cpu";
        snprintf(sim, sizeof sim, "%s%s", kl_target_is_sim(t) ? "" : "sim/", t);
        cfg.task.target = sim;
    }
    if (!rc)
        rc = kl_job_new(&c->job, tasks, n, &cfg, c->store, err);
    if (tasks != &one)
        free(tasks);
    return rc;
}

static int s_run(cmd_t *c, char *err)
{
    /* --fleet: the job's port is a head node's (kl_port_fleet.h). */
    int rc = kl_opts_str(c->o, "fleet")
                 ? kl_fleet_head(c->o, "kiln tune",
                                 kl_task_target(kl_job_task(c->job, 0)), NULL,
                                 &c->head, err)
                 : kl_fleet_coordinator(c->o, "kiln tune",
                                        kl_opts_bool(c->o, "simulate"),
                                        &c->fleet, &c->disp, err);
    if (rc)
        return rc;
    c->port = c->head ? kl_port_fleet(c->head) : kl_port_dispatch(c->disp);
    kl_job_run_cfg_t rcfg = {.agent_wait_s =
                                 kl_opts_double(c->o, "agent-wait-s"),
                             .stop = &s_stop,
                             .event = s_event,
                             .ctx = c,
                             .alive = s_alive};
    kl_metrics_update(c->metrics, &c->port, c->job, true, false);
    return kl_job_run(c->job, &c->port, &rcfg, err);
}

static void s_cmd_free(cmd_t *c)
{
    kl_metrics_destroy(&c->metrics);
    kl_job_destroy(&c->job);
    kl_port_fleet_destroy(&c->head);
    kl_dispatch_destroy(&c->disp);
    kl_fleet_destroy(&c->fleet);
    kl_store_close(&c->store);
    kl_model_destroy(&c->model);
    free(c->mtask);
    kl_live_destroy(&c->live);
    kl_opts_free(&c->o);
}

/* --condition into c->cond, and what it excludes: auto with --op (one
 * task is warm or cold), --no-flush with cold or auto (cold is flushed),
 * warm or auto with evaluator options that measure cold (auto's warm
 * tasks would be cold too). */
static int s_parse_cond(cmd_t *c, char *err)
{
    const char *text = kl_opts_str(c->o, "condition");
    c->cond = KL_MODEL_COND_WARM;
    if (!text)
        return KL_OK;
    int rc = kl_model_cond_parse(text, &c->cond, err);
    if (rc)
        return rc;
    Kiln__Evaluator e;
    kl_eval_from_opts(c->o, &e);
    if (c->cond == KL_MODEL_COND_AUTO && kl_opts_str(c->o, "op"))
        return kl_seterr(err, KL_ERR_INVAL,
                         "--condition auto goes with --model (an --op is "
                         "one task: give warm or cold)");
    if (c->cond != KL_MODEL_COND_WARM && !e.flush_cache)
        return kl_seterr(err, KL_ERR_INVAL,
                         "--condition %s measures on flushed caches: it "
                         "excludes --no-flush",
                         text);
    if (c->cond != KL_MODEL_COND_COLD && kl_cond_of(&e) == KL_COND_COLD)
        return kl_seterr(err, KL_ERR_INVAL,
                         "--condition %s, but --min-repeat-ms 0 with the "
                         "flush and --number 1 measures cold (give "
                         "--min-repeat-ms above 0 for warm tasks)",
                         text);
    return KL_OK;
}

/* Parses and checks the arguments; 0, or the exit code of a usage error
 * (messages printed). */
static int s_parse(cmd_t *c, int argc, char **argv, bool *help)
{
    char err[KL_ERRMSG_LEN];
    if (kl_opts_parse(s_opts, argc, argv, &c->o, err) != KL_OK) {
        fprintf(stderr, "kiln tune: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(c->o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        *help = true;
        return 0;
    }
    const char *op = kl_opts_str(c->o, "op"),
               *model = kl_opts_str(c->o, "model");
    int rc = KL_OK;
    if (kl_opts_npos(c->o) > 0)
        rc = kl_seterr(err, KL_ERR_INVAL, "unexpected argument '%s'",
                       kl_opts_pos(c->o, 0));
    else if (!op == !model)
        rc = kl_seterr(err, KL_ERR_INVAL, "%s",
                       op ? "--op and --model exclude each other"
                          : "--op TEXT or --model NAME|FILE is required");
    else if (op && kl_opts_given(c->o, "max-trials-global"))
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "--max-trials-global goes with --model (--op has "
                       "--max-trials-per-task)");
    else if (op && kl_opts_given(c->o, "precision"))
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "--precision goes with --model (an --op takes "
                       "in=bf16 itself)");
    else if (op && (kl_opts_given(c->o, "batch") || kl_opts_given(c->o, "seq")))
        rc = kl_seterr(err, KL_ERR_INVAL,
                       "--batch and --seq go with --model (an --op gives "
                       "its own dimensions)");
    else
        rc = s_parse_cond(c, err);
    if (!rc)
        rc = kl_fleet_head_check(c->o, true, err);
    kl_dtype prec = KL_DT_F32;
    if (!rc && model)
        rc = kl_model_precision(kl_opts_str(c->o, "precision"), &prec, err);
    kl_model_opts_t mo = {.prec = prec,
                          .batch = kl_opts_int(c->o, "batch"),
                          .seq = kl_opts_int(c->o, "seq")};
    if (!rc && model)
        rc = kl_model_load_opts(model, &mo, &c->model, err);
    if (rc) {
        fprintf(stderr, "kiln tune: %s\n%s\n", err, s_usage);
        return 2;
    }
    return 0;
}

int kiln_cmd_tune(int argc, char **argv)
{
    cmd_t c = {0};
    bool help = false;
    int code = s_parse(&c, argc, argv, &help);
    if (code || help) {
        s_cmd_free(&c);
        return code;
    }
    char err[KL_ERRMSG_LEN];
    kl_log_init("kiln tune");
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    const char *db = kl_opts_str(c.o, "db");
    int rc = db ? kl_store_open(&c.store, db, 0, err) : KL_OK;
    if (!rc)
        rc = s_job(&c, err);
    if (!rc) /* --http: live metrics (coordinator/metrics) */
        rc = kl_metrics_from_opts(
            &c.metrics, c.o,
            c.model ? kl_model_name(c.model)
                    : kl_task_workload(kl_job_task(c.job, 0))->name,
            db, err);
    if (rc == KL_ERR_INVAL || rc == KL_ERR_UNSUPPORTED) {
        fprintf(stderr, "kiln tune: %s\n", err);
        s_cmd_free(&c);
        return 2;
    }
    if (!rc && c.model) {
        fprintf(stderr,
                "kiln tune: model %s, %d tasks, %s scheduler, %lld trials "
                "already in the store\n",
                kl_model_name(c.model), kl_job_ntasks(c.job),
                kl_opts_str(c.o, "scheduler"),
                (long long)kl_ts_total_trials(kl_job_tasksched(c.job)));
        s_print_cold(&c);
        s_warn_unreached(&c);
    } else if (!rc && kl_task_restored(kl_job_task(c.job, 0)) > 0) {
        fprintf(stderr,
                "kiln tune: %lld records of %s on %s restored from %s\n",
                (long long)kl_task_restored(kl_job_task(c.job, 0)),
                kl_task_workload(kl_job_task(c.job, 0))->name,
                kl_task_target(kl_job_task(c.job, 0)), db);
    }
    if (!rc && !kl_job_finished(c.job))
        rc = s_run(&c, err);
    if (c.job)
        kl_metrics_update(c.metrics, c.disp || c.head ? &c.port : NULL, c.job,
                          true, true);
    char rerr[KL_ERRMSG_LEN];
    if (c.job && c.model) {
        printf("\n");
        s_summary(&c, stdout);
        fflush(stdout);
    } else if (c.job && s_op_report(&c, rerr)) {
        fprintf(stderr, "kiln tune: %s\n", rerr);
    }
    kl_metrics_linger(c.metrics, c.o, &s_stop);
    /* The local CUDA agents said "no such device" (kiln-agent exits 69). */
    bool no_dev = rc && c.fleet && kl_fleet_exit_code(c.fleet) == 69;
    if (no_dev)
        fprintf(stderr,
                "kiln tune: no CUDA device: the local kiln-agent (--device "
                "cuda:all) exited 69 (no GPU or no driver here: see its "
                "message above); run agents on a GPU machine with --listen\n");
    else if (rc)
        fprintf(stderr, "kiln tune: %s\n", err);
    s_cmd_free(&c);
    return no_dev ? 69 : rc ? 1 : 0;
}
