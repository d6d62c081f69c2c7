/* kl_store_json.c - JSON lines export and import of the record store.
 *
 * Messages are converted field by field through their protobuf-c
 * descriptors, so a field added to kiln.proto is exported and imported
 * without a change here. */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_store_priv.h"
#include "kl_util.h"

/* Lines per write transaction on import. */
#define S_IMPORT_BATCH 8192

/* ---- message -> JSON ------------------------------------------------------
 */

static size_t s_elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    default: /* 32-bit ints, float, bool, enum */
        return 4;
    }
}

static json_object *s_hex(const uint8_t *p, size_t n)
{
    static const char d[] = "0123456789abcdef";
    char *s = kl_xmalloc(2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = d[p[i] >> 4];
        s[2 * i + 1] = d[p[i] & 15];
    }
    s[2 * n] = '\0';
    json_object *o = json_object_new_string_len(s, (int)(2 * n));
    free(s);
    return o;
}

static json_object *s_double(double d)
{
    if (isnan(d))
        return json_object_new_string("nan");
    if (isinf(d))
        return json_object_new_string(d > 0 ? "inf" : "-inf");
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", d);
    /* Keep it a JSON number that reads back as a double. */
    if (!strpbrk(buf, ".eE"))
        strcat(buf, ".0");
    return json_object_new_double_s(d, buf);
}

static json_object *s_to_json(const ProtobufCMessage *msg);

static json_object *s_value(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_object_new_int64(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_object_new_int64(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_object_new_int64(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return json_object_new_uint64(*(const uint64_t *)p);
    case PROTOBUF_C_TYPE_FLOAT:
        return s_double(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return s_double(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_object_new_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        return ev ? json_object_new_string(ev->name) : json_object_new_int(v);
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return json_object_new_string(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        return s_hex(b->data, b->len);
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        return m ? s_to_json(m) : NULL;
    }
    }
    return NULL;
}

static void s_add_fields(json_object *o, const ProtobufCMessage *msg)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *base = (const char *)msg + f->offset;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            json_object *v = s_value(f, base);
            if (v)
                json_object_object_add(o, f->name, v);
            continue;
        }
        size_t n = *(const size_t *)((const char *)msg + f->quantifier_offset);
        const char *arr = *(char *const *)base;
        json_object *a = json_object_new_array_ext((int)n);
        for (size_t j = 0; j < n; j++)
            json_object_array_add(a,
                                  s_value(f, arr + j * s_elem_size(f->type)));
        json_object_object_add(o, f->name, a);
    }
}

static json_object *s_to_json(const ProtobufCMessage *msg)
{
    json_object *o = json_object_new_object();
    s_add_fields(o, msg);
    return o;
}

char *kl_store_json_line(const char *type, const ProtobufCMessage *msg)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string(type));
    s_add_fields(o, msg);
    char *s = kl_xstrdup(json_object_to_json_string_ext(
        o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

/* ---- export
 * ------------------------------------------------------------------ */

typedef struct {
    FILE *out;
    int err_no;
} s_export_t;

static int s_emit(s_export_t *x, const char *type, const ProtobufCMessage *m)
{
    char *line = kl_store_json_line(type, m);
    int bad = fputs(line, x->out) == EOF || fputc('\n', x->out) == EOF;
    free(line);
    if (bad) {
        x->err_no = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

static int s_export_w(const Kiln__Workload *w, void *arg)
{
    return s_emit(arg, "workload", &w->base);
}

static int s_export_r(const Kiln__TuningRecord *r, void *arg)
{
    return s_emit(arg, "record", &r->base);
}

int kl_store_export_jsonl(kl_store_t *self, FILE *out, char *err)
{
    s_export_t x = {out, 0};
    errno = 0;
    int rc = kl_store__foreach_all(self, s_export_w, s_export_r, &x, err);
    if (rc == KL_OK && fflush(out) != 0)
        x.err_no = errno ? errno : EIO, rc = -1;
    if (rc == -1)
        return kl_seterr(err, x.err_no == ENOSPC ? KL_ERR_NOSPC : KL_ERR_IO,
                         "export of store %s: write: %s", kl_store__dir(self),
                         strerror(x.err_no));
    return rc;
}

/* ---- JSON -> message ------------------------------------------------------
 */

/* Hex digit values; 0xff for anything else. Traces make most of an
 * import's bytes, so this is a table rather than branches. */
static uint8_t s_hexval[256];

static void s_hex_init(void)
{
    memset(s_hexval, 0xff, sizeof s_hexval);
    for (int i = 0; i < 10; i++)
        s_hexval['0' + i] = (uint8_t)i;
    for (int i = 0; i < 6; i++)
        s_hexval['a' + i] = s_hexval['A' + i] = (uint8_t)(10 + i);
}

static int s_unhex(const char *s, size_t len, ProtobufCBinaryData *out)
{
    if (len % 2)
        return -1;
    uint8_t *p = kl_xmalloc(len / 2 + 1);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len / 2; i++) {
        uint8_t hi = s_hexval[u[2 * i]], lo = s_hexval[u[2 * i + 1]];
        if ((hi | lo) & 0xf0) {
            free(p);
            return -1;
        }
        p[i] = (uint8_t)(hi << 4 | lo);
    }
    out->data = p;
    out->len = len / 2;
    return 0;
}

static int s_get_double(json_object *v, double *d)
{
    if (json_object_is_type(v, json_type_double) ||
        json_object_is_type(v, json_type_int)) {
        *d = json_object_get_double(v);
        return 0;
    }
    if (!json_object_is_type(v, json_type_string))
        return -1;
    const char *s = json_object_get_string(v);
    if (!strcmp(s, "nan"))
        *d = NAN;
    else if (!strcmp(s, "inf"))
        *d = INFINITY;
    else if (!strcmp(s, "-inf"))
        *d = -INFINITY;
    else
        return -1;
    return 0;
}

static int s_get_int(json_object *v, bool is_unsigned, int64_t lo, uint64_t hi,
                     uint64_t *out)
{
    if (!json_object_is_type(v, json_type_int))
        return -1;
    errno = 0;
    if (is_unsigned) {
        uint64_t u = json_object_get_uint64(v);
        /* json-c reports a negative number as 0 for uint64. */
        if (errno || u > hi || json_object_get_int64(v) < 0)
            return -1;
        *out = u;
        return 0;
    }
    int64_t i = json_object_get_int64(v);
    if (errno || i < lo || (i > 0 && (uint64_t)i > hi))
        return -1;
    *out = (uint64_t)i;
    return 0;
}

static int s_from_json(json_object *o, ProtobufCMessage *msg, bool skip_type,
                       char *path, size_t path_len);

/* Parses v into the element at p; returns 0 or -1 (bad value). */
static int s_set_value(const ProtobufCFieldDescriptor *f, json_object *v,
                       void *p, char *path, size_t path_len)
{
    uint64_t u;
    double d;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        if (s_get_int(v, false, INT32_MIN, INT32_MAX, &u))
            return -1;
        *(int32_t *)p = (int32_t)(int64_t)u;
        return 0;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if (s_get_int(v, true, 0, UINT32_MAX, &u))
            return -1;
        *(uint32_t *)p = (uint32_t)u;
        return 0;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if (s_get_int(v, false, INT64_MIN, INT64_MAX, &u))
            return -1;
        *(int64_t *)p = (int64_t)u;
        return 0;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if (s_get_int(v, true, 0, UINT64_MAX, &u))
            return -1;
        *(uint64_t *)p = u;
        return 0;
    case PROTOBUF_C_TYPE_FLOAT:
        if (s_get_double(v, &d))
            return -1;
        *(float *)p = (float)d;
        return 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        return s_get_double(v, (double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        if (!json_object_is_type(v, json_type_boolean))
            return -1;
        *(protobuf_c_boolean *)p = json_object_get_boolean(v);
        return 0;
    case PROTOBUF_C_TYPE_ENUM: {
        if (json_object_is_type(v, json_type_int)) {
            *(int *)p = json_object_get_int(v);
            return 0;
        }
        const ProtobufCEnumValue *ev =
            json_object_is_type(v, json_type_string)
                ? protobuf_c_enum_descriptor_get_value_by_name(
                      f->descriptor, json_object_get_string(v))
                : NULL;
        if (!ev)
            return -1;
        *(int *)p = ev->value;
        return 0;
    }
    case PROTOBUF_C_TYPE_STRING:
        if (!json_object_is_type(v, json_type_string))
            return -1;
        *(char **)p = kl_xstrndup(json_object_get_string(v),
                                  (size_t)json_object_get_string_len(v));
        return 0;
    case PROTOBUF_C_TYPE_BYTES:
        if (!json_object_is_type(v, json_type_string))
            return -1;
        return s_unhex(json_object_get_string(v),
                       (size_t)json_object_get_string_len(v), p);
    case PROTOBUF_C_TYPE_MESSAGE: {
        if (!json_object_is_type(v, json_type_object))
            return -1;
        const ProtobufCMessageDescriptor *md = f->descriptor;
        ProtobufCMessage *m = kl_xmalloc(md->sizeof_message);
        protobuf_c_message_init(md, m);
        *(ProtobufCMessage **)p = m;
        return s_from_json(v, m, false, path, path_len);
    }
    }
    return -1;
}

static int s_set_field(const ProtobufCFieldDescriptor *f, json_object *v,
                       ProtobufCMessage *msg, char *path, size_t path_len)
{
    char *base = (char *)msg + f->offset;
    if (f->label != PROTOBUF_C_LABEL_REPEATED)
        return s_set_value(f, v, base, path, path_len);
    if (!json_object_is_type(v, json_type_array))
        return -1;
    size_t n = json_object_array_length(v), es = s_elem_size(f->type);
    /* Counted before each element is parsed, so that free_unpacked frees
     * what a failing element allocated (unset elements are zero). */
    char *arr = kl_xcalloc(n ? n : 1, es);
    *(char **)base = arr;
    size_t *count = (size_t *)((char *)msg + f->quantifier_offset);
    *count = 0;
    for (size_t j = 0; j < n; j++) {
        (*count)++;
        if (s_set_value(f, json_object_array_get_idx(v, j), arr + j * es, path,
                        path_len))
            return -1;
    }
    return 0;
}

/* Fills msg from object o. On a bad field, path receives its dotted name
 * and -1 is returned; msg stays freeable with free_unpacked. */
static int s_from_json(json_object *o, ProtobufCMessage *msg, bool skip_type,
                       char *path, size_t path_len)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    json_object_object_foreach(o, name, v)
    {
        if (skip_type && strcmp(name, "type") == 0)
            continue;
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field_by_name(d, name);
        size_t used = strlen(path);
        snprintf(path + used, path_len - used, "%s%s", used ? "." : "", name);
        if (!f || s_set_field(f, v, msg, path, path_len))
            return -1;
        path[used] = '\0';
    }
    return 0;
}

/* ---- import ----------------------------------------------------------------
 */

typedef struct {
    kl_store_t *store;
    json_tokener *tok;
    kl_store__item_t items[S_IMPORT_BATCH];
    size_t n;
    size_t imported;
} s_import_t;

static void s_free_items(s_import_t *im, size_t from)
{
    for (size_t i = from; i < im->n; i++) {
        if (im->items[i].w)
            kiln__workload__free_unpacked(im->items[i].w, NULL);
        if (im->items[i].r)
            kiln__tuning_record__free_unpacked(im->items[i].r, NULL);
    }
    im->n = from;
}

/* Commits the pending lines. When one of them fails, the lines before it
 * are committed on their own and the error names the failing line. */
static int s_flush(s_import_t *im, char *err)
{
    size_t written = 0, failed = im->n;
    int rc = kl_store__write_items(im->store, im->items, im->n, true, &written,
                                   &failed, err);
    if (rc && failed < im->n) {
        char msg[KL_ERRMSG_LEN];
        snprintf(msg, sizeof msg, "%s", err ? err : "");
        size_t line = im->items[failed].line;
        int rc2 = kl_store__write_items(im->store, im->items, failed, true,
                                        &written, NULL, err);
        im->imported += rc2 ? 0 : written;
        s_free_items(im, 0);
        return kl_seterr(err, rc, "line %zu: %s", line, msg);
    }
    im->imported += written;
    s_free_items(im, 0);
    return rc;
}

static int s_parse_line(s_import_t *im, const char *text, size_t len,
                        size_t line, char *err)
{
    json_tokener *tok = im->tok;
    json_tokener_reset(tok);
    json_object *o = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    if (o && json_tokener_get_parse_end(tok) < len)
        jerr = json_tokener_error_parse_unexpected;
    if (!o || jerr != json_tokener_success) {
        json_object_put(o);
        return kl_seterr(err, KL_ERR_INVAL, "line %zu: bad JSON: %s", line,
                         json_tokener_error_desc(jerr));
    }
    json_object *t = NULL;
    const char *type = json_object_is_type(o, json_type_object) &&
                               json_object_object_get_ex(o, "type", &t)
                           ? json_object_get_string(t)
                           : NULL;
    kl_store__item_t *it = &im->items[im->n];
    *it = (kl_store__item_t){.line = line};
    ProtobufCMessage *m;
    if (type && strcmp(type, "workload") == 0) {
        it->w = kl_xmalloc(sizeof *it->w);
        kiln__workload__init(it->w);
        m = &it->w->base;
    } else if (type && strcmp(type, "record") == 0) {
        it->r = kl_xmalloc(sizeof *it->r);
        kiln__tuning_record__init(it->r);
        m = &it->r->base;
    } else {
        json_object_put(o);
        return kl_seterr(err, KL_ERR_INVAL,
                         "line %zu: not an object with \"type\": \"workload\" "
                         "or \"record\"",
                         line);
    }
    im->n++;
    char path[256] = "";
    int bad = s_from_json(o, m, true, path, sizeof path);
    json_object_put(o);
    if (bad) {
        s_free_items(im, im->n - 1);
        return kl_seterr(err, KL_ERR_INVAL,
                         "line %zu: field '%s': unknown or of the wrong type",
                         line, path);
    }
    return KL_OK;
}

static bool s_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

int kl_store_import_jsonl(kl_store_t *self, FILE *in, size_t *imported,
                          char *err)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, s_hex_init);
    s_import_t *im = kl_xcalloc(1, sizeof *im);
    im->store = self;
    im->tok = json_tokener_new();
    char *buf = NULL;
    size_t cap = 0, line = 0;
    ssize_t got;
    int rc = KL_OK;
    errno = 0;
    while (rc == KL_OK && (got = getline(&buf, &cap, in)) >= 0) {
        line++;
        size_t len = (size_t)got;
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            len--;
        if (s_blank(buf, len))
            continue;
        rc = s_parse_line(im, buf, len, line, err);
        if (rc == KL_OK && im->n == S_IMPORT_BATCH)
            rc = s_flush(im, err);
    }
    if (rc == KL_OK && ferror(in))
        rc = kl_seterr(err, KL_ERR_IO, "import: read after line %zu: %s", line,
                       strerror(errno));
    if (rc == KL_OK) {
        rc = s_flush(im, err);
    } else if (im->n) {
        /* Keep the lines before the bad one; its message wins. */
        char msg[KL_ERRMSG_LEN] = "";
        snprintf(msg, sizeof msg, "%s", err ? err : "");
        int rc2 = s_flush(im, err);
        if (rc2 == KL_OK && err)
            snprintf(err, KL_ERRMSG_LEN, "%s", msg);
        else if (rc2)
            rc = rc2;
    }
    free(buf);
    if (imported)
        *imported = im->imported;
    json_tokener_free(im->tok);
    free(im);
    return rc;
}
