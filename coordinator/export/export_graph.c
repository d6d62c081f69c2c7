/* export_graph.c - the layer graph of an exported model as C (kiln_model.c
 * and kiln_model.h) and the build of libkiln_model.so.
 *
 * The graph is parsed again from the model's text and fused with the rules
 * of kl_model.c (kl_model.h, "Extraction"), so that every computing layer
 * maps to the task of its workload key; a layer whose key is not one of
 * the model's tasks is an internal error, never a silent guess. */
#include "kl_export.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "export_int.h"
#include "kl_util.h"

extern char **environ;

/* ---- code of the graph ---- */

static int64_t s_numel(const kl_mnode_t *nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd->ndim; i++)
        n *= nd->shape[i];
    return n;
}

typedef struct {
    const kl_mgraph_t *g;
    const kl_model_t *m;
    int *param;      /* node -> its param index (inputs), -1 */
    kl_buf_t decl;   /* buffers, kernels' prototypes */
    kl_buf_t run;    /* body of kiln_model_run */
    kl_buf_t pnames; /* param names */
    kl_buf_t pnumel; /* param sizes */
    int nparams;
    const char *src;
    const char *text; /* the graph text (transpose's perm=) */
} s_gen_t;

/* The C expression of node i's memory. */
static void s_bufexpr(const s_gen_t *c, int i, char *out, size_t n)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    if (nd->op == KL_MOP_INPUT)
        snprintf(out, n, "(float *)p[%d]", c->param[i]);
    else if (nd->fused)
        s_bufexpr(c, nd->owner, out, n);
    else if (nd->op == KL_MOP_FLATTEN || nd->op == KL_MOP_RESHAPE)
        s_bufexpr(c, nd->in[0], out, n);
    else
        snprintf(out, n, "b_%d", i);
}

static int s_new_param(s_gen_t *c, const char *name, const char *what,
                       int64_t numel)
{
    kl_buf_printf(&c->pnames, "    \"%s%s%s\",\n", name, what ? "." : "",
                  what ? what : "");
    kl_buf_printf(&c->pnumel, "    %lldLL,\n", (long long)numel);
    return c->nparams++;
}

static void s_arg(kl_buf_t *b, const char *expr)
{
    kl_buf_printf(b, "%s(void *)%s", b->len ? ", " : "", expr);
}

/* One computing layer: its task's kernel with its tensors in ABI order. */
static int s_task_call(s_gen_t *c, int i, char *err)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    char *spec = kl_mgraph_spec(c->g, nd);
    kl_workload_t *w = NULL;
    char e2[KL_ERRMSG_LEN];
    int rc = kl_workload_from_op(spec, &w, e2);
    free(spec);
    if (rc)
        return kl_seterr(err, rc, "%s: layer '%s': %s", c->src, nd->name, e2);
    int task = -1;
    for (int t = 0; t < kl_model_ntasks(c->m); t++)
        if (!memcmp(kl_model_task(c->m, t)->w->key, w->key, 16))
            task = t;
    kl_buf_t a = {0};
    char ex[64];
    int k = 0;
    s_bufexpr(c, nd->in[0], ex, sizeof ex);
    s_arg(&a, ex), k++;
    bool two = nd->nin == 2;
    bool weight = nd->op == KL_MOP_CONV2D || nd->op == KL_MOP_DEPTHWISE ||
                  nd->op == KL_MOP_DENSE || (nd->op == KL_MOP_MATMUL && !two);
    if (two) {
        s_bufexpr(c, nd->in[1], ex, sizeof ex);
        s_arg(&a, ex), k++;
    }
    if (weight && k < w->ntensors - 1) {
        int pi =
            s_new_param(c, nd->name, "weight", kl_tensor_numel(&w->tensors[k]));
        snprintf(ex, sizeof ex, "p[%d]", pi);
        s_arg(&a, ex), k++;
    }
    if (nd->bias && k < w->ntensors - 1) {
        int pi =
            s_new_param(c, nd->name, "bias", kl_tensor_numel(&w->tensors[k]));
        snprintf(ex, sizeof ex, "p[%d]", pi);
        s_arg(&a, ex), k++;
    }
    if (nd->res) {
        s_bufexpr(c, nd->res_from, ex, sizeof ex);
        s_arg(&a, ex), k++;
    }
    s_bufexpr(c, i, ex, sizeof ex);
    s_arg(&a, ex), k++;
    if (task < 0 || k != w->ntensors) {
        kl_buf_free(&a);
        rc = kl_seterr(err, KL_ERR_INTERNAL,
                       "%s: layer '%s': %s (%d tensors, %d arguments made)",
                       c->src, nd->name,
                       task < 0 ? "its workload is none of the model's tasks"
                                : "argument count",
                       w->ntensors, k);
        kl_workload_free(&w);
        return rc;
    }
    kl_buf_printf(&c->run,
                  "    { /* %s: %s */\n        void *a[] = {%s};\n"
                  "        kiln_task_%02d(a);\n    }\n",
                  nd->name, w->name, a.data, task);
    kl_buf_free(&a);
    kl_workload_free(&w);
    return KL_OK;
}

/* Layers without a task: softmax, layer_norm, gelu over the last dim. */
static void s_untuned_call(s_gen_t *c, int i)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    char in[64], out[64];
    s_bufexpr(c, nd->in[0], in, sizeof in);
    s_bufexpr(c, i, out, sizeof out);
    long long cols = nd->shape[nd->ndim - 1];
    long long rows = s_numel(nd) / cols;
    kl_buf_printf(&c->run, "    s_%s(%s, %s, %lld, %lld); /* %s */\n",
                  kl_mop_name(nd->op), in, out, rows, cols, nd->name);
}

int kl_export_perm(const char *text, const kl_mnode_t *nd, int *perm, char *err)
{
    const char *l = text;
    for (int k = 1; l && k < nd->line; k++) {
        l = strchr(l, '\n');
        l = l ? l + 1 : NULL;
    }
    const char *end = l ? strchr(l, '\n') : NULL;
    const char *p = l ? strstr(l, "perm=") : NULL;
    if (!p || (end && p > end))
        return kl_seterr(err, KL_ERR_INTERNAL,
                         "line %d: layer '%s': no perm= found", nd->line,
                         nd->name);
    p += 5;
    for (int k = 0; k < nd->ndim; k++) {
        char *q;
        long v = strtol(p, &q, 10);
        if (q == p || v < 0 || v >= nd->ndim)
            return kl_seterr(err, KL_ERR_INTERNAL,
                             "line %d: layer '%s': bad perm=", nd->line,
                             nd->name);
        perm[k] = (int)v;
        p = *q == ',' ? q + 1 : q;
    }
    return KL_OK;
}

/* A transpose: a copy through the permutation (kiln_model.c's
 * s_transpose). */
static int s_transpose_call(s_gen_t *c, int i, char *err)
{
    const kl_mnode_t *nd = &c->g->nodes[i], *x = &c->g->nodes[nd->in[0]];
    int perm[KL_MODEL_MAX_DIMS];
    int rc = kl_export_perm(c->text, nd, perm, err);
    if (rc)
        return rc;
    char in[64];
    s_bufexpr(c, nd->in[0], in, sizeof in);
    kl_buf_printf(&c->decl, "static float b_%d[%lld]; /* %s */\n", i,
                  (long long)s_numel(nd), nd->name);
    kl_buf_printf(&c->run,
                  "    { /* %s */\n        static const long long "
                  "sh[] = {",
                  nd->name);
    for (int k = 0; k < x->ndim; k++)
        kl_buf_printf(&c->run, "%s%lld", k ? ", " : "", (long long)x->shape[k]);
    kl_buf_puts(&c->run, "};\n        static const int pm[] = {");
    for (int k = 0; k < nd->ndim; k++)
        kl_buf_printf(&c->run, "%s%d", k ? ", " : "", perm[k]);
    kl_buf_printf(&c->run,
                  "};\n        s_transpose(%s, b_%d, %d, sh, pm);\n"
                  "    }\n",
                  in, i, nd->ndim);
    return KL_OK;
}

static int s_layer(s_gen_t *c, int i, char *err)
{
    const kl_mnode_t *nd = &c->g->nodes[i];
    switch (nd->op) {
    case KL_MOP_INPUT:
        c->param[i] = s_new_param(c, nd->name, NULL, s_numel(nd));
        return KL_OK;
    case KL_MOP_FLATTEN:
    case KL_MOP_RESHAPE:
        return KL_OK;
    case KL_MOP_TRANSPOSE:
        return s_transpose_call(c, i, err);
    default:
        break;
    }
    if (nd->fused)
        return KL_OK;
    kl_buf_printf(&c->decl, "static float b_%d[%lld]; /* %s */\n", i,
                  (long long)s_numel(nd), nd->name);
    if (nd->op == KL_MOP_SOFTMAX || nd->op == KL_MOP_LAYER_NORM ||
        nd->op == KL_MOP_GELU) {
        s_untuned_call(c, i);
        return KL_OK;
    }
    return s_task_call(c, i, err);
}

static const char s_helpers[] =
    "static void s_softmax(const float *x, float *y, long long r, long long "
    "n)\n{\n    for (long long i = 0; i < r; i++) {\n"
    "        const float *a = x + i * n;\n        float *b = y + i * n, m = "
    "a[0], s = 0;\n"
    "        for (long long j = 1; j < n; j++)\n            m = a[j] > m ? "
    "a[j] : m;\n"
    "        for (long long j = 0; j < n; j++)\n            s += b[j] = "
    "expf(a[j] - m);\n"
    "        for (long long j = 0; j < n; j++)\n            b[j] /= s;\n    "
    "}\n}\n\n"
    "static void s_layer_norm(const float *x, float *y, long long r, long "
    "long n)\n{\n    for (long long i = 0; i < r; i++) {\n"
    "        const float *a = x + i * n;\n        float *b = y + i * n;\n"
    "        double m = 0, v = 0;\n"
    "        for (long long j = 0; j < n; j++)\n            m += a[j];\n"
    "        m /= n;\n        for (long long j = 0; j < n; j++)\n"
    "            v += (a[j] - m) * (a[j] - m);\n"
    "        float d = (float)(1.0 / sqrt(v / n + 1e-5));\n"
    "        for (long long j = 0; j < n; j++)\n            b[j] = "
    "(float)(a[j] - m) * d;\n    }\n}\n\n"
    "static void s_gelu(const float *x, float *y, long long r, long long n)\n"
    "{\n    for (long long i = 0; i < r * n; i++)\n"
    "        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));\n}\n\n"
    "static void s_transpose(const float *x, float *y, int nd,\n"
    "                        const long long *sh, const int *pm)\n{\n"
    "    long long n = 1, st[8], os[8], ix[8] = {0};\n"
    "    for (int i = nd - 1; i >= 0; i--) {\n"
    "        st[i] = n;\n        n *= sh[i];\n    }\n"
    "    for (int i = 0; i < nd; i++)\n        os[i] = sh[pm[i]];\n"
    "    for (long long o = 0; o < n; o++) {\n        long long off = 0;\n"
    "        for (int i = 0; i < nd; i++)\n"
    "            off += ix[i] * st[pm[i]];\n        y[o] = x[off];\n"
    "        for (int i = nd - 1; i >= 0 && ++ix[i] == os[i]; i--)\n"
    "            ix[i] = 0;\n    }\n}\n\n";

static const char s_header[] =
    "/* kiln_model.h - the API of libkiln_model.so, written by kiln export.\n"
    " *\n"
    " * The model runs its layer graph in order. Its parameters are the\n"
    " * graph's inputs (in the order of the graph's input lines), then each\n"
    " * computing layer's weight and bias, in graph order (names\n"
    " * \"LAYER.weight\", \"LAYER.bias\"); all are dense row-major f32 in\n"
    " * the layouts of kl_ir.h's named operators (conv2d weight [K,C,R,S],\n"
    " * dense weight [O,I]). Intermediate buffers are static: allocated once,\n"
    " * when the library is loaded, so kiln_model_run is not reentrant.\n"
    " */\n"
    "#ifndef KILN_MODEL_H\n#define KILN_MODEL_H\n\n"
    "/* The model's name. */\nconst char *kiln_model_name(void);\n"
    "/* Number of parameters (inputs and weights); name and element count\n"
    " * of parameter i (NULL / -1 out of range). */\n"
    "int kiln_model_nparams(void);\n"
    "const char *kiln_model_param_name(int i);\n"
    "long long kiln_model_param_numel(int i);\n"
    "/* Elements of the output (the first `output` line's tensor, else the\n"
    " * last layer). */\nlong long kiln_model_output_numel(void);\n"
    "/* Runs the model: params[i] points to parameter i, output receives\n"
    " * kiln_model_output_numel() floats. Returns 0. */\n"
    "int kiln_model_run(const float *const *params, float *output);\n\n"
    "#endif\n";

static char *s_model_c(s_gen_t *c)
{
    const kl_mgraph_t *g = c->g;
    int out = g->nout ? g->outputs[0] : g->n - 1;
    char oex[64];
    s_bufexpr(c, out, oex, sizeof oex);
    kl_buf_t b = {0};
    kl_buf_printf(&b,
                  "/* kiln_model.c - the layer graph of model %s, written "
                  "by kiln export. */\n#include <math.h>\n#include "
                  "<string.h>\n\n#include \"kiln_model.h\"\n\n",
                  kl_model_name(c->m));
    for (int t = 0; t < kl_model_ntasks(c->m); t++)
        kl_buf_printf(&b, "void kiln_task_%02d(void *const *args);\n", t);
    kl_buf_printf(&b, "\n%s\n%s", c->decl.data ? c->decl.data : "", s_helpers);
    kl_buf_printf(&b,
                  "static const char *const s_names[] = {\n%s};\n"
                  "static const long long s_numel[] = {\n%s};\n\n",
                  c->pnames.data, c->pnumel.data);
    kl_buf_printf(&b,
                  "const char *kiln_model_name(void)\n{\n    return "
                  "\"%s\";\n}\n\nint kiln_model_nparams(void)\n{\n    "
                  "return %d;\n}\n\nconst char *kiln_model_param_name(int "
                  "i)\n{\n    return i >= 0 && i < %d ? s_names[i] : 0;\n}\n\n"
                  "long long kiln_model_param_numel(int i)\n{\n    return "
                  "i >= 0 && i < %d ? s_numel[i] : -1;\n}\n\nlong long "
                  "kiln_model_output_numel(void)\n{\n    return %lldLL;\n}\n\n",
                  kl_model_name(c->m), c->nparams, c->nparams, c->nparams,
                  (long long)s_numel(&g->nodes[out]));
    kl_buf_printf(&b,
                  "int kiln_model_run(const float *const *p, float *output)"
                  "\n{\n%s    memcpy(output, %s, %lldULL * sizeof(float));\n"
                  "    return 0;\n}\n",
                  c->run.data ? c->run.data : "", oex,
                  (long long)s_numel(&g->nodes[out]));
    return kl_buf_take(&b);
}

static int s_write(const char *dir, const char *name, const char *text,
                   char ***paths, int *n, char *err)
{
    char *p = kl_xasprintf("%s/%s", dir, name);
    int rc = kl_write_file(p, text, strlen(text), err);
    if (rc || !paths) {
        free(p);
        return rc;
    }
    *paths = kl_xrealloc(*paths, (size_t)(*n + 1) * sizeof(char *));
    (*paths)[(*n)++] = p;
    return KL_OK;
}

static int s_gen(s_gen_t *c, char **model_c, char *err)
{
    for (int i = 0; i < c->g->n; i++) {
        int rc = s_layer(c, i, err);
        if (rc)
            return rc;
    }
    *model_c = s_model_c(c);
    return KL_OK;
}

int kl_export_write_graph(const char *text, const char *source,
                          const kl_model_t *m, char *const *sources,
                          const char *dir, bool build, const char *cc,
                          char *err)
{
    kl_mgraph_t g;
    int rc = kl_mgraph_parse(text, source, &g, err);
    if (rc)
        return rc;
    kl_mgraph_fuse(&g);
    s_gen_t c = {.g = &g, .m = m, .src = source, .text = text};
    c.param = kl_xcalloc((size_t)g.n, sizeof(int));
    char *model_c = NULL, **paths = NULL;
    int np = 0;
    rc = s_gen(&c, &model_c, err);
    for (int t = 0; !rc && t < kl_model_ntasks(m); t++) {
        char name[32];
        snprintf(name, sizeof name, "task_%02d.c", t);
        rc = s_write(dir, name, sources[t], &paths, &np, err);
    }
    if (!rc)
        rc = s_write(dir, "kiln_model.h", s_header, NULL, NULL, err);
    if (!rc)
        rc = s_write(dir, "kiln_model.c", model_c, &paths, &np, err);
    if (!rc && build) {
        char *lib = kl_xasprintf("%s/libkiln_model.so", dir);
        rc = kl_export_cc(cc, paths, np, lib, err);
        free(lib);
    }
    for (int i = 0; i < np; i++)
        free(paths[i]);
    free(paths);
    free(model_c);
    free(c.param);
    kl_buf_free(&c.decl);
    kl_buf_free(&c.run);
    kl_buf_free(&c.pnames);
    kl_buf_free(&c.pnumel);
    kl_mgraph_free(&g);
    return rc;
}

/* ---- the compiler ---- */

static int s_log_tail(const char *log, const char *cc, int status, char *err)
{
    char *text = NULL;
    size_t len = 0;
    char e2[KL_ERRMSG_LEN];
    if (kl_read_file(log, &text, &len, e2))
        text = kl_xstrdup("");
    const char *tail = len > 300 ? text + len - 300 : text;
    int rc = kl_seterr(err, KL_ERR_COMPILE, "%s exited with %d (log %s): %s",
                       cc, status, log, tail);
    free(text);
    return rc;
}

int kl_export_cc(const char *cc, char *const *srcs, int n, const char *lib,
                 char *err)
{
    if (!cc)
        cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    const char *fixed[] = {cc,        "-O3",   "-march=native",  "-fopenmp",
                           "-shared", "-fPIC", "-Wl,-Bsymbolic", "-o",
                           lib};
    int nf = (int)(sizeof fixed / sizeof fixed[0]);
    char **argv = kl_xcalloc((size_t)(nf + n + 2), sizeof(char *));
    for (int i = 0; i < nf; i++)
        argv[i] = (char *)fixed[i];
    for (int i = 0; i < n; i++)
        argv[nf + i] = srcs[i];
    argv[nf + n] = "-lm";
    char *log = kl_xasprintf("%s.log", lib);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(argv);
    if (rc) {
        rc = kl_seterr(err, KL_ERR_COMPILE, "cannot run %s: %s", cc,
                       strerror(rc));
        free(log);
        return rc;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        rc = s_log_tail(log, cc, WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
    free(log);
    return rc;
}
