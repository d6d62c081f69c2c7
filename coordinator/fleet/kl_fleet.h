/* kl_fleet.h - a local fleet of kiln-agent processes for `kiln measure`,
 * `kiln tune` and the benchmarks: the agents run as child processes that
 * connect to the coordinator over loopback.
 *
 * Use: kl_fleet_new (makes a temp dir and, unless insecure, ephemeral CURVE
 * keys: a coordinator keypair and one keypair per agent, all allow-listed),
 * bind the coordinator with kl_fleet_security(), kl_fleet_start(endpoint),
 * and kl_fleet_destroy at the end: SIGTERM to every agent, SIGKILL after
 * 2 s to the ones still running, and the temp dir (keys included) removed.
 */
#ifndef KL_FLEET_H
#define KL_FLEET_H

#include <stdbool.h>
#include <stddef.h>

#include "kl_net.h"

typedef struct kl_fleet_s kl_fleet_t;

typedef struct {
    int n_agents;
    /* kiln-agent to run; NULL: kl_fleet_find_agent. */
    const char *agent_path;
    /* No CURVE: the agents get --insecure (loopback only). */
    bool insecure;
    /* Agents get --simulate. */
    bool simulate;
    /* Passed as --heartbeat-ms and --build-slots when > 0. */
    int heartbeat_ms;
    int build_slots;
    /* Agents' stderr goes to this file (appended); NULL: inherited. */
    const char *log_path;
    /* Agents get --device DEV ("cuda:all", "cuda:0", ...); NULL: none
     * (the agent's default, the CPU). */
    const char *device;
    /* Extra arguments for every agent, NULL-terminated (may be NULL). */
    const char *const *extra_args;
} kl_fleet_config_t;

/* Creates the temp dir and the keys. Nothing is started yet. */
int kl_fleet_new(kl_fleet_t **out, const kl_fleet_config_t *cfg, char *err);
/* The security a coordinator binds with to admit exactly these agents
 * (borrowed, valid until destroy). */
const kl_net_security_t *kl_fleet_security(const kl_fleet_t *self);
/* Starts the agents, connecting to endpoint (a resolved loopback address,
 * e.g. from kl_dispatch_endpoint). */
int kl_fleet_start(kl_fleet_t *self, const char *endpoint, char *err);
/* Number of agent processes still running (reaps the ones that exited). */
size_t kl_fleet_running(kl_fleet_t *self);
/* The exit status of the last agent seen to exit with a non-zero status
 * (by kl_fleet_running), 0 when none did: 69 is kiln-agent's "no such
 * device" (no GPU, no driver), 2 a usage error. */
int kl_fleet_exit_code(const kl_fleet_t *self);
/* Stops every agent (SIGTERM, then SIGKILL after 2 s), waits for them and
 * removes the temp dir. NULLs *self_p; safe on NULL. */
void kl_fleet_destroy(kl_fleet_t **self_p);

/* Finds kiln-agent: $KILN_AGENT, then next to this executable, then the
 * build tree (../agent/kiln-agent, ../../agent/kiln-agent), then PATH.
 * KL_ERR_NOTFOUND with the places tried. */
int kl_fleet_find_agent(char *out, size_t len, char *err);

/* Removes a directory tree (no symlinks followed). */
int kl_fleet_rmtree(const char *path, char *err);

#endif
