/* kl_http.h - the HTTP side of live metrics, shared by `kiln tune --http`
 * (kl_metrics.h) and `kiln serve --http` (kl_metrics_serve.h): `/metrics`
 * in the Prometheus text exposition format (version 0.0.4), `/` an HTML
 * status page, 404 for any other path, 405 for methods other than GET and
 * HEAD.
 *
 * The owner's loop builds a snapshot (plain data of its own type) and
 * publishes it; libmicrohttpd's thread renders the latest published one
 * with the owner's two render functions, under a mutex. The two threads
 * share nothing else.
 */
#ifndef KL_HTTP_H
#define KL_HTTP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kl_http_s kl_http_t;

typedef struct {
    /* "PORT", ":PORT", "ADDR:PORT" or "[IPV6]:PORT"; a missing address is
     * 127.0.0.1. Port 0 picks a free port (see kl_http_url). */
    const char *listen;
    /* Ends the warning for a non-loopback address: "whoever can reach it
     * can read WHAT" (e.g. "this job's metrics"). NULL: "these metrics". */
    const char *what;
    /* Called in the server's thread with the lock held; return heap
     * strings. snap_free frees a snapshot the server let go of. */
    char *(*text)(const void *snap);
    char *(*html)(const void *snap);
    void (*snap_free)(void *snap);
} kl_http_cfg_t;

/* Parses a --http value into a numeric host (IPv4 or IPv6, no brackets)
 * and a port. A missing host is "127.0.0.1"; a name is resolved (its first
 * address). *loopback says whether the address is a loopback one. Errors
 * (KL_ERR_INVAL) name the value and what was expected. */
int kl_http_parse_listen(const char *text, char *host, size_t host_len,
                         unsigned *port, bool *loopback, char *err);

/* Binds on cfg->listen and starts the server's thread, serving snap (taken,
 * not NULL) until the first publish. A listen value that does not parse is
 * KL_ERR_INVAL; an address that cannot be bound (in use, not local) is
 * KL_ERR_IO naming the address and the reason (snap is freed then). A
 * non-loopback address is served (it was asked for explicitly) with a
 * warning. */
int kl_http_new(kl_http_t **out, const kl_http_cfg_t *cfg, void *snap,
                char *err);
/* Stops the server (open connections are closed) and frees the snapshot.
 * NULLs *self_p; safe on NULL. */
void kl_http_destroy(kl_http_t **self_p);

/* "http://HOST:PORT" with the port actually bound. Borrowed. */
const char *kl_http_url(const kl_http_t *self);

/* Takes snap (NULL: no-op) and makes it the one served; the previous one
 * is freed outside the lock. */
void kl_http_publish(kl_http_t *self, void *snap);

/* Calls fn with the snapshot served, under the lock (tests look at what
 * was published this way). */
void kl_http_peek(kl_http_t *self, void (*fn)(const void *snap, void *arg),
                  void *arg);

#endif
