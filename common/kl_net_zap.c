/* kl_net_zap.c - the process-wide zmq context and its ZAP handler.
 *
 * libzmq asks the handler bound on inproc://zeromq.zap.01 of the socket's
 * own context about every CURVE handshake; with no handler bound it admits
 * everyone. So there is one context per process (ref-counted by the
 * kl_net_t that use it) and one handler thread per context, started before
 * the first CURVE server binds and stopped after the last one closes. Each
 * server carries its own ZAP domain ("kiln-N"), which selects its
 * allow-list directory here.
 *
 * Locks: s_life orders context and thread start/stop; s_lock guards the
 * domain registry, which the handler thread reads. The handler never takes
 * s_life, so joining it under s_life cannot deadlock. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_net_int.h"
#include "kl_util.h"

#define S_ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define S_CTL_ENDPOINT "inproc://kl-net-zap-ctl"
#define S_ZAP_FRAMES 8
#define S_RESCAN_S 0.2

typedef struct s_dom {
    char domain[32];
    char *allow_dir;
    char *also_dir; /* NULL: none */
    char **keys;    /* Z85 public keys of both */
    size_t nkeys;
    uint64_t denied;
    double last_scan;
    char last_denied[41];
    struct s_dom *next;
} s_dom_t;

static pthread_mutex_t s_life = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static void *s_ctx;
static int s_refs;
static bool s_zap_on;
static pthread_t s_zap_thread;
static void *s_zap_ctl; /* our end of the handler's control pipe */
static s_dom_t *s_doms;
static unsigned s_next_id;

/* ---- context ----------------------------------------------------------- */

void *kl_net__ctx_acquire(char *err)
{
    pthread_mutex_lock(&s_life);
    if (!s_ctx) {
        s_ctx = zmq_ctx_new();
        if (!s_ctx) {
            pthread_mutex_unlock(&s_life);
            kl_seterr(err, KL_ERR_IO, "zmq_ctx_new: %s", zmq_strerror(errno));
            return NULL;
        }
        /* Sockets default to linger 0: nothing may hang on exit. */
        zmq_ctx_set(s_ctx, ZMQ_BLOCKY, 0);
    }
    s_refs++;
    void *ctx = s_ctx;
    pthread_mutex_unlock(&s_life);
    return ctx;
}

void kl_net__ctx_release(void)
{
    pthread_mutex_lock(&s_life);
    if (s_refs > 0 && --s_refs == 0) {
        while (zmq_ctx_term(s_ctx) != 0 && errno == EINTR)
            ;
        s_ctx = NULL;
    }
    pthread_mutex_unlock(&s_life);
}

/* ---- allow lists ------------------------------------------------------- */

void kl_net_keys_free(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

/* Reads every DIR/\*.pub; files that are not keys are skipped with a
 * warning naming them. */
static int s_scan_dir(const char *dir, char ***keys, size_t *nkeys, char *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return kl_seterr(err, errno == ENOENT ? KL_ERR_NOTFOUND : KL_ERR_IO,
                         "allow dir %s: %s", dir, strerror(errno));
    char **out = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len <= 4 || strcmp(e->d_name + len - 4, ".pub") != 0)
            continue;
        char *path = kl_xasprintf("%s/%s", dir, e->d_name);
        char key[41], why[KL_ERRMSG_LEN];
        if (kl_net_read_key(path, key, why) != KL_OK) {
            kl_warn("allow list: skipping %s", why);
        } else {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                out = kl_xrealloc(out, cap * sizeof *out);
            }
            out[n++] = kl_xstrdup(key);
        }
        free(path);
    }
    closedir(d);
    *keys = out;
    *nkeys = n;
    return KL_OK;
}

int kl_net_read_key_dir(const char *dir, char ***keys, size_t *n, char *err)
{
    *keys = NULL;
    *n = 0;
    return s_scan_dir(dir, keys, n, err);
}

/* The keys of allow_dir and of also_dir (NULL or missing: none). */
static int s_scan_both(const char *allow_dir, const char *also_dir,
                       char ***keys, size_t *nkeys, char *err)
{
    int rc = s_scan_dir(allow_dir, keys, nkeys, err);
    char **more = NULL, why[KL_ERRMSG_LEN];
    size_t nmore = 0;
    if (rc != KL_OK || !also_dir)
        return rc;
    int rc2 = s_scan_dir(also_dir, &more, &nmore, why);
    if (rc2 != KL_OK && rc2 != KL_ERR_NOTFOUND)
        kl_warn("%s", why);
    if (nmore) {
        *keys = kl_xrealloc(*keys, (*nkeys + nmore) * sizeof **keys);
        memcpy(*keys + *nkeys, more, nmore * sizeof *more);
        *nkeys += nmore;
    }
    free(more);
    return KL_OK;
}

static s_dom_t *s_find(const char *domain)
{
    for (s_dom_t *d = s_doms; d; d = d->next)
        if (strcmp(d->domain, domain) == 0)
            return d;
    return NULL;
}

static bool s_has_key(const s_dom_t *d, const char *key)
{
    for (size_t i = 0; i < d->nkeys; i++)
        if (strcmp(d->keys[i], key) == 0)
            return true;
    return false;
}

/* Decides one handshake: true to admit. Rescans the directory when the key
 * is unknown, so keys dropped in while running are picked up. */
static bool s_admit(const char *domain, const char *key, const char *addr)
{
    pthread_mutex_lock(&s_lock);
    s_dom_t *d = s_find(domain);
    if (d && s_has_key(d, key)) {
        pthread_mutex_unlock(&s_lock);
        return true;
    }
    /* A flood of unknown keys must not turn into a flood of directory
     * scans: at most one per S_RESCAN_S per server. */
    double now = kl_now_s();
    char *dir = NULL, *also = NULL;
    if (d && now - d->last_scan >= S_RESCAN_S) {
        dir = kl_xstrdup(d->allow_dir);
        also = d->also_dir ? kl_xstrdup(d->also_dir) : NULL;
        d->last_scan = now;
    } else if (d) {
        d->denied++;
    }
    pthread_mutex_unlock(&s_lock);
    if (!dir)
        return false; /* a socket of ours without a registered domain */

    char **keys = NULL, err[KL_ERRMSG_LEN];
    size_t nkeys = 0;
    if (s_scan_both(dir, also, &keys, &nkeys, err) != KL_OK)
        kl_warn("%s", err);
    bool ok = false;
    pthread_mutex_lock(&s_lock);
    d = s_find(domain);
    if (d) {
        kl_net_keys_free(d->keys, d->nkeys);
        d->keys = keys;
        d->nkeys = nkeys;
        keys = NULL;
        nkeys = 0;
        ok = s_has_key(d, key);
        if (!ok) {
            d->denied++;
            if (strcmp(d->last_denied, key) != 0)
                kl_warn("refused a client from %s: key %s is not in %s", addr,
                        key, dir);
            else
                kl_debug("refused %s again (key %s)", addr, key);
            snprintf(d->last_denied, sizeof d->last_denied, "%s", key);
        }
    }
    pthread_mutex_unlock(&s_lock);
    kl_net_keys_free(keys, nkeys);
    free(dir);
    free(also);
    return ok;
}

/* ---- the handler thread ------------------------------------------------ */

static void s_send_str(void *sock, const char *s, size_t n, bool more)
{
    zmq_send(sock, s, n, more ? ZMQ_SNDMORE : 0);
}

/* One ZAP request (RFC 27): version, request id, domain, address,
 * identity, mechanism, credentials... -> version, request id, status code,
 * status text, user id, metadata. */
static void s_zap_serve(void *zap)
{
    zmq_msg_t f[S_ZAP_FRAMES];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, zap, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < S_ZAP_FRAMES)
            f[n++] = m;
        else
            zmq_msg_close(&m);
    }
    char domain[64] = "", addr[64] = "", key[41] = "";
    bool ok = false;
    if (n >= 7 && zmq_msg_size(&f[0]) == 3 &&
        memcmp(zmq_msg_data(&f[0]), "1.0", 3) == 0 &&
        zmq_msg_size(&f[5]) == 5 &&
        memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
        zmq_msg_size(&f[6]) == 32 && zmq_msg_size(&f[2]) < sizeof domain) {
        memcpy(domain, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
        size_t al = zmq_msg_size(&f[3]);
        al = al < sizeof addr - 1 ? al : sizeof addr - 1;
        memcpy(addr, zmq_msg_data(&f[3]), al);
        zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
        ok = s_admit(domain, key, addr);
    }
    s_send_str(zap, "1.0", 3, true);
    if (n >= 2)
        zmq_send(zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    else
        s_send_str(zap, "", 0, true);
    s_send_str(zap, ok ? "200" : "400", 3, true);
    const char *text = ok ? "OK" : "key not allowed";
    s_send_str(zap, text, strlen(text), true);
    s_send_str(zap, ok ? key : "", ok ? 40 : 0, true);
    s_send_str(zap, "", 0, false);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

typedef struct {
    void *zap, *ctl;
} s_zap_args_t;

static void *s_zap_main(void *arg)
{
    s_zap_args_t a = *(s_zap_args_t *)arg;
    free(arg);
    zmq_pollitem_t items[2] = {{a.zap, 0, ZMQ_POLLIN, 0},
                               {a.ctl, 0, ZMQ_POLLIN, 0}};
    for (;;) {
        if (zmq_poll(items, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (items[1].revents & ZMQ_POLLIN)
            break; /* "$TERM" */
        if (items[0].revents & ZMQ_POLLIN)
            s_zap_serve(a.zap);
    }
    zmq_close(a.zap);
    zmq_close(a.ctl);
    return NULL;
}

/* Binds the handler's sockets here, so that the ZAP endpoint exists before
 * the caller binds its server, then hands them to the thread. */
static int s_zap_start(char *err)
{
    void *zap = zmq_socket(s_ctx, ZMQ_REP);
    void *ctl = zmq_socket(s_ctx, ZMQ_PAIR);
    void *mine = zmq_socket(s_ctx, ZMQ_PAIR);
    int rc = KL_OK;
    if (!zap || !ctl || !mine)
        rc = kl_seterr(err, KL_ERR_IO, "zap: zmq_socket: %s",
                       zmq_strerror(errno));
    else if (zmq_bind(zap, S_ZAP_ENDPOINT) != 0 ||
             zmq_bind(ctl, S_CTL_ENDPOINT) != 0 ||
             zmq_connect(mine, S_CTL_ENDPOINT) != 0)
        rc = kl_seterr(err, KL_ERR_IO, "zap: bind %s: %s", S_ZAP_ENDPOINT,
                       zmq_strerror(errno));
    if (rc == KL_OK) {
        s_zap_args_t *a = kl_xmalloc(sizeof *a);
        a->zap = zap;
        a->ctl = ctl;
        if (pthread_create(&s_zap_thread, NULL, s_zap_main, a) != 0) {
            free(a);
            rc = kl_seterr(err, KL_ERR_IO, "zap: pthread_create failed");
        }
    }
    if (rc != KL_OK) {
        zmq_close(zap);
        zmq_close(ctl);
        zmq_close(mine);
        return rc;
    }
    s_zap_ctl = mine;
    s_zap_on = true;
    return KL_OK;
}

static void s_zap_stop(void)
{
    zmq_send(s_zap_ctl, "$TERM", 5, 0);
    pthread_join(s_zap_thread, NULL);
    zmq_close(s_zap_ctl);
    s_zap_ctl = NULL;
    s_zap_on = false;
}

int kl_net__zap_register(const char *allow_dir, const char *also_dir,
                         char domain[32], char *err)
{
    char **keys = NULL;
    size_t nkeys = 0;
    int rc = s_scan_both(allow_dir, also_dir, &keys, &nkeys, err);
    if (rc != KL_OK)
        return rc;
    pthread_mutex_lock(&s_life);
    if (!s_ctx)
        rc = kl_seterr(err, KL_ERR_INTERNAL, "zap: no context");
    else if (!s_zap_on)
        rc = s_zap_start(err);
    if (rc != KL_OK) {
        pthread_mutex_unlock(&s_life);
        kl_net_keys_free(keys, nkeys);
        return rc;
    }
    s_dom_t *d = kl_xcalloc(1, sizeof *d);
    d->allow_dir = kl_xstrdup(allow_dir);
    d->also_dir = also_dir ? kl_xstrdup(also_dir) : NULL;
    d->keys = keys;
    d->nkeys = nkeys;
    d->last_scan = kl_now_s();
    pthread_mutex_lock(&s_lock);
    snprintf(d->domain, sizeof d->domain, "kiln-%u", s_next_id++);
    d->next = s_doms;
    s_doms = d;
    memcpy(domain, d->domain, sizeof d->domain);
    pthread_mutex_unlock(&s_lock);
    pthread_mutex_unlock(&s_life);
    if (nkeys == 0)
        kl_warn("allow dir %s holds no *.pub key yet: no client can connect "
                "until one is added",
                allow_dir);
    return KL_OK;
}

void kl_net__zap_unregister(const char *domain)
{
    pthread_mutex_lock(&s_life);
    pthread_mutex_lock(&s_lock);
    s_dom_t **pp = &s_doms, *d = NULL;
    for (; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->domain, domain) == 0) {
            d = *pp;
            *pp = d->next;
            break;
        }
    bool empty = s_doms == NULL;
    pthread_mutex_unlock(&s_lock);
    if (d) {
        kl_net_keys_free(d->keys, d->nkeys);
        free(d->allow_dir);
        free(d->also_dir);
        free(d);
    }
    if (empty && s_zap_on)
        s_zap_stop();
    pthread_mutex_unlock(&s_life);
}

uint64_t kl_net__zap_denied(const char *domain)
{
    pthread_mutex_lock(&s_lock);
    s_dom_t *d = s_find(domain);
    uint64_t n = d ? d->denied : 0;
    pthread_mutex_unlock(&s_lock);
    return n;
}
