/* kla_agent.h - the kiln-agent actor: one thread owns the DEALER socket to
 * the coordinator and talks over inproc:// PAIR sockets to its build
 * threads (one per build slot) and its runner thread (one per device).
 *
 * Protocol (docs/protocol.md): the agent says Hello with its DeviceInfo,
 * heartbeats every heartbeat_ms once welcomed, answers each candidate of a
 * MeasureRequest with one MeasureResult as soon as it is done, answers
 * the not-yet-started candidates of a Cancel with CANCELLED, and forgets
 * the work of a coordinator that says Goodbye or stays silent for three
 * heartbeat intervals (then says Hello again). Candidates wait for a free
 * build slot, then for the runner; the runner never overlaps two runs.
 */
#ifndef KLA_AGENT_H
#define KLA_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "kl_net.h"

typedef struct {
    const char *endpoint;      /* coordinator, e.g. "tcp://head:7070" */
    kl_net_security_t sec;     /* CURVE keys, or insecure for loopback */
    const char *name;          /* NULL: "HOSTNAME-PID" */
    int build_slots;           /* 0: one per core */
    const char *cc;            /* NULL: "cc" */
    const char *cflags;        /* NULL: "-O3 -march=native -fopenmp" */
    const char *workdir;       /* NULL: a fresh directory under $TMPDIR
                                  (or /tmp), removed by kla_agent_destroy */
    bool simulate;             /* synthetic results (kla_simulate.h) */
    int simulate_ms;           /* --simulate: each answer takes this long */
    int heartbeat_ms;          /* 0: 1000; Welcome may set another */
    const char *measure_cores; /* "0-3"; NULL: every allowed core */
    const char *build_cores;   /* NULL: every allowed core */
    uint64_t max_mem_mb;       /* RLIMIT_AS of kernel children; 0: none */
    uint64_t flush_mb;         /* cache flush buffer (MiB); 0: twice the LLC */
    /* Devices served: "cpu" (NULL), "cuda:0,1", "cuda:all", "cpu,cuda:0"
     * (kla_backend.h). A GPU that cannot be used is KL_ERR_UNSUPPORTED or
     * KL_ERR_NOTFOUND from kla_agent_new. */
    const char *device;
    /* Executable started as `PATH --gpu-worker N`, one per GPU; NULL: this
     * process's own executable. */
    const char *gpu_worker;
} kla_agent_config_t;

typedef struct kla_agent_s kla_agent_t;

/* Detects the device, makes the workdir, connects and starts the actor,
 * which says Hello at once. Bad config (core lists, keys, endpoint,
 * workdir) is KL_ERR_INVAL / KL_ERR_IO / KL_ERR_AUTH with a message. */
int kla_agent_new(kla_agent_t **out, const kla_agent_config_t *cfg, char *err);
/* Says Goodbye, kills running compilers and kernels, stops every thread,
 * removes a workdir it made, NULLs *self_p. */
void kla_agent_destroy(kla_agent_t **self_p);

typedef struct {
    uint64_t hellos;    /* Hello messages sent */
    uint64_t welcomes;  /* Welcome messages received */
    uint64_t goodbyes;  /* Goodbye messages received */
    uint64_t requests;  /* MeasureRequest messages received */
    uint64_t results;   /* MeasureResult messages sent */
    uint64_t cancelled; /* of which CANCELLED */
} kla_agent_stats_t;

/* A snapshot of the counters (any thread). */
void kla_agent_stats(kla_agent_t *self, kla_agent_stats_t *out);

#endif
