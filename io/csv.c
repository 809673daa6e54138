/* csv.c - the CSV reader (numbers, an optional header line); see data.h. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_impl.h"

#define DATA_CELL_MAX 63 /* longest CSV cell we parse as a number */

/* ---- CSV ------------------------------------------------------------------ */
/* Comma-separated numbers, one row per line; '\r\n' endings, a UTF-8 BOM,
 * blank lines and spaces around cells are tolerated.  Every row must have
 * as many cells as the first data row.
 *
 * A file is parsed as it is read, a line at a time, and only its numbers are kept: a CSV has
 * no header that declares its size, so a .gz of gigabytes of junk (a gzip bomb) is refused at
 * its first bad line or at a line longer than CSV_LINE_MAX, after a few megabytes, and one of
 * valid rows at 4 GiB of values (DATA_GZ_LIMIT), never after inflating all of it. */

#define CSV_LINE_MAX ((size_t)16 << 20)

typedef struct {
    const char *s; /* the line, without its terminator */
    size_t n;
    long lineno; /* 1-based */
} csv_line;

typedef struct {
    double *v;
    size_t n, cap;
    size_t max; /* most values kept (a .gz: DATA_GZ_LIMIT bytes of them) */
} csv_values;

/* The bytes lines are cut from: all of a buffer in memory, or a window onto a file. */
typedef struct {
    data_file *f;    /* NULL: the whole input is b[0..len) */
    uint8_t *buf;    /* file: the bytes read and not yet consumed (owned) */
    const char *b;   /* buf, or the caller's memory */
    size_t len, cap; /* bytes in b; buf's size */
    size_t pos;      /* start of the next line */
    size_t scanned;  /* b[pos..scanned) holds no '\n' */
    uint64_t total;  /* bytes read from the file so far */
    int eof;         /* all of the input is in b */
    const char *name;
    int shown; /* messages may quote the input (others can read the file) */
} csv_input;

/* Keeps the unfinished line and appends more of the file: DATA_READ_CHUNK bytes, or as many as
 * the unfinished line has, so that the buffer doubles while a long line does not fit. */
static int csv_fill(csv_input *in, char *err, size_t errlen) {
    size_t keep = in->len - in->pos, want;
    if (keep) memmove(in->buf, in->buf + in->pos, keep);
    in->scanned -= in->pos;
    in->len = keep;
    in->pos = 0;
    want = keep + (keep > DATA_READ_CHUNK ? keep : DATA_READ_CHUNK);
    if (data_file_read_upto(in->f, &in->buf, &in->len, &in->cap, want, err, errlen) != 0) return -1;
    in->eof = in->len < want;
    in->b = (const char *)in->buf;
    in->total += in->len - keep;
    if (!in->f->direct && in->total > DATA_GZ_LIMIT) {
        data_err(err, errlen, "%s: gzip data inflates to more than 4 GiB; refusing", in->name);
        return -1;
    }
    return 0;
}

/* Next line into *line: 1, 0 at the end of the input, -1 with a message. */
static int csv_next_line(csv_input *in, csv_line *line, char *err, size_t errlen) {
    const char *nl;
    for (;;) {
        nl = in->scanned < in->len ? memchr(in->b + in->scanned, '\n', in->len - in->scanned) : NULL;
        if (nl || in->eof) break;
        in->scanned = in->len;
        if (in->len - in->pos > CSV_LINE_MAX) {
            data_err(err, errlen,
                     "%s:%ld: expected a line of at most 16 MiB, found a longer one "
                     "(not a CSV file?)",
                     in->name, line->lineno + 1);
            return -1;
        }
        if (csv_fill(in, err, errlen) != 0) return -1;
    }
    if (in->pos >= in->len) return 0;
    line->s = in->b + in->pos;
    line->n = nl ? (size_t)(nl - line->s) : in->len - in->pos;
    in->pos += line->n + (nl != NULL);
    in->scanned = in->pos;
    if (line->n > 0 && line->s[line->n - 1] == '\r') line->n--;
    line->lineno++;
    return 1;
}

static int csv_blank(const csv_line *line) {
    size_t i;
    for (i = 0; i < line->n; i++)
        if (line->s[i] != ' ' && line->s[i] != '\t') return 0;
    return 1;
}

static size_t csv_count_cells(const csv_line *line) {
    size_t i, k = 1;
    for (i = 0; i < line->n; i++) k += line->s[i] == ',';
    return k;
}

/* Parses cell [s, s+n) as a number; -1 if it is not exactly one. */
static int csv_cell_parse(const char *s, size_t n, double *v) {
    char tmp[DATA_CELL_MAX + 1];
    char *end;
    while (n > 0 && (*s == ' ' || *s == '\t')) s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n == 0 || n > DATA_CELL_MAX) return -1;
    memcpy(tmp, s, n); /* strtod needs a terminator the buffer lacks */
    tmp[n] = '\0';
    *v = strtod(tmp, &end);
    return end == tmp + n ? 0 : -1;
}

/* Span of cell `k`'s text within the line starting at *at; advances *at. */
static size_t csv_cell_span(const csv_line *line, size_t *at) {
    size_t start = *at, end = start;
    while (end < line->n && line->s[end] != ',') end++;
    *at = end + 1;
    return end - start;
}

/* A header has a cell of text; an empty cell alone does not make one (the
 * line is then data, and its empty cell an error worth reporting). */
static int csv_is_header(const csv_line *line) {
    size_t at = 0, k, cells = csv_count_cells(line);
    double v;
    for (k = 0; k < cells; k++) {
        size_t start = at, n = csv_cell_span(line, &at), i;
        int empty = 1;
        for (i = 0; i < n; i++) empty &= line->s[start + i] == ' ' || line->s[start + i] == '\t';
        if (!empty && csv_cell_parse(line->s + start, n, &v) != 0) return 1;
    }
    return 0;
}

static int csv_push(csv_values *vals, double v) {
    if (vals->n == vals->cap) {
        size_t ncap = vals->cap ? vals->cap * 2 : 1024;
        double *nv;
        if (ncap > vals->max) ncap = vals->max;
        if (ncap <= vals->n) return -1;
        nv = realloc(vals->v, ncap * sizeof *nv);
        if (!nv) return -1;
        vals->v = nv;
        vals->cap = ncap;
    }
    vals->v[vals->n++] = v;
    return 0;
}

/* A cell that is not a number: where (file:line:column, the column counting bytes from 1) and
 * a few escaped characters of it, none when others cannot read the file (data_excerpt): a
 * model may name any file, and a whole line of /etc/shadow used to end up in the message. */
static int csv_bad_cell(const csv_input *in, const csv_line *line, size_t k, size_t start, size_t n, char *err,
                        size_t errlen) {
    char got[4 * DATA_EXCERPT_MAX + 48];
    while (n > 0 && (line->s[start] == ' ' || line->s[start] == '\t')) start++, n--;
    while (n > 0 && (line->s[start + n - 1] == ' ' || line->s[start + n - 1] == '\t')) n--;
    data_err(err, errlen, "%s:%ld:%zu: expected a number in column %zu, got %s", in->name, line->lineno, start + 1, k,
             data_excerpt(got, sizeof got, line->s + start, n, DATA_EXCERPT_MAX, in->shown));
    return -1;
}

/* Appends data row `row` (0-based sample index) of exactly `cols` cells; a NaN or
 * Inf cell ("nan", "inf", or a number past the double range) is refused, as in
 * data_array_finite_check. */
static int csv_row_parse(const csv_input *in, const csv_line *line, size_t row, size_t cols, csv_values *vals,
                         char *err, size_t errlen) {
    const char *name = in->name;
    size_t k, at = 0, cells = csv_count_cells(line);
    if (cells != cols) {
        data_err(err, errlen, "%s:%ld: expected %zu columns, got %zu", name, line->lineno, cols, cells);
        return -1;
    }
    for (k = 0; k < cells; k++) {
        size_t start = at, n = csv_cell_span(line, &at);
        double v;
        if (csv_cell_parse(line->s + start, n, &v) != 0) return csv_bad_cell(in, line, k + 1, start, n, err, errlen);
        if (!isfinite(v)) {
            data_err(err, errlen,
                     "%s:%ld: sample %zu, column %zu is %s; training data must be "
                     "finite",
                     name, line->lineno, row, k + 1,
                     isnan(v)    ? "NaN"
                         : v > 0 ? "+Inf"
                                 : "-Inf");
            return -1;
        }
        if (csv_push(vals, v) != 0) {
            if (vals->n == vals->max)
                data_err(err, errlen,
                         "%s:%ld: more than 4 GiB of values from a gzip file; "
                         "refusing",
                         name, line->lineno);
            else data_err(err, errlen, "%s:%ld: out of memory", name, line->lineno);
            return -1;
        }
    }
    return 0;
}

/* Walks the lines, dropping the header if asked (or if auto-detected). */
static int csv_rows_parse(csv_input *in, int skip_header, csv_values *vals, size_t *rows, size_t *cols, char *err,
                          size_t errlen) {
    csv_line line = {NULL, 0, 0};
    int first = 1, got;
    if (in->len >= 3 && memcmp(in->b, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 byte-order mark */
        in->pos = in->scanned = 3;
    *rows = *cols = 0;
    while ((got = csv_next_line(in, &line, err, errlen)) > 0) {
        if (csv_blank(&line)) continue;
        if (first) {
            first = 0;
            if (skip_header > 0 || (skip_header < 0 && csv_is_header(&line))) continue;
        }
        if (*rows == 0) *cols = csv_count_cells(&line);
        if (csv_row_parse(in, &line, *rows, *cols, vals, err, errlen) != 0) return -1;
        (*rows)++;
    }
    if (got < 0) return -1;
    if (*rows == 0) {
        data_err(err, errlen, "%s: no data rows%s", in->name, first ? " (empty file)" : "");
        return -1;
    }
    return 0;
}

/* Parses all of `in` into out (F64 [rows, cols]). */
static int csv_parse(csv_input *in, int skip_header, size_t max_values, nnc_array *out, char *err, size_t errlen) {
    csv_values vals = {NULL, 0, 0, max_values};
    size_t rows, cols;
    if (csv_rows_parse(in, skip_header, &vals, &rows, &cols, err, errlen) != 0) {
        free(vals.v);
        return -1;
    }
    out->dtype = NNC_DT_F64;
    out->rank = 2;
    out->dims[0] = (int64_t)rows;
    out->dims[1] = (int64_t)cols;
    out->data = vals.v; /* rows * cols == vals.n doubles, never NULL here */
    return 0;
}

int nnc_parse_csv(const void *buf, size_t len, const char *name, int skip_header, nnc_array *out, char *err,
                  size_t errlen) {
    csv_input in = {NULL, NULL, buf, len, 0, 0, 0, 0, 1, data_name(name), 1};
    data_array_clear(out);
    return csv_parse(&in, skip_header, SIZE_MAX / sizeof(double), out, err, errlen);
}

int nnc_load_csv(const char *path, int skip_header, nnc_array *out, char *err, size_t errlen) {
    data_file f;
    csv_input in = {&f, NULL, "", 0, 0, 0, 0, 0, 0, path, 0};
    int rc;
    data_array_clear(out);
    if (data_file_open(&f, path, err, errlen) != 0) return -1;
    in.shown = f.shown;
    rc = csv_fill(&in, err, errlen);
    if (rc == 0)
        rc = csv_parse(&in, skip_header, (f.direct ? SIZE_MAX : DATA_GZ_LIMIT) / sizeof(double), out, err, errlen);
    rc = data_file_close(&f, rc, err, errlen);
    free(in.buf);
    if (rc != 0) nnc_array_free(out);
    return rc;
}
