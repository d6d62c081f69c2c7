/* Unit tests of common/kl_npy: .npy files written here byte by byte (as
 * NumPy writes them, versions 1.0 and 2.0) and read back, and every error
 * the reader names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_npy.h"
#include "kl_test_tmp.h"
#include "kl_util.h"

typedef struct {
    char dir[512];
    char path[576];
    char err[KL_ERRMSG_LEN];
} fx_t;

static int setup(void **state)
{
    fx_t *fx = kl_xcalloc(1, sizeof *fx);
    if (!kl_test_mkdtemp(fx->dir, sizeof fx->dir, "kiln-npy-test-XXXXXX"))
        return -1;
    snprintf(fx->path, sizeof fx->path, "%s/a.npy", fx->dir);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    unlink(fx->path);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

/* A file of the given version with header text h (padded and ended with
 * '\n' here) and nbytes of data bytes 0, 1, 2, ... */
static void s_file(fx_t *fx, int major, const char *h, size_t nbytes)
{
    size_t pre = major == 1 ? 10 : 12;
    kl_buf_t hd = {0};
    kl_buf_puts(&hd, h);
    while ((pre + hd.len + 1) % 64)
        kl_buf_puts(&hd, " ");
    kl_buf_puts(&hd, "\n");
    size_t len = pre + hd.len + nbytes;
    unsigned char *b = kl_xcalloc(len, 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    for (size_t k = 0; k < (major == 1 ? 2u : 4u); k++)
        b[8 + k] = (unsigned char)(hd.len >> (8 * k));
    memcpy(b + pre, hd.data, hd.len);
    for (size_t k = 0; k < nbytes; k++)
        b[pre + hd.len + k] = (unsigned char)k;
    assert_int_equal(kl_write_file(fx->path, b, len, fx->err), KL_OK);
    free(b);
    kl_buf_free(&hd);
}

static void s_bad(fx_t *fx, const int64_t *want, int nw, const char *needle)
{
    kl_npy_t a;
    int rc = kl_npy_read(fx->path, want, nw, &a, fx->err);
    assert_int_equal(rc, KL_ERR_INVAL);
    assert_null(a.data);
    if (!strstr(fx->err, needle) || !strstr(fx->err, fx->path))
        fail_msg("error '%s' does not name the file and '%s'", fx->err, needle);
}

static void test_round_trip(void **state)
{
    fx_t *fx = *state;
    float v[6] = {1.5f, -2.0f, 0.0f, 3.25e-7f, -1e30f, 42.0f};
    int64_t sh[2] = {2, 3};
    assert_int_equal(kl_npy_write(fx->path, v, sh, 2, fx->err), KL_OK);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(kl_read_file(fx->path, &text, &len, fx->err), KL_OK);
    /* The header padded so that the data starts at 128, a multiple of 64
     * bytes. */
    assert_int_equal(len, 128 + 24);
    assert_memory_equal(text, "\x93NUMPY\x01\x00", 8);
    assert_int_equal(text[8] | text[9] << 8, 118);
    assert_int_equal(text[127], '\n');
    assert_non_null(strstr(text + 10, "{'descr': '<f4', 'fortran_order': "
                                      "False, 'shape': (2, 3), }"));
    free(text);
    kl_npy_t a;
    assert_int_equal(kl_npy_read(fx->path, NULL, 0, &a, fx->err), KL_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.numel, 6);
    assert_memory_equal(a.data, v, sizeof v);
    kl_npy_free(&a);
    /* The expected shape is checked by element count: 6 or 1x6 read it. */
    int64_t six = 6, one_six[2] = {1, 6};
    assert_int_equal(kl_npy_read(fx->path, &six, 1, &a, fx->err), KL_OK);
    kl_npy_free(&a);
    assert_int_equal(kl_npy_read(fx->path, one_six, 2, &a, fx->err), KL_OK);
    kl_npy_free(&a);
}

static void test_versions_and_shapes(void **state)
{
    fx_t *fx = *state;
    /* 2.0 (4-byte header length), double quotes, Python 2 longs, no
     * trailing comma, keys in another order. */
    s_file(fx, 2,
           "{\"shape\": (2L, 2L), \"fortran_order\": False, \"descr\": "
           "\"<f4\"}",
           16);
    kl_npy_t a;
    assert_int_equal(kl_npy_read(fx->path, NULL, 0, &a, fx->err), KL_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.numel, 4);
    float f;
    unsigned char b[4] = {4, 5, 6, 7}; /* the second float's bytes */
    memcpy(&f, b, 4);
    assert_memory_equal(&a.data[1], &f, 4);
    kl_npy_free(&a);
    /* A scalar and a 1-D array. */
    s_file(fx, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4);
    assert_int_equal(kl_npy_read(fx->path, NULL, 0, &a, fx->err), KL_OK);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.numel, 1);
    kl_npy_free(&a);
    char s[64];
    int64_t ten = 10, sh[4] = {1, 3, 32, 32};
    assert_string_equal(kl_npy_shape_str(&ten, 1, s, sizeof s), "(10,)");
    assert_string_equal(kl_npy_shape_str(sh, 4, s, sizeof s), "(1, 3, 32, 32)");
    assert_string_equal(kl_npy_shape_str(sh, 0, s, sizeof s), "()");
}

static void test_errors(void **state)
{
    fx_t *fx = *state;
    static const char zip[] = "PK\x03\x04 not numpy";
    assert_int_equal(kl_write_file(fx->path, zip, sizeof zip - 1, fx->err),
                     KL_OK);
    s_bad(fx, NULL, 0, "not an .npy file");
    s_file(fx, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
           24);
    s_bad(fx, NULL, 0, "dtype '<f8'");
    s_bad(fx, NULL, 0, "astype(np.float32)");
    s_file(fx, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
           12);
    s_bad(fx, NULL, 0, "dtype '<i4'");
    s_file(fx, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
           16);
    s_bad(fx, NULL, 0, "fortran_order is True");
    s_file(fx, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
           20);
    s_bad(fx, NULL, 0,
          "truncated data: shape (2, 3) is 6 floats (24 bytes), "
          "the file holds 20 bytes");
    s_file(fx, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
           28);
    s_bad(fx, NULL, 0, "too much data");
    s_file(fx, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
           24);
    int64_t want[4] = {1, 3, 2, 2};
    s_bad(fx, want, 4,
          "shape (2, 3) (6 elements) does not match the expected (1, 3, 2, "
          "2) (12 elements)");
    s_file(fx, 1, "{'descr': '<f4', 'fortran_order': False}", 0);
    s_bad(fx, NULL, 0, "no 'shape'");
    s_file(fx, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
           0);
    s_bad(fx, NULL, 0, "shape is not a tuple");
    s_file(fx, 1,
           "{'descr': [('a', '<f4')], 'fortran_order': False, "
           "'shape': (2,), }",
           8);
    s_bad(fx, NULL, 0, "structured");
    /* A header longer than the file. */
    unsigned char b[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 200, 0, '{', 0};
    assert_int_equal(kl_write_file(fx->path, b, sizeof b, fx->err), KL_OK);
    s_bad(fx, NULL, 0, "truncated .npy header");
    b[6] = 4;
    assert_int_equal(kl_write_file(fx->path, b, sizeof b, fx->err), KL_OK);
    s_bad(fx, NULL, 0, "format version 4.0");
    /* No file: the path and the system's reason. */
    kl_npy_t a;
    char *missing = kl_xasprintf("%s/none.npy", fx->dir);
    assert_int_equal(kl_npy_read(missing, NULL, 0, &a, fx->err),
                     KL_ERR_NOTFOUND);
    assert_non_null(strstr(fx->err, missing));
    free(missing);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_versions_and_shapes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
