#include "fleet_coord.h"

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
