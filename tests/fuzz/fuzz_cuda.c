/* fuzz_cuda.c - the GPU half of the compiler under arbitrary input.
 *
 * The first byte picks the mode:
 *   'p'   the rest is a ptxas report: kl_nvrtc_parse_ptxas either parses
 *         it or says KL_ERR_INVAL with a message;
 *   other the rest is a trace in text form, replayed on a small conv2d
 *         (missing decisions are drawn from a fixed seed). Whatever
 *         replays either passes the GPU postprocessors and then generates
 *         CUDA without error, twice byte for byte the same, or is refused
 *         with a message. Never a crash, never a silent failure. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_nvrtc.h"
#include "kl_space.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void s_ptxas(const char *text)
{
    char err[KL_ERRMSG_LEN] = "";
    kl_nvrtc_kernel_t *ks = NULL;
    int n = -1;
    int rc = kl_nvrtc_parse_ptxas(text, &ks, &n, err);
    if (rc != KL_OK && (rc != KL_ERR_INVAL || ks || err[0] == '\0'))
        abort();
    if (rc == KL_OK && (n < 0 || (n > 0 && !ks)))
        abort();
    free(ks);
}

static void s_trace(const char *text)
{
    static kl_workload_t *w;
    static kl_target_t tg;
    char err[KL_ERRMSG_LEN] = "";
    if (!w && (kl_workload_from_string("conv2d N=1 C=4 H=8 W=8 K=8 R=3 S=3 "
                                       "stride=1 pad=1",
                                       &w, err) ||
               kl_target_parse("cuda/sm_90", &tg, err)))
        abort();
    kl_trace_t *t = NULL;
    if (kl_trace_from_text(text, &t, err) != KL_OK)
        return;
    kl_sched_t *s = NULL;
    if (kl_sched_create(&s, w, err))
        abort();
    kl_rng_t rng;
    kl_rng_seed(&rng, 1);
    bool rej = false;
    err[0] = '\0';
    int rc = kl_trace_apply(t, s, &rng, NULL, &rej, err);
    if (!rc && !rej) {
        err[0] = '\0';
        rc = kl_postproc_cuda(&tg, s, err);
        if (rc && (rc != KL_ERR_INVAL || !err[0]))
            abort();
        if (!rc) {
            kl_kernel_t a, b;
            if (kl_codegen_cuda(s, &tg, "k", &a, err) ||
                kl_codegen_cuda(s, &tg, "k", &b, err) ||
                strcmp(a.source, b.source) != 0)
                abort();
            kl_kernel_free(&a);
            kl_kernel_free(&b);
        }
    }
    kl_sched_destroy(&s);
    kl_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (data[0] == 'p')
        s_ptxas(text);
    else
        s_trace(text);
    free(text);
    return 0;
}
