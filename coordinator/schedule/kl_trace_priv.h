/* kl_trace_priv.h - the trace's insides, shared by kl_trace.c,
 * kl_trace_text.c and kl_trace_apply.c (not part of the public contract). */
#ifndef KL_TRACE_PRIV_H
#define KL_TRACE_PRIV_H

#include "kl_trace.h"

#define KL_TRACE_MAX_DEPTH 8

struct kl_trace_s {
    char space[64];
    kl_inst_t *insts;
    int n, cap;
    int64_t next_rv;
    int depth; /* open ifs while building */
    struct {
        int index;
        bool in_else;
    } stack[KL_TRACE_MAX_DEPTH];
};

/* Appends an instruction (zeroed, op set) to the open body. */
kl_inst_t *kl_trace__append(kl_trace_t *t, kl_op op);
/* The body that builders append to (see kl_tr_if). */
void kl_trace__cur_body(kl_trace_t *t, kl_inst_t ***arr, int **n);
/* Frees the n instructions of v, their if/else bodies too, and v. */
void kl_trace__insts_free(kl_inst_t *v, int n);
/* A deep copy of the n instructions of v (NULL when n is 0). */
kl_inst_t *kl_trace__insts_clone(const kl_inst_t *v, int n);
/* The largest random variable that v's instructions (bodies included)
 * define, -1 when none. */
int64_t kl_trace__insts_max_rv(const kl_inst_t *v, int n);

#endif
