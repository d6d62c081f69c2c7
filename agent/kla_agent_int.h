/* kla_agent_int.h - what agent.c (protocol, actor loop) and work.c (jobs,
 * queues, build and run threads) share. Private to agent/. */
#ifndef KLA_AGENT_INT_H
#define KLA_AGENT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "kla_agent.h"
#include "kla_backend.h"
#include "kla_device.h"
#include "kla_measure.h"

/* One MeasureRequest's shared part; immutable once queued, so build and
 * run threads read it freely. refs is touched by the actor only. */
typedef struct {
    int refs;
    uint64_t request_id, epoch;
    int dev; /* index into the agent's devices (device_index) */
    kla_problem_t problem;
    char *ref_source, *ref_entry;
    size_t ref_len;
} kla_req_t;

/* One candidate on its way through the agent. */
typedef struct kla_job_s {
    kla_req_t *req;
    uint64_t cand_id;
    char *source, *entry;
    size_t len;
    kla_launch_t launch; /* kinds that launch grids */
    double t_recv;       /* when the request arrived */
    double t_enq;        /* when it entered its current queue */
    double blocked_s;    /* waited for other candidates (not overhead) */
    bool finished;       /* res is final (build failed) */
    char ref_so[PATH_MAX];
    kla_build_t build;
    kla_result_t res;
    struct kla_job_s *next;
} kla_job_t;

typedef struct {
    kla_job_t *head, *tail;
    int n;
} kla_queue_t;

typedef struct {
    void *sock; /* actor's end of the PAIR */
    pthread_t thread;
    bool busy, started;
    double idle_since;
} kla_worker_t;

struct kla_agent_s {
    kla_agent_config_t cfg;
    char name[256], hostname[256];
    char workdir[PATH_MAX];
    bool own_workdir;
    kla_device_t host;
    kla_env_t env; /* what the backends get */
    kla_cores_t measure, build;
    bool measure_given, disjoint;
    int build_slots;
    void *zctx;
    void *pipe_api, *pipe_actor; /* "$TERM" to the actor */
    pthread_t actor;
    bool actor_started;
    kl_net_t *net;
    kla_worker_t *builders;
    kla_queue_t build_q;
    /* The devices, in Hello's order: those of one kind are contiguous, in
     * kind order (kinds[k] says where). Each has a runner thread and a
     * queue of built jobs. */
    int ndev;
    kla_dev_t dev[KLA_MAX_DEVICES];
    struct {
        int first, n;
    } kinds[KL_TARGET__KINDS];
    kla_worker_t run_w[KLA_MAX_DEVICES];
    kla_queue_t run_q[KLA_MAX_DEVICES];
    /* actor state */
    uint64_t epoch;
    bool welcomed, stopping;
    int hb_ms;
    uint64_t hb_seq;
    double last_heard, next_hb, next_hello;
    int held; /* candidates of this epoch not answered yet */
    _Atomic uint64_t st_hellos, st_welcomes, st_goodbyes, st_requests,
        st_results, st_cancelled;
};

/* work.c */
/* Starts the build and run threads with their PAIR sockets. */
int kla_agent__work_start(kla_agent_t *a, char *err);
/* Kills running work, waits for every thread, closes the sockets. */
void kla_agent__work_stop(kla_agent_t *a);
/* Hands queued jobs to idle threads. */
void kla_agent__work_dispatch(kla_agent_t *a);
/* A thread gave a job back (socket readable): the next step or the
 * result. */
void kla_agent__work_collect(kla_agent_t *a, kla_worker_t *w, bool runner);
/* The device of a request's device_index; KL_ERR_INVAL naming the index
 * when the agent has no such device. */
int kla_agent__work_device(const kla_agent_t *a, uint32_t index, int *dev,
                           char *err);
/* Queues the candidates of a checked request for device dev. */
void kla_agent__work_add(kla_agent_t *a, const Kiln__MeasureRequest *m,
                         const kla_problem_t *p, int dev);
/* Drops queued jobs: of one request (cancel: answered CANCELLED) or all
 * (forget: no answer). */
void kla_agent__work_cancel(kla_agent_t *a, uint64_t request_id);
void kla_agent__work_forget(kla_agent_t *a);

/* agent.c */
/* Sends one MeasureResult built from the fields given. */
void kla_agent__send_result(kla_agent_t *a, uint64_t request_id,
                            uint64_t cand_id, const kla_result_t *r,
                            const kla_build_t *b, double overhead_s,
                            bool simulated);

#endif
