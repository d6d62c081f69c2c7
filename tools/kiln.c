/* kiln - the user's command line. Each subcommand lives in its own file;
 * this file only dispatches. */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kiln_cmds.h"
#include "kl_log.h"

static const kiln_cmd_t s_cmds[] = {
    {"db", kiln_cmd_db, "look into a record store: ls, best, export, import"},
    {"keygen", kiln_cmd_keygen, "make a CURVE keypair (DIR NAME)"},
    {"measure", kiln_cmd_measure,
     "measure candidate kernels of one workload on agents"},
    {"tune", kiln_cmd_tune,
     "tune an operator (--op) or a model's tasks (--model): search, "
     "measure, record"},
    {"serve", kiln_cmd_serve,
     "a head node: a fleet of agents that several jobs share"},
    {"fleet", kiln_cmd_fleet,
     "ask a head node: status, drain AGENT, undrain AGENT"},
    {"extract", kiln_cmd_extract,
     "the tuning tasks of a model (built-in, graph file or ONNX)"},
    {"space", kiln_cmd_space,
     "sample a workload's design space: traces and generated code"},
    {"export", kiln_cmd_export,
     "best records of a model's tasks as source and a shared library"},
    {"run", kiln_cmd_run,
     "run an exported model, check it against naive, time it"},
    {"report", kiln_cmd_report,
     "an HTML page (inline SVG plots) of a record store's results"},
    {NULL, NULL, NULL},
};

static void s_usage(FILE *f)
{
    fprintf(f, "usage: kiln COMMAND [options]   (kiln COMMAND --help)\n\n"
               "Commands:\n");
    for (const kiln_cmd_t *c = s_cmds; c->name; c++)
        fprintf(f, "  %-10s %s\n", c->name, c->summary);
}

/* kiln links libgomp (through xgboost). Under OMP_PROC_BIND (or
 * OMP_PLACES, GOMP_CPU_AFFINITY) libgomp binds the initial thread to one
 * CPU as it loads, before main: every agent the local fleet then forks,
 * and every kernel those agents measure, would inherit that one CPU and
 * run its threads on it (a 2-thread conv2d measured 1.5-2.3x slower, and
 * ranked differently). The binding is meant for OpenMP's own threads, not
 * for kiln's processes: the initial thread gets back every CPU the cpuset
 * allows (the kernel intersects the mask with it). An outer `taskset`
 * cannot be told apart from libgomp's binding and is lost with it. */
static void s_unbind(void)
{
    const char *vars[] = {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"};
    bool bound = false;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        bound = bound || (v && *v && strcasecmp(v, "false") != 0);
    }
    if (!bound)
        return;
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; c++)
        CPU_SET(c, &all);
    if (sched_setaffinity(0, sizeof all, &all) != 0)
        kl_warn("kiln: could not undo OpenMP's binding of the main thread "
                "(%s): local agents may measure on one CPU",
                strerror(errno));
}

int main(int argc, char **argv)
{
    kl_log_init("kiln");
    s_unbind();
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        s_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (const kiln_cmd_t *c = s_cmds; c->name; c++)
        if (strcmp(c->name, argv[1]) == 0)
            return c->fn(argc - 2, argv + 2);
    fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
    s_usage(stderr);
    return 2;
}
