/* itest_tool - helpers for the integration scripts.
 *
 *   itest_tool check DB ARGS_TEXT REF_FILE [--not-agent NAME] FILE=STATUS...
 *     Every FILE has exactly one record in the store DB (found by the hash of
 *     its source, under the workload key kiln measure uses), with STATUS;
 *     the workload has no other record; no record was made by agent NAME.
 *     Prints one line per record and exits 0, or 1 naming each mismatch.
 *
 *   itest_tool hello99 ENDPOINT
 *     Connects (insecure) and sends a Hello of protocol major 99; expects a
 *     Goodbye whose reason names both 99 and this build's version. Exit 0
 *     when it comes, 1 otherwise.
 *
 *   itest_tool hello ENDPOINT MAJOR.MINOR WANT
 *     The same with a Hello of version MAJOR.MINOR; the Goodbye's reason
 *     must name MAJOR.MINOR and contain WANT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_net.h"
#include "kl_store.h"
#include "kl_util.h"

typedef struct {
    int n;
    char **file;
    char **want;
    uint8_t (*hash)[16];
    int *count;
    int *status;
    char **agent;
    const char *not_agent;
    int others;
    int bad_agent;
} s_check_t;

static const char *s_name(int st)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&kiln__status__descriptor, st);
    return v ? v->name + 7 : "UNKNOWN";
}

static int s_on_record(const Kiln__TuningRecord *r, void *arg)
{
    s_check_t *c = arg;
    if (c->not_agent && r->agent && !strcmp(r->agent, c->not_agent))
        c->bad_agent++;
    for (int i = 0; i < c->n; i++)
        if (r->trace_hash.len == 16 &&
            !memcmp(r->trace_hash.data, c->hash[i], 16)) {
            c->count[i]++;
            c->status[i] = r->status;
            free(c->agent[i]);
            c->agent[i] = kl_xstrdup(r->agent ? r->agent : "");
            return 0;
        }
    c->others++;
    return 0;
}

static int s_check(int argc, char **argv)
{
    if (argc < 4)
        return fprintf(stderr, "check: DB ARGS REF [--not-agent N] F=S...\n"),
               2;
    char err[KL_ERRMSG_LEN];
    char *ref;
    if (kl_read_file(argv[2], &ref, NULL, err) != KL_OK)
        return fprintf(stderr, "check: %s\n", err), 1;
    kl_buf_t kb = {0};
    kl_buf_puts(&kb, argv[1]);
    kl_buf_puts(&kb, ref);
    uint8_t key[16];
    kl_hash128(kb.data, kb.len, key);
    kl_buf_free(&kb);
    free(ref);
    s_check_t c = {0};
    int first = 3;
    if (argc > 4 && !strcmp(argv[3], "--not-agent")) {
        c.not_agent = argv[4];
        first = 5;
    }
    c.n = argc - first;
    c.file = kl_xcalloc((size_t)c.n, sizeof *c.file);
    c.want = kl_xcalloc((size_t)c.n, sizeof *c.want);
    c.hash = kl_xcalloc((size_t)c.n, sizeof *c.hash);
    c.count = kl_xcalloc((size_t)c.n, sizeof *c.count);
    c.status = kl_xcalloc((size_t)c.n, sizeof *c.status);
    c.agent = kl_xcalloc((size_t)c.n, sizeof *c.agent);
    for (int i = 0; i < c.n; i++) {
        char *eq = strrchr(argv[first + i], '=');
        if (!eq)
            return fprintf(stderr, "check: '%s' is not FILE=STATUS\n",
                           argv[first + i]),
                   2;
        c.file[i] =
            kl_xstrndup(argv[first + i], (size_t)(eq - argv[first + i]));
        c.want[i] = eq + 1;
        char *src;
        if (kl_read_file(c.file[i], &src, NULL, err) != KL_OK)
            return fprintf(stderr, "check: %s\n", err), 1;
        kl_hash128(src, strlen(src), c.hash[i]);
        free(src);
    }
    kl_store_t *st;
    if (kl_store_open(&st, argv[0], KL_STORE_RDONLY, err) != KL_OK ||
        kl_store_foreach_record(st, key, NULL, s_on_record, &c, err) != KL_OK)
        return fprintf(stderr, "check: %s\n", err), 1;
    kl_store_close(&st);
    int bad = 0;
    for (int i = 0; i < c.n; i++) {
        const char *got = c.count[i] ? s_name(c.status[i]) : "-";
        bool ok = c.count[i] == 1 && !strcmp(got, c.want[i]);
        printf("%-4s %-40s records=%d status=%s want=%s agent=%s\n",
               ok ? "ok" : "BAD", c.file[i], c.count[i], got, c.want[i],
               c.agent[i] ? c.agent[i] : "-");
        bad += !ok;
        free(c.file[i]);
        free(c.agent[i]);
    }
    if (c.others)
        printf("BAD  %d record(s) of no listed file\n", c.others), bad++;
    if (c.bad_agent)
        printf("BAD  %d record(s) by agent %s\n", c.bad_agent, c.not_agent),
            bad++;
    printf("%s: %d file(s), %d problem(s)\n", bad ? "FAIL" : "PASS", c.n, bad);
    free(c.file);
    free(c.want);
    free(c.hash);
    free(c.count);
    free(c.status);
    free(c.agent);
    return bad ? 1 : 0;
}

static int s_hello(const char *ep, unsigned major, unsigned minor,
                   const char *want)
{
    char err[KL_ERRMSG_LEN];
    kl_net_security_t sec = {.insecure = true};
    kl_net_t *net;
    if (kl_net_client_new(&net, ep, &sec, err) != KL_OK)
        return fprintf(stderr, "hello: %s\n", err), 1;
    Kiln__DeviceInfo dev = KILN__DEVICE_INFO__INIT;
    Kiln__DeviceInfo *devs[1] = {&dev};
    dev.kind = "cpu";
    dev.target = "cpu/x86_64";
    Kiln__Hello h = KILN__HELLO__INIT;
    h.agent_name = "from-the-future";
    h.build_slots = 1;
    h.n_devices = 1;
    h.devices = devs;
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    env.body_case = KILN__ENVELOPE__BODY_HELLO;
    env.hello = &h;
    env.version_major = major;
    env.version_minor = minor;
    /* kl_net_send stamps this build's version; send the bytes by hand. */
    size_t len;
    void *buf = kl_net_encode(&env, &len);
    int sent = zmq_send(kl_net_socket(net), buf, len, 0);
    free(buf);
    if (sent < 0)
        return fprintf(stderr, "hello: send failed\n"), 1;
    int rc = 1;
    double until = kl_now_s() + 10;
    while (kl_now_s() < until && rc) {
        Kiln__Envelope *in = NULL;
        kl_peer_t peer;
        if (kl_net_recv(net, &peer, &in, 500, err) != KL_OK)
            continue;
        if (in->body_case == KILN__ENVELOPE__BODY_GOODBYE) {
            const char *why = in->goodbye->reason;
            char theirs[32];
            snprintf(theirs, sizeof theirs, "%u.%u", major, minor);
            printf("Goodbye: %s\n", why);
            rc = strstr(why, theirs) && strstr(why, want) ? 0 : 1;
            if (rc)
                printf("FAIL: the reason does not name %s and %s\n", theirs,
                       want);
            kl_net_envelope_free(&in);
            break;
        }
        printf("FAIL: got message %d instead of Goodbye\n", in->body_case);
        kl_net_envelope_free(&in);
        break;
    }
    if (rc && kl_now_s() >= until)
        printf("FAIL: no Goodbye within 10 s\n");
    kl_net_destroy(&net);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "check"))
        return s_check(argc - 2, argv + 2);
    if (argc == 3 && !strcmp(argv[1], "hello99")) {
        char ours[32];
        snprintf(ours, sizeof ours, "%d.%d", KL_PROTO_MAJOR, KL_PROTO_MINOR);
        return s_hello(argv[2], 99, 7, ours);
    }
    unsigned ma, mi;
    if (argc == 5 && !strcmp(argv[1], "hello") &&
        sscanf(argv[3], "%u.%u", &ma, &mi) == 2)
        return s_hello(argv[2], ma, mi, argv[4]);
    fprintf(stderr,
            "usage: itest_tool check DB ARGS REF [--not-agent N] "
            "FILE=STATUS... | hello99 EP | hello EP MAJOR.MINOR WANT\n");
    return 2;
}
