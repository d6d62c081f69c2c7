/* bench_serve_sim.h - bench_serve's simulated agents: one thread drives a
 * DEALER socket per agent that speaks the agent protocol (Hello / Welcome,
 * heartbeats, credit) and answers each candidate with a simulated OK
 * result, at once or after a hold (bench_serve.c describes the benchmark).
 * The state the agents share with the benchmark's phases is below. */
#ifndef BENCH_SERVE_SIM_H
#define BENCH_SERVE_SIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The device target the simulated agents announce. */
#define S_DEV_TARGET "sim/cpu/bench"

extern atomic_int bs_measuring;  /* agents record latencies */
extern _Atomic double bs_hold_s; /* how long an agent holds a candidate */
extern _Atomic double bs_win_t0; /* start of the measured window */
extern volatile int bs_stop_all; /* agents stop */
extern char bs_curve_dir[256];   /* CURVE keys, "" when insecure */

typedef struct {
    void *sock;
    bool welcomed;
    double next_hb;
    uint64_t hb_seq;
    /* When each credit freed by a result was freed (FIFO, credit long). */
    double *freed;
    size_t f_head, f_n;
} bs_agent_t;

/* A candidate a simulated agent holds until due (the paced phase). */
typedef struct {
    size_t agent;
    uint64_t req_id, cand_id;
    double due;
} bs_held_t;

typedef struct {
    int index;
    void *ctx;
    /* Held candidates (a heap on due) and the hold's random numbers. */
    bs_held_t *held;
    size_t h_n, h_cap;
    uint64_t rng;
    bs_agent_t *agents;
    size_t n;
    size_t first; /* global index of agents[0] */
    uint32_t credit;
    int hb_ms;
    int ep;
    pthread_t th;
    bool started;
    atomic_size_t welcomed;
    /* Latencies of the window, seconds. */
    double *lat;
    size_t n_lat, cap_lat;
    uint64_t requests, results;
} bs_agents_t;

/* Starts n agents (global indices first..first+n-1) in g's own thread,
 * connected to endpoint (CURVE with the keys in bs_curve_dir unless it is
 * ""), each with credit credit and a heartbeat every hb_ms. */
int bs_agents_start(bs_agents_t *g, void *ctx, size_t first, size_t n,
                    uint32_t credit, int hb_ms, const char *endpoint,
                    char *err);

/* Closes g's sockets and frees what it holds (after its thread ended). */
void bs_agents_free(bs_agents_t *g);

#endif
