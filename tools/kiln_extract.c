/* kiln extract - the tuning tasks of a model: one row per distinct
 * workload with its weight (how many layers run it), and the totals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_model.h"
#include "kl_opt.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"model", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME|FILE",
     "a built-in model (resnet18, resnet50, mobilenet_v2, bert_base), a "
     "graph file (docs/models.md) or an ONNX model (.onnx)"},
    {"precision", KL_OPT_STR, "f32", KL_NOBOUNDS, "f32|bf16",
     "the precision the model computes in: bf16 makes every conv2d, dense, "
     "matmul and batch_matmul task its in=bf16 form (docs/cli.md)"},
    KILN_DIM_OPTS,
    {"json", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "print one JSON object (with each workload's canonical text and key) "
     "instead of the table"},
    {"list", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "list the built-in models and exit"},
    {"print-graph", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "print the model as graph text (a built-in's file, an ONNX model's "
     "conversion) and exit"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln extract --model NAME|FILE [--precision f32|bf16] [--json]\n"
    "                    [--batch N] [--seq N]\n"
    "       kiln extract --list\n"
    "       kiln extract --model NAME|FILE [--batch N] [--seq N] --print-graph";

/* ", batch 2, seq 64" of the dimensions given ("" when none). */
static void s_dims_text(const kl_model_opts_t *mo, char *out, size_t n)
{
    int k = 0;
    out[0] = '\0';
    if (mo->batch)
        k = snprintf(out, n, ", batch %lld", (long long)mo->batch);
    if (mo->seq)
        snprintf(out + k, n - (size_t)k, ", seq %lld", (long long)mo->seq);
}

static void s_table(const kl_model_t *m, const kl_model_opts_t *mo)
{
    kl_dtype prec = mo->prec;
    char dims[64];
    s_dims_text(mo, dims, sizeof dims);
    int n = kl_model_ntasks(m), nw = 4;
    for (int i = 0; i < n; i++) {
        int l = (int)strlen(kl_model_task(m, i)->w->name);
        if (l > nw)
            nw = l;
    }
    int kernels = 0;
    for (int i = 0; i < n; i++)
        kernels += kl_model_task(m, i)->weight;
    printf("Model %s%s%s%s: %d layers -> %d kernels (fused activations/add and "
           "integer shortcuts: %d, views and untuned: %d) -> %d distinct "
           "tasks\n\n",
           kl_model_name(m), prec == KL_DT_F32 ? "" : ", precision ",
           prec == KL_DT_F32 ? "" : kl_dtype_name(prec), dims,
           kl_model_nlayers(m), kernels, kl_model_ntuned_layers(m) - kernels,
           kl_model_nlayers(m) - kl_model_ntuned_layers(m), n);
    int width = printf("%3s | %-*s | %12s | %6s | %s", "ID", nw, "Name", "FLOP",
                       "Weight", "Workload");
    printf("\n");
    for (int i = 0; i < width + 20; i++)
        putchar('-');
    putchar('\n');
    int weights = 0;
    for (int i = 0; i < n; i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        printf("%3d | %-*s | %12.0f | %6d | %s\n", i, nw, t->w->name,
               t->w->flop, t->weight, t->spec);
        weights += t->weight;
    }
    printf("\nTotal: %d tasks, %d layer kernels (sum of weights), %.0f FLOP "
           "(%.3f GFLOP) per inference\n",
           n, weights, kl_model_total_flop(m), kl_model_total_flop(m) / 1e9);
    if (*kl_model_untuned(m))
        printf("Not tuned (no named operator in kiln): %s\n",
               kl_model_untuned(m));
}

static void s_json(const kl_model_t *m, const kl_model_opts_t *mo)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "model",
                           json_object_new_string(kl_model_name(m)));
    json_object_object_add(o, "precision",
                           json_object_new_string(kl_dtype_name(mo->prec)));
    if (mo->batch) /* absent: the model's own input dimensions */
        json_object_object_add(o, "batch", json_object_new_int64(mo->batch));
    if (mo->seq)
        json_object_object_add(o, "seq", json_object_new_int64(mo->seq));
    json_object *a = json_object_new_array();
    int weights = 0;
    for (int i = 0; i < kl_model_ntasks(m); i++) {
        const kl_model_task_t *t = kl_model_task(m, i);
        char key[33];
        kl_hex128(t->w->key, key);
        json_object *r = json_object_new_object();
        json_object_object_add(r, "id", json_object_new_int(i));
        json_object_object_add(r, "name", json_object_new_string(t->w->name));
        json_object_object_add(r, "op_kind",
                               json_object_new_string(t->w->op_kind));
        json_object_object_add(r, "workload", json_object_new_string(t->spec));
        json_object_object_add(r, "canonical",
                               json_object_new_string(t->w->canonical));
        json_object_object_add(r, "key", json_object_new_string(key));
        json_object_object_add(r, "flop", json_object_new_double(t->w->flop));
        json_object_object_add(r, "weight", json_object_new_int(t->weight));
        json_object_object_add(r, "first_layer",
                               json_object_new_string(t->layer));
        json_object_array_add(a, r);
        weights += t->weight;
    }
    json_object_object_add(o, "tasks", a);
    json_object_object_add(o, "total_tasks",
                           json_object_new_int(kl_model_ntasks(m)));
    json_object_object_add(o, "total_weight", json_object_new_int(weights));
    json_object_object_add(o, "total_flop",
                           json_object_new_double(kl_model_total_flop(m)));
    json_object_object_add(o, "layers",
                           json_object_new_int(kl_model_nlayers(m)));
    json_object_object_add(o, "untuned",
                           json_object_new_string(kl_model_untuned(m)));
    printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
}

int kiln_cmd_extract(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err)) {
        fprintf(stderr, "kiln extract: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&o);
        return 0;
    }
    if (kl_opts_bool(o, "list")) {
        for (const char *const *n = kl_model_builtin_names(); *n; n++)
            printf("%s\n", *n);
        kl_opts_free(&o);
        return 0;
    }
    const char *name = kl_opts_str(o, "model");
    if (!name && kl_opts_npos(o) == 1)
        name = kl_opts_pos(o, 0);
    if (!name || kl_opts_npos(o) > (kl_opts_str(o, "model") ? 0 : 1)) {
        fprintf(stderr, "kiln extract: %s\n%s\n",
                name ? "unexpected argument" : "--model is required", s_usage);
        kl_opts_free(&o);
        return 2;
    }
    kl_model_opts_t mo = {.batch = kl_opts_int(o, "batch"),
                          .seq = kl_opts_int(o, "seq")};
    if (kl_opts_bool(o, "print-graph")) {
        char *text = NULL;
        int rc = kl_model_text_opts(name, &mo, &text, err);
        if (rc)
            fprintf(stderr, "kiln extract: %s\n", err);
        else
            fputs(text, stdout);
        free(text);
        kl_opts_free(&o);
        return rc ? 2 : 0;
    }
    kl_dtype prec;
    if (kl_model_precision(kl_opts_str(o, "precision"), &prec, err)) {
        fprintf(stderr, "kiln extract: --precision: %s\n%s\n", err, s_usage);
        kl_opts_free(&o);
        return 2;
    }
    mo.prec = prec;
    kl_model_t *m = NULL;
    int rc = kl_model_load_opts(name, &mo, &m, err);
    if (rc) {
        fprintf(stderr, "kiln extract: %s\n", err);
        kl_opts_free(&o);
        return 2;
    }
    if (kl_opts_bool(o, "json"))
        s_json(m, &mo);
    else
        s_table(m, &mo);
    kl_model_destroy(&m);
    kl_opts_free(&o);
    return 0;
}
