/* fuzz_store_import.c - JSON lines import under arbitrary text. Beyond
 * "never crash": a failure carries a message, a malformed line names its
 * line number, and the store stays readable. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_store.h"
#include "kl_test_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kl_store_t *s_store;
static char s_dir[256];

static void s_cleanup(void)
{
    kl_store_close(&s_store);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_store_import: could not remove %s\n", s_dir);
}

static int s_count(const Kiln__TuningRecord *r, void *arg)
{
    (void)r;
    (*(size_t *)arg)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[KL_ERRMSG_LEN] = "";
    if (!s_store) {
        /* No fsync: a fuzzer commits thousands of times a second. */
        if (!kl_test_mkdtemp(s_dir, sizeof s_dir, "kiln-fuzz-store-XXXXXX") ||
            kl_store_open(&s_store, s_dir, KL_STORE_NOSYNC, err))
            abort();
        atexit(s_cleanup);
    }
    if (size == 0)
        return 0;
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f)
        abort();
    size_t n = 0;
    int rc = kl_store_import_jsonl(s_store, f, &n, err);
    fclose(f);
    if (rc < 0 || rc >= KL_ERR__COUNT)
        abort();
    if (rc != KL_OK && err[0] == '\0')
        abort();
    if (rc == KL_ERR_INVAL && !strstr(err, "line "))
        abort();
    size_t total = 0, walked = 0;
    if (kl_store_count(s_store, NULL, NULL, &total, err) != KL_OK ||
        kl_store_foreach_record(s_store, NULL, NULL, s_count, &walked, err) !=
            KL_OK ||
        total != walked)
        abort();
    return 0;
}
