/* kl_fleet_coord.c - the coordinator side of a job's fleet; see
 * kl_fleet_coord.h. */
#include "kl_fleet_coord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_target.h"
#include "kl_util.h"

/* The allow-list and keys of a coordinator bound with --listen. */
static int s_listen_security(const kl_opts_t *o, kl_net_security_t *sec,
                             char **allow, char *err)
{
    if (kl_opts_bool(o, "insecure")) {
        sec->insecure = true;
        return KL_OK;
    }
    const char *keys = kl_opts_str(o, "keys");
    if (!keys)
        return kl_seterr(err, KL_ERR_INVAL,
                         "--listen needs --keys DIR (coordinator.key, "
                         "coordinator.pub, and agents/*.pub) or "
                         "--insecure on loopback");
    const char *ad = kl_opts_str(o, "agent-key-dir");
    *allow = ad ? kl_xstrdup(ad) : kl_xasprintf("%s/agents", keys);
    sec->keys_dir = keys;
    sec->name = "coordinator";
    sec->allow_dir = *allow;
    return KL_OK;
}

int kl_fleet_coordinator(const kl_opts_t *o, const char *who, bool simulate,
                         kl_fleet_t **fleet, kl_dispatch_t **disp, char *err)
{
    const char *listen = kl_opts_str(o, "listen");
    bool insecure = kl_opts_bool(o, "insecure");
    int n_local = kl_opts_given(o, "local-agents")
                      ? (int)kl_opts_int(o, "local-agents")
                      : (listen ? 0 : 1);
    if (listen && n_local > 0 && !insecure)
        return kl_seterr(err, KL_ERR_INVAL,
                         "--local-agents with --listen needs --insecure (or "
                         "start kiln-agent with keys yourself)");
    kl_dispatch_config_t cfg = {
        .endpoint = listen ? listen : "tcp://127.0.0.1:*",
        .heartbeat_ms = (int)kl_opts_int(o, "heartbeat-ms"),
        .retries = -1};
    char *allow = NULL;
    int rc = KL_OK;
    if (!listen || n_local > 0) {
        /* Local agents serve every device here of the target's kind (a
         * simulated CUDA target's too: the fake GPU of
         * KILN_FAKE_GPU_WORKER). */
        const char *user = kl_opts_str(o, "target");
        kl_target_kind kind = KL_TARGET_CPU;
        kl_target_kind_of(user, &kind);
        const char *device = kl_target_kind_info(kind)->agent_device;
        kl_fleet_config_t fc = {
            .n_agents = n_local,
            .device = device,
            .insecure = insecure,
            /* The only simulated CPU device is kiln-agent --simulate. */
            .simulate =
                simulate || (kl_target_is_sim(user) && kind == KL_TARGET_CPU),
            .heartbeat_ms = cfg.heartbeat_ms};
        rc = kl_fleet_new(fleet, &fc, err);
        if (rc == KL_OK && !listen)
            cfg.security = *kl_fleet_security(*fleet);
    }
    if (rc == KL_OK && listen)
        rc = s_listen_security(o, &cfg.security, &allow, err);
    if (rc == KL_OK)
        rc = kl_dispatch_new(disp, &cfg, err);
    free(allow);
    if (rc == KL_OK)
        fprintf(stderr, "%s: listening on %s\n", who,
                kl_dispatch_endpoint(*disp));
    if (rc == KL_OK && n_local > 0)
        rc = kl_fleet_start(*fleet, kl_dispatch_endpoint(*disp), err);
    return rc;
}

int kl_fleet_head_check(const kl_opts_t *o, bool name_required, char *err)
{
    if (!kl_opts_str(o, "fleet"))
        return KL_OK;
    if (kl_opts_str(o, "listen") || kl_opts_given(o, "local-agents"))
        return kl_seterr(err, KL_ERR_INVAL,
                         "--fleet excludes --listen and --local-agents (the "
                         "head's agents measure)");
    if (name_required && !kl_opts_str(o, "name"))
        return kl_seterr(err, KL_ERR_INVAL, "--fleet needs --name NAME");
    if (!kl_opts_bool(o, "insecure") && !kl_opts_str(o, "keys"))
        return kl_seterr(err, KL_ERR_INVAL,
                         "--fleet needs --keys DIR (KEY.key and "
                         "coordinator.pub) or --insecure on loopback");
    return KL_OK;
}

int kl_fleet_head(const kl_opts_t *o, const char *who, const char *target,
                  const char *default_name, kl_port_fleet_t **out, char *err)
{
    *out = NULL;
    int rc = kl_fleet_head_check(o, default_name == NULL, err);
    if (rc != KL_OK || !kl_opts_str(o, "fleet"))
        return rc;
    const char *keys = kl_opts_str(o, "keys");
    bool insecure = kl_opts_bool(o, "insecure");
    const char *name = kl_opts_str(o, "name");
    char *server =
        keys && !insecure ? kl_xasprintf("%s/coordinator.pub", keys) : NULL;
    kl_port_fleet_config_t cfg = {.endpoint = kl_opts_str(o, "fleet"),
                                  .name = name ? name : default_name,
                                  .weight = (uint32_t)kl_opts_int(o, "weight"),
                                  .targets = &target,
                                  .n_targets = 1,
                                  .connect_s =
                                      kl_opts_double(o, "agent-wait-s")};
    cfg.security.insecure = insecure;
    if (!insecure) {
        cfg.security.keys_dir = keys;
        cfg.security.name = kl_opts_str(o, "key");
        cfg.security.server_key_file = server;
    }
    rc = kl_port_fleet_new(out, &cfg, err);
    free(server);
    if (rc == KL_OK)
        fprintf(stderr, "%s: job %s on head %s\n", who, cfg.name, cfg.endpoint);
    return rc;
}
