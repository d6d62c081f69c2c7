/* kiln keygen - a CURVE keypair for a coordinator or an agent. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_net.h"
#include "kl_opt.h"
#include "kl_util.h"

#define S_USAGE                                                                \
    "usage: kiln keygen DIR NAME [--client | --operator | --agent-key]\n"      \
    "Writes DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub (public), and\n" \
    "prints the public key. Never overwrites a key. The coordinator's pair\n"  \
    "is KEYS/coordinator (kiln measure --keys KEYS); give its .pub to every\n" \
    "agent (kiln-agent --coordinator-key FILE) and put each agent's .pub in\n" \
    "KEYS/agents/, the coordinator's allow directory (picked up while it\n"    \
    "runs). --client (--agent-key) also copies NAME.pub into DIR/clients/\n"   \
    "(DIR/agents/), the allow list of a kiln serve --keys DIR: a client key\n" \
    "submits work to the head, an agent key measures; neither can do the\n"    \
    "other. --operator copies it into DIR/operators/: a client key that may\n" \
    "also drain agents and see every job. See docs/protocol.md.\n"

static const kl_opt_t s_opts[] = {
    {"client", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "allow-list the key as a client of kiln serve (DIR/clients/NAME.pub)"},
    {"operator", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "allow-list the key as an operator of kiln serve, a client that may "
     "drain agents and see every job (DIR/operators/NAME.pub)"},
    {"agent-key", KL_OPT_BOOL, NULL, KL_NOBOUNDS, NULL,
     "allow-list the key as an agent (DIR/agents/NAME.pub)"},
    KL_OPT_END,
};

int kiln_cmd_keygen(int argc, char **argv)
{
    char err[KL_ERRMSG_LEN];
    kl_opts_t *o = NULL;
    if (kl_opts_parse(s_opts, argc, argv, &o, err) != KL_OK) {
        fprintf(stderr, "kiln keygen: %s\n%s", err, S_USAGE);
        return 2;
    }
    if (kl_opts_help_asked(o)) {
        fputs(S_USAGE, stdout);
        kl_opts_free(&o);
        return 0;
    }
    if (kl_opts_npos(o) != 2) {
        fprintf(stderr, "kiln keygen: want DIR and NAME\n%s", S_USAGE);
        kl_opts_free(&o);
        return 2;
    }
    const char *dir = kl_opts_pos(o, 0), *name = kl_opts_pos(o, 1);
    bool client = kl_opts_bool(o, "client"), op = kl_opts_bool(o, "operator"),
         agent = kl_opts_bool(o, "agent-key");
    if (client + op + agent > 1) {
        fprintf(stderr,
                "kiln keygen: a key is a client's, an operator's or an "
                "agent's, one of them\n%s",
                S_USAGE);
        kl_opts_free(&o);
        return 2;
    }
    int rc = kl_net_keygen(dir, name, err);
    if (rc != KL_OK) {
        fprintf(stderr, "kiln keygen: %s\n", err);
        kl_opts_free(&o);
        return rc == KL_ERR_INVAL ? 2 : 1;
    }
    char *pub = kl_xasprintf("%s/%s.pub", dir, name);
    char key[41];
    rc = kl_net_read_key(pub, key, err);
    if (rc != KL_OK) {
        fprintf(stderr, "kiln keygen: %s\n", err);
    } else {
        printf("public key: %s\n", key);
        printf("secret key: %s/%s.key (mode 0600, keep it on this machine)\n",
               dir, name);
        printf("public key file: %s\n", pub);
    }
    if (rc == KL_OK && (client || op || agent)) {
        const char *sub = client ? "clients" : op ? "operators" : "agents";
        char *adir = kl_xasprintf("%s/%s", dir, sub);
        char *copy = kl_xasprintf("%s/%s.pub", adir, name);
        char line[64];
        snprintf(line, sizeof line, "%s\n", key);
        rc = kl_mkdirs(adir, err);
        if (rc == KL_OK)
            rc = kl_write_file(copy, line, strlen(line), err);
        if (rc == KL_OK)
            printf("allow-listed as %s: %s\n",
                   client ? "a client"
                   : op   ? "an operator"
                          : "an agent",
                   copy);
        else
            fprintf(stderr, "kiln keygen: %s\n", err);
        free(copy);
        free(adir);
    }
    free(pub);
    kl_opts_free(&o);
    return rc == KL_OK ? 0 : 1;
}
