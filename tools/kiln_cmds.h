/* kiln_cmds.h - the kiln CLI's subcommands, one file each (tools/kiln_*.c).
 * Each takes the arguments after its own name and returns the process exit
 * code: 0 success, 1 the job failed, 2 bad usage, 3 a missing record (export),
 * 69 a device that is not there. */
#ifndef KILN_CMDS_H
#define KILN_CMDS_H

/* The rows of --batch and --seq (kl_opt.h tables, `KILN_DIM_OPTS,` as
 * one row; 0, their value when not given, leaves the model's input
 * dimensions as they are): the kl_model_opts_t overrides of every command
 * that loads a model. */
/* clang-format off */
#define KILN_DIM_OPTS \
    {"batch", KL_OPT_INT, NULL, 1, 1e9, "N", \
     "--model: dimension 0 of every model input (its batch) becomes N; " \
     "every shape after it follows (docs/models.md)"}, \
    {"seq", KL_OPT_INT, NULL, 1, 1e9, "N", \
     "--model: dimension 1 of every 2-D [batch, seq] or 3-D [batch, seq, " \
     "hidden] model input becomes N (an input of another rank is an " \
     "error)"}
/* clang-format on */

typedef int (*kiln_cmd_fn)(int argc, char **argv);

typedef struct {
    const char *name;
    kiln_cmd_fn fn;
    const char *summary;
} kiln_cmd_t;

int kiln_cmd_db(int argc, char **argv);
int kiln_cmd_keygen(int argc, char **argv);
int kiln_cmd_measure(int argc, char **argv);
int kiln_cmd_tune(int argc, char **argv);
int kiln_cmd_serve(int argc, char **argv);
int kiln_cmd_fleet(int argc, char **argv);

int kiln_cmd_space(int argc, char **argv);
int kiln_cmd_extract(int argc, char **argv);
int kiln_cmd_export(int argc, char **argv);
int kiln_cmd_run(int argc, char **argv);
int kiln_cmd_report(int argc, char **argv);

#endif
