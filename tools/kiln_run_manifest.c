/* kiln_run_manifest.c - kiln run's reading of the manifest.json that
 * kiln export writes beside the library (kl_export.c): the tasks' tuned
 * latencies for --profile, the precision (bf16 changes the default
 * --rtol), and the input dimensions it was exported at (--batch, --seq). */
#include "kiln_run_int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kl_err.h"
#include "kl_util.h"

/* DIR/manifest.json for DIR/libkiln_model.so, parsed (NULL when it cannot
 * be read); *path (heap) names it. */
static json_object *s_manifest(const char *lib, char **path)
{
    const char *slash = strrchr(lib, '/');
    *path = slash ? kl_xasprintf("%.*s/manifest.json", (int)(slash - lib), lib)
                  : kl_xstrdup("manifest.json");
    return json_object_from_file(*path);
}

/* The tasks of DIR/manifest.json beside the library; none (and a line
 * saying so) when it is not there. */
kiln_run__mtask_t *kiln_run__manifest_tasks(const char *lib, int *n)
{
    char *path;
    json_object *m = s_manifest(lib, &path), *tasks = NULL;
    kiln_run__mtask_t *t = NULL;
    *n = 0;
    if (!m || !json_object_object_get_ex(m, "tasks", &tasks) ||
        !json_object_is_type(tasks, json_type_array)) {
        printf("no readable manifest.json at %s: tuned latencies not "
               "shown\n",
               path);
    } else {
        *n = (int)json_object_array_length(tasks);
        t = kl_xcalloc((size_t)*n + 1, sizeof *t);
        for (int i = 0; i < *n; i++) {
            json_object *o = json_object_array_get_idx(tasks, (size_t)i), *v;
            t[i].latency = NAN;
            if (json_object_object_get_ex(o, "name", &v))
                snprintf(t[i].name, sizeof t[i].name, "%s",
                         json_object_get_string(v));
            if (json_object_object_get_ex(o, "weight", &v))
                t[i].weight = json_object_get_int(v);
            if (json_object_object_get_ex(o, "latency_s", &v) && v)
                t[i].latency = json_object_get_double(v);
        }
    }
    json_object_put(m);
    free(path);
    return t;
}

/* Whether the manifest.json beside the library says "precision": "bf16"
 * (kl_export.c; absent: f32). */
bool kiln_run__lib_bf16(const char *lib)
{
    char *path;
    json_object *m = s_manifest(lib, &path), *v = NULL;
    bool bf16 = m && json_object_object_get_ex(m, "precision", &v) &&
                !strcmp(json_object_get_string(v), "bf16");
    json_object_put(m);
    free(path);
    return bf16;
}

/* The model's input dimensions (kl_model_opts_t's batch and seq): the
 * flags, else the manifest.json beside the library ("batch", "seq" when
 * kiln export was given them; absent: the model's own). A flag the
 * manifest disagrees with is an error naming both values. */
int kiln_run__lib_dims(const kl_opts_t *o, kl_model_opts_t *dims, char *err)
{
    const char *lib = kl_opts_str(o, "lib");
    char *path;
    json_object *m = s_manifest(lib, &path);
    static const char *const names[] = {"batch", "seq"};
    int64_t *vals[] = {&dims->batch, &dims->seq};
    int rc = KL_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        json_object *v = NULL;
        int64_t want = m && json_object_object_get_ex(m, names[i], &v)
                           ? json_object_get_int64(v)
                           : 0;
        if (!kl_opts_given(o, names[i])) {
            *vals[i] = want;
            if (want)
                printf("input dimensions: --%s %lld (%s)\n", names[i],
                       (long long)want, path);
            continue;
        }
        *vals[i] = kl_opts_int(o, names[i]);
        if (m && want != *vals[i] && want)
            rc = kl_seterr(err, KL_ERR_INVAL,
                           "--%s %lld, but %s says %s %lld (the library was "
                           "exported with --%s %lld)",
                           names[i], (long long)*vals[i], path, names[i],
                           (long long)want, names[i], (long long)want);
        else if (m && want != *vals[i])
            rc = kl_seterr(err, KL_ERR_INVAL,
                           "--%s %lld, but %s has no \"%s\" (the library "
                           "was exported at the model's own input "
                           "dimensions)",
                           names[i], (long long)*vals[i], path, names[i]);
    }
    json_object_put(m);
    free(path);
    return rc;
}
