/* kl_net.c - ROUTER/DEALER sockets carrying one Envelope per frame, CURVE
 * keys and key files. The codec is in kl_net_codec.c, the process-wide
 * context and the ZAP handler in kl_net_zap.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_net_int.h"
#include "kl_util.h"

#define S_HWM 1000
#define S_SNDTIMEO_MS 1000
#define S_HEARTBEAT_MS 1000
#define S_HEARTBEAT_TIMEOUT_MS 3000
#define S_RETRY_MIN_S 1.0
#define S_RETRY_MAX_S 30.0

struct kl_net_s {
    void *sock;
    bool server;
    bool has_ctx;
    char domain[32]; /* ZAP domain of a CURVE server, else "" */
    char endpoint[512];
    kl_net_stats_t stats;
    /* CURVE client: handshake events, and the retry after a refusal. */
    void *mon;
    double retry_at, backoff_s;
};

/* ---- keys -------------------------------------------------------------- */

int kl_net_read_key(const char *path, char out[41], char *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return kl_seterr(err, errno == ENOENT ? KL_ERR_NOTFOUND : KL_ERR_IO,
                         "key file %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_size > 4096)
        return kl_seterr(err, KL_ERR_INVAL,
                         "key file %s: not a key (not a small regular file)",
                         path);
    char *text = NULL, why[KL_ERRMSG_LEN];
    size_t len = 0;
    if (kl_read_file(path, &text, &len, why) != KL_OK)
        return kl_seterr(err, KL_ERR_IO, "key file %s", why);
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' ||
                       text[len - 1] == ' ' || text[len - 1] == '\t'))
        text[--len] = '\0';
    uint8_t raw[32];
    bool ok = len == 40 && strlen(text) == 40 && zmq_z85_decode(raw, text);
    if (ok)
        memcpy(out, text, 41);
    free(text);
    if (!ok)
        return kl_seterr(err, KL_ERR_INVAL,
                         "key file %s: not a CURVE key (want 40 Z85 "
                         "characters, found %zu bytes)",
                         path, len);
    return KL_OK;
}

static int s_write_new(const char *path, const char *text, mode_t mode,
                       char *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return kl_seterr(err, errno == EEXIST ? KL_ERR_EXISTS : KL_ERR_IO,
                         "%s: %s%s", path, strerror(errno),
                         errno == EEXIST ? " (refusing to overwrite a key)"
                                         : "");
    /* The umask may only remove bits; set exactly what the key needs. */
    size_t n = strlen(text), off = 0;
    int rc = fchmod(fd, mode) == 0 ? KL_OK : KL_ERR_IO;
    while (rc == KL_OK && off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = KL_ERR_IO;
        else
            off += (size_t)w;
    }
    if (close(fd) != 0 && rc == KL_OK)
        rc = KL_ERR_IO;
    if (rc != KL_OK) {
        kl_seterr(err, rc, "%s: write failed: %s", path, strerror(errno));
        unlink(path);
    }
    return rc;
}

int kl_net_keygen(const char *dir, const char *name, char *err)
{
    if (!dir || !*dir || !name || !*name || strchr(name, '/') ||
        !strcmp(name, ".") || !strcmp(name, "..") || strlen(name) > 200)
        return kl_seterr(err, KL_ERR_INVAL,
                         "keygen: bad key name '%s' (want a plain file name)",
                         name ? name : "");
    if (!zmq_has("curve"))
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "keygen: this libzmq was built without CURVE");
    int rc = kl_mkdirs(dir, err);
    if (rc != KL_OK)
        return rc;
    char pub[41], sec[41], text[48];
    if (zmq_curve_keypair(pub, sec) != 0)
        return kl_seterr(err, KL_ERR_IO, "zmq_curve_keypair: %s",
                         zmq_strerror(errno));
    char *kpath = kl_xasprintf("%s/%s.key", dir, name);
    char *ppath = kl_xasprintf("%s/%s.pub", dir, name);
    if (access(ppath, F_OK) == 0) {
        rc = kl_seterr(err, KL_ERR_EXISTS,
                       "%s: exists (refusing to overwrite a key)", ppath);
        goto out;
    }
    snprintf(text, sizeof text, "%s\n", sec);
    rc = s_write_new(kpath, text, 0600, err);
    if (rc != KL_OK)
        goto out;
    snprintf(text, sizeof text, "%s\n", pub);
    rc = s_write_new(ppath, text, 0644, err);
    if (rc != KL_OK)
        unlink(kpath);
out:
    memset(sec, 0, sizeof sec);
    memset(text, 0, sizeof text);
    free(kpath);
    free(ppath);
    return rc;
}

/* Reads DIR/NAME.pub and DIR/NAME.key and checks that they belong
 * together. */
static int s_load_pair(const kl_net_security_t *sec, char pub[41],
                       char secret[41], char *err)
{
    if (!sec->keys_dir || !sec->name)
        return kl_seterr(err, KL_ERR_INVAL,
                         "CURVE needs a keys directory and a key name "
                         "(or --insecure on loopback)");
    char *kpath = kl_xasprintf("%s/%s.key", sec->keys_dir, sec->name);
    char *ppath = kl_xasprintf("%s/%s.pub", sec->keys_dir, sec->name);
    int rc = kl_net_read_key(ppath, pub, err);
    if (rc == KL_OK)
        rc = kl_net_read_key(kpath, secret, err);
    char derived[41];
    if (rc == KL_OK &&
        (zmq_curve_public(derived, secret) != 0 || strcmp(derived, pub) != 0))
        rc = kl_seterr(err, KL_ERR_INVAL, "%s does not match %s", ppath, kpath);
    struct stat st;
    if (rc == KL_OK && stat(kpath, &st) == 0 && (st.st_mode & 077))
        kl_warn("secret key %s is readable by others (mode %03o): "
                "chmod 600 it",
                kpath, (unsigned)(st.st_mode & 0777));
    free(kpath);
    free(ppath);
    return rc;
}

/* ---- sockets ----------------------------------------------------------- */

bool kl_net_is_loopback(const char *ep)
{
    if (!ep)
        return false;
    if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9))
        return true;
    if (strncmp(ep, "tcp://", 6) != 0)
        return false;
    const char *host = ep + 6;
    if (!strncmp(host, "[::1]", 5))
        return host[5] == '\0' || host[5] == ':';
    /* Only the host part, and only literal 127.x addresses: a name such
     * as "127.0.0.1.example.com" would go to DNS. */
    char h[256];
    const char *colon = strrchr(host, ':');
    size_t n = colon ? (size_t)(colon - host) : strlen(host);
    if (n == 0 || n >= sizeof h)
        return false;
    memcpy(h, host, n);
    h[n] = '\0';
    if (!strcmp(h, "localhost"))
        return true;
    struct in_addr a;
    return inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

static int s_opt(void *s, int opt, const void *v, size_t n, const char *what,
                 char *err)
{
    if (zmq_setsockopt(s, opt, v, n) != 0)
        return kl_seterr(err, KL_ERR_IO, "zmq_setsockopt %s: %s", what,
                         zmq_strerror(errno));
    return KL_OK;
}

static int s_common_opts(void *s, const char *endpoint, char *err)
{
    int zero = 0, hwm = S_HWM, sndtimeo = S_SNDTIMEO_MS;
    int hb = S_HEARTBEAT_MS, hbto = S_HEARTBEAT_TIMEOUT_MS, one = 1;
    int64_t maxmsg = (int64_t)KL_NET_MAX_FRAME + 1024;
    int rc = s_opt(s, ZMQ_LINGER, &zero, sizeof zero, "LINGER", err);
    if (rc == KL_OK)
        rc = s_opt(s, ZMQ_SNDHWM, &hwm, sizeof hwm, "SNDHWM", err);
    if (rc == KL_OK)
        rc = s_opt(s, ZMQ_RCVHWM, &hwm, sizeof hwm, "RCVHWM", err);
    if (rc == KL_OK)
        rc =
            s_opt(s, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo, "SNDTIMEO", err);
    if (rc == KL_OK)
        rc =
            s_opt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg, "MAXMSGSIZE", err);
    if (rc == KL_OK)
        rc = s_opt(s, ZMQ_HEARTBEAT_IVL, &hb, sizeof hb, "HEARTBEAT_IVL", err);
    if (rc == KL_OK)
        rc = s_opt(s, ZMQ_HEARTBEAT_TIMEOUT, &hbto, sizeof hbto,
                   "HEARTBEAT_TIMEOUT", err);
    if (rc == KL_OK)
        rc = s_opt(s, ZMQ_HEARTBEAT_TTL, &hbto, sizeof hbto, "HEARTBEAT_TTL",
                   err);
    if (rc == KL_OK && strchr(endpoint, '['))
        rc = s_opt(s, ZMQ_IPV6, &one, sizeof one, "IPV6", err);
    return rc;
}

/* Checks the security settings shared by both sides. */
static int s_check_sec(const char *endpoint, const kl_net_security_t *sec,
                       char *err)
{
    if (!endpoint || !*endpoint)
        return kl_seterr(err, KL_ERR_INVAL, "no endpoint given");
    if (!sec)
        return kl_seterr(err, KL_ERR_INVAL,
                         "no security settings for %s (CURVE keys, or "
                         "--insecure on loopback)",
                         endpoint);
    if (sec->insecure) {
        if (!kl_net_is_loopback(endpoint))
            return kl_seterr(err, KL_ERR_INVAL,
                             "--insecure is for loopback only (endpoint %s)",
                             endpoint);
        kl_warn("%s: --insecure: no encryption and no authentication",
                endpoint);
        return KL_OK;
    }
    if (!zmq_has("curve"))
        return kl_seterr(err, KL_ERR_UNSUPPORTED,
                         "this libzmq was built without CURVE");
    return KL_OK;
}

static kl_net_t *s_new(bool server, int type, char *err)
{
    kl_net_t *self = kl_xcalloc(1, sizeof *self);
    self->server = server;
    void *ctx = kl_net__ctx_acquire(err);
    if (!ctx) {
        free(self);
        return NULL;
    }
    self->has_ctx = true;
    self->sock = zmq_socket(ctx, type);
    if (!self->sock) {
        kl_seterr(err, KL_ERR_IO, "zmq_socket: %s", zmq_strerror(errno));
        kl_net_destroy(&self);
    }
    return self;
}

int kl_net_server_new(kl_net_t **out, const char *endpoint,
                      const kl_net_security_t *sec, char *err)
{
    *out = NULL;
    int rc = s_check_sec(endpoint, sec, err);
    char pub[41], secret[41];
    if (rc == KL_OK && !sec->insecure)
        rc = s_load_pair(sec, pub, secret, err);
    if (rc != KL_OK)
        return rc;
    kl_net_t *self = s_new(true, ZMQ_ROUTER, err);
    if (!self)
        return KL_ERR_IO;
    int one = 1;
    rc = s_common_opts(self->sock, endpoint, err);
    if (rc == KL_OK)
        rc = s_opt(self->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one,
                   "ROUTER_MANDATORY", err);
    if (rc == KL_OK && !sec->insecure) {
        const char *allow = sec->allow_dir ? sec->allow_dir : sec->keys_dir;
        rc =
            kl_net__zap_register(allow, sec->also_allow_dir, self->domain, err);
        if (rc == KL_OK)
            rc = s_opt(self->sock, ZMQ_ZAP_DOMAIN, self->domain,
                       strlen(self->domain), "ZAP_DOMAIN", err);
        if (rc == KL_OK)
            rc = s_opt(self->sock, ZMQ_CURVE_SERVER, &one, sizeof one,
                       "CURVE_SERVER", err);
        if (rc == KL_OK)
            rc = s_opt(self->sock, ZMQ_CURVE_SECRETKEY, secret, 40,
                       "CURVE_SECRETKEY", err);
    }
    memset(secret, 0, sizeof secret);
    if (rc == KL_OK && zmq_bind(self->sock, endpoint) != 0)
        rc = kl_seterr(err, KL_ERR_IO, "bind %s: %s", endpoint,
                       zmq_strerror(errno));
    size_t n = sizeof self->endpoint;
    if (rc == KL_OK &&
        zmq_getsockopt(self->sock, ZMQ_LAST_ENDPOINT, self->endpoint, &n) != 0)
        snprintf(self->endpoint, sizeof self->endpoint, "%s", endpoint);
    if (rc != KL_OK) {
        kl_net_destroy(&self);
        return rc;
    }
    *out = self;
    return KL_OK;
}

/* ZeroMQ never retries a handshake that the server refused (the session
 * ends on a ZAP "400"), which would leave an agent started before its key
 * was allowed cut off for good. The client watches its handshakes and
 * reconnects itself, backing off. */
static int s_monitor(kl_net_t *self, char *err)
{
    static unsigned s_seq;
    char addr[64];
    snprintf(addr, sizeof addr, "inproc://kl-net-mon-%u-%p",
             __atomic_fetch_add(&s_seq, 1, __ATOMIC_RELAXED), (void *)self);
    int events =
        ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    if (zmq_socket_monitor(self->sock, addr, events) != 0)
        return kl_seterr(err, KL_ERR_IO, "zmq_socket_monitor: %s",
                         zmq_strerror(errno));
    self->mon = zmq_socket(kl_net__ctx_acquire(err), ZMQ_PAIR);
    kl_net__ctx_release(); /* self already holds a reference */
    if (!self->mon || zmq_connect(self->mon, addr) != 0)
        return kl_seterr(err, KL_ERR_IO, "monitor %s: %s", addr,
                         zmq_strerror(errno));
    self->backoff_s = S_RETRY_MIN_S;
    return KL_OK;
}

/* Reads pending handshake events; reconnects when a refusal's wait is
 * over. */
static void s_watch(kl_net_t *self)
{
    if (!self->mon)
        return;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, self->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        uint16_t ev = 0;
        uint32_t val = 0;
        if (zmq_msg_size(&m) >= 6) {
            memcpy(&ev, zmq_msg_data(&m), 2);
            memcpy(&val, (char *)zmq_msg_data(&m) + 2, 4);
        }
        bool more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        while (more) { /* the endpoint frame */
            zmq_msg_init(&m);
            more = zmq_msg_recv(&m, self->mon, ZMQ_DONTWAIT) >= 0 &&
                   zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            self->backoff_s = S_RETRY_MIN_S;
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH &&
                   self->retry_at == 0) {
            self->stats.auth_denied++;
            kl_warn("%s refused this side's key (status %u): retrying in "
                    "%.0f s (is its .pub in the server's allow dir?)",
                    self->endpoint, val, self->backoff_s);
            self->retry_at = kl_now_s() + self->backoff_s;
            self->backoff_s = self->backoff_s * 2 < S_RETRY_MAX_S
                                  ? self->backoff_s * 2
                                  : S_RETRY_MAX_S;
        }
    }
    if (self->retry_at > 0 && kl_now_s() >= self->retry_at) {
        self->retry_at = 0;
        zmq_disconnect(self->sock, self->endpoint);
        if (zmq_connect(self->sock, self->endpoint) != 0)
            kl_warn("reconnect %s: %s", self->endpoint, zmq_strerror(errno));
    }
}

int kl_net_client_new(kl_net_t **out, const char *endpoint,
                      const kl_net_security_t *sec, char *err)
{
    *out = NULL;
    int rc = s_check_sec(endpoint, sec, err);
    char pub[41], secret[41], server[41];
    if (rc == KL_OK && !sec->insecure) {
        if (!sec->server_key_file)
            rc = kl_seterr(err, KL_ERR_INVAL,
                           "CURVE client needs the coordinator's public key "
                           "file");
        else
            rc = kl_net_read_key(sec->server_key_file, server, err);
        if (rc == KL_OK)
            rc = s_load_pair(sec, pub, secret, err);
    }
    if (rc != KL_OK)
        return rc;
    kl_net_t *self = s_new(false, ZMQ_DEALER, err);
    if (!self)
        return KL_ERR_IO;
    snprintf(self->endpoint, sizeof self->endpoint, "%s", endpoint);
    int ivl = 100, ivl_max = 2000;
    rc = s_common_opts(self->sock, endpoint, err);
    if (rc == KL_OK)
        rc = s_opt(self->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl,
                   "RECONNECT_IVL", err);
    if (rc == KL_OK)
        rc = s_opt(self->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max,
                   "RECONNECT_IVL_MAX", err);
    if (rc == KL_OK && !sec->insecure) {
        rc = s_opt(self->sock, ZMQ_CURVE_PUBLICKEY, pub, 40, "CURVE_PUBLICKEY",
                   err);
        if (rc == KL_OK)
            rc = s_opt(self->sock, ZMQ_CURVE_SECRETKEY, secret, 40,
                       "CURVE_SECRETKEY", err);
        if (rc == KL_OK)
            rc = s_opt(self->sock, ZMQ_CURVE_SERVERKEY, server, 40,
                       "CURVE_SERVERKEY", err);
    }
    memset(secret, 0, sizeof secret);
    if (rc == KL_OK && !sec->insecure)
        rc = s_monitor(self, err);
    if (rc == KL_OK && zmq_connect(self->sock, endpoint) != 0)
        rc = kl_seterr(err, KL_ERR_IO, "connect %s: %s", endpoint,
                       zmq_strerror(errno));
    if (rc != KL_OK) {
        kl_net_destroy(&self);
        return rc;
    }
    *out = self;
    return KL_OK;
}

void kl_net_destroy(kl_net_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_net_t *self = *self_p;
    if (self->mon) {
        zmq_socket_monitor(self->sock, NULL, 0);
        zmq_close(self->mon);
    }
    if (self->sock) {
        int zero = 0;
        zmq_setsockopt(self->sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(self->sock);
    }
    if (self->domain[0])
        kl_net__zap_unregister(self->domain);
    if (self->has_ctx)
        kl_net__ctx_release();
    free(self);
    *self_p = NULL;
}

void *kl_net_socket(kl_net_t *self)
{
    return self->sock;
}

const char *kl_net_endpoint(const kl_net_t *self)
{
    return self->endpoint;
}

void kl_net_stats(const kl_net_t *self, kl_net_stats_t *out)
{
    *out = self->stats;
    if (self->domain[0])
        out->auth_denied = kl_net__zap_denied(self->domain);
}

/* ---- send and receive -------------------------------------------------- */

/* errno e of a send that did not wait. */
static int s_zmq_err_now(const char *what, int e, char *err)
{
    if (e == EAGAIN)
        return kl_seterr(err, KL_ERR_TIMEOUT, "%s: send queue full", what);
    if (e == EHOSTUNREACH)
        return kl_seterr(err, KL_ERR_CLOSED, "%s: peer is gone", what);
    if (e == ETERM || e == ENOTSOCK)
        return kl_seterr(err, KL_ERR_CLOSED, "%s: socket closed", what);
    return kl_seterr(err, KL_ERR_IO, "%s: %s", what, zmq_strerror(e));
}

static int s_zmq_err(const char *what, char *err)
{
    int e = errno;
    if (e == EAGAIN)
        return kl_seterr(err, KL_ERR_TIMEOUT, "%s: send queue full for %d ms",
                         what, S_SNDTIMEO_MS);
    return s_zmq_err_now(what, e, err);
}

static void s_free_buf(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* flags: 0, or ZMQ_DONTWAIT (a full queue is KL_ERR_TIMEOUT at once). */
static int s_send(kl_net_t *self, const kl_peer_t *peer, Kiln__Envelope *env,
                  int flags, char *err)
{
    if (self->server && (!peer || peer->len == 0 || peer->len > 255))
        return kl_seterr(err, KL_ERR_INVAL, "send: a server needs a peer");
    env->version_major = KL_PROTO_MAJOR;
    env->version_minor = KL_PROTO_MINOR;
    s_watch(self);
    if (self->retry_at > 0)
        return kl_seterr(err, KL_ERR_AUTH,
                         "not sent: %s refused this side's key; retrying in "
                         "%.1f s",
                         self->endpoint, self->retry_at - kl_now_s());
    char why[KL_ERRMSG_LEN];
    int rc = kl_net__check(env, why);
    if (rc != KL_OK)
        return kl_seterr(err, rc, "not sent: %s", why);
    size_t len;
    void *buf = kl_net_encode(env, &len);
    if (len > KL_NET_MAX_FRAME) {
        free(buf);
        return kl_seterr(err, KL_ERR_PROTO,
                         "not sent: envelope of %zu bytes exceeds the limit "
                         "of %u",
                         len, (unsigned)KL_NET_MAX_FRAME);
    }
    /* A ROUTER checks the peer's queue at the routing id: the payload of
     * a message whose id went out always follows. */
    if (self->server &&
        zmq_send(self->sock, peer->id, peer->len, ZMQ_SNDMORE | flags) < 0) {
        free(buf);
        return flags ? s_zmq_err_now("send", errno, err)
                     : s_zmq_err("send", err);
    }
    zmq_msg_t m;
    zmq_msg_init_data(&m, buf, len, s_free_buf, NULL); /* takes buf */
    if (zmq_msg_send(&m, self->sock, flags) < 0) {
        rc = flags ? s_zmq_err_now("send", errno, err) : s_zmq_err("send", err);
        zmq_msg_close(&m);
        return rc;
    }
    self->stats.frames_out++;
    return KL_OK;
}

int kl_net_send(kl_net_t *self, const kl_peer_t *peer, Kiln__Envelope *env,
                char *err)
{
    return s_send(self, peer, env, ZMQ_DONTWAIT, err);
}

int kl_net_try_send(kl_net_t *self, const kl_peer_t *peer, Kiln__Envelope *env,
                    char *err)
{
    return s_send(self, peer, env, ZMQ_DONTWAIT, err);
}

/* Receives one frame set: [routing id] payload. Returns the number of
 * frames received and leaves the payload in *m (the first frame after the
 * routing id); extra frames are read and discarded. */
static int s_recv_set(kl_net_t *self, kl_peer_t *peer, zmq_msg_t *m,
                      int *frames, char *err)
{
    *frames = 0;
    bool more = true, have = false;
    bool want_id = self->server;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, self->sock, 0) < 0) {
            zmq_msg_close(&part);
            if (have)
                zmq_msg_close(m);
            return s_zmq_err("recv", err);
        }
        more = zmq_msg_more(&part);
        (*frames)++;
        if (want_id) {
            want_id = false;
            size_t n = zmq_msg_size(&part);
            if (peer && n <= sizeof peer->id) {
                memcpy(peer->id, zmq_msg_data(&part), n);
                peer->len = n;
            }
            zmq_msg_close(&part);
        } else if (!have) {
            /* The ZAP handler's user id is the client's key (Z85). */
            const char *uid =
                self->server && peer ? zmq_msg_gets(&part, "User-Id") : NULL;
            if (uid && strlen(uid) == 40)
                memcpy(peer->key, uid, 41);
            *m = part;
            have = true;
        } else {
            zmq_msg_close(&part);
        }
    }
    if (!have)
        zmq_msg_init(m);
    return KL_OK;
}

/* Decodes one received payload; counts what it drops. */
static int s_take(kl_net_t *self, const void *data, size_t len,
                  Kiln__Envelope **env, char *err)
{
    if (len > KL_NET_MAX_FRAME) {
        self->stats.dropped_oversize++;
        return kl_seterr(err, KL_ERR_PROTO,
                         "dropped a frame of %zu bytes (limit %u)", len,
                         (unsigned)KL_NET_MAX_FRAME);
    }
    uint32_t major, minor;
    /* Major 0 is no version at all: every kiln since 1.0 stamps one, so
     * such a frame is malformed rather than foreign. */
    if (kl_net__peek_version(data, len, &major, &minor) == KL_OK &&
        major != 0 && major != KL_PROTO_MAJOR) {
        /* Not interpreted with this side's schema: only the versions are
         * handed back, so the caller can say goodbye. */
        self->stats.dropped_version++;
        Kiln__Envelope *v = kl_xmalloc(sizeof *v);
        kiln__envelope__init(v);
        v->version_major = major;
        v->version_minor = minor;
        *env = v;
        return kl_seterr(err, KL_ERR_VERSION,
                         "peer speaks protocol %u.%u, this side speaks %d.%d",
                         major, minor, KL_PROTO_MAJOR, KL_PROTO_MINOR);
    }
    char why[KL_ERRMSG_LEN];
    int rc = kl_net_decode(data, len, env, why);
    if (rc == KL_OK && (*env)->version_major != KL_PROTO_MAJOR) {
        kl_net_envelope_free(env);
        rc = kl_seterr(why, KL_ERR_PROTO, "envelope: no protocol version");
    }
    if (rc != KL_OK) {
        self->stats.dropped_malformed++;
        return kl_seterr(err, KL_ERR_PROTO, "dropped a frame: %s", why);
    }
    return KL_OK;
}

/* Waits until the socket is readable; a CURVE client also serves its
 * handshake events meanwhile. */
static int s_wait(kl_net_t *self, int timeout_ms, char *err)
{
    double deadline = kl_now_s() + (timeout_ms < 0 ? 0 : timeout_ms / 1e3);
    for (;;) {
        s_watch(self);
        zmq_pollitem_t it[2] = {{self->sock, 0, ZMQ_POLLIN, 0},
                                {self->mon, 0, ZMQ_POLLIN, 0}};
        long wait = -1;
        if (timeout_ms >= 0) {
            double left = deadline - kl_now_s();
            wait = left > 0 ? (long)(left * 1e3 + 0.999) : 0;
        }
        if (self->retry_at > 0) {
            long r = (long)((self->retry_at - kl_now_s()) * 1e3 + 1);
            r = r < 0 ? 0 : r;
            wait = wait < 0 || r < wait ? r : wait;
        }
        int n = zmq_poll(it, self->mon ? 2 : 1, wait);
        if (n < 0) {
            if (errno == EINTR)
                return kl_seterr(err, KL_ERR_TIMEOUT, "recv: interrupted");
            return s_zmq_err("recv", err);
        }
        if (it[0].revents & ZMQ_POLLIN)
            return KL_OK;
        if (timeout_ms >= 0 && kl_now_s() >= deadline)
            return kl_seterr(err, KL_ERR_TIMEOUT, "recv: nothing within %d ms",
                             timeout_ms);
    }
}

int kl_net_recv(kl_net_t *self, kl_peer_t *peer, Kiln__Envelope **env,
                int timeout_ms, char *err)
{
    *env = NULL;
    if (peer) {
        peer->len = 0;
        peer->key[0] = '\0';
    }
    int rc = s_wait(self, timeout_ms, err);
    if (rc != KL_OK)
        return rc;
    zmq_msg_t m;
    int frames;
    rc = s_recv_set(self, peer, &m, &frames, err);
    if (rc != KL_OK)
        return rc;
    self->stats.frames_in++;
    int want = self->server ? 2 : 1;
    if (frames != want) {
        self->stats.dropped_malformed++;
        rc = kl_seterr(err, KL_ERR_PROTO,
                       "dropped a set of %d frames (want one envelope)",
                       frames - (want - 1));
    } else {
        rc = s_take(self, zmq_msg_data(&m), zmq_msg_size(&m), env, err);
    }
    zmq_msg_close(&m);
    return rc;
}
