/* kiln export - replays the best record of every task of a model (or of one
 * operator) on one exact target into source, and builds the model's shared
 * library (coordinator/export/kl_export.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_export.h"
#include "kl_model.h"
#include "kl_opt.h"
#include "kl_store.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"db", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR", "record store to read"},
    {"model", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME|FILE",
     "a built-in model or a graph file: every task is exported"},
    {"op", KL_OPT_STR, NULL, KL_NOBOUNDS, "TEXT",
     "one operator (the form of kiln tune --op) instead of a model"},
    {"target", KL_OPT_STR, "cpu", KL_NOBOUNDS, "TARGET",
     "exact target of the records: cpu (this machine's exact CPU target), "
     "cpu/x86_64-avx512, cuda/sm_90, ...; records of any other target are "
     "never used"},
    {"condition", KL_OPT_STR, "warm", KL_NOBOUNDS, "warm|cold|auto",
     "measurement condition of the records: warm, or cold (caches flushed "
     "before every sample of one run); the two are never compared; auto "
     "(--model): cold for the tasks whose layers' parameters take 1 MiB or "
     "more, warm for the others, as kiln tune --condition auto measured "
     "them"},
    {"out", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR", "output directory"},
    {"fallback", KL_OPT_STR, NULL, KL_NOBOUNDS, "naive",
     "tasks without a record get their reference kernel (one warning "
     "each) instead of failing"},
    {"precision", KL_OPT_STR, "f32", KL_NOBOUNDS, "f32|bf16",
     "--model: the precision the model computes in; bf16 runs its conv2d, "
     "dense, matmul and batch_matmul layers with the records of their "
     "in=bf16 tasks (CPU targets; the library still takes and gives f32)"},
    KILN_DIM_OPTS,
    {"no-build", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "write the sources only, do not build libkiln_model.so"},
    {"cc", KL_OPT_STR, NULL, KL_NOBOUNDS, "CC",
     "C compiler for the library (default $CC, else cc)"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln export --db DIR (--model NAME | --op TEXT) [--target cpu] "
    "--out DIR\n"
    "                   [--precision f32|bf16] [--batch N] [--seq N]\n"
    "                   [--condition warm|cold|auto]\n"
    "                   [--fallback naive] [--no-build]\n"
    "Writes the best record of every task on the exact target as source, a "
    "manifest.json,\nand for CPU targets libkiln_model.so with kiln_model_run "
    "and the model's weights\n(its own, else seeded random; see "
    "DIR/kiln_model.h). --batch and --seq resize the model's\ninputs (the "
    "manifest keeps them for kiln run).\n"
    "Exit codes: 0 ok, 1 failed, 2 usage, 3 a task without a record (each "
    "is listed).";

static int s_op(kl_store_t *st, kl_opts_t *o, kl_cond_t cond, const char *out,
                char *err)
{
    kl_workload_t *w = NULL;
    int rc = kl_workload_from_string(kl_opts_str(o, "op"), &w, err);
    if (rc) {
        fprintf(stderr, "kiln export: --op: %s\n", err);
        return 2;
    }
    Kiln__TuningRecord *rec = NULL;
    kl_kernel_t k = {0};
    const char *t = kl_export_target(kl_opts_str(o, "target"));
    rc = kl_export_best(st, w, t, cond, &rec, err);
    if (!rc)
        rc = kl_export_replay(w, rec, "kl_main", &k, err);
    if (!rc)
        rc = kl_mkdirs(out, err);
    kl_target_kind kind = KL_TARGET_CPU;
    kl_target_kind_of(t, &kind);
    if (!rc) {
        char *p =
            kl_xasprintf("%s/%s.%s", out, w->name, kl_codegen_source_ext(kind));
        rc = kl_write_file(p, k.source, strlen(k.source), err);
        if (!rc)
            printf("%s on %s: record %llu, median %.3f us (%s) -> %s%s\n",
                   w->name, t, (unsigned long long)rec->seq,
                   rec->median_s * 1e6, kl_cond_name(cond), p,
                   k.prepare ? " (defines kl_main_prepare: constant inputs "
                               "laid out once, kl_abi.h)"
                             : "");
        free(p);
    }
    kl_kernel_free(&k);
    if (rec)
        kiln__tuning_record__free_unpacked(rec, NULL);
    kl_workload_free(&w);
    if (rc)
        fprintf(stderr, "kiln export: %s\n", err);
    return rc == KL_ERR_NOTFOUND ? 3 : rc == KL_ERR_INVAL ? 2 : rc ? 1 : 0;
}

static int s_model(kl_store_t *st, kl_opts_t *o, kl_model_cond_t cond,
                   kl_dtype prec, const char *out, char *err)
{
    kl_export_cfg_t cfg = {
        .precision = prec,
        .model = kl_opts_str(o, "model"),
        .target = kl_opts_str(o, "target"),
        .cond = cond,
        .out_dir = out,
        .fallback_naive = kl_opts_given(o, "fallback"),
        .build = !kl_opts_bool(o, "no-build"),
        .cc = kl_opts_str(o, "cc"),
        .batch = kl_opts_int(o, "batch"),
        .seq = kl_opts_int(o, "seq"),
    };
    kl_export_result_t res;
    kl_target_kind kind = KL_TARGET_CPU;
    int rc = kl_export_model(st, &cfg, &res, err);
    for (int i = 0; i < res.nmissing; i++)
        fprintf(stderr, "kiln export: %s%s\n",
                cfg.fallback_naive && !rc ? "warning: naive kernel for " : "",
                res.missing[i]);
    if (rc) {
        fprintf(stderr, "kiln export: %s\n", err);
    } else {
        char how[64];
        if (cond == KL_MODEL_COND_AUTO)
            snprintf(how, sizeof how, "auto: %d cold, %d warm", res.ncold,
                     res.ntasks - res.ncold);
        else
            snprintf(how, sizeof how, "%s",
                     cond == KL_MODEL_COND_COLD ? "cold" : "warm");
        printf("model %s on %s: %d tasks, %d tuned, %d naive, %d with a "
               "prepare step; sum of weighted task latencies %.3f ms (tuned "
               "tasks, %s)\n",
               res.model ? res.model : cfg.model, kl_export_target(cfg.target),
               res.ntasks, res.ntasks - res.nmissing, res.nmissing,
               res.nprepare, res.tuned_s * 1e3, how);
        if (kl_target_kind_of(kl_export_target(cfg.target), &kind) == KL_OK &&
            kind == KL_TARGET_CPU) {
            if (res.trained)
                printf("weights: the model's own (%d parameters) in "
                       "%s/kiln_model.weights, embedded in the library\n",
                       res.nmodel_params, out);
            else
                printf("weights: seeded random, uniform in [-%g, %g), seed %d "
                       "(the model carries none) in %s/kiln_model.weights, "
                       "embedded in the library\n",
                       KL_EXPORT_WEIGHT_SCALE, KL_EXPORT_WEIGHT_SCALE,
                       KL_EXPORT_WEIGHT_SEED, out);
        }
        printf("wrote %s/manifest.json%s%s\n", out, res.lib_path ? " and " : "",
               res.lib_path ? res.lib_path : "");
    }
    bool bad_model = res.bad_model;
    kl_export_result_free(&res);
    return bad_model               ? 2
           : rc == KL_ERR_NOTFOUND ? 3
           : rc == KL_ERR_INVAL    ? 2
           : rc                    ? 1
                                   : 0;
}

int kiln_cmd_export(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err)) {
        fprintf(stderr, "kiln export: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&o);
        return 0;
    }
    const char *db = kl_opts_str(o, "db"), *out = kl_opts_str(o, "out");
    const char *fb = kl_opts_str(o, "fallback");
    bool model = kl_opts_given(o, "model"), op = kl_opts_given(o, "op");
    kl_model_cond_t mcond = KL_MODEL_COND_WARM;
    kl_dtype prec = KL_DT_F32;
    char perr[KL_ERRMSG_LEN];
    bool bad_cond =
        kl_model_cond_parse(kl_opts_str(o, "condition"), &mcond, err);
    bool bad_prec =
        kl_model_precision(kl_opts_str(o, "precision"), &prec, perr) != KL_OK;
    const char *bad = bad_cond   ? err
                      : bad_prec ? perr
                      : op && mcond == KL_MODEL_COND_AUTO
                          ? "--condition auto goes with --model (an --op is "
                            "one task: give warm or cold)"
                      : op && kl_opts_given(o, "precision")
                          ? "--precision goes with --model (an --op takes "
                            "in=bf16 itself)"
                      : !db             ? "--db is required"
                      : !out            ? "--out is required"
                      : model == op     ? "give one of --model and --op"
                      : kl_opts_npos(o) ? "unexpected argument"
                      : fb && strcmp(fb, "naive")
                          ? "--fallback takes only 'naive'"
                          : NULL;
    if (!bad && op && (kl_opts_given(o, "batch") || kl_opts_given(o, "seq")))
        bad = "--batch and --seq go with --model (an --op gives its own "
              "dimensions)";
    if (bad) {
        fprintf(stderr, "kiln export: %s\n%s\n", bad, s_usage);
        kl_opts_free(&o);
        return 2;
    }
    kl_store_t *st = NULL;
    int rc = kl_store_open(&st, db, KL_STORE_RDONLY, err);
    if (rc) {
        fprintf(stderr, "kiln export: %s\n", err);
        kl_opts_free(&o);
        return rc == KL_ERR_NOTFOUND ? 3 : 1;
    }
    rc = op ? s_op(st, o,
                   mcond == KL_MODEL_COND_COLD ? KL_COND_COLD : KL_COND_WARM,
                   out, err)
            : s_model(st, o, mcond, prec, out, err);
    kl_store_close(&st);
    kl_opts_free(&o);
    return rc;
}
