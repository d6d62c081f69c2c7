/* kiln fleet - ask a head node (kiln serve) for its status, or drain and
 * undrain its agents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_log.h"
#include "kl_opt.h"
#include "kl_port_fleet.h"
#include "kl_util.h"

static const kl_opt_t s_opts[] = {
    {"head", KL_OPT_STR, NULL, KL_NOBOUNDS, "EP",
     "the head's client endpoint (kiln serve --clients)"},
    {"keys", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "DIR/KEY.key (a client key) and DIR/coordinator.pub (the head's)"},
    {"key", KL_OPT_STR, "client", KL_NOBOUNDS, "NAME",
     "name of this side's keypair in --keys"},
    {"insecure", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "no CURVE (loopback endpoints only)"},
    {"json", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL, "status as one JSON object"},
    {"timeout-s", KL_OPT_DOUBLE, "10", 0.1, 3600, "S",
     "fail when the head does not answer this long"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln fleet (status | drain AGENT | undrain AGENT) --head EP\n"
    "                  (--keys DIR [--key NAME] | --insecure) [--json]\n"
    "status: the head's agents and jobs (only this key's jobs unless it is\n"
    "an operator key, in the head's KEYS/operators/). drain: the agent\n"
    "finishes what it holds and is given no more work; undrain gives it\n"
    "work again; both need an operator key.\n"
    "Exit codes: 0 ok, 1 the head did not answer or refused, 2 usage, 3 no\n"
    "agent of that name.";

static void s_json_str(const char *s)
{
    putchar('"');
    for (const char *p = s ? s : ""; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if ((unsigned char)*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

static void s_json_strs(char **v, size_t n)
{
    putchar('[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            putchar(',');
        s_json_str(v[i]);
    }
    putchar(']');
}

static void s_print_json(const Kiln__StatusReply *r)
{
    printf("{\"head\":");
    s_json_str(r->head_id);
    printf(",\"all_jobs\":%s", r->all_jobs ? "true" : "false");
    printf(",\"agents\":[");
    for (size_t i = 0; i < r->n_agents; i++) {
        const Kiln__AgentStatus *a = r->agents[i];
        printf("%s{\"name\":", i ? "," : "");
        s_json_str(a->name);
        printf(",\"host\":");
        s_json_str(a->hostname);
        printf(",\"targets\":");
        s_json_strs(a->device_targets, a->n_device_targets);
        printf(",\"devices\":");
        s_json_strs(a->device_names, a->n_device_names);
        printf(",\"build_slots\":%u,\"busy\":%u,\"results\":%llu,"
               "\"failures\":%llu,\"last_seen_s\":%.3f,\"drained\":%s,"
               "\"unsandboxed\":%s}",
               a->build_slots, a->busy, (unsigned long long)a->results,
               (unsigned long long)a->failures, a->last_seen_s,
               a->drained ? "true" : "false",
               a->unsandboxed ? "true" : "false");
    }
    printf("],\"jobs\":[");
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Kiln__JobStatus *j = r->jobs[i];
        printf("%s{\"name\":", i ? "," : "");
        s_json_str(j->name);
        printf(",\"owner_key\":");
        s_json_str(j->owner_key);
        printf(",\"targets\":");
        s_json_strs(j->targets, j->n_targets);
        printf(",\"weight\":%u,\"queued\":%llu,\"in_flight\":%llu,"
               "\"done\":%llu,\"rate\":%.3f,\"state\":",
               j->weight, (unsigned long long)j->queued,
               (unsigned long long)j->in_flight, (unsigned long long)j->done,
               j->rate);
        s_json_str(j->state);
        printf(",\"waiting_target\":");
        s_json_str(j->waiting_target);
        putchar('}');
    }
    printf("]}\n");
}

/* minor: the reply's protocol minor (all_jobs came with 6). */
static void s_print_table(const Kiln__StatusReply *r, uint32_t minor)
{
    printf("head %s: %zu agent(s), %zu job(s)%s\n\n", r->head_id, r->n_agents,
           r->n_jobs,
           minor >= 6 && !r->all_jobs
               ? " of this client key (an operator key, in the head's "
                 "KEYS/operators/, sees every job)"
               : "");
    printf("%-16s %-16s %-24s %5s %4s %8s %8s %6s %s\n", "AGENT", "HOST",
           "TARGET", "SLOTS", "BUSY", "RESULTS", "FAILURES", "SEEN", "");
    for (size_t i = 0; i < r->n_agents; i++) {
        const Kiln__AgentStatus *a = r->agents[i];
        printf("%-16s %-16s %-24s %5u %4u %8llu %8llu %5.1fs %s\n", a->name,
               a->hostname, a->n_device_targets ? a->device_targets[0] : "-",
               a->build_slots, a->busy, (unsigned long long)a->results,
               (unsigned long long)a->failures, a->last_seen_s,
               a->drained && a->unsandboxed ? "drained UNSANDBOXED"
               : a->drained                 ? "drained"
               : a->unsandboxed             ? "UNSANDBOXED"
                                            : "");
    }
    printf("\n%-20s %-24s %6s %8s %9s %8s %8s %s\n", "JOB", "TARGETS", "WEIGHT",
           "QUEUED", "IN FLIGHT", "DONE", "RATE/S", "STATE");
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Kiln__JobStatus *j = r->jobs[i];
        printf("%-20s %-24s %6u %8llu %9llu %8llu %8.1f ", j->name,
               j->n_targets ? j->targets[0] : "-", j->weight,
               (unsigned long long)j->queued, (unsigned long long)j->in_flight,
               (unsigned long long)j->done, j->rate);
        if (strcmp(j->state, "waiting") == 0)
            printf("waiting for an agent of target %s\n", j->waiting_target);
        else
            printf("%s\n", *j->state ? j->state : "-"); /* a 1.2 head: "" */
    }
}

static int s_connect(const kl_opts_t *o, kl_port_fleet_t **pf, char *err)
{
    const char *head = kl_opts_str(o, "head"), *keys = kl_opts_str(o, "keys");
    bool insecure = kl_opts_bool(o, "insecure");
    if (!head)
        return kl_seterr(err, KL_ERR_INVAL, "--head EP is required");
    if (!insecure && !keys)
        return kl_seterr(err, KL_ERR_INVAL, "--keys DIR or --insecure");
    char *server = keys ? kl_xasprintf("%s/coordinator.pub", keys) : NULL;
    kl_port_fleet_config_t cfg = {.endpoint = head};
    cfg.security.insecure = insecure;
    if (!insecure) {
        cfg.security.keys_dir = keys;
        cfg.security.name = kl_opts_str(o, "key");
        cfg.security.server_key_file = server;
    }
    int rc = kl_port_fleet_new(pf, &cfg, err);
    free(server);
    return rc;
}

int kiln_cmd_fleet(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err) != KL_OK) {
        fprintf(stderr, "kiln fleet: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&o);
        return 0;
    }
    const char *verb = kl_opts_npos(o) > 0 ? kl_opts_pos(o, 0) : "";
    bool status = strcmp(verb, "status") == 0 && kl_opts_npos(o) == 1;
    bool drain = (strcmp(verb, "drain") == 0 || strcmp(verb, "undrain") == 0) &&
                 kl_opts_npos(o) == 2;
    if (!status && !drain) {
        fprintf(stderr,
                "kiln fleet: want status, drain AGENT or undrain "
                "AGENT\n%s\n",
                s_usage);
        kl_opts_free(&o);
        return 2;
    }
    kl_log_init("kiln fleet");
    int ms = (int)(kl_opts_double(o, "timeout-s") * 1000);
    kl_port_fleet_t *pf = NULL;
    int rc = s_connect(o, &pf, err), code = 0;
    if (rc == KL_ERR_INVAL)
        code = 2;
    if (rc == KL_OK && status) {
        Kiln__Envelope *env = NULL;
        rc = kl_port_fleet_status(pf, &env, ms, err);
        if (rc == KL_OK && kl_opts_bool(o, "json"))
            s_print_json(env->status_reply);
        else if (rc == KL_OK)
            s_print_table(env->status_reply, env->version_minor);
        kl_net_envelope_free(&env);
    } else if (rc == KL_OK) {
        size_t n = 0;
        bool un = verb[0] == 'u';
        rc = kl_port_fleet_drain(pf, kl_opts_pos(o, 1), un, &n, ms, err);
        if (rc == KL_OK && n == 0) {
            fprintf(stderr, "kiln fleet: no agent %s on the head\n",
                    kl_opts_pos(o, 1));
            code = 3;
        } else if (rc == KL_OK) {
            printf("%s %s (%zu agent%s)\n", un ? "undrained" : "drained",
                   kl_opts_pos(o, 1), n, n == 1 ? "" : "s");
        }
    }
    if (rc != KL_OK) {
        fprintf(stderr, "kiln fleet: %s\n", err);
        if (!code)
            code = 1;
    }
    kl_port_fleet_destroy(&pf);
    kl_opts_free(&o);
    return code;
}
