/* kl_port.c - the fleet interface, and its implementation by a dispatch. */
#include "kl_port.h"

#include "kl_err.h"

static int s_submit(void *ctx, const kl_dispatch_batch_t *b, uint64_t *id,
                    char *err)
{
    return kl_dispatch_submit(ctx, b, id, err);
}

static int s_recv(void *ctx, kl_dispatch_result_t **out, int timeout_ms,
                  char *err)
{
    return kl_dispatch_recv(ctx, out, timeout_ms, err);
}

static int s_cancel(void *ctx, uint64_t id, char *err)
{
    return kl_dispatch_cancel(ctx, id, err);
}

static int s_agents(void *ctx, const char *target, size_t *n, char *err)
{
    return kl_dispatch_agents(ctx, target, n, err);
}

static const char *s_where(void *ctx)
{
    return kl_dispatch_endpoint(ctx);
}

static int s_stats(void *ctx, kl_dispatch_stats_t *out, char *err)
{
    return kl_dispatch_stats(ctx, out, err);
}

kl_port_t kl_port_dispatch(kl_dispatch_t *d)
{
    return (kl_port_t){.ctx = d,
                       .submit = s_submit,
                       .recv = s_recv,
                       .cancel = s_cancel,
                       .agents = s_agents,
                       .where = s_where,
                       .stats = s_stats};
}

int kl_port_submit(const kl_port_t *p, const kl_dispatch_batch_t *batch,
                   uint64_t *request_id, char *err)
{
    return p->submit(p->ctx, batch, request_id, err);
}

int kl_port_recv(const kl_port_t *p, kl_dispatch_result_t **out, int timeout_ms,
                 char *err)
{
    return p->recv(p->ctx, out, timeout_ms, err);
}

int kl_port_cancel(const kl_port_t *p, uint64_t request_id, char *err)
{
    return p->cancel(p->ctx, request_id, err);
}

int kl_port_agents(const kl_port_t *p, const char *target, size_t *n, char *err)
{
    return p->agents(p->ctx, target, n, err);
}

const char *kl_port_where(const kl_port_t *p)
{
    const char *w = p->where ? p->where(p->ctx) : NULL;
    return w ? w : "the fleet";
}

int kl_port_stats(const kl_port_t *p, kl_dispatch_stats_t *out, char *err)
{
    if (!p->stats)
        return kl_seterr(err, KL_ERR_UNSUPPORTED, "this fleet keeps no stats");
    return p->stats(p->ctx, out, err);
}
