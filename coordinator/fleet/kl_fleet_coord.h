/* kl_fleet_coord.h - the coordinator side of a job's fleet, shared by kiln
 * measure and kiln tune (--op and --model): binds the dispatch and, when
 * asked, starts local agents, from the fleet options every such command
 * declares: listen, insecure, local-agents, heartbeat-ms, keys,
 * agent-key-dir.
 *
 * Without --listen: a ROUTER on tcp://127.0.0.1:* secured with ephemeral
 * CURVE keys, and --local-agents (default 1) kiln-agent processes.
 * With --listen EP: binds EP with DIR/coordinator.key and the allow-list
 * DIR/agents (or --agent-key-dir), or no CURVE with --insecure (loopback
 * only); --local-agents defaults to 0 and needs --insecure.
 * Local agents of a command whose --target (an option every such command
 * has) is cuda/... run with --device cuda:all; when they exit 69 (no GPU,
 * no driver), kl_fleet_exit_code says so.
 */
#ifndef KL_FLEET_COORD_H
#define KL_FLEET_COORD_H

#include <stdbool.h>

#include "kl_fleet.h"
#include "kl_dispatch.h"
#include "kl_opt.h"
#include "kl_port_fleet.h"

/* The option rows kl_fleet_coordinator reads (and agent-wait-s, which the
 * job loops read); put them in a command's kl_opt_t table. */
/* clang-format off */
#define KL_FLEET_OPTS \
    {"listen", KL_OPT_STR, NULL, KL_NOBOUNDS, "EP", \
     "bind here and wait for remote agents (e.g. tcp://0.0.0.0:7070)"}, \
    {"local-agents", KL_OPT_INT, NULL, 0, 1024, "N", \
     "kiln-agent processes to start here (default 1, or 0 with --listen)"}, \
    {"keys", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR", \
     "with --listen: DIR/coordinator.key and .pub, allow-list DIR/agents"}, \
    {"agent-key-dir", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR", \
     "allow-list of agent public keys (*.pub) instead of KEYS/agents"}, \
    {"insecure", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL, \
     "no CURVE (loopback endpoints only)"}, \
    {"agent-wait-s", KL_OPT_DOUBLE, "30", 0.1, 1e6, "S", \
     "fail when no agent of the target is connected for this long"}, \
    {"heartbeat-ms", KL_OPT_INT, "1000", 10, 60000, "MS", \
     "heartbeat interval (agents silent for 3 are lost)"},
/* The option rows of a job that may run on a shared head node instead
 * (kiln serve): --fleet EP, --name, --weight, --key. */
#define KL_HEAD_OPTS \
    {"fleet", KL_OPT_STR, NULL, KL_NOBOUNDS, "EP", \
     "measure on a shared head node (kiln serve --clients EP) instead"}, \
    {"name", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME", \
     "with --fleet: this job's name on the head (unique there)"}, \
    {"weight", KL_OPT_INT, "1", 1, 1000, "W", \
     "with --fleet: this job's share of the agents, against other jobs'"}, \
    {"key", KL_OPT_STR, "client", KL_NOBOUNDS, "NAME", \
     "with --fleet: this side's keypair KEYS/NAME.key (a client key)"},
/* clang-format on */

/* who names the command in the "listening on" line ("kiln tune"). Local
 * agents simulate when simulate is set or the target is a simulated CPU
 * target ("sim/cpu...", kl_target.h); a CUDA target's (simulated or not)
 * serve every GPU here. On success *disp is bound and *fleet (NULL when
 * no local agent was asked for) is running; on failure both may be set
 * and are the caller's to destroy. */
int kl_fleet_coordinator(const kl_opts_t *o, const char *who, bool simulate,
                         kl_fleet_t **fleet, kl_dispatch_t **disp, char *err);

/* --fleet: checks that the fleet options do not clash (--fleet excludes
 * --listen and --local-agents) and, when --fleet is given, connects to the
 * head as job `name` (the --name option, else default_name; NULL: --name
 * is required) wanting target, and prints "WHO: job NAME on head EP".
 * *out stays NULL without --fleet. KL_ERR_INVAL for a usage error. */
int kl_fleet_head(const kl_opts_t *o, const char *who, const char *target,
                  const char *default_name, kl_port_fleet_t **out, char *err);
/* The usage half of kl_fleet_head, for a command that checks its options
 * before it starts anything. */
int kl_fleet_head_check(const kl_opts_t *o, bool name_required, char *err);

#endif
