/* kla_cuda_worker_int.h - what the GPU worker's files share:
 * cuda_worker.c (the process's main loop and the wire),
 * cuda_worker_device.c (the device side: the helper kernels, the
 * reference, the candidate's check, verification and timing) and
 * cuda_worker_fake.c (the stand-in, KILN_FAKE_GPU_WORKER). Private to
 * agent/. */
#ifndef KLA_CUDA_WORKER_INT_H
#define KLA_CUDA_WORKER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kla_cuda.h"
#include "kla_cuda_api.h"
#include "kla_cuda_wire.h"

#define KLA_CW__REFS 4

/* One cached reference (cuda_worker_device.c). */
typedef struct {
    uint8_t key[16];
    int n_args;
    CUdeviceptr buf[64]; /* inputs and reference outputs */
    double rms[64];      /* outputs: root mean square of the reference's */
    size_t bytes;
    bool failed;
    char error[512];
    uint64_t used;
} kla_cw__ref_t;

/* The worker's state: one per process. */
typedef struct {
    kla_cu_t *cu;
    kla_cuda_dev_t dev;
    int fd;
    CUcontext ctx;
    CUdevice cudev;
    CUstream stream; /* NULL: the legacy default stream */
    CUmodule helpers;
    CUfunction fill, fill16, compare;
    CUdeviceptr flush, stats;
    CUevent ev[2];
    size_t flush_n;
    kla_cw__ref_t refs[KLA_CW__REFS];
    uint64_t tick;
    bool poisoned;
} kla_cw__worker_t;

/* ---- the wire (cuda_worker.c) ---------------------------------------- */

/* Closes the open descriptors of fds (KLA_CW_NFDS of them), each then
 * -1. */
void kla_cw__close_fds(int *fds);
/* Reads one request and its descriptors (kla_cuda_wire.h) into q and
 * fds. 0; 1 at a clean end of the stream; -1 on a short read, an error,
 * or another number of descriptors than KLA_CW_NFDS (none kept). */
int kla_cw__recv_req(int fd, kla_cw_req_t *q, int *fds);
/* Terminates q's entry names; whether q is well formed (magic, argument
 * count, repeat, f32 outputs). */
bool kla_cw__req_ok(kla_cw_req_t *q);
/* The contents of the cubin descriptor fd (a sealed memfd) into *img
 * (malloc'd, NUL-terminated) and *len. -1 with msg. */
int kla_cw__read_cubin(int fd, char **img, size_t *len, char *msg, size_t n);

/* ---- the device side (cuda_worker_device.c) -------------------------- */

/* Records a CUDA failure of call `what` into msg; marks the context
 * poisoned when the error is sticky. Returns rc != CUDA_SUCCESS. */
bool kla_cw__fail(kla_cw__worker_t *w, CUresult rc, const char *what, char *msg,
                  size_t n);
/* Opens the driver, retains device ordinal's primary context, builds the
 * helper kernels and allocates the buffers. -1 with msg. */
int kla_cw__setup(kla_cw__worker_t *w, int ordinal, char *msg, size_t n);
/* Finds or makes the cached reference of q (least recently used out). */
kla_cw__ref_t *kla_cw__reference(kla_cw__worker_t *w, const kla_cw_req_t *q,
                                 int ref_fd);
/* Loads, checks, runs, verifies and times the candidate of cubin
 * descriptor fd against ref; fills h and *samples (malloc'd). */
void kla_cw__candidate(kla_cw__worker_t *w, const kla_cw_req_t *q,
                       const kla_cw__ref_t *ref, int fd, kla_cw_res_t *h,
                       double **samples);

/* ---- the stand-in (cuda_worker_fake.c) ------------------------------- */

/* The stand-in of kla_cuda.h: answers by entry name, touches no driver. */
int kla_cw__fake_main(int fd);

#endif
