/* onnx_unsup_test.c - a model with nodes kiln cannot import fails once,
 * naming every unsupported op type with its count and first node names,
 * most nodes first (kl_model_onnx.c, s_nodes); what is computed from
 * them is named only when no handler takes its op at all. */
#include "onnx_fx.h"

static void s_want(const char *err, const char *want)
{
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

static void s_want_not(const char *err, const char *what)
{
    if (strstr(err, what))
        fail_msg("error '%s' says '%s'", err, what);
}

/* One squeeze-excite-like block: conv, Softplus, Mul of the two. */
static void s_silu(s_onnx_t *o, const char *in, const char *w, int i)
{
    static char names[8][3][16];
    snprintf(names[i][0], 16, "/c%d", i);
    snprintf(names[i][1], 16, "/s%d", i);
    snprintf(names[i][2], 16, "/m%d", i);
    s_onnx_node(o, "Conv", s_strs(in, w, 0), 2, names[i][0], 0, 0, 0);
    s_onnx_node(o, "Softplus", s_strs(names[i][0], 0, 0), 1, names[i][1], 0, 0,
                0);
    s_onnx_node(o, "Mul", s_strs(names[i][0], names[i][1], 0), 2, names[i][2],
                0, 0, 0);
}

/* Trilu x1 (before everything; of a computed value, which kiln folds on
 * constants only: the reason is given), Softplus x3, Selu x2: all three
 * op types, each node by name, sorted by count; the convs and Muls
 * computed from a Softplus are not named (kiln has handlers for them). */
static void test_unsup_grouped(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[4] = {1, 8, 4, 4};
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = s_tensor("w", 4, 8, 8, 1, 1);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Trilu", s_strs("x", 0, 0), 1, "/t", 0, 0, 0);
    s_silu(&o, "x", "w", 1);
    s_silu(&o, "/m1", "w", 2);
    s_silu(&o, "/m2", "w", 3);
    s_onnx_node(&o, "Selu", s_strs("/m3", 0, 0), 1, "/sp1", 0, 0, 0);
    s_onnx_node(&o, "Selu", s_strs("x", 0, 0), 1, "/sp2", 0, 0, 0);
    s_onnx_node(&o, "Add", s_strs("/sp1", "/sp2", 0), 2, "y", 0, 0, 0);
    const char *path = s_onnx_write(&o, "y");
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    assert_null(m);
    s_want(err, ".onnx: ONNX import: 3 op types are not supported (6 "
                "nodes): Softplus (3 nodes: '/s1', '/s2', '/s3'), Selu (2 "
                "nodes: '/sp1', '/sp2'), Trilu (1 node: '/t'; of a computed "
                "value (kiln folds it on constants only)); kiln imports "
                "Conv, Gemm, MatMul");
    s_want_not(err, "Mul (");
    s_want_not(err, "Conv (");
    s_want_not(err, "Add");
    /* a fourth Softplus: its name is left out, the count says it */
    o.g.n_node--;
    s_silu(&o, "/sp1", "w", 4);
    path = s_onnx_write(&o, "/m4");
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    s_want(err, "(7 nodes): Softplus (4 nodes: '/s1', '/s2', '/s3', ...), "
                "Selu (2 nodes");
    s_want_not(err, "/s4");
    unlink(path);
    s_arena_free();
}

/* More op types than the message has room for names of: every op type
 * is still named with its count (names dropped first). */
static void test_unsup_many_types(void **state)
{
    (void)state;
    static const char *const ops[] = {"Softplus", "Selu",   "Celu", "Mish",
                                      "Softsign", "Shrink", "Sinh", "Cosh",
                                      "Asin",     "Acos"};
    enum { NOPS = sizeof ops / sizeof ops[0] };
    static char names[NOPS][3][80];
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[2] = {1, 8};
    s_onnx_init(&o, "x", 2, in);
    for (int i = 0; i < NOPS; i++)
        for (int k = 0; k < 2 + (i == 0); k++) {
            snprintf(names[i][k], 80,
                     "/features/%d/block/block.%d/a_long_node_name/%s", i, k,
                     ops[i]);
            s_onnx_node(&o, ops[i], s_strs("x", 0, 0), 1, names[i][k], 0, 0, 0);
        }
    const char *path = s_onnx_write(&o, names[0][0]);
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    unlink(path);
    s_want(err, "ONNX import: 10 op types are not supported (21 nodes): "
                "Softplus (3 nodes");
    char want[64];
    for (int i = 1; i < NOPS; i++) {
        snprintf(want, sizeof want, ", %s (2 nodes)", ops[i]);
        s_want(err, want);
    }
    s_want_not(err, "/features/");
    /* 30 op types do not fit even without names: as many as fit, then
     * how many more op types and nodes there are */
    static char op30[30][32];
    o.g.n_node = 0;
    for (int i = 0; i < 30; i++) {
        snprintf(op30[i], sizeof op30[i], "CustomOperatorNumber%02d", i);
        s_onnx_node(&o, op30[i], s_strs("x", 0, 0), 1, op30[i], 0, 0, 0);
    }
    path = s_onnx_write(&o, op30[0]);
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    unlink(path);
    s_want(err, "ONNX import: 30 op types are not supported (30 nodes): "
                "CustomOperatorNumber00 (1 node), CustomOperatorNumber01 (1 "
                "node), ");
    const char *more = strstr(err, ", and ");
    assert_non_null(more);
    int n_more = 0, n_nodes = 0, shown = 0;
    assert_int_equal(
        sscanf(more, ", and %d more op types (%d nodes)", &n_more, &n_nodes),
        2);
    for (const char *p = err; (p = strstr(p, "(1 node)")); p++)
        shown++;
    assert_int_equal(shown + n_more, 30);
    assert_int_equal(n_nodes, n_more);
    s_want(err, "; kiln imports Conv");
    assert_true(strlen(err) < KL_ERRMSG_LEN - 1);
    s_arena_free();
}

/* An unsupported node after supported ones: it alone is named. Other
 * problems still stop at their node, as before. */
static void test_unsup_after_supported(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[4] = {1, 8, 4, 4};
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = s_tensor("w", 4, 8, 8, 1, 1);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "/c", 0, 0, 0);
    s_onnx_node(&o, "Relu", s_strs("/c", 0, 0), 1, "/r", 0, 0, 0);
    s_onnx_node(&o, "Softsign", s_strs("/r", 0, 0), 1, "/e", 0, 0, 0);
    const char *path = s_onnx_write(&o, "/e");
    kl_model_t *m = NULL;
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    s_want(err, ".onnx: ONNX import: 1 op type is not supported (1 node): "
                "Softsign (1 node: '/e'); kiln imports");
    s_want_not(err, "Conv (");
    s_want_not(err, "Relu (");
    /* asymmetric pads after an unsupported node: that error, by node */
    s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "/p",
                s_ints("pads", 4, 0, 0, 1, 1), 0, 0);
    path = s_onnx_write(&o, "/p");
    assert_int_equal(kl_model_load(path, &m, err), KL_ERR_INVAL);
    s_want(err, "node '/p' (Conv): asymmetric");
    s_want_not(err, "not supported");
    unlink(path);
    s_arena_free();
}

/* Only supported nodes: imports as before. */
static void test_unsup_none(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    s_onnx_t o;
    int64_t in[4] = {1, 8, 4, 4};
    s_onnx_init(&o, "x", 4, in);
    o.inits[0] = s_tensor("w", 4, 8, 8, 1, 1);
    o.g.n_initializer = 1;
    s_onnx_node(&o, "Conv", s_strs("x", "w", 0), 2, "/c", 0, 0, 0);
    s_onnx_node(&o, "Relu", s_strs("/c", 0, 0), 1, "/r", 0, 0, 0);
    const char *path = s_onnx_write(&o, "/r");
    kl_model_t *m = NULL;
    if (kl_model_load(path, &m, err))
        fail_msg("%s", err);
    unlink(path);
    assert_int_equal(kl_model_ntasks(m), 1);
    assert_non_null(strstr(kl_model_task(m, 0)->spec, "conv2d N=1 C=8 H=4"));
    kl_model_destroy(&m);
    s_arena_free();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unsup_grouped),
        cmocka_unit_test(test_unsup_many_types),
        cmocka_unit_test(test_unsup_after_supported),
        cmocka_unit_test(test_unsup_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
