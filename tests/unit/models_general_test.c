/* Unit tests of the graph format's general ops (kl_graph.h,
 * kl_mop_is_general; docs/models.md): const, the broadcasting element-wise
 * ops (add of two shapes, sub, mul, div, pow, max, min, where), sqrt,
 * exp, erf, neg, reciprocal, gelu approximate=tanh, concat, slice, gather,
 * expand, reduce_mean and reduce_sum.
 *  - shapes: each op's output as numpy / ONNX define it, broadcasting in
 *    both directions, keepdims both ways, and which layers broadcast;
 *  - errors: each names file, line, layer and what is wrong;
 *  - extraction: the general ops are no tasks and are reported as not
 *    tuned; a same-shape add stays the add task (and a residual), a
 *    broadcasting add is neither; a relu after a general op stays a layer
 *    of its own (a relu task). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_graph.h"
#include "kl_model.h"

static const kl_mnode_t *s_node(const kl_mgraph_t *g, const char *name)
{
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name))
            return &g->nodes[i];
    fail_msg("no node '%s'", name);
    return NULL;
}

/* Node name's shape is want ("2x3x4"). */
static void s_shape_is(const kl_mgraph_t *g, const char *name, const char *want)
{
    const kl_mnode_t *nd = s_node(g, name);
    char got[160] = "";
    size_t k = 0;
    for (int i = 0; i < nd->ndim; i++)
        k += (size_t)snprintf(got + k, sizeof got - k, "%s%lld", i ? "x" : "",
                              (long long)nd->shape[i]);
    if (strcmp(got, want))
        fail_msg("'%s' is %s, expected %s", name, got, want);
}

static void s_graph(const char *text, kl_mgraph_t *g)
{
    char err[KL_ERRMSG_LEN];
    if (kl_mgraph_parse(text, "t.graph", g, err))
        fail_msg("kl_mgraph_parse: %s", err);
}

static void test_broadcast_shapes(void **state)
{
    (void)state;
    kl_mgraph_t g;
    s_graph("input x 1x8x5x5\n"
            "input g 1x8x1x1\n"
            "input s 4x1\n"
            "input t 3\n"
            "input c 1x1x4x4\n"
            "input u 2x1x4x1\n"
            "m = mul x g\n" /* the squeeze-excite gate */
            "d = sub s t\n" /* [4,1] - [3]: both ways */
            "q = div t s\n" /* the other order */
            "p = pow x x\n" /* one shape: no broadcast */
            "a = add x x\n" /* the add task */
            "b = add x g\n" /* a broadcasting add */
            "mx = max t t\n"
            "mn = min u c\n"    /* [2,1,4,1] and [1,1,4,4] */
            "w = where c u g\n" /* three ways */
            "k = const shape=2x3\n"
            "e1 = expand s shape=2x1x3\n" /* [4,1] to [2,4,3] */
            "e2 = expand g shape=8x1x1\n" /* fewer dims: g's shape */
            "e3 = expand t shape=3\n",
            &g);
    s_shape_is(&g, "m", "1x8x5x5");
    s_shape_is(&g, "d", "4x3");
    s_shape_is(&g, "q", "4x3");
    s_shape_is(&g, "p", "1x8x5x5");
    s_shape_is(&g, "a", "1x8x5x5");
    s_shape_is(&g, "b", "1x8x5x5");
    s_shape_is(&g, "mx", "3");
    s_shape_is(&g, "mn", "2x1x4x4");
    s_shape_is(&g, "w", "2x8x4x4");
    s_shape_is(&g, "k", "2x3");
    s_shape_is(&g, "e1", "2x4x3");
    s_shape_is(&g, "e2", "1x8x1x1");
    s_shape_is(&g, "e3", "3");
    /* which broadcast */
    assert_true(s_node(&g, "m")->bcast);
    assert_true(s_node(&g, "d")->bcast);
    assert_false(s_node(&g, "p")->bcast);
    assert_false(s_node(&g, "a")->bcast);
    assert_true(s_node(&g, "b")->bcast);
    assert_false(s_node(&g, "mx")->bcast);
    assert_true(s_node(&g, "w")->bcast);
    const kl_mnode_t *w = s_node(&g, "w"), *k = s_node(&g, "k");
    assert_int_equal(w->nin, 3);
    assert_string_equal(g.nodes[w->in[2]].name, "g");
    assert_int_equal(k->nin, 0);
    assert_int_equal(k->op, KL_MOP_CONST);
    kl_mgraph_free(&g);
}

static void test_data_shapes(void **state)
{
    (void)state;
    kl_mgraph_t g;
    s_graph("input x 2x3x4x5\n"
            "input y 2x6x4x5\n"
            "c1 = concat x y axis=1\n"
            "c0 = concat x x axis=0\n"
            "c3 = concat x x axis=3\n"
            "s1 = slice x axis=3 start=1 end=5 step=3\n" /* 1, 4 */
            "s2 = slice x axis=0 start=0 end=2\n"        /* all of it */
            "s3 = slice y axis=1 start=1 end=6 step=2\n" /* 1, 3, 5 */
            "g1 = gather x axis=2 indices=3,0,3,1,2\n"
            "g2 = gather x axis=0 indices=1\n"
            "r1 = reduce_mean x axes=2,3\n"
            "r2 = reduce_mean x axes=3,1 keepdims=0\n"
            "r3 = reduce_sum x axes=0,1,2,3 keepdims=0\n"
            "r4 = reduce_sum x axes=0 keepdims=1\n"
            "e = exp x\n"
            "n = neg e\n"
            "q = sqrt n\n"
            "f = erf q\n"
            "v = reciprocal f\n"
            "u0 = gelu v\n"
            "u1 = gelu v approximate=none\n"
            "u2 = gelu v approximate=tanh\n",
            &g);
    s_shape_is(&g, "c1", "2x9x4x5");
    s_shape_is(&g, "c0", "4x3x4x5");
    s_shape_is(&g, "c3", "2x3x4x10");
    s_shape_is(&g, "s1", "2x3x4x2");
    s_shape_is(&g, "s2", "2x3x4x5");
    s_shape_is(&g, "s3", "2x3x4x5");
    s_shape_is(&g, "g1", "2x3x5x5");
    s_shape_is(&g, "g2", "1x3x4x5");
    s_shape_is(&g, "r1", "2x3x1x1");
    s_shape_is(&g, "r2", "2x4");
    s_shape_is(&g, "r3", "1");
    s_shape_is(&g, "r4", "1x3x4x5");
    static const char *const same[] = {"e", "n", "q", "f", "v", "u0"};
    for (int k = 0; k < 6; k++)
        s_shape_is(&g, same[k], "2x3x4x5");
    const kl_mnode_t *s1 = s_node(&g, "s1"), *g1 = s_node(&g, "g1");
    assert_int_equal(s1->axis, 3);
    assert_int_equal(s1->start, 1);
    assert_int_equal(s1->end, 5);
    assert_int_equal(s1->step, 3);
    assert_int_equal(s_node(&g, "s2")->step, 1);
    assert_int_equal(g1->nidx, 5);
    assert_int_equal(g1->idx[0], 3);
    assert_int_equal(g1->idx[4], 2);
    assert_int_equal(s_node(&g, "r2")->axes, (1u << 3) | (1u << 1));
    assert_false(s_node(&g, "r2")->keepdims);
    assert_true(s_node(&g, "r1")->keepdims);
    assert_false(s_node(&g, "u0")->gelu_tanh);
    assert_false(s_node(&g, "u1")->gelu_tanh);
    assert_true(s_node(&g, "u2")->gelu_tanh);
    kl_mgraph_free(&g);
}

static void s_fails(const char *text, const char *want)
{
    char err[KL_ERRMSG_LEN] = "";
    kl_mgraph_t g;
    assert_int_equal(kl_mgraph_parse(text, "t.graph", &g, err), KL_ERR_INVAL);
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

static void test_errors(void **state)
{
    (void)state;
    const char *in = "input a 2x3\ninput b 4x3\ninput x 1x4\n";
    char text[512];
#define S_FAILS(line, want)                                                    \
    do {                                                                       \
        snprintf(text, sizeof text, "%s%s\n", in, line);                       \
        s_fails(text, want);                                                   \
    } while (0)
    S_FAILS("y = mul a b",
            "t.graph:4: layer 'y': mul: shapes 2x3 and 4x3 do not broadcast");
    S_FAILS("y = add a b",
            "t.graph:4: layer 'y': add: shapes 2x3 and 4x3 do not broadcast");
    S_FAILS("y = where a a b", "t.graph:4: layer 'y': where: shapes 2x3, 2x3 "
                               "and 4x3 do not broadcast");
    S_FAILS("y = where a b", "t.graph:4: layer 'y': where takes 3 inputs");
    S_FAILS("y = sub a", "layer 'y': sub takes 2 inputs");
    S_FAILS("y = sqrt a b", "layer 'y': sqrt takes at most 1 input");
    S_FAILS("y = slice x axis=1 start=0 end=9",
            "t.graph:4: layer 'y': slice: end=9 is past dim 1 (4)");
    S_FAILS("y = slice x axis=1 start=2 end=2", "slice: start=2 end=2 is "
                                                "empty");
    S_FAILS("y = slice x axis=1 start=3 end=1", "slice: start=3 end=1 is "
                                                "empty");
    S_FAILS("y = slice x axis=1 end=2", "layer 'y': slice needs start=");
    S_FAILS("y = slice x axis=1 start=0 end=2 step=0",
            "layer 'y': bad value '0' for step");
    S_FAILS("y = slice x axis=2 start=0 end=1",
            "layer 'y': slice: axis=2 is past the 2 dims of 'x'");
    S_FAILS("y = slice x axis=-1 start=0 end=1",
            "layer 'y': bad value '-1' for axis");
    S_FAILS("y = concat a b axis=1", "layer 'y': concat: 'a' (2x3) and 'b' "
                                     "(4x3) differ outside axis 1");
    S_FAILS("y = concat a x axis=0", "'a' (2x3) and 'x' (1x4) differ");
    S_FAILS("y = concat a b", "layer 'y': concat needs axis=");
    S_FAILS("y = gather x axis=1 indices=0,4",
            "t.graph:4: layer 'y': gather: index 4 is past dim 1 (4)");
    S_FAILS("y = gather x axis=1 indices=0,,1", "bad indices '0,,1'");
    S_FAILS("y = gather x axis=1 indices=-1", "bad indices '-1'");
    S_FAILS("y = gather x axis=1", "layer 'y': gather needs indices=");
    char many[400] = "y = gather x axis=1 indices=0";
    for (int k = 0; k < 64; k++)
        strcat(many, ",1");
    S_FAILS(many, "layer 'y': gather: more than 64 indices");
    S_FAILS("y = expand a shape=4x3",
            "layer 'y': expand: shapes 2x3 and 4x3 do not broadcast");
    S_FAILS("y = expand a", "layer 'y': expand needs shape=");
    S_FAILS("y = reduce_mean a axes=2",
            "layer 'y': reduce_mean: axis 2 is past the 2 dims of 'a'");
    S_FAILS("y = reduce_sum a axes=1,1",
            "layer 'y': reduce_sum: axis 1 given twice");
    S_FAILS("y = reduce_sum a", "layer 'y': reduce_sum needs axes=");
    S_FAILS("y = reduce_sum a axes=0 keepdims=2",
            "layer 'y': keepdims must be 0 or 1");
    S_FAILS("y = gelu a approximate=fast",
            "layer 'y': bad value 'fast' for approximate (none or tanh)");
    S_FAILS("y = const", "expected 'NAME = OP");
    S_FAILS("y = const axis=1", "layer 'y': const has no attribute 'axis'");
    S_FAILS("y = const a shape=2", "layer 'y': const takes no input");
    S_FAILS("y = const shape=2x0", "bad shape '2x0'");
    S_FAILS("q = quantize a scale=0.5\ny = mul q a",
            "t.graph:5: layer 'y': mul needs an f32 input (dequantize it "
            "first), 'q' is u8");
    S_FAILS("q = quantize a scale=0.5\ny = reduce_sum q axes=0",
            "layer 'y': reduce_sum needs an f32 input");
#undef S_FAILS
}

static kl_model_t *s_model(const char *text)
{
    char err[KL_ERRMSG_LEN];
    kl_model_t *m = NULL;
    if (kl_model_parse(text, "t.graph", &m, err))
        fail_msg("kl_model_parse: %s", err);
    return m;
}

static void test_extraction(void **state)
{
    (void)state;
    /* c's add with x is the residual; b's broadcasting add of c2 and the
     * gate is neither a residual nor a task; r, the relu after the mul,
     * is a relu task; the same-shape add a2 of two non-conv values is
     * the add task. */
    static const char text[] = "input x 1x8x5x5\n"
                               "k = const shape=1x8x1x1\n"
                               "c = conv2d x K=8 R=1\n"
                               "s = add c x\n"
                               "c2 = conv2d s K=8 R=1\n"
                               "b = add c2 k\n"
                               "m = mul b k\n"
                               "r = relu m\n"
                               "a2 = add r m\n"
                               "ex = exp a2\n"
                               "rm = reduce_mean ex axes=2,3\n"
                               "d = sub ex rm\n"
                               "g = gelu d approximate=tanh\n"
                               "o = concat g d axis=1\n";
    kl_model_t *m = s_model(text);
    const char *want[] = {"conv2d N=1 C=8 H=5 W=5 K=8 R=1 S=1 stride=1 "
                          "pad=0 residual=1",
                          "conv2d N=1 C=8 H=5 W=5 K=8 R=1 S=1 stride=1 pad=0",
                          "relu shape=1x8x5x5", "add shape=1x8x5x5"};
    assert_int_equal(kl_model_ntasks(m), 4);
    for (int i = 0; i < 4; i++)
        assert_string_equal(kl_model_task(m, i)->spec, want[i]);
    assert_string_equal(kl_model_untuned(m),
                        "gelu x1, add (broadcast) x1, sub x1, mul x1, exp "
                        "x1, concat x1, reduce_mean x1");
    assert_int_equal(kl_model_nlayers(m), 13);
    assert_int_equal(kl_model_ntuned_layers(m), 5); /* c, s, c2, r, a2 */
    kl_model_destroy(&m);

    /* The graph as export sees it: b not fused, c2 without a residual. */
    kl_mgraph_t g;
    s_graph(text, &g);
    kl_mgraph_fuse(&g);
    assert_true(s_node(&g, "s")->fused);
    assert_true(s_node(&g, "c")->res);
    assert_false(s_node(&g, "b")->fused);
    assert_false(s_node(&g, "c2")->res);
    assert_false(s_node(&g, "r")->fused);
    kl_mgraph_free(&g);

    /* A broadcasting add is never a residual, even of a conv's output
     * that nothing else reads. */
    m = s_model("input x 1x8x5x5\n"
                "input g 1x8x1x1\n"
                "c = conv2d x K=8 R=1\n"
                "b = add g c\n"
                "r = relu b\n");
    assert_int_equal(kl_model_ntasks(m), 2);
    assert_string_equal(kl_model_task(m, 0)->spec,
                        "conv2d N=1 C=8 H=5 W=5 K=8 R=1 S=1 stride=1 pad=0");
    assert_string_equal(kl_model_task(m, 1)->spec, "relu shape=1x8x5x5");
    assert_string_equal(kl_model_untuned(m), "add (broadcast) x1");
    kl_model_destroy(&m);

    /* Only general layers: nothing to tune. */
    char err[KL_ERRMSG_LEN];
    assert_int_equal(
        kl_model_parse("input x 2x3\ny = mul x x\n", "t.graph", &m, err),
        KL_ERR_INVAL);
    assert_non_null(strstr(err, "no layer computes anything kiln can tune"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broadcast_shapes),
        cmocka_unit_test(test_data_shapes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_extraction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
