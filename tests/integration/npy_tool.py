#!/usr/bin/env python3
"""Small .npy files for the kiln run tests, with the standard library only
(struct; no numpy: the tests need no Python packages).

  npy_tool.py write PATH DESCR SHAPE   values ((i*37) % 101 - 50) / 50, i = 0..
                                       DESCR '<f4' or '<f8', SHAPE like 1x8x16x16
  npy_tool.py check PATH SHAPE         exit 1 unless PATH is a v1.0 '<f4' C-order
                                       .npy of SHAPE whose data starts at a
                                       multiple of 64; prints its values' sum,
                                       min and max
  npy_tool.py perturb IN OUT INDEX REL copy of IN with element INDEX moved by
                                       REL x the largest magnitude
  npy_tool.py maxdiff A B              largest |a - b| / largest |b|
  npy_tool.py cat OUT A B...           A, B, ... one after the other along
                                       axis 0 (the other dims must agree)
"""
import ast
import struct
import sys


def write(path, descr, shape, vals):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    h = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, dims)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    code = {"<f4": "f", "<f8": "d"}[descr]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        f.write(struct.pack("<%d%s" % (len(vals), code), *vals))


def read(path, strict=False):
    """shape, values of a v1.0 '<f4' C-order file; strict: as kiln writes
    them, the data at a multiple of 64 bytes."""
    b = open(path, "rb").read()
    if b[:8] != b"\x93NUMPY\x01\x00":
        sys.exit("%s: not a v1.0 .npy file: %r" % (path, b[:8]))
    hlen = struct.unpack("<H", b[8:10])[0]
    if strict and (10 + hlen) % 64:
        sys.exit("%s: the data starts at %d, not a multiple of 64" % (path, 10 + hlen))
    h = ast.literal_eval(b[10:10 + hlen].decode())
    if h["descr"] != "<f4" or h["fortran_order"]:
        sys.exit("%s: header %r" % (path, h))
    n = 1
    for d in h["shape"]:
        n *= d
    data = b[10 + hlen:]
    if len(data) != 4 * n:
        sys.exit("%s: %d data bytes for shape %r" % (path, len(data), h["shape"]))
    return h["shape"], list(struct.unpack("<%df" % n, data))


def main(argv):
    cmd = argv[1]
    if cmd == "write":
        shape = [int(d) for d in argv[4].split("x")]
        n = 1
        for d in shape:
            n *= d
        write(argv[2], argv[3], shape, [((i * 37) % 101 - 50) / 50.0 for i in range(n)])
    elif cmd == "check":
        shape, vals = read(argv[2], strict=True)
        want = tuple(int(d) for d in argv[3].split("x"))
        if tuple(shape) != want:
            sys.exit("%s: shape %r, expected %r" % (argv[2], shape, want))
        print("sum %.9g min %.9g max %.9g" % (sum(vals), min(vals), max(vals)))
    elif cmd == "perturb":
        shape, vals = read(argv[2])
        big = max(abs(v) for v in vals)
        vals[int(argv[4])] += float(argv[5]) * big
        write(argv[3], "<f4", list(shape), vals)
    elif cmd == "maxdiff":
        _, a = read(argv[2])
        _, b = read(argv[3])
        big = max(abs(v) for v in b) or 1e-30
        print("%.3g" % (max(abs(x - y) for x, y in zip(a, b)) / big))
    elif cmd == "cat":
        shape, vals = None, []
        for path in argv[3:]:
            sh, v = read(path)
            if shape is not None and tuple(sh[1:]) != tuple(shape[1:]):
                sys.exit("%s: shape %r does not follow %r" % (path, sh, shape))
            shape = [sh[0] + (shape[0] if shape else 0)] + list(sh[1:])
            vals += v
        write(argv[2], "<f4", shape, vals)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
