/* kiln_run_int.h - between kiln run (kiln_run.c) and its reading of the
 * library's manifest.json (kiln_run_manifest.c). */
#ifndef KILN_RUN_INT_H
#define KILN_RUN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <json-c/json.h>

#include "kl_model.h"
#include "kl_opt.h"

/* A task of manifest.json (kl_export.c): name, weight, latency_s (NaN for
 * a naive kernel, whose latency is null). */
typedef struct {
    char name[128];
    int weight;
    double latency;
} kiln_run__mtask_t;

/* The tasks of DIR/manifest.json beside the library lib (heap, *n of
 * them); none (and a line saying so) when it is not there. */
kiln_run__mtask_t *kiln_run__manifest_tasks(const char *lib, int *n);

/* Whether the manifest.json beside lib says "precision": "bf16" (absent:
 * f32). */
bool kiln_run__lib_bf16(const char *lib);

/* The model's input dimensions (kl_model_opts_t's batch and seq): the
 * flags of o, else the manifest.json beside --lib ("batch", "seq" when
 * kiln export was given them; absent: the model's own). A flag the
 * manifest disagrees with is an error naming both values. */
int kiln_run__lib_dims(const kl_opts_t *o, kl_model_opts_t *dims, char *err);

#endif
