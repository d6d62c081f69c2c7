/* model_dims_test.c - a model's inputs resized at load (kl_model_opts_t,
 * kiln's --batch and --seq; coordinator/models/kl_model_dims.c and the
 * ONNX importer's s_inputs): graph text has its input lines rewritten
 * and nothing else; the built-ins' tasks follow (resnet18 at batch 2,
 * bert_base at sequence 64); an ONNX model whose reshape shapes and
 * causal mask are computed from Shape of its input follows the new size
 * (its tasks, its mask parameter, and, built naive, its numbers),
 * while one whose
 * shapes are constants is refused naming the reshape; and the errors
 * (--seq on a 4-D input, a negative size, N=0 on the command line). */
#include "onnx_fx.h"

#include "export_fx.h"
#include "kiln_cmds.h"
#include "kl_opt.h"

static kl_model_t *s_load(const char *name, int64_t batch, int64_t seq)
{
    char err[KL_ERRMSG_LEN];
    kl_model_opts_t o = {.batch = batch, .seq = seq};
    kl_model_t *m = NULL;
    if (kl_model_load_opts(name, &o, &m, err))
        fail_msg("%s (batch %lld, seq %lld): %s", name, (long long)batch,
                 (long long)seq, err);
    return m;
}

/* The load fails with KL_ERR_INVAL and an error that says want. */
static void s_load_fails(const char *name, int64_t batch, int64_t seq,
                         const char *want)
{
    char err[KL_ERRMSG_LEN] = "";
    kl_model_opts_t o = {.batch = batch, .seq = seq};
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load_opts(name, &o, &m, err), KL_ERR_INVAL);
    assert_null(m);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

/* The model has a task whose spec is want, of weight w. */
static void s_has_task(const kl_model_t *m, const char *want, int w)
{
    for (int i = 0; i < kl_model_ntasks(m); i++)
        if (!strcmp(kl_model_task(m, i)->spec, want)) {
            assert_int_equal(kl_model_task(m, i)->weight, w);
            return;
        }
    fail_msg("%s has no task '%s'", kl_model_name(m), want);
}

/* ---- graph text ---- */

static const char s_graph[] = "# two inputs, a comment after one\n"
                              "model two\n"
                              "input h 1x16x32   # [batch, seq, hidden]\n"
                              "input\tids 1x16\n"
                              "t = reshape h shape=-1x32\n"
                              "d = dense t O=8\n"
                              "s = reshape ids shape=-1x1\n";

static void test_graph_text(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], *out = NULL;
    kl_model_opts_t o = {.batch = 2, .seq = 8};
    assert_int_equal(kl_model_resize_text(s_graph, "two", &o, &out, err),
                     KL_OK);
    /* the shapes alone change, the rest of each line is kept */
    assert_string_equal(out, "# two inputs, a comment after one\n"
                             "model two\n"
                             "input h 2x8x32   # [batch, seq, hidden]\n"
                             "input\tids 2x8\n"
                             "t = reshape h shape=-1x32\n"
                             "d = dense t O=8\n"
                             "s = reshape ids shape=-1x1\n");
    free(out);
    /* batch alone; no overrides is the text itself */
    o = (kl_model_opts_t){.batch = 3};
    assert_int_equal(kl_model_resize_text(s_graph, "two", &o, &out, err),
                     KL_OK);
    assert_non_null(strstr(out, "input h 3x16x32 "));
    assert_non_null(strstr(out, "input\tids 3x16\n"));
    free(out);
    assert_int_equal(kl_model_resize_text(s_graph, "two", NULL, &out, err),
                     KL_OK);
    assert_string_equal(out, s_graph);
    free(out);
    /* a line the parser refuses is left for it to refuse */
    o = (kl_model_opts_t){.batch = 2};
    assert_int_equal(
        kl_model_resize_text("input x 1x-3\n", "bad", &o, &out, err), KL_OK);
    assert_string_equal(out, "input x 1x-3\n");
    free(out);

    /* a graph file loads resized: its tasks follow */
    char path[256];
    snprintf(path, sizeof path, "%s/kiln_dims_%d.graph", kl_test_tmpdir(),
             (int)getpid());
    assert_int_equal(kl_write_file(path, s_graph, strlen(s_graph), err), KL_OK);
    kl_model_t *m = s_load(path, 0, 0);
    s_has_task(m, "dense N=16 I=32 O=8 bias=1", 1);
    kl_model_destroy(&m);
    m = s_load(path, 2, 8);
    s_has_task(m, "dense N=16 I=32 O=8 bias=1", 1); /* 2 x 8 tokens */
    kl_model_destroy(&m);
    m = s_load(path, 4, 8);
    s_has_task(m, "dense N=32 I=32 O=8 bias=1", 1);
    kl_model_destroy(&m);
    /* --seq on a 4-D input: named with its shape and line */
    const char four[] = "input img 1x3x8x8\nc = conv2d img K=4 R=3\n";
    assert_int_equal(kl_write_file(path, four, strlen(four), err), KL_OK);
    char want[700];
    snprintf(want, sizeof want,
             "%s:1: --seq 8: input 'img' is 1x3x8x8 (4-D); --seq sets "
             "dimension 1 of a 2-D [batch, seq] or 3-D [batch, seq, hidden] "
             "input",
             path);
    s_load_fails(path, 0, 8, want);
    m = s_load(path, 2, 0);
    s_has_task(m, "conv2d N=2 C=3 H=8 W=8 K=4 R=3 S=3 stride=1 pad=0", 1);
    kl_model_destroy(&m);
    unlink(path);
}

/* ---- built-ins ---- */

static void test_resnet18_batch(void **state)
{
    (void)state;
    kl_model_t *one = s_load("resnet18", 0, 0), *two = s_load("resnet18", 2, 0);
    assert_int_equal(kl_model_ntasks(two), kl_model_ntasks(one));
    s_has_task(two,
               "conv2d N=2 C=3 H=224 W=224 K=64 R=7 S=7 stride=2 pad=3 "
               "bias=1 relu=1",
               1);
    s_has_task(two, "dense N=2 I=512 O=1000 bias=1", 1);
    /* every task is batch 2 now, and the model computes twice as much */
    for (int i = 0; i < kl_model_ntasks(two); i++) {
        const char *spec = kl_model_task(two, i)->spec;
        if (strncmp(strchr(spec, ' '), " N=2 ", 5))
            fail_msg("task %d is not at batch 2: %s", i, spec);
    }
    assert_true(kl_model_total_flop(two) == 2 * kl_model_total_flop(one));
    kl_model_destroy(&one);
    kl_model_destroy(&two);
    s_load_fails("resnet18", 0, 8,
                 "resnet18:8: --seq 8: input 'data' is 1x3x224x224 (4-D)");
}

static void test_bert_seq(void **state)
{
    (void)state;
    kl_model_t *m = s_load("bert_base", 0, 64);
    assert_int_equal(kl_model_ntasks(m), 5);
    s_has_task(m, "dense N=64 I=768 O=768 bias=1", 3);
    /* scores and context are the same shape at 64 = the head size: one
     * task of weight 2 */
    s_has_task(m, "batch_matmul B=12 M=64 N=64 K=64", 2);
    /* the residual adds fused into the projections before them */
    s_has_task(m, "dense N=64 I=768 O=768 bias=1 residual=1", 1);
    s_has_task(m, "dense N=64 I=768 O=3072 bias=1 act=gelu", 1);
    s_has_task(m, "dense N=64 I=3072 O=768 bias=1 residual=1", 1);
    kl_model_destroy(&m);
    m = s_load("bert_base", 1, 256);
    s_has_task(m, "batch_matmul B=12 M=256 N=256 K=64", 1);
    s_has_task(m, "batch_matmul B=12 M=256 N=64 K=256", 1);
    kl_model_destroy(&m);
    /* one sequence: its attention would mix two */
    s_load_fails("bert_base", 2, 0, "layer 'x.seq': reshape of");
}

/* ---- ONNX ---- */

static KilnOnnx__TensorProto *s_i64(const char *name, int n, const int64_t *v)
{
    KilnOnnx__TensorProto *t = s_tensor(name, n < 0 ? 0 : 1, n, 0, 0, 0);
    t->data_type = 7;
    n = n < 0 ? 1 : n;
    t->n_int64_data = (size_t)n;
    t->int64_data = s_mem((size_t)n * sizeof(int64_t));
    memcpy(t->int64_data, v, (size_t)n * sizeof(int64_t));
    return t;
}

/* An 8x8 weight of seeded values in [-0.5, 0.5). */
static KilnOnnx__TensorProto *s_w8(const char *name, uint64_t seed)
{
    float v[64];
    kl_rng_t r;
    kl_rng_seed(&r, seed);
    for (int i = 0; i < 64; i++)
        v[i] = (float)kl_rng_double(&r) - 0.5f;
    return s_data(s_tensor(name, 2, 8, 8, 0, 0), v, 64, false);
}

static char **s_in4(const char *a, const char *b, const char *c, const char *d)
{
    char **v = s_mem(4 * sizeof(char *));
    v[0] = (char *)a, v[1] = (char *)b, v[2] = (char *)c, v[3] = (char *)d;
    return v;
}

/* Self-attention as an exporter writes it, x [batch, 4, 8] (batch
 * symbolic) -> y: q, k, v = x Wq, x Wk, x Wv; two heads of 4 by
 * Reshape to [B, T, 2, 4] and Transpose; scores q k^T, with masked the
 * causal mask (ConstantOfShape [T, T] of 1, Trilu, Equal 0, Where
 * -1e9); Softmax; context, Transpose, Reshape to [B, T, 8]; y = that
 * Wo. B and T come from Shape(x) (Gather, Unsqueeze, Concat), as an
 * export with dynamic axes computes them; fixed: they are constants (1
 * and 4), as the exporter writes them when it traced the sizes. */
/* The attention's end: context p v, heads back to [B, T, 8], Wo. */
static const char *s_attention_tail(s_onnx_t *o)
{
    s_onnx_node(o, "MatMul", s_strs("p", "vt", 0), 2, "ctx", 0, 0, 0);
    s_onnx_node(o, "Transpose", s_strs("ctx", 0, 0), 1, "ctt",
                s_ints("perm", 4, 0, 2, 1, 3), 0, 0);
    s_onnx_node(o, "Reshape", s_strs("ctt", "os", 0), 2, "cf", 0, 0, 0);
    s_onnx_node(o, "MatMul", s_strs("cf", "wo", 0), 2, "y", 0, 0, 0);
    return s_onnx_write(o, "y");
}

static const char *s_attention(bool fixed, bool masked)
{
    s_onnx_t o;
    int64_t in[3] = {0, 4, 8}, i0 = 0, i1 = 1, two = 2, four = 4, eight = 8,
            zero = 0;
    s_onnx_init(&o, "x", 3, in);
    int ni = 0;
    o.inits[ni++] = s_w8("wq", 1);
    o.inits[ni++] = s_w8("wk", 2);
    o.inits[ni++] = s_w8("wv", 3);
    o.inits[ni++] = s_w8("wo", 4);
    o.inits[ni++] = s_i64("zero", -1, &zero);
    o.inits[ni++] = s_scalar("ninf", -1e9f, true);
    if (fixed) {
        static const int64_t hs[4] = {1, 4, 2, 4}, ms[2] = {4, 4},
                             os[3] = {1, 4, 8};
        o.inits[ni++] = s_i64("hs", 4, hs);
        o.inits[ni++] = s_i64("ms", 2, ms);
        o.inits[ni++] = s_i64("os", 3, os);
    } else {
        o.inits[ni++] = s_i64("i0", -1, &i0);
        o.inits[ni++] = s_i64("i1", -1, &i1);
        o.inits[ni++] = s_i64("c2", 1, &two);
        o.inits[ni++] = s_i64("c4", 1, &four);
        o.inits[ni++] = s_i64("c8", 1, &eight);
    }
    o.g.n_initializer = (size_t)ni;
    s_onnx_node(&o, "MatMul", s_strs("x", "wq", 0), 2, "q", 0, 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("x", "wk", 0), 2, "k", 0, 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("x", "wv", 0), 2, "v", 0, 0, 0);
    if (!fixed) {
        s_onnx_node(&o, "Shape", s_strs("x", 0, 0), 1, "sh", 0, 0, 0);
        s_onnx_node(&o, "Gather", s_strs("sh", "i0", 0), 2, "b", 0, 0, 0);
        s_onnx_node(&o, "Gather", s_strs("sh", "i1", 0), 2, "t", 0, 0, 0);
        s_onnx_node(&o, "Unsqueeze", s_strs("b", 0, 0), 1, "bu",
                    s_ints("axes", 1, 0, 0, 0, 0), 0, 0);
        s_onnx_node(&o, "Unsqueeze", s_strs("t", 0, 0), 1, "tu",
                    s_ints("axes", 1, 0, 0, 0, 0), 0, 0);
        s_onnx_node(&o, "Concat", s_in4("bu", "tu", "c2", "c4"), 4, "hs",
                    s_int("axis", 0), 0, 0);
        s_onnx_node(&o, "Concat", s_strs("tu", "tu", 0), 2, "ms",
                    s_int("axis", 0), 0, 0);
        s_onnx_node(&o, "Concat", s_strs("bu", "tu", "c8"), 3, "os",
                    s_int("axis", 0), 0, 0);
    }
    s_onnx_node(&o, "Reshape", s_strs("q", "hs", 0), 2, "qh", 0, 0, 0);
    s_onnx_node(&o, "Transpose", s_strs("qh", 0, 0), 1, "qt",
                s_ints("perm", 4, 0, 2, 1, 3), 0, 0);
    s_onnx_node(&o, "Reshape", s_strs("k", "hs", 0), 2, "kh", 0, 0, 0);
    s_onnx_node(&o, "Transpose", s_strs("kh", 0, 0), 1, "kt",
                s_ints("perm", 4, 0, 2, 3, 1), 0, 0);
    s_onnx_node(&o, "Reshape", s_strs("v", "hs", 0), 2, "vh", 0, 0, 0);
    s_onnx_node(&o, "Transpose", s_strs("vh", 0, 0), 1, "vt",
                s_ints("perm", 4, 0, 2, 1, 3), 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("qt", "kt", 0), 2, "sc", 0, 0, 0);
    if (!masked) {
        s_onnx_node(&o, "Softmax", s_strs("sc", 0, 0), 1, "p",
                    s_int("axis", -1), 0, 0);
        return s_attention_tail(&o);
    }
    KilnOnnx__AttributeProto *one = s_mem(sizeof(*one));
    kiln_onnx__attribute_proto__init(one);
    one->name = "value";
    one->t =
        s_data(s_tensor("v1", 1, 1, 0, 0, 0), (const float[]){1}, 1, false);
    s_onnx_node(&o, "ConstantOfShape", s_strs("ms", 0, 0), 1, "ones", one, 0,
                0);
    s_onnx_node(&o, "Trilu", s_strs("ones", 0, 0), 1, "tril", s_int("upper", 0),
                0, 0);
    s_onnx_node(&o, "Equal", s_strs("tril", "zero", 0), 2, "mask", 0, 0, 0);
    s_onnx_node(&o, "Where", s_strs("mask", "ninf", "sc"), 3, "msc", 0, 0, 0);
    s_onnx_node(&o, "Softmax", s_strs("msc", 0, 0), 1, "p", s_int("axis", -1),
                0, 0);
    return s_attention_tail(&o);
}

static void s_text_has_opts(const char *path, const kl_model_opts_t *o,
                            const char *want)
{
    char err[KL_ERRMSG_LEN], *text = NULL;
    if (kl_model_text_opts(path, o, &text, err))
        fail_msg("%s", err);
    if (!strstr(text, want))
        fail_msg("the graph text does not have '%s':\n%s", want, text);
    free(text);
}

/* The shapes computed from Shape(x) follow the new size: the reshapes,
 * the mask (a parameter of T x T values, 1 above the diagonal) and the
 * tasks. */
static void test_onnx_computed(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    const char *path = s_attention(false, true);
    /* as the model has it: the symbolic batch is 1 */
    s_text_has(path, "input x 1x4x8\n");
    s_text_has(path, "mask = const shape=4x4\n");
    kl_model_opts_t o = {.batch = 2, .seq = 8};
    s_text_has_opts(path, &o, "input x 2x8x8\n");
    s_text_has_opts(path, &o, "reshape q shape=2x8x2x4\n");
    s_text_has_opts(path, &o, "mask = const shape=8x8\n");
    s_text_has_opts(path, &o, "reshape ctt shape=2x8x8\n");
    kl_model_t *m = s_load(path, 2, 8);
    s_has_task(m, "matmul M=16 N=8 K=8 const_b=1", 4); /* q, k, v, the output */
    s_has_task(m, "batch_matmul B=4 M=8 N=8 K=4", 1);
    s_has_task(m, "batch_matmul B=4 M=8 N=4 K=8", 1);
    kl_model_destroy(&m);
    char *text = NULL;
    kl_model_params_t ps;
    assert_int_equal(kl_model_text_params_opts(path, &o, &text, &ps, err),
                     KL_OK);
    const kl_model_param_t *mask = kl_model_params_find(&ps, "mask.weight");
    assert_non_null(mask);
    assert_int_equal(mask->numel, 64);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            assert_true(mask->data[i * 8 + j] == (j > i ? 1.0f : 0.0f));
    kl_model_params_free(&ps);
    free(text);
    /* --seq on a 4-D ONNX input names it with its shape as the model
     * writes it */
    s_onnx_t c;
    int64_t in4[4] = {0, 3, 8, 8};
    s_onnx_init(&c, "img", 4, in4);
    c.inits[0] = s_tensor("w", 4, 4, 3, 3, 3);
    float wv[108] = {0};
    s_data(c.inits[0], wv, 108, false);
    c.g.n_initializer = 1;
    s_onnx_node(&c, "Conv", s_strs("img", "w", 0), 2, "y", 0, 0, 0);
    path = s_onnx_write(&c, "y");
    char want[700];
    snprintf(want, sizeof want,
             "%s: --seq 8: input 'img' is [batch, 3, 8, 8] (4-D)", path);
    s_load_fails(path, 0, 8, want);
    m = s_load(path, 2, 0);
    s_has_task(m, "conv2d N=2 C=3 H=8 W=8 K=4 R=3 S=3 stride=1 pad=0", 1);
    kl_model_destroy(&m);
    unlink(path);
    s_arena_free();
}

/* Shapes the exporter wrote as constants do not follow: the first
 * reshape they no longer fit is the error, naming its layer. */
static void test_onnx_constant_shapes(void **state)
{
    (void)state;
    const char *path = s_attention(true, true);
    kl_model_t *m = s_load(path, 0, 0);
    s_has_task(m, "matmul M=4 N=8 K=8 const_b=1", 4);
    kl_model_destroy(&m);
    m = s_load(path, 0, 4); /* its own size */
    kl_model_destroy(&m);
    char want[700];
    snprintf(want, sizeof want,
             "%s: with --seq 8: layer 'qh': reshape of 64 elements to "
             "1x4x2x4 (the model has this shape as a constant",
             path);
    s_load_fails(path, 0, 8, want);
    snprintf(want, sizeof want, "%s: with --batch 2: layer 'qh'", path);
    s_load_fails(path, 2, 0, want);
    unlink(path);
    s_arena_free();
}

/* Runs the naive build of the model at path with dims (batch, seq) on x
 * into y (64 floats, NaN where the output does not reach). */
static void s_run(const char *path, const char *dir, const char *name,
                  int64_t batch, int64_t seq, const float *x, float *y)
{
    char err[KL_ERRMSG_LEN];
    kl_model_opts_t o = {.batch = batch, .seq = seq};
    for (int i = 0; i < 64; i++) /* what a smaller model leaves */
        y[i] = NAN;
    char *d = kl_xasprintf("%s/%s", dir, name);
    if (kl_export_naive_opts(path, &o, d, NULL, err))
        fail_msg("%s: %s", name, err);
    char *lib = kl_xasprintf("%s/libkiln_model.so", d);
    fx_lib_t l;
    fx_open(&l, lib);
    assert_int_equal(l.infer(x, y), 0);
    free(lib);
    free(d);
}

/* n floats of got are want's (to 1e-5 of want's largest magnitude). */
static void s_close(const float *got, const float *want, int n,
                    const char *what)
{
    double big = 0;
    for (int i = 0; i < n; i++)
        big = fmax(big, fabs(want[i]));
    assert_true(big > 0.01);
    for (int i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-5 * big))
            fail_msg("%s: [%d] is %.9g, expected %.9g", what, i, got[i],
                     want[i]);
}

/* The numbers at the new size, the attention without its mask (the
 * const and where layers it needs do not export yet) built naive at
 * batch 1 and sequence 4 (the model's own), at sequence 8 and at batch
 * 2: a sequence of 4 tokens written twice attends to each token twice,
 * with half the weight, so its output is the output of the 4 tokens,
 * twice; at batch 2 each sequence's output is its own at batch 1. Shapes
 * that did not follow, or a layout that did not, break either. */
static void test_onnx_numbers(void **state)
{
    (void)state;
    char dir[256];
    assert_non_null(kl_test_mkdtemp(dir, sizeof dir, "kiln-dims-XXXXXX"));
    const char *path = s_attention(false, false);
    char model[300];
    snprintf(model, sizeof model, "%s/attention.onnx", dir);
    assert_int_equal(rename(path, model), 0);
    float a[32], b[32], x[64], ya[64], yb[64], y[64];
    kl_rng_t r;
    kl_rng_seed(&r, 7);
    for (int i = 0; i < 32; i++) {
        a[i] = 2 * (float)kl_rng_double(&r) - 1;
        b[i] = 2 * (float)kl_rng_double(&r) - 1;
    }
    s_run(model, dir, "a", 0, 0, a, ya);
    s_run(model, dir, "b", 0, 0, b, yb);
    memcpy(x, a, sizeof a);
    memcpy(x + 32, a, sizeof a);
    s_run(model, dir, "seq8", 0, 8, x, y);
    s_close(y, ya, 32, "seq 8, tokens 0..3");
    s_close(y + 32, ya, 32, "seq 8, tokens 4..7");
    memcpy(x + 32, b, sizeof b);
    s_run(model, dir, "batch2", 2, 0, x, y);
    s_close(y, ya, 32, "batch 2, sequence 0");
    s_close(y + 32, yb, 32, "batch 2, sequence 1");
    s_rmrf(dir);
    s_arena_free();
}

/* ---- the errors ---- */

static void test_errors(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN], *out = NULL;
    kl_model_t *m = NULL;
    kl_model_opts_t o = {.batch = -1};
    assert_int_equal(kl_model_load_opts("resnet18", &o, &m, err), KL_ERR_INVAL);
    assert_string_equal(err, "resnet18: --batch -1: a dimension is at least "
                             "1 (0 keeps the model's own)");
    o = (kl_model_opts_t){.seq = -2};
    assert_int_equal(kl_model_resize_text(s_graph, "two", &o, &out, err),
                     KL_ERR_INVAL);
    assert_null(out);
    assert_non_null(strstr(err, "--seq -2: a dimension is at least 1"));
    /* --seq on a 1-D input */
    o = (kl_model_opts_t){.seq = 4};
    assert_int_equal(
        kl_model_resize_text("model v\ninput v 16\n", "v", &o, &out, err),
        KL_ERR_INVAL);
    assert_non_null(strstr(err, "v:2: --seq 4: input 'v' is 16 (1-D)"));

    /* N=0 on the command line: the rows every command shares refuse it
     * (0 is the value of a flag not given) */
    static const kl_opt_t rows[] = {KILN_DIM_OPTS, KL_OPT_END};
    kl_opts_t *p = NULL;
    char *zero[] = {"--batch", "0"}, *zseq[] = {"--seq=0"},
         *ok[] = {"--seq", "8"};
    assert_int_equal(kl_opts_parse(rows, 2, zero, &p, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "--batch: 0 is out of range [1,"));
    assert_int_equal(kl_opts_parse(rows, 1, zseq, &p, err), KL_ERR_INVAL);
    assert_non_null(strstr(err, "--seq: 0 is out of range [1,"));
    assert_int_equal(kl_opts_parse(rows, 2, ok, &p, err), KL_OK);
    assert_int_equal(kl_opts_int(p, "seq"), 8);
    assert_int_equal(kl_opts_int(p, "batch"), 0);
    kl_opts_free(&p);
}

int main(void)
{
    unsetenv("KILN_BATCH"); /* the rows read these too */
    unsetenv("KILN_SEQ");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_text),
        cmocka_unit_test(test_resnet18_batch),
        cmocka_unit_test(test_bert_seq),
        cmocka_unit_test(test_onnx_computed),
        cmocka_unit_test(test_onnx_constant_shapes),
        cmocka_unit_test(test_onnx_numbers),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
