/*
 * test_csv.c - nnc_parse_csv / nnc_load_csv: header detection, the
 * tolerated variations (CRLF, BOM, blank lines, spaces) and the errors,
 * which must name the line (and the column for a bad cell).
 */
#define _XOPEN_SOURCE 700

#include <sys/stat.h>

#include "bomb.h"
#include "check.h"
#include "data.h"

static int parse(const char *text, int skip, nnc_array *a, char *err)
{
    return nnc_parse_csv(text, strlen(text), "data.csv", skip, a, err, 256);
}

/* a is F64 [rows, cols] holding want[]. */
static int same(const nnc_array *a, int64_t rows, int64_t cols, const double *want)
{
    return a->dtype == NNC_DT_F64 && a->rank == 2 && a->dims[0] == rows && a->dims[1] == cols &&
           memcmp(a->data, want, (size_t)(rows * cols) * sizeof(double)) == 0;
}

static void test_headers(void)
{
    static const double want[6] = { 1, 2, 3, 4.5, -5e-3, 6 };
    nnc_array a;
    char err[256] = "";
    int rc = parse("a,b,c\n1,2,3\n4.5,-5e-3,6\n", -1, &a, err);
    CHECK(rc == 0 && same(&a, 2, 3, want), "auto-detect skips a text header %s", err);
    nnc_array_free(&a);
    rc = parse("1,2,3\n4.5,-5e-3,6", -1, &a, err);
    CHECK(rc == 0 && same(&a, 2, 3, want), "auto-detect keeps a numeric first line %s", err);
    nnc_array_free(&a);
    rc = parse("9,9,9\n1,2,3\n4.5,-5e-3,6\n", 1, &a, err);
    CHECK(rc == 0 && same(&a, 2, 3, want), "skip_header=1 drops even a numeric line %s", err);
    nnc_array_free(&a);
    rc = parse("x,y,z\n1,2,3\n", 0, &a, err);
    CHECK_ERR(rc, err, "data.csv:1:1: expected a number in column 1, got 'x'", "skip_header=0");
    rc = parse("id,1,2\n1,2,3\n4.5,-5e-3,6\n", -1, &a, err);
    CHECK(rc == 0 && same(&a, 2, 3, want), "one text cell makes the first line a header %s", err);
    nnc_array_free(&a);
}

static void test_variations(void)
{
    static const double want[6] = { 1, 2, 3, 4.5, -5e-3, 6 };
    nnc_array a;
    char err[256] = "";
    int rc = parse("\xEF\xBB\xBF" "a,b,c\r\n\r\n 1 , 2,3\t\r\n\n4.5,-5e-3,6\r\n\r\n", -1, &a, err);
    CHECK(rc == 0 && same(&a, 2, 3, want), "BOM, CRLF, blank lines and spaces %s", err);
    nnc_array_free(&a);
    rc = parse("7\n8\n", -1, &a, err);
    CHECK(rc == 0 && a.dims[0] == 2 && a.dims[1] == 1, "single column %s", err);
    nnc_array_free(&a);
}

static void test_errors(void)
{
    nnc_array a;
    char err[256] = "";
    int rc = parse("a,b,c\n1,2,3\n4,5\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:3: expected 3 columns, got 2", "ragged row");
    CHECK(a.data == NULL, "output left empty");
    rc = parse("1,2,3\n4,5,6,7\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:2: expected 3 columns, got 4", "row too long");
    rc = parse("a,b\n1,2\n\n3,x1\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:4:3: expected a number in column 2, got 'x1'", "non-numeric cell");
    rc = parse("1,2,3\n1,,3\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:2:3: expected a number in column 2, got ''", "empty cell");
    rc = parse("1,,3\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:1:3: expected a number in column 2, got ''",
              "an empty cell does not make the first line a header");
    rc = parse("1,2\n3,4 5\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:2:3: expected a number in column 2, got '4 5'", "two numbers in a cell");
    rc = parse("1\n0000000000000000000000000000000000000000000000000000000000000000001\n", 0, &a,
               err);
    CHECK_ERR(rc, err, "data.csv:2:1: expected a number in column 1, got '00000000'... (67 bytes)",
              "an over-long cell is cut to 8 characters");
    rc = parse("", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv: no data rows (empty file)", "empty input");
    rc = parse("a,b\n\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv: no data rows", "header only");
    rc = nnc_parse_csv("1,\x00" "2\n", 5, "z.csv", 0, &a, err, sizeof err);
    CHECK_ERR(rc, err, "z.csv:1:3: expected a number in column 2, got '\\x002'", "NUL byte in a cell");
    rc = parse("1,2\n3, \x1b]0;pwned\x07 \n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:2:4: expected a number in column 2, got '\\x1B]0;pwne'... (10 bytes)",
              "a terminal escape is shown escaped, from where the cell's text starts");
}

/* NaN and Inf are refused at load time, naming line, sample and column: one NaN would
 * otherwise train into NaN weights without a trace. */
static void test_non_finite(void)
{
    nnc_array a;
    char err[256] = "";
    int rc = parse("a,b\n1,2\n\n3,nan\n", -1, &a, err);
    CHECK_ERR(rc, err, "data.csv:4: sample 1, column 2 is NaN; training data must be finite",
              "nan cell");
    CHECK(a.data == NULL, "output left empty");
    rc = parse("1,2\n-inf,4\n", 0, &a, err);
    CHECK_ERR(rc, err, "data.csv:2: sample 1, column 1 is -Inf", "-inf cell");
    rc = parse("1e999\n", 0, &a, err);
    CHECK_ERR(rc, err, "data.csv:1: sample 0, column 1 is +Inf", "a number past the double range");
}

/* Messages quote at most 8 escaped characters of a file, and nothing of one that others may
 * not read: a model may name /etc/shadow (its first line is taken for a header). */
static void test_excerpts(void)
{
    static const char shadow[] = "root:$6$salt$hash:19618:0:99999:7:::\n"
                                 "daemon:*:19618:0:99999:7:::\n";
    nnc_array a;
    char err[512] = "";
    int rc;
    check_write(check_path("shadow"), shadow, strlen(shadow));
    if (chmod(check_path("shadow"), 0640) != 0)
        check_die("chmod");
    rc = nnc_load_csv(check_path("shadow"), -1, &a, err, sizeof err);
    CHECK_ERR(rc, err, "shadow:2:1: expected a number in column 1, got 27 bytes (not shown: others "
                       "cannot read the file)", "a file others cannot read: no excerpt");
    CHECK(strstr(err, "shadow:2:") && !strstr(strstr(err, "shadow:2:"), "daemon") &&
          !strstr(strstr(err, "shadow:2:"), "root"), "... nothing of it in \"%s\"", err);
    if (chmod(check_path("shadow"), 0644) != 0)
        check_die("chmod");
    rc = nnc_load_csv(check_path("shadow"), -1, &a, err, sizeof err);
    CHECK_ERR(rc, err, "shadow:2:1: expected a number in column 1, got 'daemon:*'... (27 bytes)",
              "a file anyone can read: 8 characters");
}

static void test_files(void)
{
    static const char text[] = "x,y\n1,2\n3,4\n";
    nnc_array a;
    char err[512] = "";
    int rc;
    check_write(check_path("t.csv"), text, strlen(text));
    rc = nnc_load_csv(check_path("t.csv"), -1, &a, err, sizeof err);
    CHECK(rc == 0 && a.dims[0] == 2 && a.dims[1] == 2 && ((double *)a.data)[3] == 4,
          "load from file %s", err);
    nnc_array_free(&a);
    rc = nnc_load_csv(check_path("none.csv"), -1, &a, err, sizeof err);
    CHECK_ERR(rc, err, "none.csv: cannot open: No such file or directory", "missing file");
    check_write(check_path("r.csv"), "1,2\n3\n", 6);
    rc = nnc_load_csv(check_path("r.csv"), -1, &a, err, sizeof err);
    CHECK_ERR(rc, err, "r.csv:2: expected 2 columns, got 1", "file errors name the path and line");
}

/* A file is parsed through a window of about 1 MiB: lines (and CRLF pairs) that straddle its
 * edges, a line longer than the window, a BOM and a last line without '\n' give what parsing
 * the same bytes in memory gives, plain or gzip'd. */
static void test_stream_windows(void)
{
    size_t cap = 5u << 20, n = 0, i;
    char *text = malloc(cap), err[512] = "", err2[512] = "";
    nnc_array mem, file;
    int rc, rc2, f, same_all = 1;
    gzFile gz;
    if (!text)
        check_die("malloc");
    n += (size_t)sprintf(text, "\xEF\xBB\xBF" "a,b,c\r\n");
    for (i = 0; n < (4u << 20); i++) { /* rows of varying width; one line of 1.5 MiB of spaces */
        int pad = (int)(i * 7919 % 97);
        if (i == 20000) {
            memset(text + n, ' ', 3u << 19);
            n += 3u << 19;
        }
        n += (size_t)sprintf(text + n, "%zu,%*s%d.5,-%zu%s", i, pad, "", (int)(i % 13), i * 3,
                             i % 5 ? "\r\n" : "\n\n");
    }
    n += (size_t)sprintf(text + n, "1,2,3"); /* no '\n' at the end */
    rc = nnc_parse_csv(text, n, "w.csv", -1, &mem, err, sizeof err);
    check_write(check_path("w.csv"), text, n);
    gz = gzopen(check_path("w.csv.gz"), "wb1");
    if (!gz || gzwrite(gz, text, (unsigned)n) != (int)n || gzclose(gz) != Z_OK)
        check_die("w.csv.gz");
    for (f = 0; f < 2; f++) {
        rc2 = nnc_load_csv(check_path(f ? "w.csv.gz" : "w.csv"), -1, &file, err2, sizeof err2);
        same_all &= rc == 0 && rc2 == 0 && file.dims[0] == mem.dims[0] && file.dims[1] == 3 &&
                    memcmp(file.data, mem.data, (size_t)(mem.dims[0] * 3) * sizeof(double)) == 0;
        nnc_array_free(&file);
    }
    CHECK(same_all && mem.dims[0] == (int64_t)i + 1, "4 MiB through the window, plain and gzip'd, "
          "as in memory (%lld rows) %s%s", (long long)mem.dims[0], err, err2);
    nnc_array_free(&mem);
    free(text);
}

static int load_auto(const char *path, nnc_array *out, char *err, size_t errlen)
{
    return nnc_load_csv(path, -1, out, err, errlen);
}

/* A CSV is parsed as it streams, keeping only its numbers: a .gz is refused at its first bad
 * line, or at a line longer than 16 MiB, not after inflating all of it into memory. */
static void test_gzip_bomb(void)
{
    static const char bad_row[] = "1,2,3\n1,2\n";
    char err[512];
    long peak;
    int rc;
    bomb_write(check_path("row.csv.gz"), bad_row, strlen(bad_row), '\n', 1024);
    rc = bomb_load(load_auto, check_path("row.csv.gz"), err, sizeof err, &peak);
    CHECK_ERR(rc, err, "row.csv.gz:2: expected 3 columns, got 2", "a bad row, then 1 GiB of lines");
    CHECK(peak < 256, "... refused at %ld MiB of memory (inflating it takes 1024)", peak);
    bomb_write(check_path("line.csv.gz"), "1,2,3\n", 6, 'x', 1024);
    rc = bomb_load(load_auto, check_path("line.csv.gz"), err, sizeof err, &peak);
    CHECK_ERR(rc, err, "line.csv.gz:2: expected a line of at most 16 MiB, found a longer one",
              "a line of 1 GiB");
    CHECK(peak < 256, "... refused at %ld MiB of memory (inflating it takes 1024)", peak);
}

int main(void)
{
    test_headers();
    test_variations();
    test_errors();
    test_non_finite();
    test_files();
    test_excerpts();
    test_stream_windows();
    test_gzip_bomb();
    return check_done();
}
