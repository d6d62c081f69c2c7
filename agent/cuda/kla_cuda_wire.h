/* kla_cuda_wire.h - what a GPU runner thread and its worker process say to
 * each other over their socket pair (private to agent/cuda_*.c).
 *
 * worker -> runner: one s_hello when the context and helpers are ready (or
 * could not be made: status != OK, then the worker exits).
 * runner -> worker: one request per candidate, with two descriptors by
 * SCM_RIGHTS on its first bytes (the socket pair is SOCK_STREAM; the
 * worker collects them with recvmsg while it reads the request):
 * [KLA_CW_FD_CUBIN] the candidate's cubin and [KLA_CW_FD_REF] the
 * reference's, each a sealed memfd copy (no resize, no writes) of the
 * built file. The worker reads its modules from them and from nothing
 * else: it sees no workdir (kla_cuda.h, "Runs"). A request with another
 * number of descriptors is malformed.
 * worker -> runner: a START word when the candidate's own part begins (the
 * reference is ready), then one response followed by n_samples doubles.
 * The worker writes a response with poisoned = 1 and exits when the
 * context is lost.
 */
#ifndef KLA_CUDA_WIRE_H
#define KLA_CUDA_WIRE_H

#include <stdint.h>

#define KLA_CW_MAGIC 0x6b6c6375u /* "klcu" */
#define KLA_CW_START 0x6b6c7374u /* "klst" */

/* The descriptors of a request, in this order. */
enum { KLA_CW_FD_CUBIN, KLA_CW_FD_REF, KLA_CW_NFDS };

typedef struct {
    uint32_t magic;
    uint32_t status; /* Kiln__Status */
    char msg[1024];
} kla_cw_hello_t;

typedef struct {
    uint32_t magic;
    uint32_t n_args;
    uint8_t ref_key[16];
    uint64_t nelem[64];
    uint8_t is_output[64];
    uint8_t dtype[64]; /* Kiln__DType: f32; f16 or bf16 inputs */
    uint32_t number, repeat, min_repeat_ms, flush, skip_verify;
    double rtol, atol;
    uint64_t seed;
    uint32_t grid[3], block[3], shared_bytes;
    char entry[256], ref_entry[256];
} kla_cw_req_t;

typedef struct {
    uint32_t magic;
    uint32_t status; /* Kiln__Status */
    uint32_t number, n_samples;
    uint32_t poisoned;
    double max_abs_err;
    double run_s; /* the candidate's own part */
    char msg[1024];
} kla_cw_res_t;

#endif
