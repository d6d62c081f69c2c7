/* kl_net_codec.c - the Envelope codec: a wire pre-scan that bounds every
 * repeated field before protobuf-c allocates anything, protobuf-c itself,
 * then a check of every bound on the unpacked message.
 *
 * Why a pre-scan: an empty repeated sub-message costs 2 bytes on the wire
 * and ~100 bytes once unpacked, so a 64 MiB frame of them would cost
 * gigabytes before any check could run. Counting on the wire first keeps
 * the memory of a decode close to the size of the frame. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_net_int.h"
#include "kl_util.h"

#define S_MAX_DEPTH 8
#define S_MAX_UNKNOWN 64   /* unknown fields per message (newer minors) */
#define S_MAX_FIELDS 32    /* fields of the largest message in kiln.proto */
#define S_DEFAULT_MAX 1024 /* repeated fields not in s_limits */

static const struct {
    const ProtobufCMessageDescriptor *desc;
    uint32_t id;
    size_t max;
} s_limits[] = {
    {&kiln__hello__descriptor, 5, KL_NET_MAX_DEVICES},
    {&kiln__device_info__descriptor, 11, KL_NET_MAX_CORES},
    {&kiln__kernel_arg__descriptor, 3, KL_NET_MAX_DIMS},
    {&kiln__measure_request__descriptor, 4, KL_NET_MAX_ARGS},
    {&kiln__measure_request__descriptor, 8, KL_NET_MAX_CANDIDATES},
    {&kiln__candidate__descriptor, 4, 3},
    {&kiln__candidate__descriptor, 5, 3},
    {&kiln__measure_result__descriptor, 4, KL_NET_MAX_SAMPLES},
    {&kiln__job_hello__descriptor, 3, KL_NET_MAX_TARGETS},
    {&kiln__agent_status__descriptor, 3, KL_NET_MAX_DEVICES},
    {&kiln__agent_status__descriptor, 4, KL_NET_MAX_DEVICES},
    {&kiln__job_status__descriptor, 3, KL_NET_MAX_TARGETS},
    {&kiln__status_reply__descriptor, 3, KL_NET_MAX_PEERS},
    {&kiln__status_reply__descriptor, 4, KL_NET_MAX_PEERS},
};

static size_t s_limit(const ProtobufCMessageDescriptor *d, uint32_t id)
{
    for (size_t i = 0; i < sizeof s_limits / sizeof s_limits[0]; i++)
        if (s_limits[i].desc == d && s_limits[i].id == id)
            return s_limits[i].max;
    return S_DEFAULT_MAX;
}

static int s_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end)
            return -1;
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* Elements in a packed run of len bytes of a scalar type. */
static size_t s_packed_count(ProtobufCType t, const uint8_t *p, size_t len)
{
    switch (t) {
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return len / 8;
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return len / 4;
    default: {
        size_t n = 0;
        for (size_t i = 0; i < len; i++)
            n += !(p[i] & 0x80);
        return n;
    }
    }
}

/* Where a field sits, for messages only: formatted on failure, never on
 * the way down (a request holds thousands of fields). */
typedef struct s_path {
    const struct s_path *up;
    const char *name;
    long idx; /* element index, -1 for a plain field */
} s_path_t;

#define S_AT(up_, name_, idx_) (&(s_path_t){(up_), (name_), (long)(idx_)})

static void s_fmt(const s_path_t *p, kl_buf_t *b)
{
    if (!p)
        return;
    s_fmt(p->up, b);
    if (b->len)
        kl_buf_puts(b, ".");
    kl_buf_puts(b, p->name);
    if (p->idx >= 0)
        kl_buf_printf(b, "[%ld]", p->idx);
}

__attribute__((format(printf, 3, 4))) static int
s_fail(char *err, const s_path_t *p, const char *fmt, ...)
{
    kl_buf_t b = {0};
    s_fmt(p, &b);
    char msg[KL_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kl_seterr(err, KL_ERR_PROTO, "%s: %s", b.len ? b.data : "envelope", msg);
    kl_buf_free(&b);
    return KL_ERR_PROTO;
}

/* Reads one field header and its payload bounds; returns 0 or -1. */
static int s_field(const uint8_t **p, const uint8_t *end, uint32_t *id, int *wt,
                   const uint8_t **pay, size_t *plen)
{
    uint64_t key, v;
    if (s_varint(p, end, &key) != 0 || (key >> 3) == 0 ||
        (key >> 3) > 0x1fffffff)
        return -1;
    *id = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    *pay = *p;
    switch (*wt) {
    case 0:
        if (s_varint(p, end, &v) != 0)
            return -1;
        break;
    case 1:
    case 5: {
        size_t n = *wt == 1 ? 8 : 4;
        if ((size_t)(end - *p) < n)
            return -1;
        *p += n;
        break;
    }
    case 2:
        if (s_varint(p, end, &v) != 0 || v > (uint64_t)(end - *p))
            return -1;
        *pay = *p;
        *p += v;
        break;
    default:
        return -1;
    }
    *plen = (size_t)(*p - *pay);
    return 0;
}

static int s_scan(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
                  size_t len, int depth, const s_path_t *path, char *err)
{
    if (depth > S_MAX_DEPTH)
        return s_fail(err, path, "nested too deep");
    size_t counts[S_MAX_FIELDS] = {0}, unknown = 0;
    const uint8_t *p = buf, *end = buf + len;
    while (p < end) {
        uint32_t id;
        int wt;
        const uint8_t *pay;
        size_t plen;
        if (s_field(&p, end, &id, &wt, &pay, &plen) != 0)
            return s_fail(err, path, "malformed field at byte %zu",
                          (size_t)(p - buf));
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(d, id);
        if (!f) {
            if (++unknown > S_MAX_UNKNOWN)
                return s_fail(err, path, "more than %d unknown fields",
                              S_MAX_UNKNOWN);
            continue;
        }
        size_t idx = (size_t)(f - d->fields);
        if (idx >= S_MAX_FIELDS)
            return kl_seterr(err, KL_ERR_INTERNAL, "%s: too many fields",
                             d->name);
        bool rep = f->label == PROTOBUF_C_LABEL_REPEATED;
        size_t n = 1;
        if (rep && wt == 2 && f->type != PROTOBUF_C_TYPE_STRING &&
            f->type != PROTOBUF_C_TYPE_BYTES &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            n = s_packed_count(f->type, pay, plen);
        counts[idx] += n;
        s_path_t sub = {path, f->name, -1};
        if (rep && counts[idx] > s_limit(d, id))
            return s_fail(err, &sub, "more than %zu entries", s_limit(d, id));
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (!rep && counts[idx] > 1)
            return s_fail(err, &sub, "appears more than once");
        if (wt != 2)
            return s_fail(err, &sub, "wrong wire type %d", wt);
        if (rep)
            sub.idx = (long)counts[idx] - 1;
        int rc = s_scan(f->descriptor, pay, plen, depth + 1, &sub, err);
        if (rc != KL_OK)
            return rc;
    }
    return KL_OK;
}

int kl_net__peek_version(const void *buf, size_t len, uint32_t *major,
                         uint32_t *minor)
{
    const uint8_t *p = len ? buf : (const uint8_t *)"", *end = p + len;
    *major = *minor = 0;
    while (p < end) {
        uint32_t id;
        int wt;
        const uint8_t *pay;
        size_t plen;
        if (s_field(&p, end, &id, &wt, &pay, &plen) != 0)
            return KL_ERR_PROTO;
        uint64_t v;
        if ((id == 1 || id == 2) && wt == 0 && s_varint(&pay, end, &v) == 0)
            *(id == 1 ? major : minor) = (uint32_t)v;
    }
    return KL_OK;
}

/* ---- bounds of the unpacked message ------------------------------------ */

static int s_str(const char *s, size_t max, const s_path_t *p, const char *name,
                 char *err)
{
    size_t n = s ? strlen(s) : 0;
    if (n > max)
        return s_fail(err, S_AT(p, name, -1), "%zu bytes (limit %zu)", n, max);
    return KL_OK;
}

static int s_count(size_t n, size_t max, const s_path_t *p, const char *name,
                   char *err)
{
    if (n > max)
        return s_fail(err, S_AT(p, name, -1), "%zu entries (limit %zu)", n,
                      max);
    return KL_OK;
}

#define S_TRY(x)                                                               \
    do {                                                                       \
        int rc_ = (x);                                                         \
        if (rc_ != KL_OK)                                                      \
            return rc_;                                                        \
    } while (0)

static int s_check_device(const Kiln__DeviceInfo *dv, const s_path_t *p,
                          char *err)
{
    if (!dv)
        return s_fail(err, p, "missing");
    S_TRY(s_str(dv->kind, KL_NET_MAX_STRING, p, "kind", err));
    S_TRY(s_str(dv->name, KL_NET_MAX_STRING, p, "name", err));
    S_TRY(s_str(dv->target, KL_NET_MAX_STRING, p, "target", err));
    S_TRY(
        s_str(dv->driver_version, KL_NET_MAX_STRING, p, "driver_version", err));
    return s_count(dv->n_measure_cores, KL_NET_MAX_CORES, p, "measure_cores",
                   err);
}

static int s_check_hello(const Kiln__Hello *h, char *err)
{
    const s_path_t *p = S_AT(NULL, "hello", -1);
    S_TRY(s_str(h->agent_name, KL_NET_MAX_STRING, p, "agent_name", err));
    S_TRY(s_str(h->hostname, KL_NET_MAX_STRING, p, "hostname", err));
    S_TRY(s_count(h->n_devices, KL_NET_MAX_DEVICES, p, "devices", err));
    for (size_t i = 0; i < h->n_devices; i++)
        S_TRY(s_check_device(h->devices[i], S_AT(p, "devices", i), err));
    return KL_OK;
}

static int s_check_arg(const Kiln__KernelArg *a, const s_path_t *p, char *err)
{
    if (!a)
        return s_fail(err, p, "missing");
    S_TRY(s_str(a->name, KL_NET_MAX_STRING, p, "name", err));
    if ((int)a->dtype < 0 || a->dtype > KILN__DTYPE__DTYPE_S8)
        return s_fail(err, S_AT(p, "dtype", -1), "unknown value %d",
                      (int)a->dtype);
    if ((int)a->role < 0 || a->role > KILN__ARG_ROLE__ROLE_CONSTANT)
        return s_fail(err, S_AT(p, "role", -1), "unknown value %d",
                      (int)a->role);
    S_TRY(s_count(a->n_shape, KL_NET_MAX_DIMS, p, "shape", err));
    int64_t elems = 1;
    for (size_t i = 0; i < a->n_shape; i++) {
        if (a->shape[i] < 0)
            return s_fail(err, S_AT(p, "shape", i), "negative (%lld)",
                          (long long)a->shape[i]);
        if (__builtin_mul_overflow(elems, a->shape[i], &elems))
            return s_fail(err, S_AT(p, "shape", -1), "element count overflows");
    }
    return KL_OK;
}

static int s_check_evaluator(const Kiln__Evaluator *e, const s_path_t *p,
                             char *err)
{
    if (!e)
        return KL_OK; /* the agent's defaults */
    if (e->repeat > KL_NET_MAX_SAMPLES)
        return s_fail(err, S_AT(p, "repeat", -1), "%u (limit %u)", e->repeat,
                      (unsigned)KL_NET_MAX_SAMPLES);
    if (!isfinite(e->rtol) || e->rtol < 0)
        return s_fail(err, S_AT(p, "rtol", -1), "not a finite value >= 0");
    if (!isfinite(e->atol) || e->atol < 0)
        return s_fail(err, S_AT(p, "atol", -1), "not a finite value >= 0");
    return KL_OK;
}

static int s_check_candidate(const Kiln__Candidate *c, const s_path_t *p,
                             char *err)
{
    if (!c)
        return s_fail(err, p, "missing");
    S_TRY(s_str(c->source, KL_NET_MAX_SOURCE, p, "source", err));
    S_TRY(s_str(c->entry, KL_NET_MAX_STRING, p, "entry", err));
    if (c->n_grid != 0 && c->n_grid != 3)
        return s_fail(err, S_AT(p, "grid", -1), "%zu values (want 0 or 3)",
                      c->n_grid);
    if (c->n_block != 0 && c->n_block != 3)
        return s_fail(err, S_AT(p, "block", -1), "%zu values (want 0 or 3)",
                      c->n_block);
    if (c->trace.len > KL_NET_MAX_SOURCE)
        return s_fail(err, S_AT(p, "trace", -1), "%zu bytes (limit %u)",
                      c->trace.len, (unsigned)KL_NET_MAX_SOURCE);
    return KL_OK;
}

static int s_check_request(const Kiln__MeasureRequest *r, char *err)
{
    const s_path_t *p = S_AT(NULL, "request", -1);
    if (r->workload_key.len != 0 && r->workload_key.len != 16)
        return s_fail(err, S_AT(p, "workload_key", -1), "%zu bytes (want 16)",
                      r->workload_key.len);
    S_TRY(s_str(r->target, KL_NET_MAX_STRING, p, "target", err));
    S_TRY(s_count(r->n_args, KL_NET_MAX_ARGS, p, "args", err));
    for (size_t i = 0; i < r->n_args; i++)
        S_TRY(s_check_arg(r->args[i], S_AT(p, "args", i), err));
    S_TRY(s_str(r->reference_source, KL_NET_MAX_SOURCE, p, "reference_source",
                err));
    S_TRY(s_str(r->reference_entry, KL_NET_MAX_STRING, p, "reference_entry",
                err));
    S_TRY(s_check_evaluator(r->evaluator, S_AT(p, "evaluator", -1), err));
    S_TRY(
        s_count(r->n_candidates, KL_NET_MAX_CANDIDATES, p, "candidates", err));
    for (size_t i = 0; i < r->n_candidates; i++)
        S_TRY(
            s_check_candidate(r->candidates[i], S_AT(p, "candidates", i), err));
    return KL_OK;
}

static int s_check_result(const Kiln__MeasureResult *r, char *err)
{
    const s_path_t *p = S_AT(NULL, "result", -1);
    if ((int)r->status < 0 || r->status > KILN__STATUS__STATUS_INVALID)
        return s_fail(err, S_AT(p, "status", -1), "unknown value %d",
                      (int)r->status);
    S_TRY(s_count(r->n_samples, KL_NET_MAX_SAMPLES, p, "samples", err));
    for (size_t i = 0; i < r->n_samples; i++)
        if (!isfinite(r->samples[i]) || r->samples[i] < 0)
            return s_fail(err, S_AT(p, "samples", i),
                          "not a finite value >= 0");
    return s_str(r->error, KL_NET_MAX_ERROR, p, "error", err);
}

static int s_strs(char **v, size_t n, size_t max, const s_path_t *p,
                  const char *name, char *err)
{
    S_TRY(s_count(n, max, p, name, err));
    for (size_t i = 0; i < n; i++) {
        size_t len = v[i] ? strlen(v[i]) : 0;
        if (len > KL_NET_MAX_STRING)
            return s_fail(err, S_AT(p, name, i), "%zu bytes (limit %u)", len,
                          (unsigned)KL_NET_MAX_STRING);
    }
    return KL_OK;
}

static int s_check_job_hello(const Kiln__JobHello *h, char *err)
{
    const s_path_t *p = S_AT(NULL, "job_hello", -1);
    S_TRY(s_str(h->name, KL_NET_MAX_STRING, p, "name", err));
    S_TRY(s_str(h->hostname, KL_NET_MAX_STRING, p, "hostname", err));
    return s_strs(h->targets, h->n_targets, KL_NET_MAX_TARGETS, p, "targets",
                  err);
}

static int s_check_job_result(const Kiln__JobResult *r, char *err)
{
    const s_path_t *p = S_AT(NULL, "job_result", -1);
    if (!r->result)
        return s_fail(err, S_AT(p, "result", -1), "missing");
    S_TRY(s_check_result(r->result, err));
    S_TRY(s_str(r->agent, KL_NET_MAX_STRING, p, "agent", err));
    S_TRY(s_str(r->hostname, KL_NET_MAX_STRING, p, "hostname", err));
    S_TRY(s_str(r->device_name, KL_NET_MAX_STRING, p, "device_name", err));
    S_TRY(s_str(r->limit, KL_NET_MAX_STRING, p, "limit", err));
    return s_str(r->device_target, KL_NET_MAX_STRING, p, "device_target", err);
}

static int s_check_status(const Kiln__StatusReply *r, char *err)
{
    const s_path_t *p = S_AT(NULL, "status_reply", -1);
    S_TRY(s_str(r->head_id, KL_NET_MAX_STRING, p, "head_id", err));
    S_TRY(s_count(r->n_agents, KL_NET_MAX_PEERS, p, "agents", err));
    for (size_t i = 0; i < r->n_agents; i++) {
        const Kiln__AgentStatus *a = r->agents[i];
        const s_path_t *q = S_AT(p, "agents", i);
        if (!a)
            return s_fail(err, q, "missing");
        S_TRY(s_str(a->name, KL_NET_MAX_STRING, q, "name", err));
        S_TRY(s_str(a->hostname, KL_NET_MAX_STRING, q, "hostname", err));
        S_TRY(s_strs(a->device_targets, a->n_device_targets, KL_NET_MAX_DEVICES,
                     q, "device_targets", err));
        S_TRY(s_strs(a->device_names, a->n_device_names, KL_NET_MAX_DEVICES, q,
                     "device_names", err));
    }
    S_TRY(s_count(r->n_jobs, KL_NET_MAX_PEERS, p, "jobs", err));
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Kiln__JobStatus *j = r->jobs[i];
        const s_path_t *q = S_AT(p, "jobs", i);
        if (!j)
            return s_fail(err, q, "missing");
        S_TRY(s_str(j->name, KL_NET_MAX_STRING, q, "name", err));
        S_TRY(s_str(j->owner_key, KL_NET_MAX_STRING, q, "owner_key", err));
        S_TRY(s_str(j->state, KL_NET_MAX_STRING, q, "state", err));
        S_TRY(s_str(j->waiting_target, KL_NET_MAX_STRING, q, "waiting_target",
                    err));
        S_TRY(s_strs(j->targets, j->n_targets, KL_NET_MAX_TARGETS, q, "targets",
                     err));
    }
    return KL_OK;
}

/* The bodies of the job <-> head messages (minor 2). */
static int s_check_head(const Kiln__Envelope *env, char *err)
{
    switch (env->body_case) {
    case KILN__ENVELOPE__BODY_JOB_HELLO:
        return env->job_hello
                   ? s_check_job_hello(env->job_hello, err)
                   : s_fail(err, S_AT(NULL, "job_hello", -1), "missing");
    case KILN__ENVELOPE__BODY_JOB_WELCOME:
        if (!env->job_welcome)
            return s_fail(err, S_AT(NULL, "job_welcome", -1), "missing");
        return s_str(env->job_welcome->head_id, KL_NET_MAX_STRING,
                     S_AT(NULL, "job_welcome", -1), "head_id", err);
    case KILN__ENVELOPE__BODY_JOB_RESULT:
        return env->job_result
                   ? s_check_job_result(env->job_result, err)
                   : s_fail(err, S_AT(NULL, "job_result", -1), "missing");
    case KILN__ENVELOPE__BODY_AGENTS_QUERY:
        if (!env->agents_query)
            return s_fail(err, S_AT(NULL, "agents_query", -1), "missing");
        return s_str(env->agents_query->target, KL_NET_MAX_STRING,
                     S_AT(NULL, "agents_query", -1), "target", err);
    case KILN__ENVELOPE__BODY_AGENTS_REPLY:
    case KILN__ENVELOPE__BODY_STATUS_QUERY:
        /* Only integers inside. */
        return env->agents_reply ? KL_OK : s_fail(err, NULL, "body missing");
    case KILN__ENVELOPE__BODY_DRAIN_REPLY:
        if (!env->drain_reply)
            return s_fail(err, S_AT(NULL, "drain_reply", -1), "missing");
        return s_str(env->drain_reply->error, KL_NET_MAX_ERROR,
                     S_AT(NULL, "drain_reply", -1), "error", err);
    case KILN__ENVELOPE__BODY_STATUS_REPLY:
        return env->status_reply
                   ? s_check_status(env->status_reply, err)
                   : s_fail(err, S_AT(NULL, "status_reply", -1), "missing");
    case KILN__ENVELOPE__BODY_DRAIN:
        if (!env->drain)
            return s_fail(err, S_AT(NULL, "drain", -1), "missing");
        return s_str(env->drain->agent, KL_NET_MAX_STRING,
                     S_AT(NULL, "drain", -1), "agent", err);
    default:
        return s_fail(err, NULL, "no body (oneof body not set)");
    }
}

int kl_net__check(const Kiln__Envelope *env, char *err)
{
    switch (env->body_case) {
    case KILN__ENVELOPE__BODY_HELLO:
        return env->hello ? s_check_hello(env->hello, err)
                          : s_fail(err, S_AT(NULL, "hello", -1), "missing");
    case KILN__ENVELOPE__BODY_WELCOME:
        if (!env->welcome)
            return s_fail(err, S_AT(NULL, "welcome", -1), "missing");
        return s_str(env->welcome->coordinator_id, KL_NET_MAX_STRING,
                     S_AT(NULL, "welcome", -1), "coordinator_id", err);
    case KILN__ENVELOPE__BODY_HEARTBEAT:
    case KILN__ENVELOPE__BODY_CANCEL:
        /* Only integers inside; a NULL pointer is still a missing body. */
        return env->heartbeat ? KL_OK : s_fail(err, NULL, "body missing");
    case KILN__ENVELOPE__BODY_REQUEST:
        return env->request ? s_check_request(env->request, err)
                            : s_fail(err, S_AT(NULL, "request", -1), "missing");
    case KILN__ENVELOPE__BODY_RESULT:
        return env->result ? s_check_result(env->result, err)
                           : s_fail(err, S_AT(NULL, "result", -1), "missing");
    case KILN__ENVELOPE__BODY_GOODBYE:
        if (!env->goodbye)
            return s_fail(err, S_AT(NULL, "goodbye", -1), "missing");
        return s_str(env->goodbye->reason, KL_NET_MAX_ERROR,
                     S_AT(NULL, "goodbye", -1), "reason", err);
    default:
        return s_check_head(env, err);
    }
}

int kl_net_decode(const void *buf, size_t len, Kiln__Envelope **out, char *err)
{
    *out = NULL;
    if (len > KL_NET_MAX_FRAME)
        return kl_seterr(err, KL_ERR_PROTO,
                         "frame of %zu bytes exceeds the limit of %u", len,
                         (unsigned)KL_NET_MAX_FRAME);
    if (len > 0 && !buf)
        return kl_seterr(err, KL_ERR_INVAL, "decode: NULL buffer");
    if (len == 0)
        buf = ""; /* no arithmetic on NULL below */
    S_TRY(s_scan(&kiln__envelope__descriptor, buf, len, 0, NULL, err));
    Kiln__Envelope *env = kiln__envelope__unpack(NULL, len, buf);
    if (!env)
        return kl_seterr(err, KL_ERR_PROTO,
                         "frame of %zu bytes is not a kiln.Envelope", len);
    int rc = kl_net__check(env, err);
    if (rc != KL_OK) {
        kiln__envelope__free_unpacked(env, NULL);
        return rc;
    }
    *out = env;
    return KL_OK;
}

void *kl_net_encode(Kiln__Envelope *env, size_t *len)
{
    size_t n = kiln__envelope__get_packed_size(env);
    uint8_t *buf = kl_xmalloc(n ? n : 1);
    *len = kiln__envelope__pack(env, buf);
    return buf;
}

void kl_net_envelope_free(Kiln__Envelope **env_p)
{
    if (!env_p || !*env_p)
        return;
    kiln__envelope__free_unpacked(*env_p, NULL);
    *env_p = NULL;
}
