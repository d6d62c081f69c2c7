/* kiln_tune_model.h - `kiln tune --model`: the model-level driver.
 *
 * tools/kiln_tune.c tunes one operator (--op). When its arguments carry
 * --model, kiln_cmd_tune hands them, unchanged, to kiln_tune_model, which
 * has its own option table (the fleet, search and evaluator options of
 * --op, plus the scheduler's) and returns the process exit code. The two
 * files share nothing else: kiln_tune.c owns --op, this one owns --model.
 */
#ifndef KILN_TUNE_MODEL_H
#define KILN_TUNE_MODEL_H

#include <stdbool.h>

/* True when argv (the arguments after "tune") has --model or --model=. */
bool kiln_tune_model_wanted(int argc, char **argv);

/* Runs `kiln tune --model ...`: extracts the model's tasks, schedules
 * their rounds (round-robin or gradient, hard trial caps), measures them
 * on the fleet, records every result in --db, and prints the summary
 * table. Exit codes as kiln_cmds.h. */
int kiln_tune_model(int argc, char **argv);

#endif
