/*
 * test_idx.c - nnc_load_idx / nnc_parse_idx: valid files plain and gzipped,
 * big-endian conversion, and every way a header can lie (truncation, bad
 * magic, unknown type, absurd dims), each with its exact message.
 */
#define _XOPEN_SOURCE 700

#include <sys/stat.h>
#include <zlib.h>

#include "bomb.h"
#include "check.h"
#include "data.h"

/* An IDX image: magic, type, dims (big-endian), then `data` as given. */
static size_t idx_build(unsigned char *buf, unsigned type, int rank, const uint32_t *dims,
                        const void *data, size_t nbytes)
{
    size_t n = 4;
    int i;
    buf[0] = 0;
    buf[1] = 0;
    buf[2] = (unsigned char)type;
    buf[3] = (unsigned char)rank;
    for (i = 0; i < rank; i++, n += 4) {
        buf[n] = (unsigned char)(dims[i] >> 24);
        buf[n + 1] = (unsigned char)(dims[i] >> 16);
        buf[n + 2] = (unsigned char)(dims[i] >> 8);
        buf[n + 3] = (unsigned char)dims[i];
    }
    if (nbytes)
        memcpy(buf + n, data, nbytes);
    return n + nbytes;
}

static void gz_write(const char *path, const void *buf, size_t len)
{
    gzFile gz = gzopen(path, "wb");
    if (!gz || gzwrite(gz, buf, (unsigned)len) != (int)len || gzclose(gz) != Z_OK)
        check_die(path);
}

static unsigned char img[2 * 3 * 4];
static unsigned char file[4096];
static size_t file_len;

static void test_valid(void)
{
    uint32_t dims[3] = { 2, 3, 4 };
    nnc_array a;
    char err[256] = "";
    size_t i;
    int rc, good;
    for (i = 0; i < sizeof img; i++)
        img[i] = (unsigned char)(i * 7 + 1);
    file_len = idx_build(file, 0x08, 3, dims, img, sizeof img);
    check_write(check_path("u8.idx"), file, file_len);
    gz_write(check_path("u8.idx.gz"), file, file_len);
    for (i = 0; i < 2; i++) {
        const char *p = check_path(i ? "u8.idx.gz" : "u8.idx");
        rc = nnc_load_idx(p, &a, err, sizeof err);
        good = rc == 0 && a.dtype == NNC_DT_U8 && a.rank == 3 && a.dims[0] == 2 &&
               a.dims[1] == 3 && a.dims[2] == 4 && memcmp(a.data, img, sizeof img) == 0;
        CHECK(good, "valid u8 [2,3,4] %s loads exactly %s", i ? "gzipped" : "plain", err);
        nnc_array_free(&a);
    }
}

static void test_big_endian(void)
{
    uint32_t dims[1] = { 3 };
    unsigned char be[12] = { 0x3f, 0x80, 0, 0, 0xc0, 0x20, 0, 0, 0x47, 0xc3, 0x50, 0 };
    unsigned char be16[6] = { 0x00, 0x01, 0xff, 0xfe, 0x7f, 0xff };
    nnc_array a;
    char err[256] = "";
    size_t n = idx_build(file, 0x0D, 1, dims, be, sizeof be);
    int rc = nnc_parse_idx(file, n, "f32.idx", &a, err, sizeof err);
    CHECK(rc == 0 && a.dtype == NNC_DT_F32 && ((float *)a.data)[0] == 1.0f &&
              ((float *)a.data)[1] == -2.5f && ((float *)a.data)[2] == 100000.0f,
          "f32 elements are converted from big-endian %s", err);
    nnc_array_free(&a);
    n = idx_build(file, 0x0B, 1, dims, be16, sizeof be16);
    rc = nnc_parse_idx(file, n, "i16.idx", &a, err, sizeof err);
    CHECK(rc == 0 && a.dtype == NNC_DT_I16 && ((int16_t *)a.data)[0] == 1 &&
              ((int16_t *)a.data)[1] == -2 && ((int16_t *)a.data)[2] == 32767,
          "i16 elements are converted from big-endian %s", err);
    nnc_array_free(&a);
}

static void test_truncated(void)
{
    uint32_t dims[3] = { 2, 3, 4 };
    nnc_array a;
    char err[256] = "";
    size_t n = idx_build(file, 0x08, 3, dims, img, sizeof img), cut;
    int rc, all = 1;
    check_write(check_path("short.idx"), file, n - 4);
    rc = nnc_load_idx(check_path("short.idx"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "short.idx: truncated: shape [2, 3, 4] of u8 needs 24 data bytes after "
                       "the 16-byte header, found 20", "truncated file");
    CHECK(a.data == NULL, "output stays empty on failure");
    gz_write(check_path("short.idx.gz"), file, n - 4);
    rc = nnc_load_idx(check_path("short.idx.gz"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "found 20", "truncated data inside a gzip file");
    for (cut = 0; cut < n; cut++) { /* every prefix fails cleanly */
        rc = nnc_parse_idx(file, cut, "p.idx", &a, err, sizeof err);
        all &= rc == -1 && a.data == NULL && strstr(err, "p.idx: ") == err;
    }
    CHECK(all, "every proper prefix of a valid file is refused with a named error");
    rc = nnc_parse_idx(file, 2, "p.idx", &a, err, sizeof err);
    CHECK_ERR(rc, err, "p.idx: truncated: expected a 4-byte IDX header, found 2 bytes",
              "2-byte file");
    rc = nnc_parse_idx(file, 9, "p.idx", &a, err, sizeof err);
    CHECK_ERR(rc, err, "a 3-dimensional IDX header needs 16 bytes, found 9", "cut in the dims");
    file[n] = 0;
    rc = nnc_parse_idx(file, n + 1, "long.idx", &a, err, sizeof err);
    CHECK_ERR(rc, err, "long.idx: offset 40: expected the end of the file after shape [2, 3, 4] of "
                       "u8 (24 data bytes after the 16-byte header), found more", "trailing byte");
}

static void test_truncated_gzip_stream(void)
{
    unsigned char *gz;
    size_t len;
    nnc_array a;
    char err[256] = "";
    int rc;
    gz = check_read(check_path("u8.idx.gz"), &len);
    check_write(check_path("cut.idx.gz"), gz, len - 10); /* cut inside the deflate stream */
    rc = nnc_load_idx(check_path("cut.idx.gz"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "cut.idx.gz: cannot read: gzip data ends early (truncated .gz file?)",
              "gzip stream cut short");
    gz[len / 2] ^= 0xff; /* corrupt the middle of the deflate stream */
    check_write(check_path("bad.idx.gz"), gz, len);
    rc = nnc_load_idx(check_path("bad.idx.gz"), &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "bad.idx.gz: cannot read: ") && !strstr(err, "<fd:"),
          "corrupt gzip stream: \"%s\"", err);
    free(gz);
}

static void test_header_lies(void)
{
    uint32_t huge[2] = { 1u << 20, 1u << 20 }, max[4] = { 0xffffffff, 0xffffffff, 0xffffffff, 8 };
    uint32_t bomb[3] = { 65536, 65536, 2 }, one[1] = { 1 };
    unsigned char bad[8] = { 0, 0, 0x42, 1, 0, 0, 0, 1 };
    nnc_array a;
    char err[256] = "";
    size_t n;
    int rc;
    rc = nnc_parse_idx(bad, sizeof bad, "train.gz", &a, err, sizeof err);
    CHECK_ERR(rc, err, "train.gz: offset 2: expected IDX type code 0x08..0x0E, got 0x42",
              "unknown type code");
    bad[2] = 0x0A;
    rc = nnc_parse_idx(bad, sizeof bad, "t", &a, err, sizeof err);
    CHECK_ERR(rc, err, "got 0x0A (0x0A is unassigned)", "the gap in the type codes");
    bad[0] = 'P';
    rc = nnc_parse_idx(bad, sizeof bad, "t", &a, err, sizeof err);
    CHECK_ERR(rc, err, "t: offset 0: expected IDX magic 0x00 0x00, got 0x50 0x00", "bad magic");
    n = idx_build(file, 0x08, 0, NULL, NULL, 0);
    rc = nnc_parse_idx(file, n, "t", &a, err, sizeof err);
    CHECK_ERR(rc, err, "t: offset 3: expected 1..8 dimensions, got 0", "zero dimensions");
    file[3] = 9;
    rc = nnc_parse_idx(file, n, "t", &a, err, sizeof err);
    CHECK_ERR(rc, err, "expected 1..8 dimensions, got 9", "nine dimensions");
    n = idx_build(file, 0x08, 2, huge, img, 10);
    rc = nnc_parse_idx(file, n, "t", &a, err, sizeof err);
    CHECK_ERR(rc, err, "needs 1099511627776 data bytes after the 12-byte header, found 10",
              "dims claiming 2^40 elements (nothing allocated)");
    check_write(check_path("huge.idx"), file, n);
    rc = nnc_load_idx(check_path("huge.idx"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "needs 1099511627776 data bytes", "2^40 elements from a plain file");
    gz_write(check_path("huge.idx.gz"), file, n);
    rc = nnc_load_idx(check_path("huge.idx.gz"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "refusing more than 4 GiB from a gzip file", "2^40 bytes from a .gz");
    n = idx_build(file, 0x08, 3, bomb, img, 4);
    gz_write(check_path("bomb.idx.gz"), file, n);
    rc = nnc_load_idx(check_path("bomb.idx.gz"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "refusing more than 4 GiB", "8 GiB claimed by a .gz");
    n = idx_build(file, 0x0E, 4, max, img, 8);
    rc = nnc_parse_idx(file, n, "t", &a, err, sizeof err);
    CHECK_ERR(rc, err, "t: header: shape [4294967295, 4294967295, 4294967295, 8] of f64 is too "
                       "large to address", "element count overflows");
    n = idx_build(file, 0x0C, 1, one, img, 3);
    rc = nnc_parse_idx(file, n, NULL, &a, err, sizeof err);
    CHECK_ERR(rc, err, "<memory>: truncated: shape [1] of i32 needs 4 data bytes", "i32 short");
}

/* The magic of a file that is not IDX is shown only if others may read the file. */
static void test_private_magic(void)
{
    nnc_array a;
    char err[512] = "";
    int rc;
    check_write(check_path("secret"), "root:x:0", 8);
    if (chmod(check_path("secret"), 0600) != 0)
        check_die("chmod");
    rc = nnc_load_idx(check_path("secret"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "secret: offset 0: expected IDX magic 0x00 0x00, got other bytes (not shown: "
                       "others cannot read the file)", "a file others cannot read");
    if (chmod(check_path("secret"), 0644) != 0)
        check_die("chmod");
    rc = nnc_load_idx(check_path("secret"), &a, err, sizeof err);
    CHECK_ERR(rc, err, "secret: offset 0: expected IDX magic 0x00 0x00, got 0x72 0x6F",
              "a file anyone can read");
}

static void test_files(void)
{
    nnc_array a;
    char err[256] = "", want[600];
    int rc = nnc_load_idx(check_path("missing.idx"), &a, err, sizeof err);
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory",
             check_path("missing.idx"));
    CHECK(rc == -1 && strcmp(err, want) == 0, "missing file: \"%s\"", err);
    rc = nnc_load_idx(check_tmpdir(), &a, err, sizeof err);
    CHECK_ERR(rc, err, "cannot open: Is a directory", "a directory");
    rc = nnc_load_idx(check_path("missing.idx"), &a, NULL, 0);
    CHECK(rc == -1, "a NULL error buffer is allowed");
}

/* Edge cases at the boundary of the size checks (zero-sized dims). */
static void test_edge_cases(void)
{
    static const unsigned char empty_dims[] = { 0, 0, 0x08, 1, 0, 0, 0, 0 };
    nnc_array a;
    char err[256] = "";
    int rc = nnc_parse_idx(empty_dims, sizeof empty_dims, "e", &a, err, sizeof err);
    CHECK(rc == 0 && a.rank == 1 && a.dims[0] == 0 && a.data != NULL,
          "zero-length dim gives an empty array with non-NULL data %s", err);
    nnc_array_free(&a);
}

/* An f32 IDX file holding +Inf is refused with its sample and byte offset. */
static void test_non_finite(void)
{
    uint32_t dims[2] = { 2, 2 };
    unsigned char be[16] = { 0x3f, 0x80, 0, 0, 0x3f, 0x80, 0, 0, 0x3f, 0x80, 0, 0, 0x7f, 0x80, 0, 0 };
    nnc_array a;
    char err[256] = "";
    size_t n = idx_build(file, 0x0D, 2, dims, be, sizeof be);
    int rc = nnc_parse_idx(file, n, "f.idx", &a, err, sizeof err);
    CHECK_ERR(rc, err, "f.idx: offset 24: sample 1, element 1 is +Inf; training data must be finite",
              "f32 +Inf in IDX");
    CHECK(a.data == NULL, "output left empty");
}

/* A .gz whose stream runs on far past the shape its header declares is refused at the first
 * byte too many: reading stops there, whatever the rest would inflate to. */
static void test_gzip_bomb(void)
{
    uint32_t dims[2] = { 4, 3 };
    char err[512];
    long peak;
    size_t n = idx_build(file, 0x08, 2, dims, img, 12);
    int rc;
    bomb_write(check_path("bomb.idx.gz"), file, n, 0, 1024);
    rc = bomb_load(nnc_load_idx, check_path("bomb.idx.gz"), err, sizeof err, &peak);
    CHECK_ERR(rc, err, "bomb.idx.gz: offset 24: expected the end of the file after shape [4, 3] "
                       "of u8 (12 data bytes after the 12-byte header), found more",
              "12 bytes declared, then 1 GiB of zeros");
    CHECK(peak < 256, "... refused at %ld MiB of memory (inflating it takes 1024)", peak);
    rc = bomb_load(nnc_load_idx_header, check_path("bomb.idx.gz"), err, sizeof err, &peak);
    CHECK(rc == 0 && peak < 256, "its header alone reads (%s, %ld MiB)", err, peak);
    err[0] = '\0';
    {
        nnc_array h;
        rc = nnc_load_idx_header(check_path("bomb.idx.gz"), &h, err, sizeof err);
        CHECK(rc == 0 && h.dtype == NNC_DT_U8 && h.rank == 2 && h.dims[0] == 4 && h.dims[1] == 3 &&
              h.data == NULL, "... as u8 [4, 3], no data %s", err);
    }
}

int main(void)
{
    test_valid();
    test_big_endian();
    test_truncated();
    test_truncated_gzip_stream();
    test_header_lies();
    test_files();
    test_edge_cases();
    test_non_finite();
    test_gzip_bomb();
    test_private_magic();
    return check_done();
}
