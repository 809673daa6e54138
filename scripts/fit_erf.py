#!/usr/bin/env python3
"""fit_erf.py - the coefficients of the CPU target's float erf (nnc_erff, codegen/cpu/dialect_c.c).

erf(x) is x + x T(x^2) for |x| < C0 and 1 - e^P(|x|) above (P approximates log(erfc), so there is
no division and one exponential).  Both are fitted by Lawson's iteration (weighted least squares
that converges to the minimax fit) with the error weighted into units of erf's last place, on
Chebyshev points; the printout is what dialect_c.c pastes, highest power first.  The rounding of
the float evaluation adds to the fit's own error: tests/numeric/vector_math_test.sh measures the
result over the floats.  Needs NumPy.

    python3 scripts/fit_erf.py [C0 [DEGREE_T [DEGREE_P]]]   (defaults 0.921875 5 6)
"""
import math
import struct
import sys

import numpy as np


def lawson(x, f, weight, degree, basis, iters=300):
    A = np.stack([basis(x) ** k for k in range(degree + 1)], 1)
    w = np.ones_like(x)
    for _ in range(iters):
        sw = np.sqrt(w) * weight
        c, *_ = np.linalg.lstsq(A * sw[:, None], f * sw, rcond=None)
        e = np.abs(A @ c - f) * weight
        w = w * e
        w /= w.sum()
    return c, e.max()


def chebyshev(lo, hi, n=6000):
    return np.cos(np.linspace(0, np.pi, n)) * (hi - lo) / 2 + (hi + lo) / 2


def fit_small(c0, degree):
    """T(s) = erf(x) / x - 1 with s = x^2; erf's error is x dT, its last place erf(x) 2^-24."""
    x = chebyshev(0, c0)
    x = x[x > 1e-4]
    f = np.array([math.erf(v) / v - 1 for v in x])
    weight = np.array([v / (math.erf(v) * 2.0**-24) for v in x])
    return lawson(x, f, weight, degree, lambda v: v * v)


def fit_large(c0, degree, hi=3.9375):
    """P(t) = log(erfc(t)); erf's error is erfc(t) dP, its last place 2^-24 (erf >= 0.5)."""
    t = chebyshev(c0, hi)
    f = np.array([math.log(math.erfc(v)) for v in t])
    weight = np.array([math.erfc(v) / 2.0**-24 for v in t])
    return lawson(t, f, weight, degree, lambda v: v)


def as_float(v):
    return struct.unpack("f", struct.pack("f", v))[0]


if __name__ == "__main__":
    c0 = float(sys.argv[1]) if len(sys.argv) > 1 else 0.921875
    dt = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    dp = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    ct, et = fit_small(c0, dt)
    cp, ep = fit_large(c0, dp)
    print(f"T (|x| < {c0}, fit error {et:.3f} ulp):", ", ".join("%.9ef" % as_float(v) for v in ct[::-1]))
    print(f"P (|x| >= {c0}, fit error {ep:.3f} ulp):", ", ".join("%.9ef" % as_float(v) for v in cp[::-1]))
