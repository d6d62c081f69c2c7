/* kla_backend.h - the agent's backends: one per kind of device (the kinds
 * of common/kl_target.h), each describing, building for and running on
 * its devices behind one interface, all in one registry (backend.c).
 *
 * The agent's loop (agent.c, work.c) knows devices only through this
 * interface: it parses --device into one selection per kind, asks each
 * backend to probe the devices selected (numbered in Hello and in
 * MeasureRequest.device_index in registry order: the CPU first, then the
 * GPUs in the order given), opens them (builders and runners; not in
 * --simulate), and then for each candidate calls build in a build thread
 * and measure in the device's own runner thread. Backends today:
 *
 *   cpu   (cpu/cpu_backend.c: cpu/builder.c, cpu/runner.c, the host's
 *         device.c): cc into shared objects, run in sandboxed children,
 *         builds paused while timing;
 *   cuda  (cuda/cuda_backend.c: cuda/kla_cuda.h): NVRTC into cubins, run
 *         by one worker process per GPU.
 *
 * --device grammar. A comma-separated list of KIND (every device of the
 * kind), KIND:all, KIND:N, and bare numbers N that continue the list of
 * the KIND:N before them ("cuda:0,1"). A kind whose backend has no unit
 * (the CPU) is one device and takes only KIND.
 */
#ifndef KLA_BACKEND_H
#define KLA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.pb-c.h"
#include "kl_target.h"
#include "kla_device.h"
#include "kla_measure.h"

/* Devices one agent serves, all kinds together. */
#define KLA_MAX_DEVICES 32

/* How a Candidate is launched, for kinds whose kernels are launched as a
 * grid of blocks (all 1s and 0 otherwise). */
typedef struct {
    uint32_t grid[3], block[3];
    uint32_t shared_bytes; /* dynamic */
} kla_launch_t;

/* One kind's part of --device. */
typedef struct {
    bool all;                /* KIND or KIND:all */
    int n;                   /* KIND:N,N...: device numbers */
    int id[KLA_MAX_DEVICES]; /* no duplicates */
} kla_devsel_t;

/* A parsed --device: one selection per kind. */
typedef struct {
    kla_devsel_t sel[KL_TARGET__KINDS];
} kla_devspec_t;

/* Whether sel names any device. */
bool kla_devsel_any(const kla_devsel_t *sel);

/* Parses a --device value (see above) against the registry. Empty text,
 * an unknown kind, a bad or repeated number, KIND:all together with a
 * number, or no device at all is KL_ERR_INVAL with a message starting
 * "--device" and naming the token. */
int kla_devspec_parse(const char *text, kla_devspec_t *out, char *err);

/* What the agent gives its backends; set once, before probe, except the
 * core lists, which are set before open and info are called. */
typedef struct {
    const kla_device_t *host;   /* this machine (kla_device_detect) */
    const char *workdir;        /* builds go there (it exists) */
    const char *cc, *cflags;    /* the C compiler (kla_builder_config_t) */
    const kla_cores_t *measure; /* cores that time candidates */
    bool measure_given;         /* --measure-cores given: pin timed runs */
    const kla_cores_t *build;   /* cores for compilers */
    bool disjoint; /* build and measure cores apart: builds need not pause */
    int build_slots;
    uint64_t max_mem_mb; /* RLIMIT_AS of kernel processes; 0: none */
    uint64_t flush_mb;   /* cache flush buffer; 0: twice the LLC */
    /* Executable of worker processes (`PATH --gpu-worker N`); NULL: this
     * process's own. */
    const char *worker_path;
    bool simulate; /* --simulate: probe and info only */
} kla_env_t;

typedef struct kla_backend_s kla_backend_t;

/* One device served: its backend, its exact target, the backend's state. */
typedef struct {
    const kla_backend_t *backend;
    char target[64]; /* "cpu/x86_64-avx512", "cuda/sm_90" */
    bool stand_in;   /* a test stand-in: its results are marked simulated */
    void *impl;      /* the backend's, freed by its close */
} kla_dev_t;

struct kla_backend_s {
    kl_target_kind kind; /* its name is the kind's (kl_target_kind_info) */
    /* The --device forms of the kind, for messages: "cpu",
     * "cuda:N[,N...] or cuda:all". */
    const char *forms;
    /* What one numbered device is called in messages ("GPU"); NULL: the
     * kind is one device, named by KIND alone. */
    const char *unit;
    int max_devices; /* numbers a selection may hold */

    /* kiln-agent's check before it starts: whether the devices of sel can
     * be served here (driver, compiler). 0, or KL_ERR_UNSUPPORTED /
     * KL_ERR_NOTFOUND with a message (kiln-agent exits 69). NULL: always
     * served. */
    int (*check)(const kla_devsel_t *sel, char *err);
    /* Describes the devices of sel into devs (room for max_devices, or 1
     * without a unit) and their count into *n. Errors as check's. */
    int (*probe)(const kla_devsel_t *sel, const kla_env_t *env, kla_dev_t *devs,
                 int *n, char *err);
    /* Makes the builders and runners of devs[0..n) (not in --simulate).
     * KL_ERR_* with a message; close frees what was made. */
    int (*open)(kla_dev_t *devs, int n, const kla_env_t *env, char *err);
    /* Frees what probe and open made for devs[0..n); NULLs their impl. */
    void (*close)(kla_dev_t *devs, int n);
    /* Fills the device's DeviceInfo for Hello (strings borrowed from d,
     * valid until the next call); the agent sets index and simulated. */
    void (*info)(kla_dev_t *d, const kla_env_t *env, Kiln__DeviceInfo *out);
    /* The device's line in the agent's start-up log. */
    void (*describe)(const kla_dev_t *d, const kla_env_t *env, char *buf,
                     size_t n);
    /* Checks what a request for d needs beyond what every request needs
     * (e.g. a reference kernel in the device's language). 0 or
     * KL_ERR_INVAL with a message. NULL: nothing more. */
    int (*check_request)(const kla_dev_t *d, const Kiln__MeasureRequest *m,
                         char *err);
    /* Builds source (len bytes) for d, or finds it in the cache; entry is
     * the kernel's name. Contract of kla_builder_build (so_path is what
     * measure loads). Any build thread, concurrently. */
    int (*build)(kla_dev_t *d, const char *src, size_t len, const char *entry,
                 kla_build_t *out);
    /* Measures the built candidate (so, entry, launch l) of problem p
     * against the built reference on d; every failure is a status in
     * *out. d's runner thread only: one measurement at a time. */
    void (*measure)(kla_dev_t *d, const kla_problem_t *p, const char *ref_so,
                    const char *ref_entry, const char *so, const char *entry,
                    const kla_launch_t *l, kla_result_t *out);
    /* Kills what d builds and runs now, and makes further builds fail
     * (any thread; shutdown). Safe before open. */
    void (*abort)(kla_dev_t *d);

    /* A hidden mode of kiln-agent: `kiln-agent FLAG N` runs
     * worker_main(N, 3) (a worker process with its socket on fd 3) and
     * exits with its status. NULL: none. */
    const char *worker_flag;
    int (*worker_main)(int arg, int fd);
};

/* The backend of kind k, or NULL when the agent has none. */
const kla_backend_t *kla_backend_of(kl_target_kind k);

/* The name of b's kind: "cpu", "cuda". */
const char *kla_backend_name(const kla_backend_t *b);

/* When argv asks for a backend's worker mode (argc == 3, argv[1] its
 * worker_flag), runs it, stores its exit status in *rc and returns true. */
bool kla_backend_worker(int argc, char **argv, int *rc);

/* The backends (registered in backend.c). */
extern const kla_backend_t kla_backend_cpu;
extern const kla_backend_t kla_backend_cuda;

#endif
