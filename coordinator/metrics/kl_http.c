/* kl_http.c - --http parsing, the libmicrohttpd daemon (its own thread),
 * the snapshot it serves and the two pages (kl_http.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_http.h"
#include "kl_util.h"

#if MHD_VERSION < 0x00097002
typedef int kl_mhd_result;
#else
typedef enum MHD_Result kl_mhd_result;
#endif

struct kl_http_s {
    /* The snapshot served. Why a mutex and not an inproc ZeroMQ actor
     * (CONVENTIONS.md habit 9): libmicrohttpd calls us back on its own
     * thread and wants the answer from inside the callback, while the
     * loop that owns the sources (kiln tune's, kiln serve's) sits in a
     * poll or kl_dispatch_recv for up to 250 ms; a request/reply to it
     * would stall every scrape and add a poll to a loop that is not ours.
     * Publishing instead swaps one pointer under this lock (the loop never
     * waits for a render longer than the render of one page), and the
     * snapshot is the only thing the two threads share. */
    pthread_mutex_t lock;
    void *snap;
    kl_http_cfg_t cfg;
    struct MHD_Daemon *daemon;
    bool started; /* atomic: the daemon runs (messages go to the log) */
    char url[96];
    char log[256]; /* libmicrohttpd's last message while starting */
};

/* Splits text into host and port text; brackets allowed around IPv6. */
static int s_split(const char *text, char *host, size_t host_len,
                   const char **port, char *err)
{
    const char *colon = strrchr(text, ':');
    const char *h = text;
    size_t hl = 0;
    if (!colon) {
        *port = text;
    } else if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close + 1 != colon)
            return kl_seterr(err, KL_ERR_INVAL,
                             "--http '%s': expected [IPV6]:PORT", text);
        h = text + 1;
        hl = (size_t)(close - h);
        *port = colon + 1;
    } else {
        if (memchr(text, ':', (size_t)(colon - text)))
            return kl_seterr(err, KL_ERR_INVAL,
                             "--http '%s': an IPv6 address goes in brackets "
                             "([::1]:9100)",
                             text);
        hl = (size_t)(colon - text);
        *port = colon + 1;
    }
    if (hl >= host_len)
        return kl_seterr(err, KL_ERR_INVAL, "--http '%s': address too long",
                         text);
    memcpy(host, h, hl);
    host[hl] = '\0';
    return KL_OK;
}

static bool s_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return false;
}

int kl_http_parse_listen(const char *text, char *host, size_t host_len,
                         unsigned *port, bool *loopback, char *err)
{
    char name[256];
    const char *ptext = NULL;
    if (!text || !*text)
        return kl_seterr(err, KL_ERR_INVAL,
                         "--http: expected PORT or ADDR:PORT");
    int rc = s_split(text, name, sizeof name, &ptext, err);
    if (rc)
        return rc;
    char *end = NULL;
    errno = 0;
    unsigned long p = strtoul(ptext, &end, 10);
    if (!*ptext || *end || errno || p > 65535 || ptext[0] == '-' ||
        ptext[0] == '+')
        return kl_seterr(err, KL_ERR_INVAL,
                         "--http '%s': port '%s' is not a number in 0-65535 "
                         "(expected PORT or ADDR:PORT)",
                         text, ptext);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(name[0] ? name : "127.0.0.1", NULL, &hints, &ai);
    if (g != 0 || !ai)
        return kl_seterr(err, KL_ERR_INVAL, "--http '%s': address '%s': %s",
                         text, name, gai_strerror(g));
    char num[INET6_ADDRSTRLEN];
    const void *a =
        ai->ai_family == AF_INET6
            ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
            : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
    inet_ntop(ai->ai_family, a, num, sizeof num);
    *loopback = s_is_loopback(ai->ai_addr);
    freeaddrinfo(ai);
    if (strlen(num) >= host_len)
        return kl_seterr(err, KL_ERR_INVAL, "--http '%s': address too long",
                         text);
    snprintf(host, host_len, "%s", num);
    *port = (unsigned)p;
    return KL_OK;
}

/* libmicrohttpd's messages: kept while starting (for the error), logged
 * as warnings afterwards. */
static void s_mhd_log(void *cls, const char *fmt, va_list ap)
{
    kl_http_t *m = cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (!__atomic_load_n(&m->started, __ATOMIC_ACQUIRE))
        snprintf(m->log, sizeof m->log, "%s", line);
    else
        kl_warn("metrics server: %s", line);
}

static kl_mhd_result s_reply(struct MHD_Connection *c, unsigned code,
                             const char *type, char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    kl_mhd_result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static kl_mhd_result s_handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    kl_http_t *m = cls;
    /* The first call of a request only announces its headers. */
    if (*con_cls == NULL) {
        *con_cls = m;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return s_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
                       kl_xstrdup("only GET and HEAD\n"));
    bool text = strcmp(url, "/metrics") == 0;
    if (!text && strcmp(url, "/") != 0)
        return s_reply(
            c, MHD_HTTP_NOT_FOUND, "text/plain",
            kl_xasprintf("not found: %s (try /metrics or /)\n", url));
    char *body;
    pthread_mutex_lock(&m->lock);
    body = text ? m->cfg.text(m->snap) : m->cfg.html(m->snap);
    pthread_mutex_unlock(&m->lock);
    return s_reply(c, MHD_HTTP_OK,
                   text ? "text/plain; version=0.0.4; charset=utf-8"
                        : "text/html; charset=utf-8",
                   body);
}

/* Fills ss with host:port. */
static socklen_t s_sockaddr(const char *host, unsigned port,
                            struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        return sizeof *in;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    inet_pton(AF_INET6, host, &in6->sin6_addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    return sizeof *in6;
}

static int s_start(kl_http_t *m, const char *listen, char *err)
{
    char host[INET6_ADDRSTRLEN];
    unsigned port = 0;
    bool loopback = false;
    int rc =
        kl_http_parse_listen(listen, host, sizeof host, &port, &loopback, err);
    if (rc)
        return rc;
    struct sockaddr_storage ss;
    s_sockaddr(host, port, &ss);
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    m->daemon = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, s_handle, m,
        MHD_OPTION_EXTERNAL_LOGGER, s_mhd_log, m, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, (unsigned)32,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!m->daemon)
        return kl_seterr(
            err, KL_ERR_IO, "--http %s: cannot serve on %s port %u: %s", listen,
            host, port, m->log[0] ? m->log : "libmicrohttpd refused");
    __atomic_store_n(&m->started, true, __ATOMIC_RELEASE);
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (info && info->port)
        port = info->port;
    snprintf(m->url, sizeof m->url,
             ss.ss_family == AF_INET6 ? "http://[%s]:%u" : "http://%s:%u", host,
             port);
    if (!loopback)
        kl_warn("metrics served on %s, a non-loopback address: whoever can "
                "reach it can read %s",
                m->url, m->cfg.what ? m->cfg.what : "these metrics");
    return KL_OK;
}

int kl_http_new(kl_http_t **out, const kl_http_cfg_t *cfg, void *snap,
                char *err)
{
    *out = NULL;
    kl_http_t *m = kl_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    m->cfg = *cfg;
    m->snap = snap;
    int rc = s_start(m, cfg->listen, err);
    if (rc) {
        kl_http_destroy(&m);
        return rc;
    }
    *out = m;
    return KL_OK;
}

void kl_http_destroy(kl_http_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_http_t *m = *self_p;
    if (m->daemon)
        MHD_stop_daemon(m->daemon);
    if (m->snap)
        m->cfg.snap_free(m->snap);
    pthread_mutex_destroy(&m->lock);
    free(m);
    *self_p = NULL;
}

const char *kl_http_url(const kl_http_t *self)
{
    return self->url;
}

void kl_http_publish(kl_http_t *self, void *snap)
{
    if (!snap)
        return;
    pthread_mutex_lock(&self->lock);
    void *old = self->snap;
    self->snap = snap;
    pthread_mutex_unlock(&self->lock);
    if (old)
        self->cfg.snap_free(old);
}

void kl_http_peek(kl_http_t *self, void (*fn)(const void *snap, void *arg),
                  void *arg)
{
    pthread_mutex_lock(&self->lock);
    fn(self->snap, arg);
    pthread_mutex_unlock(&self->lock);
}
