/* kiln keygen - a CURVE keypair for a coordinator or an agent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_cmds.h"
#include "kl_err.h"
#include "kl_net.h"
#include "kl_opt.h"
#include "kl_util.h"

#define S_USAGE                                                                \
    "usage: kiln keygen DIR NAME\n"                                            \
    "Writes DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub (public), and\n" \
    "prints the public key. Never overwrites a key. The coordinator's pair\n"  \
    "is KEYS/coordinator (kiln measure --keys KEYS); give its .pub to every\n" \
    "agent (kiln-agent --coordinator-key FILE) and put each agent's .pub in\n" \
    "KEYS/agents/, the coordinator's allow directory (picked up while it\n"    \
    "runs). See docs/protocol.md.\n"

static const kl_opt_t s_opts[] = {
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
    free(pub);
    kl_opts_free(&o);
    return rc == KL_OK ? 0 : 1;
}
