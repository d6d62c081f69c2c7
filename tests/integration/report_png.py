#!/usr/bin/env python3
"""Says whether a PNG (8-bit RGB or RGBA, not interlaced) is blank.

Decodes it with zlib alone, then counts the distinct colours, the share of
pixels that are not white, and the pixels close to the plots' blue
(#1f77b4). Prints the figures; exits 0 when the image shows something (at
least 16 colours, 1 % non-white, some plot blue), 1 when it is blank, 2
when it cannot be read."""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, hdr = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError("unsupported PNG: depth %d colour type %d" % (depth, ctype))
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    try:
        w, h, bpp, rows = decode(sys.argv[1])
    except (OSError, ValueError, zlib.error, struct.error, TypeError) as e:
        print("cannot read %s: %s" % (sys.argv[1], e))
        return 2
    colours, nonwhite, blue = set(), 0, 0
    for line in rows:
        for x in range(0, w * bpp, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            colours.add((r, g, b))
            if r < 250 or g < 250 or b < 250:
                nonwhite += 1
                if abs(r - 31) < 12 and abs(g - 119) < 12 and abs(b - 180) < 12:
                    blue += 1
    share = nonwhite / float(w * h)
    print("%dx%d, %d colours, %.1f %% not white, %d plot-blue pixels"
          % (w, h, len(colours), 100 * share, blue))
    return 0 if len(colours) >= 16 and share >= 0.01 and blue > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
