/* fuzz_envelope.c - the wire codec under arbitrary bytes. Beyond "never
 * crash": whatever decodes must encode and decode again. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kl_err.h"
#include "kl_net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[KL_ERRMSG_LEN];
    Kiln__Envelope *env = NULL;
    int rc = kl_net_decode(data, size, &env, err);
    if (rc != KL_OK && rc != KL_ERR_PROTO)
        abort();
    if (rc == KL_OK) {
        size_t len;
        void *again = kl_net_encode(env, &len);
        Kiln__Envelope *env2 = NULL;
        if (kl_net_decode(again, len, &env2, err) != KL_OK)
            abort();
        if (env2->body_case != env->body_case)
            abort();
        kl_net_envelope_free(&env2);
        free(again);
    } else if (env != NULL) {
        abort();
    }
    kl_net_envelope_free(&env);
    return 0;
}
