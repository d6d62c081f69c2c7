/* kiln serve - the head node of a fleet shared by tuning jobs: agents on
 * --agents, jobs (kiln tune --fleet) and kiln fleet on --clients
 * (coordinator/serve/kl_serve.h). Runs until SIGTERM or SIGINT. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_log.h"
#include "kl_metrics_serve.h"
#include "kl_opt.h"
#include "kl_serve.h"

static const kl_opt_t s_opts[] = {
    {"agents", KL_OPT_STR, "tcp://0.0.0.0:7070", KL_NOBOUNDS, "EP",
     "bind here for kiln-agent (allow-list KEYS/agents)"},
    {"clients", KL_OPT_STR, "tcp://0.0.0.0:7071", KL_NOBOUNDS, "EP",
     "bind here for jobs and kiln fleet (allow-list KEYS/clients)"},
    {"keys", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "DIR/coordinator.key and .pub, DIR/agents/*.pub, DIR/clients/*.pub, "
     "DIR/operators/*.pub (clients that may drain and see every job)"},
    {"insecure", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "no CURVE (loopback endpoints only)"},
    {"heartbeat-ms", KL_OPT_INT, "1000", 10, 60000, "MS",
     "heartbeat interval to agents and jobs"},
    {"client-timeout-s", KL_OPT_DOUBLE, "30", 0.1, 1e6, "S",
     "drop a job silent this long (its queued work too)"},
    {"http", KL_OPT_STR, NULL, KL_NOBOUNDS, "ADDR:PORT",
     "serve /metrics (Prometheus text) and / (status page) of the agents "
     "and jobs; a bare PORT listens on 127.0.0.1, port 0 picks a free one"},
    {"state", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "keep what an operator set across restarts: DIR/drained (the agents "
     "drained, applied as they register), and DIR/names (the job names "
     "bound to client keys)"},
    {"name-hold-s", KL_OPT_DOUBLE, KL_OPT_DEF(KL_SERVE_DEF_NAME_HOLD_S), 1, 1e7,
     "S",
     "a job name stays its client key's, an agent name its agent key's, "
     "this long after its job or agent goes (another key is refused)"},
    {"max-queued-per-job", KL_OPT_INT, KL_OPT_DEF(KL_SERVE_DEF_MAX_QUEUED), 1,
     1e9, "N",
     "candidates a job's requests may hold at the head (queued or at "
     "agents); a request past it is refused"},
    {"max-bytes-per-job", KL_OPT_INT, KL_OPT_DEF(KL_SERVE_DEF_MAX_BYTES), 1024,
     1e12, "BYTES",
     "bytes of requests (packed) a job may hold at the head; a request past "
     "it is refused"},
    {"max-candidate-bytes", KL_OPT_INT, KL_OPT_DEF(KL_SERVE_DEF_MAX_CANDIDATE),
     64, 1e7, "BYTES",
     "one candidate's source + entry + trace; a request with a bigger one "
     "is refused"},
    {"max-timeout-ms", KL_OPT_INT, KL_OPT_DEF(KL_SERVE_DEF_MAX_TIMEOUT_MS), 1,
     86400000, "MS",
     "a request's evaluator timeout (one candidate's run); a longer one is "
     "refused"},
    {"max-jobs-per-key", KL_OPT_INT, KL_OPT_DEF(KL_SERVE_DEF_MAX_JOBS_PER_KEY),
     1, 100000, "N", "live jobs one client key may have"},
    KL_OPT_END,
};

static const char s_usage[] =
    "usage: kiln serve [--agents EP] [--clients EP] (--keys DIR | "
    "--insecure)\n"
    "                  [--http ADDR:PORT] [--state DIR] [--name-hold-s S]\n"
    "                  [--max-queued-per-job N] [--max-bytes-per-job BYTES]\n"
    "                  [--max-candidate-bytes BYTES] [--max-timeout-ms MS]\n"
    "                  [--max-jobs-per-key N]\n"
    "The head node of a fleet that several jobs share: agents connect to\n"
    "--agents as to kiln tune --listen, jobs connect with kiln tune --fleet\n"
    "to --clients. Work is shared by weight between the jobs that want a\n"
    "target. A job name belongs to the client key that opened it; keys in\n"
    "KEYS/operators/ may also drain agents and see every job, other clients\n"
    "see their own jobs. A job's requests are held within the --max-*\n"
    "limits; one past a limit is answered with an error naming it.\n"
    "Stores no records; with --state DIR it keeps the agents an\n"
    "operator drained (DIR/drained) and the job names' keys (DIR/names).\n"
    "--http serves the agents and jobs as\n"
    "Prometheus metrics (/metrics) and a status page (/). Runs until\n"
    "SIGTERM or SIGINT.";

static volatile sig_atomic_t s_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

int kiln_cmd_serve(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err) != KL_OK) {
        fprintf(stderr, "kiln serve: %s\n%s\n", err, s_usage);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
        kl_opts_free(&o);
        return 0;
    }
    if (kl_opts_npos(o) > 0) {
        fprintf(stderr, "kiln serve: unexpected argument '%s'\n%s\n",
                kl_opts_pos(o, 0), s_usage);
        kl_opts_free(&o);
        return 2;
    }
    kl_log_init("kiln serve");
    kl_serve_config_t cfg = {
        .agents_endpoint = kl_opts_str(o, "agents"),
        .clients_endpoint = kl_opts_str(o, "clients"),
        .keys_dir = kl_opts_str(o, "keys"),
        .insecure = kl_opts_bool(o, "insecure"),
        .heartbeat_ms = (int)kl_opts_int(o, "heartbeat-ms"),
        .client_timeout_s = kl_opts_double(o, "client-timeout-s"),
        .state_dir = kl_opts_str(o, "state"),
        .name_hold_s = kl_opts_double(o, "name-hold-s"),
        .max_queued_per_job = (size_t)kl_opts_int(o, "max-queued-per-job"),
        .max_bytes_per_job = (size_t)kl_opts_int(o, "max-bytes-per-job"),
        .max_candidate_bytes = (size_t)kl_opts_int(o, "max-candidate-bytes"),
        .max_timeout_ms = (uint32_t)kl_opts_int(o, "max-timeout-ms"),
        .max_jobs_per_key = (size_t)kl_opts_int(o, "max-jobs-per-key")};
    kl_serve_t *s = NULL;
    kl_metrics_serve_t *m = NULL;
    int rc = kl_serve_new(&s, &cfg, err);
    if (rc == KL_OK && kl_opts_str(o, "http"))
        rc = kl_metrics_serve_new(&m, s, kl_opts_str(o, "http"), err);
    if (rc != KL_OK) {
        fprintf(stderr, "kiln serve: %s\n", err);
        kl_serve_destroy(&s);
        kl_opts_free(&o);
        return rc == KL_ERR_INVAL ? 2 : 1;
    }
    kl_serve_on_tick(s, kl_metrics_serve_tick, m);
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (m)
        fprintf(stderr, "kiln serve: metrics on %s/metrics\n",
                kl_metrics_serve_url(m));
    fprintf(stderr, "kiln serve: agents on %s, jobs on %s\n",
            kl_serve_agents_endpoint(s), kl_serve_clients_endpoint(s));
    rc = kl_serve_run(s, &s_stop, err);
    if (rc != KL_OK)
        fprintf(stderr, "kiln serve: %s\n", err);
    kl_metrics_serve_destroy(&m);
    kl_serve_destroy(&s);
    kl_opts_free(&o);
    fprintf(stderr, "kiln serve: stopped\n");
    return rc == KL_OK ? 0 : 1;
}
