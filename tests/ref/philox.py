"""Reference implementation of include/nnc_rng.h in Python (+ NumPy helpers).

Every function here reproduces its C namesake exactly: integers and
uniforms bit for bit, normals to the last ulp or two of libm.  The mapping
is documented at the top of include/nnc_rng.h; keep the two in step.
"""

import math

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
TWO_POW_M53 = 1.0 / 9007199254740992.0


def hash_name(s):
    """64-bit FNV-1a of the UTF-8 bytes of s (nnc_rng_hash)."""
    h = FNV_OFFSET
    for b in s.encode("utf-8") if isinstance(s, str) else s:
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


def philox(ctr, key):
    """Philox4x32-10 block function on 4 counter words and 2 key words."""
    c = list(ctr)
    k0, k1 = key
    for r in range(10):
        if r > 0:
            k0 = (k0 + W0) & MASK32
            k1 = (k1 + W1) & MASK32
        p0 = M0 * c[0]
        p1 = M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK32, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK32]
    return c


def u32x4(seed, stream, i):
    """Block i of (seed, stream): key {lo,hi}(seed), counter {lo,hi}(i), {lo,hi}(stream)."""
    key = (seed & MASK32, (seed >> 32) & MASK32)
    ctr = (i & MASK32, (i >> 32) & MASK32, stream & MASK32, (stream >> 32) & MASK32)
    return philox(ctr, key)


def _bits53(hi, lo):
    return ((hi << 32) | lo) >> 11


def uniform(seed, stream, i):
    w = u32x4(seed, stream, i)
    return _bits53(w[0], w[1]) * TWO_POW_M53


def normal(seed, stream, i):
    w = u32x4(seed, stream, i)
    u1 = (_bits53(w[0], w[1]) + 1) * TWO_POW_M53
    u2 = _bits53(w[2], w[3]) * TWO_POW_M53
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def permutation(n, seed, stream):
    perm = list(range(n))
    for k in range(n - 1, 0, -1):
        j = min(k, int(uniform(seed, stream, k) * (k + 1)))
        perm[k], perm[j] = perm[j], perm[k]
    return perm


def normal_array(n, seed, stream):
    """NumPy array of normal(seed, stream, 0..n-1), float64."""
    import numpy as np
    return np.array([normal(seed, stream, i) for i in range(n)], dtype=np.float64)


def uniform_array(n, seed, stream):
    import numpy as np
    return np.array([uniform(seed, stream, i) for i in range(n)], dtype=np.float64)


if __name__ == "__main__":
    # Random123 known-answer vectors for philox4x32-10.
    assert philox([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox([MASK32] * 4, [MASK32] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]
    print("philox.py: known-answer vectors ok")
