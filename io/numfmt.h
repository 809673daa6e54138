/*
 * numfmt.h - printf's "%.*g" and "%.*f" for a double, without printf.
 *
 * The trainer writes one or two JSON lines per step to --metrics.  For a step of a microsecond
 * (linear regression, a small model at a small batch) glibc's printf, which works in
 * multiple-precision arithmetic, costs about as much as the step itself.  These give the same
 * characters as snprintf in the C locale, correctly rounded (half to even on the exact binary
 * value, as glibc does), by one exact 128-bit product or quotient; a value outside the range
 * that arithmetic covers (and NaN, Inf, zero) goes to snprintf, so the answer is always
 * printf's.  tests/unit/test_numfmt.c compares them with snprintf on millions of values.
 *
 *   char b[NUMFMT_LEN];
 *   numfmt_g(b, loss, 9);      // snprintf(b, sizeof b, "%.9g", loss)
 *   numfmt_f(b, seconds, 6);   // snprintf(b, sizeof b, "%.6f", seconds), |seconds| < 1e15
 *   numfmt_int(b, step);       // snprintf(b, sizeof b, "%lld", step)
 */
#ifndef NNC_NUMFMT_H
#define NNC_NUMFMT_H

#define NUMFMT_LEN 48 /* the longest result of either, with its NUL */

/* "%lld" into b (24 bytes: 20 digits, a sign, the NUL); returns the length */
int numfmt_int(char b[24], long long v);
/* precision 1..17; returns the length written */
int numfmt_g(char buf[NUMFMT_LEN], double x, int precision);
/* decimals 0..17; |x| at least 1e15 goes to snprintf (returns the length, truncated to fit) */
int numfmt_f(char buf[NUMFMT_LEN], double x, int decimals);

#endif
