/* export_fx.h - what the export tests share (export_test.c,
 * export_prep_test.c, export_qdq_test.c, export_qfuse_test.c,
 * export_layout_test.c, export_weights_test.c): a tuning record committed
 * to a real store, the fixture's directory removed with what is in it,
 * and a graph exported with naive kernels (and a variant of its
 * kiln_model.c built) into a library opened in this process. */
#ifndef EXPORT_FX_H
#define EXPORT_FX_H

#include <dirent.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_export.h"
#include "kl_store.h"
#include "kl_trace.h"
#include "kl_util.h"

/* Commits trace tr as a record of w on target: status OK, the given
 * median, simulated or not, measured with ev (NULL: none). */
static inline void s_commit_rec(kl_store_t *st, const kl_workload_t *w,
                                const char *target, const kl_trace_t *tr,
                                double median, bool simulated,
                                Kiln__Evaluator *ev, char *err)
{
    uint8_t *buf = NULL, hash[16];
    size_t len = 0;
    kl_trace_to_proto(tr, &buf, &len);
    kl_trace_hash(tr, hash);
    Kiln__TuningRecord rec = KILN__TUNING_RECORD__INIT;
    rec.workload_key = (ProtobufCBinaryData){16, (uint8_t *)w->key};
    rec.target = (char *)target;
    rec.trace = (ProtobufCBinaryData){len, buf};
    rec.trace_hash = (ProtobufCBinaryData){16, hash};
    rec.status = KILN__STATUS__STATUS_OK;
    rec.median_s = median;
    rec.simulated = simulated;
    rec.evaluator = ev;
    Kiln__TuningRecord *p = &rec;
    assert_int_equal(kl_store_commit(st, &p, 1, err), KL_OK);
    free(buf);
}

/* Removes dir and everything in it (a store's files too), saying so on
 * stderr when it cannot. */
static inline void s_rmrf(const char *dir)
{
    char *cmd = kl_xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(cmd);
}

/* An exported model's library, opened. */
typedef struct {
    void *h;
    int (*infer)(const float *, float *);
} fx_lib_t;

static inline void fx_open(fx_lib_t *l, const char *path)
{
    l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!l->h)
        fail_msg("dlopen %s: %s", path, dlerror());
    *(void **)&l->infer = dlsym(l->h, "kiln_model_infer");
    assert_non_null(l->infer);
}

/* Writes graph to DIR/NAME.graph and exports it with naive kernels into
 * DIR/NAME, the environment variable env set (to 1) when on and unset
 * otherwise (and after); opens the library into l and returns
 * kiln_model.c's text. */
static inline char *fx_export(const char *dir, const char *name,
                              const char *graph, const char *env, bool on,
                              fx_lib_t *l)
{
    char err[KL_ERRMSG_LEN];
    char *g = kl_xasprintf("%s/%s.graph", dir, name);
    char *d = kl_xasprintf("%s/%s", dir, name);
    assert_int_equal(kl_write_file(g, graph, strlen(graph), err), KL_OK);
    if (on)
        setenv(env, "1", 1);
    else
        unsetenv(env);
    if (kl_export_naive(g, d, NULL, err))
        fail_msg("%s: %s", name, err);
    unsetenv(env);
    char *lib = kl_xasprintf("%s/libkiln_model.so", d);
    fx_open(l, lib);
    char *src = kl_xasprintf("%s/kiln_model.c", d), *text = NULL;
    size_t len;
    assert_int_equal(kl_read_file(src, &text, &len, err), KL_OK);
    free(src);
    free(lib);
    free(d);
    free(g);
    return text;
}

/* Builds DIR/NAME's kiln_model.c with `from` replaced by `to` (its first
 * occurrence) and NAME's tasks into DIR/NAME/libvariant_TAG.so; returns
 * the library's path (the caller's). Each variant needs its own tag: the
 * libraries are linked -z nodelete, so dlopen of a path already opened
 * returns the library first built there. */
static inline char *fx_variant_lib(const char *dir, const char *name,
                                   const char *from, const char *to,
                                   const char *tag)
{
    char err[KL_ERRMSG_LEN];
    char *d = kl_xasprintf("%s/%s", dir, name);
    char *src = kl_xasprintf("%s/kiln_model.c", d), *text = NULL;
    size_t len;
    assert_int_equal(kl_read_file(src, &text, &len, err), KL_OK);
    char *at = strstr(text, from);
    if (!at)
        fail_msg("'%s' is not in %s", from, src);
    kl_buf_t b = {0};
    kl_buf_append(&b, text, (size_t)(at - text));
    kl_buf_puts(&b, to);
    kl_buf_puts(&b, at + strlen(from));
    char *vsrc = kl_xasprintf("%s/variant_%s.c", d, tag);
    assert_int_equal(kl_write_file(vsrc, b.data, b.len, err), KL_OK);
    char *srcs[32];
    int n = 0;
    DIR *dd = opendir(d);
    assert_non_null(dd);
    struct dirent *e;
    while ((e = readdir(dd)) && n < 30)
        if (!strncmp(e->d_name, "task_", 5) && strstr(e->d_name, ".c"))
            srcs[n++] = kl_xasprintf("%s/%s", d, e->d_name);
    closedir(dd);
    srcs[n++] = vsrc;
    srcs[n++] = kl_xasprintf("%s/kiln_weights.S", d);
    char *lib = kl_xasprintf("%s/libvariant_%s.so", d, tag);
    if (kl_export_cc(NULL, srcs, n, lib, err))
        fail_msg("variant %s: %s", tag, err);
    for (int i = 0; i < n; i++)
        free(srcs[i]);
    kl_buf_free(&b);
    free(text);
    free(src);
    free(d);
    return lib;
}

/* fx_variant_lib's library (tag k) opened into l. */
static inline void fx_variant(const char *dir, const char *name,
                              const char *from, const char *to, int k,
                              fx_lib_t *l)
{
    char tag[16];
    snprintf(tag, sizeof tag, "%d", k);
    char *lib = fx_variant_lib(dir, name, from, to, tag);
    fx_open(l, lib);
    free(lib);
}

#endif
