/*
 * test_npy.c - nnc_parse_npy / nnc_load_npy on headers built here byte by
 * byte: every supported dtype, 0-d and empty arrays, versions 1-3, and the
 * refusals (Fortran order, big-endian, objects, truncation, absurd shapes).
 */
#define _XOPEN_SOURCE 700

#include <math.h>

#include "bomb.h"
#include "check.h"
#include "data.h"

static unsigned char buf[8192];

/* A .npy image with the given version and header dict; data appended. */
static size_t npy_build(int major, const char *dict, const void *data, size_t nbytes)
{
    size_t pre = major == 1 ? 10 : 12, hlen = strlen(dict) + 1;
    size_t pad = (64 - (pre + hlen) % 64) % 64, n = pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    hlen += pad;
    buf[8] = (unsigned char)hlen;
    buf[9] = (unsigned char)(hlen >> 8);
    if (major != 1) {
        buf[10] = (unsigned char)(hlen >> 16);
        buf[11] = (unsigned char)(hlen >> 24);
    }
    memcpy(buf + n, dict, strlen(dict));
    n += strlen(dict);
    memset(buf + n, ' ', pad);
    n += pad;
    buf[n++] = '\n';
    if (nbytes)
        memcpy(buf + n, data, nbytes);
    return n + nbytes;
}

static int parse(size_t n, nnc_array *a, char *err)
{
    return nnc_parse_npy(buf, n, "x.npy", a, err, 256);
}

static void test_dtypes(void)
{
    static const struct {
        const char *descr;
        nnc_dtype want;
    } cases[] = { { "<u1", NNC_DT_U8 },  { "|u1", NNC_DT_U8 },  { "|b1", NNC_DT_U8 },
                  { "|i1", NNC_DT_I8 },  { "<i1", NNC_DT_I8 },  { "<i2", NNC_DT_I16 },
                  { "<i4", NNC_DT_I32 }, { "<i8", NNC_DT_I64 }, { "<f4", NNC_DT_F32 },
                  { "<f8", NNC_DT_F64 } };
    unsigned char data[6 * 8];
    char dict[128], err[256] = "";
    size_t i, n, k;
    for (k = 0; k < sizeof data; k++)
        data[k] = (unsigned char)(k * 13 + 5);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nnc_array a;
        size_t bytes = 6 * nnc_dtype_size(cases[i].want);
        int rc;
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (2, 3), }",
                 cases[i].descr);
        n = npy_build(1, dict, data, bytes);
        rc = parse(n, &a, err);
        CHECK(rc == 0 && a.dtype == cases[i].want && a.rank == 2 && a.dims[0] == 2 &&
                  a.dims[1] == 3 && memcmp(a.data, data, bytes) == 0,
              "dtype %s [2,3] loads as %s %s", cases[i].descr, nnc_dtype_name(cases[i].want), err);
        nnc_array_free(&a);
    }
}

static void test_shapes_and_versions(void)
{
    double one = 42.5;
    nnc_array a;
    char err[256] = "";
    size_t n = npy_build(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", &one, 8);
    int rc = parse(n, &a, err);
    CHECK(rc == 0 && a.rank == 0 && nnc_array_numel(&a) == 1 && *(double *)a.data == 42.5,
          "0-d array %s", err);
    nnc_array_free(&a);
    n = npy_build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", NULL, 0);
    rc = parse(n, &a, err);
    CHECK(rc == 0 && a.rank == 2 && a.dims[0] == 0 && nnc_array_numel(&a) == 0 && a.data,
          "empty (0, 3) array has non-NULL data %s", err);
    nnc_array_free(&a);
    n = npy_build(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", &one, 8);
    rc = parse(n, &a, err);
    CHECK(rc == 0 && a.rank == 1 && *(double *)a.data == 42.5, "version 2.0 header %s", err);
    nnc_array_free(&a);
    n = npy_build(3, "{\"descr\":\"<f8\",\"shape\":(1L,),\"fortran_order\":True}", &one, 8);
    rc = parse(n, &a, err);
    CHECK(rc == 0 && a.rank == 1, "version 3.0, other key order, 1-d Fortran order is fine %s",
          err);
    nnc_array_free(&a);
}

static void test_refusals(void)
{
    static const struct {
        const char *dict, *want, *what;
    } cases[] = {
        { "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
          "x.npy: header: fortran_order arrays are not supported (save with np.ascontiguousarray)",
          "fortran order" },
        { "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }",
          "x.npy: header: big-endian dtype '>f4' is not supported (save with arr.astype('<f4'))",
          "big-endian" },
        { "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }",
          "x.npy: header: object arrays ('|O') are not supported", "object dtype" },
        { "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }",
          "dtype '<f2' is not supported (expected one of", "float16" },
        { "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
          "structured dtypes", "structured dtype" },
        { "{'descr': '\x1b[2J\x1b[H<f4', 'fortran_order': False, 'shape': (2, 3), }",
          "x.npy: header: dtype '\\x1B[2J\\x1B[H<'... (10 bytes) is not supported", "a descr that "
          "clears the terminal is shown escaped, cut short" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
          "x.npy: header: shape [4611686018427387904, 4] of '<f4' is too large to address",
          "absurd shape" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
          "expected a dimension below 2^63", "dimension over 2^63" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }",
          "expected at most 8 dimensions", "rank 9" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }",
          "x.npy: offset 63: header: expected ',' or ')' in the shape tuple, got '3'",
          "malformed tuple" },
        { "{'descr': '<f4', 'fortran_order': False, }", "header: missing key 'shape'",
          "missing key" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
          "expected one each of the keys", "unknown key" },
        { "{'descr': '<f4', 'fortran_order': None, 'shape': (2,), }", "expected True or False",
          "fortran_order None" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
          "expected a non-negative integer dimension", "negative dimension" },
        { "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk",
          "expected only padding after the header dict", "junk after the dict" },
    };
    unsigned char data[64] = { 0 };
    char err[256] = "";
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nnc_array a;
        size_t n = npy_build(1, cases[i].dict, data, 24);
        int rc = parse(n, &a, err);
        CHECK_ERR(rc, err, cases[i].want, cases[i].what);
        CHECK(a.data == NULL, "%s: output left empty", cases[i].what);
    }
}

static void test_truncation(void)
{
    float v[6] = { 1, 2, 3, 4, 5, 6 };
    nnc_array a;
    char err[256] = "";
    size_t n = npy_build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", v,
                         sizeof v),
           cut;
    int rc, all = 1;
    rc = parse(n - 1, &a, err);
    CHECK_ERR(rc, err, "x.npy: truncated: shape [2, 3] of '<f4' needs 24 data bytes at offset "
                       "128, found 23", "data cut short");
    rc = parse(n + 1, &a, err);
    CHECK_ERR(rc, err, "x.npy: offset 152: expected the end of the file after shape [2, 3] of "
                       "'<f4' (24 data bytes at offset 128), found more", "one byte too many");
    rc = parse(30, &a, err);
    CHECK_ERR(rc, err, "x.npy: truncated: header of 118 bytes at offset 10 needs 128 bytes, found 30",
              "header cut short");
    rc = parse(5, &a, err);
    CHECK_ERR(rc, err, "truncated: expected at least 10 bytes", "5-byte file");
    for (cut = 0; cut < n; cut++) {
        rc = parse(cut, &a, err);
        all &= rc == -1 && a.data == NULL && strstr(err, "x.npy: ") == err;
    }
    CHECK(all, "every proper prefix of a valid file is refused with a named error");
    buf[6] = 4;
    rc = parse(n, &a, err);
    CHECK_ERR(rc, err, "x.npy: offset 6: expected .npy format version 1.0, 2.0 or 3.0, got 4.0",
              "unknown version");
    buf[0] = 'P';
    rc = parse(n, &a, err);
    CHECK_ERR(rc, err, "x.npy: offset 0: expected .npy magic", "bad magic");
}

static void test_files(void)
{
    int32_t v[3] = { -1, 0, 7 };
    nnc_array a;
    char err[512] = "";
    size_t n = npy_build(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", v,
                         sizeof v);
    int rc;
    check_write(check_path("v.npy"), buf, n);
    rc = nnc_load_npy(check_path("v.npy"), &a, err, sizeof err);
    CHECK(rc == 0 && a.dtype == NNC_DT_I32 && memcmp(a.data, v, sizeof v) == 0,
          "load from file %s", err);
    nnc_array_free(&a);
    rc = nnc_load_npy(check_path("nope.npy"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "nope.npy: cannot open: No such file or directory", "missing file");
    check_write(check_path("bad.npy"), buf, n - 2);
    rc = nnc_load_npy(check_path("bad.npy"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "bad.npy: truncated: shape [3] of '<i4' needs 12 data bytes at offset 128, "
                       "found 10", "truncated file names the path");
}

/* Edge cases at the boundary of the size checks (zero-sized dims). */
static void test_edge_cases(void)
{
    nnc_array a;
    char err[256] = "";
    size_t n = npy_build(1, "{'descr': '', 'fortran_order': False, 'shape': (), }", NULL, 0);
    int rc = parse(n, &a, err);
    CHECK_ERR(rc, err, "dtype '' is not supported", "empty descr");
    n = npy_build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904), }",
                  NULL, 0);
    rc = parse(n, &a, err);
    CHECK(rc == 0 && nnc_array_numel(&a) == 0, "zero dim times a huge dim is empty %s", err);
    nnc_array_free(&a);
}

/* NaN and Inf in float data are refused with the sample, element and byte offset. */
static void test_non_finite(void)
{
    float f[6] = { 0, 1, 2, 3, 4, 5 };
    double d[2] = { 1, 2 };
    nnc_array a;
    char err[256] = "", want[128];
    size_t n;
    int rc;
    f[4] = NAN;
    n = npy_build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f, sizeof f);
    rc = parse(n, &a, err);
    snprintf(want, sizeof want, "x.npy: offset %zu: sample 2, element 0 is NaN; training data "
             "must be finite", n - sizeof f + 16);
    CHECK_ERR(rc, err, want, "f32 NaN");
    CHECK(a.data == NULL, "output left empty");
    d[1] = -INFINITY;
    n = npy_build(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", d, sizeof d);
    rc = parse(n, &a, err);
    CHECK_ERR(rc, err, "sample 1, element 0 is -Inf", "f64 -Inf");
}

/* A .gz is read as it streams, never past what its header declares: a run of zeros after
 * the data is refused at its first byte, a header that declares more than 4 GiB before any data
 * is read, and so is a preamble that declares a header of gigabytes. */
static void test_gzip_bomb(void)
{
    char err[512];
    long peak;
    nnc_array a;
    size_t n = npy_build(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", NULL, 0);
    int rc;
    memset(buf + n, 0, 48);
    bomb_write(check_path("bomb.npy.gz"), buf, n + 48, 0, 1024);
    rc = bomb_load(nnc_load_npy, check_path("bomb.npy.gz"), err, sizeof err, &peak);
    CHECK_ERR(rc, err, "bomb.npy.gz: offset 176: expected the end of the file after shape [4, 3] "
                       "of '<f4' (48 data bytes at offset 128), found more",
              "48 bytes declared, then 1 GiB of zeros");
    CHECK(peak < 256, "... refused at %ld MiB of memory (inflating it takes 1024)", peak);
    err[0] = '\0';
    rc = nnc_load_npy_header(check_path("bomb.npy.gz"), &a, err, sizeof err);
    CHECK(rc == 0 && a.dtype == NNC_DT_F32 && a.rank == 2 && a.dims[0] == 4 && a.dims[1] == 3 &&
          a.data == NULL, "its header alone reads: f32 [4, 3], no data %s", err);
    n = npy_build(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (65536, 65536, 2), }", NULL,
                  0);
    bomb_write(check_path("big.npy.gz"), buf, n, 0, 1);
    rc = bomb_load(nnc_load_npy, check_path("big.npy.gz"), err, sizeof err, &peak);
    CHECK_ERR(rc, err, "big.npy.gz: header claims 8589934592 data bytes; refusing more than 4 GiB "
                       "from a gzip file", "8 GiB declared by a .gz");
    n = npy_build(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", NULL, 0);
    buf[8] = buf[9] = buf[10] = 0xFF;
    buf[11] = 0x7F;
    rc = parse(n, &a, err);
    CHECK_ERR(rc, err, "x.npy: offset 8: expected a header of at most 1048576 bytes, the preamble "
                       "declares 2147483647", "a 2 GiB header");
    bomb_write(check_path("hdr.npy.gz"), buf, n, ' ', 1024);
    rc = bomb_load(nnc_load_npy, check_path("hdr.npy.gz"), err, sizeof err, &peak);
    CHECK_ERR(rc, err, "expected a header of at most 1048576 bytes", "a 2 GiB header in a .gz");
    CHECK(peak < 256, "... refused at %ld MiB of memory (inflating it takes 1024)", peak);
}

int main(void)
{
    test_dtypes();
    test_shapes_and_versions();
    test_refusals();
    test_truncation();
    test_files();
    test_edge_cases();
    test_non_finite();
    test_gzip_bomb();
    return check_done();
}
