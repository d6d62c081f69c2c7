/* fleet_coord.h - the coordinator side of a job's fleet, shared by kiln
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
 */
#ifndef KILN_FLEET_COORD_H
#define KILN_FLEET_COORD_H

#include <stdbool.h>

#include "fleet.h"
#include "kl_dispatch.h"
#include "kl_opt.h"

/* who names the command in the "listening on" line ("kiln tune"). On
 * success *disp is bound and *fleet (NULL when no local agent was asked
 * for) is running; on failure both may be set and are the caller's to
 * destroy. */
int kl_fleet_coordinator(const kl_opts_t *o, const char *who, bool simulate,
                         kl_fleet_t **fleet, kl_dispatch_t **disp, char *err);

#endif
