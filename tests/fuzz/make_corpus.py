#!/usr/bin/env python3
"""Writes the small seed files in tests/fuzz/corpus/<target>/ (committed).

Plain Python (struct, json, zlib) so it runs without NumPy.  Each seed is a
tiny valid input, plus a few near-misses that reach the error paths early.
Re-run after changing a format; every file stays well under 4 KB.
"""
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    assert len(data) < 4096, name
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data)


def idx(code, dims, payload):
    return struct.pack(">BBBB", 0, 0, code, len(dims)) + b"".join(
        struct.pack(">I", d) for d in dims) + payload


def npy(descr, shape, payload, fortran=False, major=1):
    shape_s = "(" + "".join("%d, " % d for d in shape).rstrip(" ") + ")" if len(shape) != 1 \
        else "(%d,)" % shape[0]
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_s)
    pre = 10 if major == 1 else 12
    pad = (64 - (pre + len(d) + 1) % 64) % 64
    h = (d + " " * pad + "\n").encode()
    lenfield = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + lenfield + h + payload


def safetensors(tensors, meta=None, crc=True):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    m = dict(meta or {})
    if crc:
        m["nnc_crc32"] = "%08x" % zlib.crc32(data)
    if m:
        header = {"__metadata__": m, **header}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    write("fuzz_idx", "u8_2x3x4", idx(0x08, [2, 3, 4], bytes(range(24))))
    write("fuzz_idx", "f32_3", idx(0x0D, [3], struct.pack(">3f", 1.0, -2.5, 1e5)))
    write("fuzz_idx", "i16_2x2", idx(0x0B, [2, 2], struct.pack(">4h", -2, 1, 300, -300)))
    write("fuzz_idx", "f64_1", idx(0x0E, [1], struct.pack(">d", 3.25)))
    write("fuzz_idx", "truncated", idx(0x08, [4, 4], bytes(10)))

    write("fuzz_npy", "f32_2x3", npy("<f4", [2, 3], struct.pack("<6f", *range(6))))
    write("fuzz_npy", "i64_0d", npy("<i8", [], struct.pack("<q", -7)))
    write("fuzz_npy", "u8_empty", npy("|u1", [0, 5], b""))
    write("fuzz_npy", "b1_v2", npy("|b1", [3], b"\x01\x00\x01", major=2))
    write("fuzz_npy", "fortran", npy("<f8", [2, 2], bytes(32), fortran=True))

    write("fuzz_csv", "header", b"a,b,c\n1,2,3\n4.5,-5e-3,6\n")
    write("fuzz_csv", "crlf_bom", b"\xef\xbb\xbf1, 2\r\n\r\n3 ,4\r\n")
    write("fuzz_csv", "ragged", b"1,2,3\n4,5\n")
    write("fuzz_csv", "bad_cell", b"x,y\n1,nan\n2,abc\n")

    f32 = struct.pack("<4f", 1, 2, 3, 4)
    write("fuzz_safetensors", "two_tensors", safetensors(
        {"w": ("F32", [2, 2], f32), "b": ("I64", [1], struct.pack("<q", 5))}, {"step": "1"}))
    write("fuzz_safetensors", "no_crc_misaligned", safetensors(
        {"m": ("U8", [3], b"\x01\x02\x03"), "s": ("F64", [], struct.pack("<d", 2.5)),
         "e": ("I16", [0, 4], b""), "x\u00e9": ("BOOL", [1], b"\x01")}, crc=False))
    write("fuzz_safetensors", "empty", safetensors({}))


if __name__ == "__main__":
    main()
