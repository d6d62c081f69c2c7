/* kiln-agent - compiles, runs, verifies and times candidate kernels for a
 * kiln coordinator. Options come from one table (flags > KILN_* > default);
 * SIGTERM or SIGINT say Goodbye and exit cleanly. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_opt.h"
#include "kl_util.h"
#include "kla_agent.h"
#include "kla_backend.h"
#include "kla_jail.h"

static const kl_opt_t s_opts[] = {
    {"connect", KL_OPT_STR, NULL, KL_NOBOUNDS, "EP",
     "coordinator endpoint, e.g. tcp://head:7070 (required)"},
    {"keys", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "directory holding NAME.key and NAME.pub, this agent's CURVE keypair"},
    {"name", KL_OPT_STR, NULL, KL_NOBOUNDS, "NAME",
     "agent name: the key pair's file name and the name in Hello "
     "(default: HOSTNAME-PID; required with --keys)"},
    {"coordinator-key", KL_OPT_STR, NULL, KL_NOBOUNDS, "FILE",
     "the coordinator's public key file (pinned)"},
    {"insecure", KL_OPT_BOOL, "false", KL_NOBOUNDS, NULL,
     "no CURVE: loopback endpoints only, for tests"},
    {"build-slots", KL_OPT_INT, "0", 0, 256, "N",
     "parallel compiles (0: one per core, or per --build-cores core)"},
    {"cc", KL_OPT_STR, "cc", KL_NOBOUNDS, "CC", "C compiler for candidates"},
    {"cflags", KL_OPT_STR, "-O3 -march=native -fopenmp", KL_NOBOUNDS, "FLAGS",
     "compiler flags, split on spaces, no shell quoting (-shared -fPIC are "
     "added; given twice, both are used)"},
    {"workdir", KL_OPT_STR, NULL, KL_NOBOUNDS, "DIR",
     "build directory, kept, so its cache survives restarts (default: a "
     "fresh directory under $TMPDIR, removed on exit)"},
    {"simulate", KL_OPT_BOOL, "false", KL_NOBOUNDS, NULL,
     "answer with synthetic latencies, compiling and running nothing"},
    {"simulate-ms", KL_OPT_INT, "0", 0, 10000, "MS",
     "with --simulate: each answer takes this long (a fleet slower than its "
     "jobs, for tests)"},
    {"heartbeat-ms", KL_OPT_INT, "1000", 10, 600000, "MS",
     "heartbeat interval until the coordinator's Welcome says otherwise"},
    {"measure-cores", KL_OPT_STR, NULL, KL_NOBOUNDS, "LIST",
     "cores that time candidates, e.g. 0-3 (default: all allowed)"},
    {"build-cores", KL_OPT_STR, NULL, KL_NOBOUNDS, "LIST",
     "cores for compilers; when disjoint from --measure-cores builds go on "
     "while candidates are timed, otherwise builds pause during timing"},
    {"max-mem-mb", KL_OPT_INT, "8192", 0, 1 << 24, "N",
     "address-space limit of each kernel process in MiB (0: none)"},
    {"flush-mb", KL_OPT_INT, "0", 0, 1 << 20, "N",
     "MiB written between samples to flush the caches when the evaluator "
     "asks (0: twice the last-level cache, at most 128 MiB: virtual "
     "machines often report the host's whole cache)"},
    {"unsafe-no-sandbox", KL_OPT_BOOL, "false", KL_NOBOUNDS, NULL,
     "run candidates and compilers without the sandbox (bubblewrap: new "
     "namespaces, read-only system, no network) where the machine cannot "
     "make one; a candidate can then read and change what this agent's "
     "user can. The agent's Hello and every result say so"},
    {"device", KL_OPT_STR, "cpu", KL_NOBOUNDS, "LIST",
     "devices to serve: cpu, cuda:0, cuda:0,1, cuda:all, or a mix such as "
     "cpu,cuda:0 (GPUs need the NVIDIA driver; libcuda and NVRTC are "
     "loaded at run time)"},
    KL_OPT_END,
};

static const char *s_usage =
    "usage: kiln-agent --connect EP [--keys DIR --name NAME "
    "--coordinator-key FILE | --insecure] [options]\n\n"
    "Compiles, runs (sandboxed), verifies and times candidate kernels for a "
    "kiln coordinator.\nExit codes: 0 stopped by SIGTERM/SIGINT, 1 could not "
    "start, 2 usage, 69 no such device.";

static int s_run(const kl_opts_t *o)
{
    kla_agent_config_t cfg = {0};
    cfg.endpoint = kl_opts_str(o, "connect");
    cfg.sec.insecure = kl_opts_bool(o, "insecure");
    cfg.sec.keys_dir = kl_opts_str(o, "keys");
    cfg.sec.name = kl_opts_str(o, "name");
    cfg.sec.server_key_file = kl_opts_str(o, "coordinator-key");
    cfg.name = kl_opts_str(o, "name");
    cfg.build_slots = (int)kl_opts_int(o, "build-slots");
    cfg.cc = kl_opts_str(o, "cc");
    /* --cflags given more than once: all of them, in order. */
    const char *const *all = NULL;
    int nall = kl_opts_all(o, "cflags", &all);
    kl_buf_t flags = {0};
    for (int i = 0; i < nall; i++)
        kl_buf_printf(&flags, "%s%s", i ? " " : "", all[i]);
    cfg.cflags = nall > 1 ? flags.data : kl_opts_str(o, "cflags");
    cfg.workdir = kl_opts_str(o, "workdir");
    cfg.simulate = kl_opts_bool(o, "simulate");
    cfg.simulate_ms = (int)kl_opts_int(o, "simulate-ms");
    cfg.heartbeat_ms = (int)kl_opts_int(o, "heartbeat-ms");
    cfg.measure_cores = kl_opts_str(o, "measure-cores");
    cfg.build_cores = kl_opts_str(o, "build-cores");
    cfg.max_mem_mb = (uint64_t)kl_opts_int(o, "max-mem-mb");
    cfg.flush_mb = (uint64_t)kl_opts_int(o, "flush-mb");
    cfg.device = kl_opts_str(o, "device");
    bool unsafe = kl_opts_bool(o, "unsafe-no-sandbox");
    if (unsafe) {
        kla_jail_set_unsafe(true);
        kl_warn("agent: --unsafe-no-sandbox: candidates run without the "
                "sandbox; every result says so");
    } else if (!cfg.simulate) {
        char why[KL_ERRMSG_LEN];
        if (kla_jail_probe(why) != KL_OK) {
            fprintf(stderr,
                    "kiln-agent: cannot sandbox candidates: %s\nkiln-agent: "
                    "refusing to run tenants' code unsandboxed; start it "
                    "with --unsafe-no-sandbox to accept that risk\n",
                    why);
            return 1;
        }
    }

    /* Every thread inherits this mask; only sigwait below sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[KL_ERRMSG_LEN];
    kla_agent_t *agent = NULL;
    int rc = kla_agent_new(&agent, &cfg, err);
    kl_buf_free(&flags);
    if (rc != KL_OK) {
        fprintf(stderr, "kiln-agent: %s\n", err);
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    kl_info("agent: %s, saying goodbye", sig == SIGINT ? "SIGINT" : "SIGTERM");
    kla_agent_destroy(&agent);
    return 0;
}

/* 0 when every device of --device can be served; 69 (with a message)
 * when a device or its driver or compiler is missing; 2 for a malformed
 * list. */
static int s_check_devices(const char *device)
{
    char err[KL_ERRMSG_LEN];
    kla_devspec_t spec;
    if (kla_devspec_parse(device, &spec, err) != KL_OK) {
        fprintf(stderr, "kiln-agent: %s\n", err);
        return 2;
    }
    for (int k = 0; k < KL_TARGET__KINDS; k++) {
        const kla_backend_t *b = kla_backend_of((kl_target_kind)k);
        if (b && b->check && kla_devsel_any(&spec.sel[k]) &&
            b->check(&spec.sel[k], err) != KL_OK) {
            fprintf(stderr, "kiln-agent: device '%s': %s\n", device, err);
            return 69;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* Hidden: a backend's worker process (the GPU worker, kla_cuda.h),
     * started by an agent with its socket on fd 3. */
    int wrc = 0;
    if (kla_backend_worker(argc, argv, &wrc))
        return wrc;
    kl_log_init("agent");
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc - 1, argv + 1, &o, err) != KL_OK) {
        fprintf(stderr, "kiln-agent: %s\n", err);
        kl_opts_print_help(stderr, s_usage, s_opts);
        return 2;
    }
    int rc = 0;
    if (kl_opts_help_asked(o)) {
        kl_opts_print_help(stdout, s_usage, s_opts);
    } else if (kl_opts_npos(o) > 0) {
        fprintf(stderr, "kiln-agent: unexpected argument '%s'\n",
                kl_opts_pos(o, 0));
        rc = 2;
    } else if (!kl_opts_str(o, "connect")) {
        fprintf(stderr, "kiln-agent: --connect EP is required\n");
        rc = 2;
    } else if (!kl_opts_bool(o, "insecure") &&
               (!kl_opts_str(o, "keys") || !kl_opts_str(o, "name") ||
                !kl_opts_str(o, "coordinator-key"))) {
        fprintf(stderr, "kiln-agent: give --keys DIR --name NAME "
                        "--coordinator-key FILE, or --insecure (loopback)\n");
        rc = 2;
    } else if ((rc = s_check_devices(kl_opts_str(o, "device"))) == 0) {
        rc = s_run(o);
    }
    kl_opts_free(&o);
    return rc;
}
