/* fuzz_ir_parse.c - the workload parser (and the named-operator parser
 * behind kl_workload_from_string) under arbitrary bytes. Beyond "never
 * crash": a failure is KL_ERR_INVAL with a message and no workload, and
 * whatever parses prints a canonical text that parses back to itself. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[KL_ERRMSG_LEN] = "";
    kl_workload_t *w = NULL;
    int rc = kl_workload_from_string(text, &w, err);
    if (rc != KL_OK) {
        if (rc != KL_ERR_INVAL || w != NULL || err[0] == '\0')
            abort();
    } else {
        kl_workload_t *back = NULL;
        if (kl_workload_parse(w->canonical, &back, err) != KL_OK)
            abort();
        if (strcmp(back->canonical, w->canonical) != 0 ||
            memcmp(back->key, w->key, 16) != 0 || back->flop != w->flop)
            abort();
        kl_workload_free(&back);
        kl_workload_free(&w);
    }
    free(text);
    return 0;
}
