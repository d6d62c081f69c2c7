/* kl_net_codec.c - the Envelope codec: a wire pre-scan that bounds every
 * repeated field before protobuf-c allocates anything, protobuf-c itself,
 * then a check of every bound on the unpacked message.
 *
 * Why a pre-scan: an empty repeated sub-message costs 2 bytes on the wire
 * and ~100 bytes once unpacked, so a 64 MiB frame of them would cost
 * gigabytes before any check could run. Counting on the wire first keeps
 * the memory of a decode close to the size of the frame. */
#include <math.h>
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
#define S_PATH_LEN 160

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

static void s_subpath(char *out, const char *path, const char *name, long idx)
{
    const char *dot = path[0] ? "." : "";
    int n;
    if (idx >= 0)
        n = snprintf(out, S_PATH_LEN, "%s%s%s[%ld]", path, dot, name, idx);
    else
        n = snprintf(out, S_PATH_LEN, "%s%s%s", path, dot, name);
    if (n >= S_PATH_LEN) /* a cut path still names the field's start */
        out[S_PATH_LEN - 1] = '\0';
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
                  size_t len, int depth, const char *path, char *err)
{
    const char *where = path[0] ? path : "envelope";
    if (depth > S_MAX_DEPTH)
        return kl_seterr(err, KL_ERR_PROTO, "%s: nested too deep", where);
    size_t counts[S_MAX_FIELDS] = {0}, unknown = 0;
    const uint8_t *p = buf, *end = buf + len;
    while (p < end) {
        uint32_t id;
        int wt;
        const uint8_t *pay;
        size_t plen;
        if (s_field(&p, end, &id, &wt, &pay, &plen) != 0)
            return kl_seterr(err, KL_ERR_PROTO,
                             "%s: malformed field at byte %zu", where,
                             (size_t)(p - buf));
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field(d, id);
        if (!f) {
            if (++unknown > S_MAX_UNKNOWN)
                return kl_seterr(err, KL_ERR_PROTO,
                                 "%s: more than %d unknown fields", where,
                                 S_MAX_UNKNOWN);
            continue;
        }
        size_t idx = (size_t)(f - d->fields);
        if (idx >= S_MAX_FIELDS)
            return kl_seterr(err, KL_ERR_INTERNAL, "%s: too many fields",
                             where);
        char sub[S_PATH_LEN];
        bool rep = f->label == PROTOBUF_C_LABEL_REPEATED;
        size_t n = 1;
        if (rep && wt == 2 && f->type != PROTOBUF_C_TYPE_STRING &&
            f->type != PROTOBUF_C_TYPE_BYTES &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            n = s_packed_count(f->type, pay, plen);
        counts[idx] += n;
        s_subpath(sub, path, f->name, -1);
        if (rep && counts[idx] > s_limit(d, id))
            return kl_seterr(err, KL_ERR_PROTO, "%s: more than %zu entries",
                             sub, s_limit(d, id));
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (!rep && counts[idx] > 1)
            return kl_seterr(err, KL_ERR_PROTO, "%s: appears more than once",
                             sub);
        if (wt != 2)
            return kl_seterr(err, KL_ERR_PROTO, "%s: wrong wire type %d", sub,
                             wt);
        s_subpath(sub, path, f->name, rep ? (long)counts[idx] - 1 : -1);
        int rc = s_scan(f->descriptor, pay, plen, depth + 1, sub, err);
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

static int s_str(const char *s, size_t max, const char *path, char *err)
{
    size_t n = s ? strlen(s) : 0;
    if (n > max)
        return kl_seterr(err, KL_ERR_PROTO, "%s: %zu bytes (limit %zu)", path,
                         n, max);
    return KL_OK;
}

static int s_count(size_t n, size_t max, const char *path, char *err)
{
    if (n > max)
        return kl_seterr(err, KL_ERR_PROTO, "%s: %zu entries (limit %zu)", path,
                         n, max);
    return KL_OK;
}

#define S_TRY(x)                                                               \
    do {                                                                       \
        int rc_ = (x);                                                         \
        if (rc_ != KL_OK)                                                      \
            return rc_;                                                        \
    } while (0)

static int s_check_device(const Kiln__DeviceInfo *dv, const char *path,
                          char *err)
{
    char p[S_PATH_LEN];
    if (!dv)
        return kl_seterr(err, KL_ERR_PROTO, "%s: missing", path);
    s_subpath(p, path, "kind", -1);
    S_TRY(s_str(dv->kind, KL_NET_MAX_STRING, p, err));
    s_subpath(p, path, "name", -1);
    S_TRY(s_str(dv->name, KL_NET_MAX_STRING, p, err));
    s_subpath(p, path, "target", -1);
    S_TRY(s_str(dv->target, KL_NET_MAX_STRING, p, err));
    s_subpath(p, path, "driver_version", -1);
    S_TRY(s_str(dv->driver_version, KL_NET_MAX_STRING, p, err));
    s_subpath(p, path, "measure_cores", -1);
    return s_count(dv->n_measure_cores, KL_NET_MAX_CORES, p, err);
}

static int s_check_hello(const Kiln__Hello *h, char *err)
{
    S_TRY(s_str(h->agent_name, KL_NET_MAX_STRING, "hello.agent_name", err));
    S_TRY(s_str(h->hostname, KL_NET_MAX_STRING, "hello.hostname", err));
    S_TRY(s_count(h->n_devices, KL_NET_MAX_DEVICES, "hello.devices", err));
    for (size_t i = 0; i < h->n_devices; i++) {
        char p[S_PATH_LEN];
        s_subpath(p, "hello", "devices", (long)i);
        S_TRY(s_check_device(h->devices[i], p, err));
    }
    return KL_OK;
}

static int s_check_arg(const Kiln__KernelArg *a, const char *path, char *err)
{
    char p[S_PATH_LEN];
    if (!a)
        return kl_seterr(err, KL_ERR_PROTO, "%s: missing", path);
    s_subpath(p, path, "name", -1);
    S_TRY(s_str(a->name, KL_NET_MAX_STRING, p, err));
    if ((int)a->dtype < 0 || a->dtype > KILN__DTYPE__DTYPE_I32)
        return kl_seterr(err, KL_ERR_PROTO, "%s.dtype: unknown value %d", path,
                         (int)a->dtype);
    if ((int)a->role < 0 || a->role > KILN__ARG_ROLE__ROLE_OUTPUT)
        return kl_seterr(err, KL_ERR_PROTO, "%s.role: unknown value %d", path,
                         (int)a->role);
    s_subpath(p, path, "shape", -1);
    S_TRY(s_count(a->n_shape, KL_NET_MAX_DIMS, p, err));
    int64_t elems = 1;
    for (size_t i = 0; i < a->n_shape; i++) {
        if (a->shape[i] < 0)
            return kl_seterr(err, KL_ERR_PROTO, "%s[%zu]: negative (%lld)", p,
                             i, (long long)a->shape[i]);
        if (__builtin_mul_overflow(elems, a->shape[i], &elems))
            return kl_seterr(err, KL_ERR_PROTO, "%s: element count overflows",
                             p);
    }
    return KL_OK;
}

static int s_check_evaluator(const Kiln__Evaluator *e, char *err)
{
    if (!e)
        return KL_OK; /* the agent's defaults */
    if (e->repeat > KL_NET_MAX_SAMPLES)
        return kl_seterr(err, KL_ERR_PROTO,
                         "request.evaluator.repeat: %u (limit %u)", e->repeat,
                         (unsigned)KL_NET_MAX_SAMPLES);
    if (!isfinite(e->rtol) || e->rtol < 0)
        return kl_seterr(err, KL_ERR_PROTO,
                         "request.evaluator.rtol: not a finite value >= 0");
    if (!isfinite(e->atol) || e->atol < 0)
        return kl_seterr(err, KL_ERR_PROTO,
                         "request.evaluator.atol: not a finite value >= 0");
    return KL_OK;
}

static int s_check_candidate(const Kiln__Candidate *c, const char *path,
                             char *err)
{
    char p[S_PATH_LEN];
    if (!c)
        return kl_seterr(err, KL_ERR_PROTO, "%s: missing", path);
    s_subpath(p, path, "source", -1);
    S_TRY(s_str(c->source, KL_NET_MAX_SOURCE, p, err));
    s_subpath(p, path, "entry", -1);
    S_TRY(s_str(c->entry, KL_NET_MAX_STRING, p, err));
    if (c->n_grid != 0 && c->n_grid != 3)
        return kl_seterr(err, KL_ERR_PROTO, "%s.grid: %zu values (want 0 or 3)",
                         path, c->n_grid);
    if (c->n_block != 0 && c->n_block != 3)
        return kl_seterr(err, KL_ERR_PROTO,
                         "%s.block: %zu values (want 0 or 3)", path,
                         c->n_block);
    if (c->trace.len > KL_NET_MAX_SOURCE)
        return kl_seterr(err, KL_ERR_PROTO, "%s.trace: %zu bytes (limit %u)",
                         path, c->trace.len, (unsigned)KL_NET_MAX_SOURCE);
    return KL_OK;
}

static int s_check_request(const Kiln__MeasureRequest *r, char *err)
{
    if (r->workload_key.len != 0 && r->workload_key.len != 16)
        return kl_seterr(err, KL_ERR_PROTO,
                         "request.workload_key: %zu bytes (want 16)",
                         r->workload_key.len);
    S_TRY(s_str(r->target, KL_NET_MAX_STRING, "request.target", err));
    S_TRY(s_count(r->n_args, KL_NET_MAX_ARGS, "request.args", err));
    char p[S_PATH_LEN];
    for (size_t i = 0; i < r->n_args; i++) {
        s_subpath(p, "request", "args", (long)i);
        S_TRY(s_check_arg(r->args[i], p, err));
    }
    S_TRY(s_str(r->reference_source, KL_NET_MAX_SOURCE,
                "request.reference_source", err));
    S_TRY(s_str(r->reference_entry, KL_NET_MAX_STRING,
                "request.reference_entry", err));
    S_TRY(s_check_evaluator(r->evaluator, err));
    S_TRY(s_count(r->n_candidates, KL_NET_MAX_CANDIDATES, "request.candidates",
                  err));
    for (size_t i = 0; i < r->n_candidates; i++) {
        s_subpath(p, "request", "candidates", (long)i);
        S_TRY(s_check_candidate(r->candidates[i], p, err));
    }
    return KL_OK;
}

static int s_check_result(const Kiln__MeasureResult *r, char *err)
{
    if ((int)r->status < 0 || r->status > KILN__STATUS__STATUS_INVALID)
        return kl_seterr(err, KL_ERR_PROTO, "result.status: unknown value %d",
                         (int)r->status);
    S_TRY(s_count(r->n_samples, KL_NET_MAX_SAMPLES, "result.samples", err));
    for (size_t i = 0; i < r->n_samples; i++)
        if (!isfinite(r->samples[i]) || r->samples[i] < 0)
            return kl_seterr(err, KL_ERR_PROTO,
                             "result.samples[%zu]: not a finite value >= 0", i);
    return s_str(r->error, KL_NET_MAX_ERROR, "result.error", err);
}

int kl_net__check(const Kiln__Envelope *env, char *err)
{
    switch (env->body_case) {
    case KILN__ENVELOPE__BODY_HELLO:
        return env->hello ? s_check_hello(env->hello, err)
                          : kl_seterr(err, KL_ERR_PROTO, "hello: missing");
    case KILN__ENVELOPE__BODY_WELCOME:
        if (!env->welcome)
            return kl_seterr(err, KL_ERR_PROTO, "welcome: missing");
        return s_str(env->welcome->coordinator_id, KL_NET_MAX_STRING,
                     "welcome.coordinator_id", err);
    case KILN__ENVELOPE__BODY_HEARTBEAT:
    case KILN__ENVELOPE__BODY_CANCEL:
        /* Only integers inside; a NULL pointer is still a missing body. */
        return env->heartbeat ? KL_OK
                              : kl_seterr(err, KL_ERR_PROTO, "body: missing");
    case KILN__ENVELOPE__BODY_REQUEST:
        return env->request ? s_check_request(env->request, err)
                            : kl_seterr(err, KL_ERR_PROTO, "request: missing");
    case KILN__ENVELOPE__BODY_RESULT:
        return env->result ? s_check_result(env->result, err)
                           : kl_seterr(err, KL_ERR_PROTO, "result: missing");
    case KILN__ENVELOPE__BODY_GOODBYE:
        if (!env->goodbye)
            return kl_seterr(err, KL_ERR_PROTO, "goodbye: missing");
        return s_str(env->goodbye->reason, KL_NET_MAX_ERROR, "goodbye.reason",
                     err);
    default:
        return kl_seterr(err, KL_ERR_PROTO,
                         "envelope: no body (oneof body not set)");
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
    S_TRY(s_scan(&kiln__envelope__descriptor, buf, len, 0, "", err));
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
