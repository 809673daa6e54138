#!/usr/bin/env python3
"""Cross-checks of io/ and the RNG against Python: run by CTest (label "python").

  (a) rng.h versus tests/ref/philox.py, through the rng_dump helper:
      integers and uniforms bit-exact, normals within 1e-12;
  (b) files written by NumPy (.npy, IDX, CSV; several dtypes, a 0-d and an
      empty array) read by io/ through load_dump, compared by
      dtype, shape and crc32 of the bytes; NumPy's unsupported layouts are
      refused with the documented messages;
  (c) a checkpoint saved by nnc_st_save (st_tool save) read by a 20-line
      pure-Python reader below and, when importable, by the `safetensors`
      package (NumPy and PyTorch front ends);
  (d) checkpoints written by the `safetensors` package read back in C
      (st_tool dump).

Parts whose Python modules are missing print "SKIP: reason".  The last
line is "N passed, M failed"; the exit status is non-zero on any failure.
"""

import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import philox  # noqa: E402


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        print(("ok   - " if ok else "FAIL - ") + what, flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok


def run(cmd):
    """Runs a helper, returning its stdout lines (stderr passed through)."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, encoding="utf-8",
                       errors="replace", check=False)
    return p.returncode, p.stdout.splitlines()


# ---- (a) RNG -----------------------------------------------------------------

def check_rng(t, rng_dump):
    rc, lines = run([rng_dump])
    t.check(rc == 0 and len(lines) > 100, "rng_dump ran (%d lines)" % len(lines))
    bad = {"hash": 0, "u32x4": 0, "uniform": 0, "normal": 0, "perm": 0}
    seen = dict.fromkeys(bad, 0)
    maxdiff = 0.0
    for line in lines:
        f = line.split()
        kind = f[0]
        seen[kind] += 1
        if kind == "hash":
            name = b"" if f[1] == "-" else bytes.fromhex(f[1])
            bad[kind] += philox.hash_name(name) != int(f[2])
            continue
        if kind == "perm":
            seed, stream, n = int(f[1]), int(f[2]), int(f[3])
            bad[kind] += philox.permutation(n, seed, stream) != [int(x) for x in f[4:]]
            continue
        seed, stream, i = int(f[1]), int(f[2]), int(f[3])
        if kind == "u32x4":
            bad[kind] += philox.u32x4(seed, stream, i) != [int(x) for x in f[4:8]]
        elif kind == "uniform":
            bad[kind] += philox.uniform(seed, stream, i) != float.fromhex(f[4])
        elif kind == "normal":
            d = abs(philox.normal(seed, stream, i) - float.fromhex(f[4]))
            maxdiff = max(maxdiff, d)
            bad[kind] += not d <= 1e-12
    for kind in bad:
        extra = " (maxdiff %.3g)" % maxdiff if kind == "normal" else ""
        t.check(seen[kind] > 0 and bad[kind] == 0,
                "rng %s: %d values match philox.py, %d differ%s" % (kind, seen[kind], bad[kind], extra))


# ---- (b) data loaders ---------------------------------------------------------

DTYPE_NAMES = {"uint8": "u8", "bool": "u8", "int8": "i8", "int16": "i16", "int32": "i32",
               "int64": "i64", "float32": "f32", "float64": "f64"}


def expected_line(arr):
    """What load_dump prints for an array the C loader should reproduce."""
    import numpy as np
    a = np.array(arr, order="C")  # ascontiguousarray would make 0-d 1-d
    le = a.astype(a.dtype.newbyteorder("<")) if a.dtype.itemsize > 1 else a
    shape = ",".join(str(d) for d in a.shape) or "-"
    return "ok %s %s %08x" % (DTYPE_NAMES[a.dtype.name], shape, zlib.crc32(le.tobytes()))


def check_dump(t, load_dump, kind, cases, what):
    """cases: list of (path, expected line or error fragment, label)."""
    rc, lines = run([load_dump, kind] + [c[0] for c in cases])
    t.check(rc == 0 and len(lines) == len(cases), "load_dump %s ran on %d files" % (kind, len(cases)))
    for (path, want, label), got in zip(cases, lines):
        if want.startswith("ok "):
            t.check(got == want, "%s %s: C reads %s (want %s)" % (what, label, got, want))
        else:
            t.check(got.startswith("error ") and want in got and path in got,
                    "%s %s refused: %s" % (what, label, got))


def npy_cases(tmp):
    import numpy as np
    rng = np.random.default_rng(0)
    arrays = {
        "f32_2x3": rng.standard_normal((2, 3)).astype(np.float32),
        "f64_3d": rng.standard_normal((2, 3, 4)),
        "u8_img": rng.integers(0, 256, (4, 28, 28), dtype=np.uint8),
        "i8": np.arange(-128, 128, dtype=np.int8),
        "i16": np.array([-32768, -1, 0, 1, 32767], dtype=np.int16),
        "i32": np.arange(-50, 50, dtype=np.int32).reshape(10, 10),
        "i64": np.array([-(2 ** 63), -1, 0, 2 ** 63 - 1], dtype=np.int64),
        "bool": np.array([[True, False, True], [False, False, True]]),
        "scalar_0d": np.array(3.25),
        "empty_0x3": np.zeros((0, 3), dtype=np.float32),
        "slice_noncontig": rng.standard_normal((6, 8)).astype(np.float32)[::2, 1::3],
        "fortran_1d": np.asfortranarray(np.arange(7, dtype=np.float64)),
        "rank8": np.arange(2 ** 8, dtype=np.int16).reshape((2,) * 8),
    }
    cases = []
    for name, a in arrays.items():
        path = os.path.join(tmp, name + ".npy")
        np.save(path, a)
        cases.append((path, expected_line(a), name))
    for version in [(2, 0), (3, 0)]:
        path = os.path.join(tmp, "v%d.npy" % version[0])
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        with open(path, "wb") as fh:
            np.lib.format.write_array(fh, a, version=version)
        cases.append((path, expected_line(a), "format version %d.0" % version[0]))
    refused = {
        "fortran_2d": (np.asfortranarray(np.ones((3, 4))), "fortran_order arrays are not supported"),
        "big_endian": (np.arange(4, dtype=">f4"), "big-endian dtype '>f4' is not supported"),
        "float16": (np.arange(4, dtype=np.float16), "dtype '<f2' is not supported"),
        "object": (np.array([1, "a", None], dtype=object), "object arrays ('|O') are not supported"),
        "complex": (np.zeros(2, dtype=np.complex64), "dtype '<c8' is not supported"),
    }
    for name, (a, msg) in refused.items():
        path = os.path.join(tmp, name + ".npy")
        np.save(path, a, allow_pickle=True)
        cases.append((path, msg, name))
    with open(os.path.join(tmp, "f32_2x3.npy"), "rb") as fh:
        whole = fh.read()
    path = os.path.join(tmp, "truncated.npy")
    with open(path, "wb") as fh:
        fh.write(whole[:-3])
    cases.append((path, "truncated: shape [2, 3] of '<f4' needs 24 data bytes at offset 128, "
                        "found 21", "truncated"))
    return cases


IDX_CODES = {"uint8": 0x08, "int8": 0x09, "int16": 0x0B, "int32": 0x0C, "float32": 0x0D,
             "float64": 0x0E}


def idx_bytes(a):
    head = struct.pack(">BBBB", 0, 0, IDX_CODES[a.dtype.name], a.ndim)
    head += b"".join(struct.pack(">I", d) for d in a.shape)
    return head + a.astype(a.dtype.newbyteorder(">")).tobytes()


def idx_cases(tmp):
    import numpy as np
    rng = np.random.default_rng(1)
    arrays = {
        "images_u8": rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
        "labels_u8": rng.integers(0, 10, (10,), dtype=np.uint8),
        "i8": np.arange(-5, 5, dtype=np.int8),
        "i16": np.array([[-300, 300], [1, -1]], dtype=np.int16),
        "i32": np.array([-(2 ** 31), 2 ** 31 - 1, 5], dtype=np.int32),
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f64": rng.standard_normal((2, 2, 2)),
    }
    cases = []
    for name, a in arrays.items():
        path = os.path.join(tmp, name + ".idx")
        with open(path, "wb") as fh:
            fh.write(idx_bytes(a))
        cases.append((path, expected_line(a), name))
        with gzip.open(path + ".gz", "wb") as fh:
            fh.write(idx_bytes(a))
        cases.append((path + ".gz", expected_line(a), name + ".gz"))
    return cases


def csv_cases(tmp):
    import numpy as np
    rng = np.random.default_rng(2)
    a = rng.standard_normal((20, 11)) * 1e3
    cases = []
    for name, header in [("with_header.csv", ",".join("c%d" % i for i in range(11))),
                         ("no_header.csv", ""), ("gzipped.csv.gz", "x" + ",y" * 10)]:
        path = os.path.join(tmp, name)
        np.savetxt(path, a, delimiter=",", fmt="%.17g", header=header, comments="")
        cases.append((path, expected_line(a), name))
    path = os.path.join(tmp, "ragged.csv")
    with open(path, "w") as fh:
        fh.write("a,b,c\n" + "1,2,3\n" * 15 + "1,2\n")
    cases.append((path, "ragged.csv:17: expected 3 columns, got 2", "ragged"))
    return cases


def check_loaders(t, load_dump, tmp):
    check_dump(t, load_dump, "npy", npy_cases(tmp), "npy")
    check_dump(t, load_dump, "idx", idx_cases(tmp), "idx")
    check_dump(t, load_dump, "csv", csv_cases(tmp), "csv")


# ---- (c), (d) safetensors ------------------------------------------------------

ST_DTYPES = {"U8": "uint8", "BOOL": "bool", "I8": "int8", "I16": "int16", "I32": "int32",
             "I64": "int64", "F32": "float32", "F64": "float64"}


def read_safetensors(path):
    """The whole format in a few lines: returns (metadata, {name: array})."""
    import numpy as np
    with open(path, "rb") as fh:
        raw = fh.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = np.dtype(ST_DTYPES[info["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(data[b:e], dtype=dt).reshape(info["shape"])
    if "nnc_crc32" in meta:
        assert int(meta["nnc_crc32"], 16) == zlib.crc32(data), "crc32 mismatch"
    assert n % 8 == 0, "header not padded to 8 bytes"
    return meta, tensors


def expected_tensors():
    """The values st_tool save writes (keep in step with st_tool.c fill())."""
    import numpy as np
    k = lambda n: np.arange(n)  # noqa: E731
    fc1 = [philox.uniform(7, philox.hash_name("fc1.weight"), i) for i in range(12)]
    return {
        "u8": ((k(15) * 37 + 11) % 256).astype(np.uint8).reshape(3, 5),
        "i8": ((k(7) * 37 + 11) % 256 - 128).astype(np.int8),
        "i16": (k(24) * 1237 - 5000).astype(np.int16).reshape(2, 3, 4),
        "i32": ((k(16) - 8) * 1000003).astype(np.int32).reshape(4, 4),
        "i64": ((k(5) - 2) * 3000000000123).astype(np.int64),
        "f32": ((k(8) - 3.5) * 0.25).astype(np.float32).reshape(2, 2, 2),
        "f64": np.array([i * 0.375 - 0.9375 for i in range(6)], dtype=np.float64),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "fc1.weight": np.array(fc1, dtype=np.float32).reshape(3, 4),
    }


EXPECTED_META = {"step": "1000", "note": "h\u00e9llo \"quoted\"\n"}


def tensor_diff(got, want):
    """Names of tensors that are missing, extra, or differ in dtype, shape or value."""
    import numpy as np
    bad = sorted(set(got) ^ set(want))
    for n in sorted(set(got) & set(want)):
        if not (got[n].dtype == want[n].dtype and got[n].shape == want[n].shape and
                np.array_equal(got[n], want[n])):
            bad.append("%s (got %s %s %s, want %s %s %s)" % (
                n, got[n].dtype, got[n].shape, got[n].ravel()[:4], want[n].dtype,
                want[n].shape, want[n].ravel()[:4]))
    return bad


def check_st_from_c(t, st_tool, tmp, st):
    path = os.path.join(tmp, "from_c.safetensors")
    rc, lines = run([st_tool, "save", path])
    if not t.check(rc == 0, "st_tool save: %s" % " ".join(lines)):
        return
    want = expected_tensors()
    try:
        meta, got = read_safetensors(path)
        bad = tensor_diff(got, want)
        t.check(not bad, "pure-Python reader: all %d tensors exact %s" % (len(want), bad or ""))
        t.check(all(meta.get(k) == v for k, v in EXPECTED_META.items()) and "nnc_crc32" in meta,
                "pure-Python reader: metadata and crc32 %s" % meta.get("nnc_crc32"))
    except (AssertionError, KeyError, ValueError) as e:
        t.check(False, "pure-Python reader failed: %r" % e)
    if st is None:
        print("SKIP: safetensors not importable; nnc file not checked with the reference reader")
        return
    from safetensors import safe_open
    from safetensors.numpy import load_file
    bad = tensor_diff(load_file(path), want)
    t.check(not bad, "safetensors.numpy.load_file: all tensors exact %s" % (bad or ""))
    with safe_open(path, framework="np") as fh:
        meta = fh.metadata()
    t.check(all(meta.get(k) == v for k, v in EXPECTED_META.items()),
            "safetensors.safe_open metadata: %r" % sorted(meta))
    try:
        import torch  # noqa: F401
        from safetensors.torch import load_file as torch_load
    except Exception as e:  # torch missing or incompatible
        print("SKIP: safetensors.torch unavailable (%s)" % e)
        return
    got = {n: v.numpy() for n, v in torch_load(path).items()}
    bad = tensor_diff(got, want)
    t.check(not bad, "safetensors.torch.load_file: all tensors exact %s" % (bad or ""))


def st_dump_line(name, a):
    import numpy as np
    a = np.array(a, order="C")
    code = {v: k for k, v in ST_DTYPES.items() if k != "BOOL"}.get(a.dtype.name, "U8")
    shape = ",".join(str(d) for d in a.shape) or "-"
    return "tensor %s %s %s %08x" % (name, code, shape, zlib.crc32(a.tobytes()))


def check_st_to_c(t, st_tool, tmp, st):
    import numpy as np
    if st is None:
        print("SKIP: safetensors not importable; files written by it not read back in C")
        return
    from safetensors.numpy import save_file
    rng = np.random.default_rng(3)
    tensors = {
        "emb.weight": rng.standard_normal((7, 3)).astype(np.float32),
        "f64": rng.standard_normal(5),
        "odd_u8": np.arange(3, dtype=np.uint8),  # 3 bytes: later tensors may be misaligned
        "i16": np.array([-2, 7, 9], dtype=np.int16),
        "i64": np.array([2 ** 40, -3], dtype=np.int64),
        "i32": np.arange(6, dtype=np.int32).reshape(2, 3),
        "i8": np.array([-1, 1], dtype=np.int8),
        "mask": np.array([True, False, True]),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 2), dtype=np.float64),
    }
    path = os.path.join(tmp, "from_py.safetensors")
    save_file(tensors, path, metadata={"format": "np", "origin": "python"})
    rc, lines = run([st_tool, "dump", path])
    got = {l.split()[1]: l for l in lines if l.startswith("tensor ")}
    t.check(rc == 0 and "meta format np" in lines and "meta origin python" in lines,
            "C reads a file written by safetensors.numpy: %s" % (lines[:1] if rc else "ok"))
    for name, a in tensors.items():
        t.check(got.get(name) == st_dump_line(name, a), "C reads %s: %s" % (name, got.get(name)))
    try:
        import torch
        from safetensors.torch import save_file as torch_save
    except Exception as e:
        print("SKIP: safetensors.torch unavailable (%s)" % e)
        return
    path = os.path.join(tmp, "from_torch.safetensors")
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    torch_save({"w": w, "b": torch.tensor([1, -2], dtype=torch.int64)}, path)
    rc, lines = run([st_tool, "dump", path])
    t.check(rc == 0 and st_dump_line("w", w.numpy()) in lines and
            st_dump_line("b", np.array([1, -2], dtype=np.int64)) in lines,
            "C reads a file written by safetensors.torch")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rng-dump", required=True)
    ap.add_argument("--load-dump", required=True)
    ap.add_argument("--st-tool", required=True)
    args = ap.parse_args()
    t = Tally()
    check_rng(t, args.rng_dump)
    try:
        import numpy  # noqa: F401
    except ImportError:
        numpy = None
        print("SKIP: numpy not importable; loader and safetensors cross-checks not run")
    try:
        import safetensors as st
    except ImportError:
        st = None
        print("SKIP: safetensors not importable (pip install safetensors); "
              "reference-reader checks not run")
    if numpy is not None:
        with tempfile.TemporaryDirectory(prefix="nnc-py-") as tmp:
            check_loaders(t, args.load_dump, tmp)
            check_st_from_c(t, args.st_tool, tmp, st)
            check_st_to_c(t, args.st_tool, tmp, st)
    print("%d passed, %d failed" % (t.passed, t.failed))
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
