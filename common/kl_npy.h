/* kl_npy.h - NumPy .npy files of f32 arrays: the inputs and outputs of
 * `kiln run` (docs/cli.md, "Export and run").
 *
 * Read: format versions 1.0, 2.0 and 3.0 (a 2- or 4-byte header length),
 * dtype '<f4' only (little-endian float32), C order. Every error is
 * KL_ERR_INVAL (KL_ERR_IO when the file cannot be read) with a message
 * that starts with the path and names the problem: not an .npy file (bad
 * magic), a header that does not parse, another dtype (named, e.g. '<f8',
 * with how to convert: arr.astype(np.float32)), fortran_order True, data
 * shorter or longer than the shape says, or a shape other than the one
 * expected (both shapes named).
 *
 * Write: version 1.0, '<f4', C order, the header padded with spaces so
 * that the data starts at a multiple of 64 bytes (as NumPy writes it). */
#ifndef KL_NPY_H
#define KL_NPY_H

#include <stddef.h>
#include <stdint.h>

#define KL_NPY_MAX_DIMS 16

typedef struct {
    int ndim; /* 0 for a scalar */
    int64_t shape[KL_NPY_MAX_DIMS];
    int64_t numel; /* product of shape (1 for a scalar) */
    float *data;   /* numel floats, host order; the caller's (free) */
} kl_npy_t;

/* Reads path into out. With want (want_ndim dimensions), the file's
 * element count must be that of want: a shape of the same count (e.g.
 * (1, 10) for 1x10 or 10) is accepted, any other is an error naming both
 * shapes. want NULL: any shape. On error out is left empty. */
int kl_npy_read(const char *path, const int64_t *want, int want_ndim,
                kl_npy_t *out, char *err);

/* Writes numel = product(shape) floats of data as path. */
int kl_npy_write(const char *path, const float *data, const int64_t *shape,
                 int ndim, char *err);

/* "(1, 3, 32, 32)", "(10,)", "()" into buf (NumPy's way of writing a
 * shape); returns buf. */
char *kl_npy_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);

void kl_npy_free(kl_npy_t *a);

#endif
