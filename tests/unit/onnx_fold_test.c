/* onnx_fold_test.c - the ONNX importer's constant folding and general
 * element-wise and shape layers (kl_model_onnx_fold.c, _ew.c): a causal
 * mask made of constants folds into one const layer with the right
 * values, a weight transposed in the graph folds into the matmul's
 * weight, a constant that cannot fold into the layer before it is a
 * const operand, and the refusals name the node and the reason. The
 * models' numbers against ONNX Runtime are tests/integration/onnx_ops.sh's. */
#include "onnx_fx.h"

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

static void s_load_fails(const char *path, const char *want)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    assert_null(m);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

/* ConstantOfShape [4,4] of 1, Trilu (lower), Equal 0, Where(mask, -1e9,
 * x): the mask is one const layer of 0 and 1 (1 above the diagonal),
 * the -1e9 another, and the Where a where layer. */
static void test_fold_causal_mask(void **state)
{
    (void)state;
    s_onnx_t o;
    int64_t in[4] = {1, 2, 4, 4}, shp[2] = {4, 4}, zero = 0;
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = s_i64("shp", 2, shp);
    o.inits[1] = s_i64("zero", -1, &zero);
    o.inits[2] = s_scalar("ninf", -1e9f, true);
    static const float w[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    o.inits[3] = s_data(s_tensor("w", 2, 4, 3, 0, 0), w, 12, false);
    o.g.n_initializer = 4;
    KilnOnnx__AttributeProto *one = s_mem(sizeof(*one));
    kiln_onnx__attribute_proto__init(one);
    one->name = "value";
    one->t = s_data(s_tensor("v", 1, 1, 0, 0, 0), (const float[]){1}, 1, false);
    s_onnx_node(&o, "ConstantOfShape", s_strs("shp", 0, 0), 1, "ones", one, 0,
                0);
    s_onnx_node(&o, "Trilu", s_strs("ones", 0, 0), 1, "tril", s_int("upper", 0),
                0, 0);
    s_onnx_node(&o, "Cast", s_strs("tril", 0, 0), 1, "tril_i", s_int("to", 7),
                0, 0);
    s_onnx_node(&o, "Equal", s_strs("tril_i", "zero", 0), 2, "mask", 0, 0, 0);
    s_onnx_node(&o, "Where", s_strs("mask", "ninf", "x"), 3, "wh", 0, 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("wh", "w", 0), 2, "y", 0, 0, 0);
    const char *path = s_onnx_write(&o, "y");
    s_text_has(path, "mask = const shape=4x4\n"
                     "ninf = const shape=1\n"
                     "wh = where mask ninf x\n"
                     "y = matmul wh N=3\n");
    kl_model_params_t ps = s_params(path);
    double want[16];
    for (int i = 0; i < 16; i++)
        want[i] = i % 4 > i / 4;
    s_param_is(&ps, "mask.weight", want, 16);
    want[0] = -1e9;
    s_param_is(&ps, "ninf.weight", want, 1);
    kl_model_params_free(&ps);
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    kl_model_destroy(&m);
    unlink(path);
    s_arena_free();
}

/* A weight read through a Transpose (an export without constant
 * folding): the matmul's weight is the transposed values. */
static void test_fold_transposed_weight(void **state)
{
    (void)state;
    s_onnx_t o;
    int64_t in[2] = {1, 3};
    s_onnx_init(&o, "x", 2, in);
    static const float w[6] = {1, 2, 3, 4, 5, 6}; /* [2,3]: out x in */
    o.inits[0] = s_data(s_tensor("w", 2, 2, 3, 0, 0), w, 6, true);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Transpose", s_strs("w", 0, 0), 1, "wt",
                s_ints("perm", 2, 1, 0, 0, 0), 0, 0);
    s_onnx_node(&o, "MatMul", s_strs("x", "wt", 0), 2, "y", 0, 0, 0);
    const char *path = s_onnx_write(&o, "y");
    s_text_has(path, "y = matmul x N=2\n");
    kl_model_params_t ps = s_params(path);
    const double want[6] = {1, 4, 2, 5, 3, 6}; /* [K=3, N=2] */
    s_param_is(&ps, "y.weight", want, 6);
    kl_model_params_free(&ps);
    unlink(path);
    s_arena_free();
}

/* A Mul by a per-element constant after a conv (not one value per
 * channel) does not fold: a const operand and a mul layer; the conv keeps
 * its own weight. A Sub of two computed values is a sub layer. */
static void test_const_operand(void **state)
{
    (void)state;
    s_onnx_t o;
    int64_t in[4] = {1, 2, 2, 2};
    s_onnx_init(&o, "x", 4, in);
    static const float s[4] = {1, 2, 3, 4}, w[4] = {1, 0, 0, 1};
    o.inits[0] = s_data(s_tensor("w", 4, 2, 2, 1, 1), w, 4, false);
    o.inits[1] = s_data(s_tensor("s", 2, 2, 2, 0, 0), s, 4, false);
    o.g.n_initializer = 2;
    s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "c", 0, 0, 0);
    s_onnx_node(&o, "Mul", s_strs("c", "s", 0), 2, "m", 0, 0, 0);
    s_onnx_node(&o, "Sub", s_strs("m", "x", 0), 2, "y", 0, 0, 0);
    const char *path = s_onnx_write(&o, "y");
    s_text_has(path, "c = conv2d x K=2 R=1 S=1 stride=1 pad=0\n"
                     "s = const shape=2x2\n"
                     "m = mul c s\n"
                     "y = sub m x\n");
    kl_model_params_t ps = s_params(path);
    const double want[4] = {1, 2, 3, 4};
    s_param_is(&ps, "s.weight", want, 4);
    kl_model_params_free(&ps);
    unlink(path);
    s_arena_free();
}

/* Split by sizes, Slice with a negative start and a step, Gather by a
 * scalar index (a slice and a reshape that drops the axis), Concat of
 * three. */
static void test_shape_layers(void **state)
{
    (void)state;
    s_onnx_t o;
    int64_t in[3] = {1, 6, 8}, sizes[2] = {2, 4}, st = -6, en = 1000, ax = 2,
            step = 2, idx = 1;
    s_onnx_init(&o, "x", 3, in);
    o.inits[0] = s_i64("sizes", 2, sizes);
    o.inits[1] = s_i64("st", 1, &st);
    o.inits[2] = s_i64("en", 1, &en);
    o.inits[3] = s_i64("ax", 1, &ax);
    o.inits[4] = s_i64("step", 1, &step);
    o.inits[5] = s_i64("idx", -1, &idx);
    o.inits[6] = s_tensor("w", 2, 7, 3, 0, 0);
    o.g.n_initializer = 7;
    KilnOnnx__NodeProto *sp;
    s_onnx_node(&o, "Split", s_strs("x", "sizes", 0), 2, "a", s_int("axis", 1),
                0, 0);
    sp = o.nodes[o.g.n_node - 1];
    sp->output = s_strs("a", "b", NULL);
    sp->n_output = 2;
    char **sl = s_mem(5 * sizeof(char *));
    const char *sln[5] = {"b", "st", "en", "ax", "step"};
    memcpy(sl, sln, sizeof(sln));
    s_onnx_node(&o, "Slice", sl, 5, "bs", 0, 0, 0);
    s_onnx_node(&o, "Gather", s_strs("a", "idx", 0), 2, "g", s_int("axis", 1),
                0, 0);
    s_onnx_node(&o, "Unsqueeze", s_strs("g", 0, 0), 1, "gu",
                s_ints("axes", 1, 1, 0, 0, 0), 0, 0);
    s_onnx_node(&o, "Concat", s_strs("gu", "a", "b"), 3, "cat",
                s_int("axis", 1), 0, 0);
    s_onnx_node(&o, "ReduceSum", s_strs("cat", 0, 0), 1, "r",
                s_ints("axes", 1, -1, 0, 0, 0), s_int("keepdims", 0), 0);
    s_onnx_node(&o, "MatMul", s_strs("r", "w", 0), 2, "y", 0, 0, 0);
    const char *path = s_onnx_write(&o, "y");
    s_text_has(path, "a = slice x axis=1 start=0 end=2\n"
                     "b = slice x axis=1 start=2 end=6\n"
                     "bs = slice b axis=2 start=2 end=7 step=2\n"
                     "g_0 = slice a axis=1 start=1 end=2\n"
                     "g = reshape g_0 shape=1x8\n");
    s_text_has(path, "cat_1 = concat gu a axis=1\n"
                     "cat = concat cat_1 b axis=1\n"
                     "r = reduce_sum cat axes=2 keepdims=0\n"
                     "y = matmul r N=3\n");
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    kl_model_destroy(&m);
    unlink(path);
    s_arena_free();
}

/* GELU's tanh form as the dynamo exporter writes it (Pow 3, Mul, Add,
 * Mul, Tanh, Add 1, Mul by 0.5, then Mul by x) is one gelu layer; with
 * another constant than 0.5 it is not GELU, and stays element-wise. */
static void test_gelu_tanh_form(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        s_onnx_t o;
        int64_t in[2] = {1, 8};
        s_onnx_init(&o, "x", 2, in);
        o.inits[0] = s_scalar("three", 3, true);
        o.inits[1] = s_scalar("c1", 0.044715f, true);
        o.inits[2] = s_scalar("c2", 0.7978846f, true);
        o.inits[3] = s_scalar("one", 1, true);
        o.inits[4] = s_scalar("half", k ? 0.6f : 0.5f, true);
        o.inits[5] = s_tensor("w", 2, 8, 4, 0, 0);
        o.g.n_initializer = 6;
        s_onnx_node(&o, "Pow", s_strs("x", "three", 0), 2, "p", 0, 0, 0);
        s_onnx_node(&o, "Mul", s_strs("c1", "p", 0), 2, "m1", 0, 0, 0);
        s_onnx_node(&o, "Add", s_strs("x", "m1", 0), 2, "a1", 0, 0, 0);
        s_onnx_node(&o, "Mul", s_strs("c2", "a1", 0), 2, "m2", 0, 0, 0);
        s_onnx_node(&o, "Tanh", s_strs("m2", 0, 0), 1, "t", 0, 0, 0);
        s_onnx_node(&o, "Add", s_strs("t", "one", 0), 2, "a2", 0, 0, 0);
        s_onnx_node(&o, "Mul", s_strs("half", "a2", 0), 2, "m3", 0, 0, 0);
        s_onnx_node(&o, "Mul", s_strs("x", "m3", 0), 2, "g", 0, 0, 0);
        s_onnx_node(&o, "MatMul", s_strs("g", "w", 0), 2, "y", 0, 0, 0);
        const char *path = s_onnx_write(&o, "y");
        if (k == 0)
            s_text_has(path, "input x 1x8\ng = gelu x approximate=tanh\n"
                             "y = matmul g N=4\n");
        else
            s_text_has(path, "t = tanh m2\n");
        unlink(path);
        s_arena_free();
    }
}

/* What kiln still refuses on computed values names the node and why. */
static void test_refusals(void **state)
{
    (void)state;
    s_onnx_t o;
    int64_t in[2] = {4, 8}, st = 3, en = 0, ax = 1, step = -1,
            sizes[2] = {3, 3};
    s_onnx_init(&o, "x", 2, in);
    o.inits[0] = s_i64("st", 1, &st);
    o.inits[1] = s_i64("en", 1, &en);
    o.inits[2] = s_i64("ax", 1, &ax);
    o.inits[3] = s_i64("step", 1, &step);
    o.inits[4] = s_i64("sizes", 2, sizes);
    o.g.n_initializer = 5;
    char **sl = s_mem(5 * sizeof(char *));
    const char *sln[5] = {"x", "st", "en", "ax", "step"};
    memcpy(sl, sln, sizeof(sln));
    s_onnx_node(&o, "Slice", sl, 5, "y", 0, 0, 0);
    s_load_fails(s_onnx_write(&o, "y"),
                 "node 'y' (Slice): a negative step (kiln slices computed "
                 "values forward only)");
    o.g.n_node = 0;
    s_onnx_node(&o, "Split", s_strs("x", "sizes", 0), 2, "y", s_int("axis", 1),
                0, 0);
    o.nodes[0]->output = s_strs("y", "z", NULL);
    o.nodes[0]->n_output = 2;
    s_load_fails(s_onnx_write(&o, "y"),
                 "node 'y' (Split): split sizes that do not add up");
    o.g.n_node = 0;
    s_onnx_node(&o, "Gather", s_strs("x", "x", 0), 2, "y", 0, 0, 0);
    s_load_fails(s_onnx_write(&o, "y"),
                 "node 'y' (Gather): indices must be a constant");
    o.g.n_node = 0;
    s_onnx_node(&o, "Equal", s_strs("x", "x", 0), 2, "y", 0, 0, 0);
    s_load_fails(s_onnx_write(&o, "y"),
                 "Equal (1 node: 'y'; of a computed value (kiln folds it on "
                 "constants only))");
    /* a constant too large to fold */
    int64_t big[2] = {1 << 13, 1 << 12};
    o.inits[5] = s_i64("big", 2, big);
    o.g.n_initializer = 6;
    o.g.n_node = 0;
    s_onnx_node(&o, "ConstantOfShape", s_strs("big", 0, 0), 1, "y", 0, 0, 0);
    s_load_fails(s_onnx_write(&o, "y"),
                 "node 'y' (ConstantOfShape): a constant of 33554432 values "
                 "is too large to fold");
    unlink(s_onnx_write(&o, "y"));
    s_arena_free();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_causal_mask),
        cmocka_unit_test(test_fold_transposed_weight),
        cmocka_unit_test(test_const_operand),
        cmocka_unit_test(test_shape_layers),
        cmocka_unit_test(test_gelu_tanh_form),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
