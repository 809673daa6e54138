"""Helpers shared by the Python cross-checks: safetensors and --metrics readers, running the
nnc CLI, the Fashion-MNIST loader and the training loop's batch order."""
import gzip
import json
import os
import struct
import subprocess

import numpy as np

ST_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def load_safetensors(path):
    """{name: float64/int array} and the metadata dict, parsed with json + numpy only."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        arr = np.frombuffer(blob[base + a:base + b], dtype=ST_DTYPES[t["dtype"]]).reshape(t["shape"])
        out[name] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr.copy()
    return out, meta


def read_metrics(path):
    """(step losses in order, epoch records) from a --metrics JSONL file."""
    steps, epochs = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            (steps if r["type"] == "step" else epochs).append(r)
    return [r["loss"] for r in steps], epochs


def run_nnc(nnc, args, cwd):
    r = subprocess.run([nnc] + list(args) + ["--quiet"], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("nnc %s failed (%d):\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r.stdout


def read_idx_gz(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


FMNIST = "/usr/share/datasets/fashion-mnist"


def fashion_mnist(train=True):
    """Images as float64 [N, 784] in [0, 1] (the float32 values nnc computes with), labels int."""
    p = "train" if train else "t10k"
    x = read_idx_gz(os.path.join(FMNIST, "%s-images-idx3-ubyte.gz" % p))
    y = read_idx_gz(os.path.join(FMNIST, "%s-labels-idx1-ubyte.gz" % p))
    x = (x.reshape(len(x), -1).astype(np.float32) * np.float32(1 / 255)).astype(np.float64)
    return x, y.astype(np.int64)


# Philox4x32-10, vectorized over the block index: the same mapping as tests/ref/philox.py
# (checked against it in batch_order below), fast enough for a 60000-element shuffle.
_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)


def _philox_np(idx, seed, stream):
    idx = idx.astype(np.uint64)
    c0, c1 = idx & _MASK, idx >> np.uint64(32)
    c2 = np.full_like(idx, stream & 0xFFFFFFFF)
    c3 = np.full_like(idx, (stream >> 32) & 0xFFFFFFFF)
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
        p0, p1 = np.uint64(_M0) * c0, np.uint64(_M1) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & _MASK,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & _MASK)
    return c0, c1


def uniform_np(n, seed, stream):
    w0, w1 = _philox_np(np.arange(n, dtype=np.uint64), seed, stream)
    return ((w0 << np.uint64(32)) | w1) >> np.uint64(11)


def permutation(n, seed, stream):
    """nnc_rng_permutation: Fisher-Yates from the end, the partner of slot k from block k."""
    bits = uniform_np(n, seed, stream)
    u = bits.astype(np.float64) * (1.0 / 9007199254740992.0)
    j = np.minimum(np.arange(n), (u * (np.arange(n) + 1)).astype(np.int64))
    perm = list(range(n))
    jl = j.tolist()
    for k in range(n - 1, 0, -1):
        jj = jl[k]
        perm[k], perm[jj] = perm[jj], perm[k]
    return np.array(perm, dtype=np.int64)


def batch_order(n, seed, epoch):
    """The training loop's shuffle for an epoch (train/train.c), cross-checked on a prefix
    against tests/ref/philox.py's pure-Python reference when that module is importable."""
    stream = 0x5348554646 + epoch
    perm = permutation(n, seed, stream)
    try:
        import philox
        for k in (1, 2, 3, n - 1):
            want = min(k, int(philox.uniform(seed, stream, k) * (k + 1)))
            got = min(k, int(float(uniform_np(k + 1, seed, stream)[k]) * (1.0 / 9007199254740992.0) * (k + 1)))
            assert want == got, "philox mismatch at block %d" % k
        if n <= 2000:
            assert philox.permutation(n, seed, stream) == perm.tolist()
    except ImportError:
        pass
    return perm


def token_windows(ntok, T, seed, epoch):
    """A shuffled epoch's windows of a token stream of ntok tokens (train/dataset.c
    dataset_windows_draw): (ntok - 1) // T of them, window p starting at floor(u * (ntok - T)),
    u the uniform of Philox block p of stream "WINDOW" + epoch, below ntok - T; cross-checked on
    a few blocks against tests/ref/philox.py when that module is importable."""
    stream, n, span = 0x57494E444F57 + epoch, (ntok - 1) // T, ntok - T
    u = uniform_np(n, seed, stream).astype(np.float64) * (1.0 / 9007199254740992.0)
    starts = np.minimum((u * span).astype(np.int64), span - 1)
    try:
        import philox
        for p in {0, 1, n - 1}:
            assert min(int(philox.uniform(seed, stream, p) * span), span - 1) == starts[p], "philox mismatch"
    except ImportError:
        pass
    return starts
