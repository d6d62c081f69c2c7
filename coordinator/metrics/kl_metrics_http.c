/* kl_metrics_http.c - the registry's HTTP side: --http parsing, the
 * libmicrohttpd daemon (its own thread) and the two pages. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_metrics_int.h"
#include "kl_util.h"

#if MHD_VERSION < 0x00097002
typedef int kl_mhd_result;
#else
typedef enum MHD_Result kl_mhd_result;
#endif

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

int kl_metrics_parse_listen(const char *text, char *host, size_t host_len,
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
    kl_metrics_t *m = cls;
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
    kl_metrics_t *m = cls;
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
    body = text ? kl_metrics_render_text(m->snap)
                : kl_metrics_render_html(m->snap);
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

static int s_start(kl_metrics_t *m, const char *listen, char *err)
{
    char host[INET6_ADDRSTRLEN];
    unsigned port = 0;
    bool loopback = false;
    int rc = kl_metrics_parse_listen(listen, host, sizeof host, &port,
                                     &loopback, err);
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
                "reach it can read this job's metrics",
                m->url);
    return KL_OK;
}

int kl_metrics_new(kl_metrics_t **out, const kl_metrics_cfg_t *cfg, char *err)
{
    *out = NULL;
    kl_metrics_t *m = kl_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
    snprintf(m->job, sizeof m->job, "%s", cfg->job ? cfg->job : "tune");
    m->store_dir = cfg->store_dir ? kl_xstrdup(cfg->store_dir) : NULL;
    m->min_interval_s = cfg->min_interval_s > 0 ? cfg->min_interval_s : 0.5;
    m->t0 = kl_now_s();
    m->snap = kl_metrics_snap_new(0);
    snprintf(m->snap->job, sizeof m->snap->job, "%s", m->job);
    int rc = s_start(m, cfg->listen, err);
    if (rc) {
        kl_metrics_destroy(&m);
        return rc;
    }
    *out = m;
    return KL_OK;
}

void kl_metrics_destroy(kl_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_metrics_t *m = *self_p;
    if (m->daemon)
        MHD_stop_daemon(m->daemon);
    kl_metrics_snap_free(&m->snap);
    pthread_mutex_destroy(&m->lock);
    free(m->store_dir);
    free(m);
    *self_p = NULL;
}

const char *kl_metrics_url(const kl_metrics_t *self)
{
    return self->url;
}
