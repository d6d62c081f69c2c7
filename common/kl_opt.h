/* kl_opt.h - command-line options from one table.
 *
 * Each binary (and each kiln subcommand) declares one table of options:
 * name, type, default, bounds, help. The same table drives parsing and
 * --help. A value comes from, in order of precedence: the flag
 * (--name VALUE or --name=VALUE; a bool flag takes no value), the
 * environment (KILN_NAME, upper case, '-' as '_'), the default.
 */
#ifndef KL_OPT_H
#define KL_OPT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    KL_OPT_BOOL,
    KL_OPT_INT,
    KL_OPT_DOUBLE,
    KL_OPT_STR,
} kl_opt_type;

typedef struct {
    const char *name; /* long flag without the dashes: "build-slots" */
    kl_opt_type type;
    const char *def;     /* default as text; NULL: unset */
    double min, max;     /* bounds for numbers; min > max means none */
    const char *metavar; /* shown in --help: "N", "DIR" */
    const char *help;
} kl_opt_t;

/* End a table with KL_OPT_END. */
#define KL_OPT_END                                                             \
    {                                                                          \
        NULL, KL_OPT_BOOL, NULL, 0, 0, NULL, NULL                              \
    }
#define KL_NOBOUNDS 1, 0

/* A numeric default written once: a module defines KL_X_DEF_Y 0.2, uses
 * it in its C defaults, and its option row's default is KL_OPT_DEF
 * (KL_X_DEF_Y), the same token as text ("0.2"). */
#define KL_OPT_DEF_(x) #x
#define KL_OPT_DEF(x) KL_OPT_DEF_(x)

typedef struct kl_opts_s kl_opts_t;

/* Parses argv[0..argc) (argv[0] is NOT skipped: pass argc-1, argv+1 for a
 * program's own arguments). Arguments that are not options are kept as
 * positionals; "--" ends options. An unknown flag, a missing value, a value
 * that is not a number or is out of bounds is KL_ERR_INVAL with a message
 * that names the flag. "--help" / "-h" sets kl_opts_help_asked(). On success
 * *out owns copies of everything; free with kl_opts_free(). */
int kl_opts_parse(const kl_opt_t *table, int argc, char **argv, kl_opts_t **out,
                  char *err);
void kl_opts_free(kl_opts_t **self_p);

bool kl_opts_help_asked(const kl_opts_t *self);
/* True when the value came from a flag or the environment. */
bool kl_opts_given(const kl_opts_t *self, const char *name);
/* Value getters; name must be in the table (asserted). A string option
 * without a value returns NULL. */
const char *kl_opts_str(const kl_opts_t *self, const char *name);
int64_t kl_opts_int(const kl_opts_t *self, const char *name);
double kl_opts_double(const kl_opts_t *self, const char *name);
bool kl_opts_bool(const kl_opts_t *self, const char *name);
/* Every value given for a repeatable string flag, in order (e.g. --cflags
 * given twice). Returns the count; *values is borrowed until free. */
int kl_opts_all(const kl_opts_t *self, const char *name,
                const char *const **values);

int kl_opts_npos(const kl_opts_t *self);
const char *kl_opts_pos(const kl_opts_t *self, int i);

/* Prints "usage" and then one line per option (with its default and
 * bounds, and its KILN_ variable). */
void kl_opts_print_help(FILE *f, const char *usage, const kl_opt_t *table);

#endif
