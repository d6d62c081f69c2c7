/* kiln space - sample a workload's design space and show (or write) the
 * traces and the code they generate. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "kiln_cmds.h"
#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_ir.h"
#include "kl_opt.h"
#include "kl_space.h"
#include "kl_target.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"op", KL_OPT_STR, NULL, KL_NOBOUNDS, "SPEC",
     "workload: a named op (\"matmul M=64 N=64 K=64\") or an expression"},
    {"target", KL_OPT_STR, "cpu", KL_NOBOUNDS, "T",
     "cpu, cpu/x86_64-avx512, cpu/x86_64-avx2, cuda/sm_90, ..."},
    {"samples", KL_OPT_INT, "3", 1, 100000, "N", "how many samples"},
    {"seed", KL_OPT_INT, "1", 0, 9.2e18, "S", "random seed"},
    {"emit", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "write NNN.c|.cu, NNN.trace and manifest.json there instead of "
     "printing"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln space --op SPEC [--target T] [--samples N] [--seed S] "
    "[--emit DIR]";

static json_object *s_args_json(const kl_workload_t *w)
{
    json_object *a = json_object_new_array();
    for (int t = 0; t < w->ntensors; t++) {
        const kl_tensor_t *tn = &w->tensors[t];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(tn->name));
        json_object_object_add(
            o, "dtype", json_object_new_string(kl_dtype_name(tn->dtype)));
        json_object *sh = json_object_new_array();
        for (int d = 0; d < tn->ndim; d++)
            json_object_array_add(sh, json_object_new_int64(tn->shape[d]));
        json_object_object_add(o, "shape", sh);
        json_object_object_add(o, "role",
                               json_object_new_string(tn->is_output ? "output"
                                                      : tn->is_const
                                                          ? "constant"
                                                          : "input"));
        json_object_array_add(a, o);
    }
    return a;
}

static json_object *s_dims(const int64_t *v)
{
    json_object *a = json_object_new_array();
    for (int i = 0; i < 3; i++)
        json_object_array_add(a, json_object_new_int64(v[i]));
    return a;
}

static int s_write(const char *dir, const char *name, const char *text,
                   char *err)
{
    char *path = kl_xasprintf("%s/%s", dir, name);
    int rc = kl_write_file(path, text, strlen(text), err);
    free(path);
    return rc;
}

/* One sample: prints it, or writes its files and appends to the manifest. */
static int s_one(const kl_space_t *sp, kl_rng_t *rng, int i, const char *dir,
                 json_object *list, char *err)
{
    kl_trace_t *tr = NULL;
    kl_sched_t *s = NULL;
    int rc = kl_space_sample(sp, rng, &tr, &s, 0, NULL, err);
    if (rc)
        return rc;
    const kl_target_t *t = kl_space_target(sp);
    char entry[32];
    snprintf(entry, sizeof entry, "kl_s%03d", i);
    kl_kernel_t k;
    rc = kl_codegen_kernel(s, t, entry, &k, err);
    char *txt = rc ? NULL : kl_trace_to_text(tr);
    if (!rc && !dir) {
        printf("=== sample %d\n--- trace\n%s--- source (%s)\n%s\n", i, txt,
               k.entry, k.source);
    } else if (!rc) {
        char name[32];
        snprintf(name, sizeof name, "%03d.%s", i,
                 kl_codegen_source_ext(t->kind));
        rc = s_write(dir, name, k.source, err);
        char tname[32];
        snprintf(tname, sizeof tname, "%03d.trace", i);
        if (!rc)
            rc = s_write(dir, tname, txt, err);
        uint8_t h[16];
        char hex[33];
        kl_trace_hash(tr, h);
        kl_hex128(h, hex);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "index", json_object_new_int(i));
        json_object_object_add(o, "source", json_object_new_string(name));
        json_object_object_add(o, "trace", json_object_new_string(tname));
        json_object_object_add(o, "trace_hash", json_object_new_string(hex));
        json_object_object_add(o, "entry", json_object_new_string(k.entry));
        json_object_object_add(o, "grid", s_dims(k.grid));
        json_object_object_add(o, "block", s_dims(k.block));
        json_object_object_add(o, "shared_bytes",
                               json_object_new_int64(k.shared_bytes));
        json_object_array_add(list, o);
    }
    free(txt);
    if (!rc)
        kl_kernel_free(&k);
    kl_sched_destroy(&s);
    kl_trace_free(&tr);
    return rc;
}

static int s_manifest(const char *dir, const kl_workload_t *w,
                      const kl_space_t *sp, json_object *list, char *err)
{
    char hex[33];
    kl_hex128(w->key, hex);
    json_object *m = json_object_new_object();
    json_object_object_add(m, "workload", json_object_new_string(w->name));
    json_object_object_add(m, "canonical",
                           json_object_new_string(w->canonical));
    json_object_object_add(m, "key", json_object_new_string(hex));
    json_object_object_add(m, "flop", json_object_new_double(w->flop));
    json_object_object_add(m, "target",
                           json_object_new_string(kl_space_target(sp)->name));
    json_object_object_add(m, "args", s_args_json(w));
    json_object_object_add(m, "samples", json_object_get(list));
    const char *txt =
        json_object_to_json_string_ext(m, JSON_C_TO_STRING_PRETTY);
    int rc = s_write(dir, "manifest.json", txt, err);
    json_object_put(m);
    return rc;
}

int kiln_cmd_space(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err)) {
        fprintf(stderr, "kiln space: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&o);
        return 0;
    }
    const char *op = kl_opts_str(o, "op"), *dir = kl_opts_str(o, "emit");
    if (!op || kl_opts_npos(o)) {
        fprintf(stderr, "kiln space: %s\n%s\n",
                op ? "unexpected argument" : "--op is required", s_usage);
        kl_opts_free(&o);
        return 2;
    }
    kl_workload_t *w = NULL;
    kl_space_t *sp = NULL;
    json_object *list = json_object_new_array();
    int rc = kl_workload_from_string(op, &w, err);
    /* An integer or bf16 workload's "cpu" carries this CPU's features, as
     * kiln tune resolves it ("cpu/x86_64-avx512+vnni": the VNNI intrinsic). */
    const char *target = kl_opts_str(o, "target");
    if (!rc && kl_workload_cpu_feats(w))
        target = kl_target_resolve_for(target, kl_workload_cpu_feats(w));
    if (!rc)
        rc = kl_space_for_target(target, w, &sp, err);
    if (!rc && dir)
        rc = kl_mkdirs(dir, err);
    kl_rng_t rng;
    kl_rng_seed(&rng, (uint64_t)kl_opts_int(o, "seed"));
    int n = (int)kl_opts_int(o, "samples");
    for (int i = 0; !rc && i < n; i++)
        rc = s_one(sp, &rng, i, dir, list, err);
    if (!rc && dir)
        rc = s_manifest(dir, w, sp, list, err);
    if (rc)
        fprintf(stderr, "kiln space: %s\n", err);
    else if (dir)
        fprintf(stderr,
                "kiln space: wrote %d samples and manifest.json to %s\n", n,
                dir);
    json_object_put(list);
    kl_space_destroy(&sp);
    kl_workload_free(&w);
    kl_opts_free(&o);
    return rc == KL_OK ? 0 : (rc == KL_ERR_INVAL ? 2 : 1);
}
