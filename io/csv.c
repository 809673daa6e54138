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
 * as many cells as the first data row. */

typedef struct {
    const char *s; /* the line, without its terminator */
    size_t n;
    long lineno; /* 1-based */
} csv_line;

typedef struct {
    double *v;
    size_t n, cap;
} csv_values;

/* Next line starting at *pos; 0 at end of input. */
static int csv_next_line(const char *b, size_t len, size_t *pos, csv_line *line)
{
    const char *nl;
    if (*pos >= len)
        return 0;
    line->s = b + *pos;
    nl = memchr(line->s, '\n', len - *pos);
    line->n = nl ? (size_t)(nl - line->s) : len - *pos;
    *pos += line->n + (nl != NULL);
    if (line->n > 0 && line->s[line->n - 1] == '\r')
        line->n--;
    line->lineno++;
    return 1;
}

static int csv_blank(const csv_line *line)
{
    size_t i;
    for (i = 0; i < line->n; i++)
        if (line->s[i] != ' ' && line->s[i] != '\t')
            return 0;
    return 1;
}

static size_t csv_count_cells(const csv_line *line)
{
    size_t i, k = 1;
    for (i = 0; i < line->n; i++)
        k += line->s[i] == ',';
    return k;
}

/* Parses cell [s, s+n) as a number; -1 if it is not exactly one. */
static int csv_cell_parse(const char *s, size_t n, double *v)
{
    char tmp[DATA_CELL_MAX + 1];
    char *end;
    while (n > 0 && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || n > DATA_CELL_MAX)
        return -1;
    memcpy(tmp, s, n); /* strtod needs a terminator the buffer lacks */
    tmp[n] = '\0';
    *v = strtod(tmp, &end);
    return end == tmp + n ? 0 : -1;
}

/* Span of cell `k`'s text within the line starting at *at; advances *at. */
static size_t csv_cell_span(const csv_line *line, size_t *at)
{
    size_t start = *at, end = start;
    while (end < line->n && line->s[end] != ',')
        end++;
    *at = end + 1;
    return end - start;
}

/* A header has a cell of text; an empty cell alone does not make one (the
 * line is then data, and its empty cell an error worth reporting). */
static int csv_is_header(const csv_line *line)
{
    size_t at = 0, k, cells = csv_count_cells(line);
    double v;
    for (k = 0; k < cells; k++) {
        size_t start = at, n = csv_cell_span(line, &at), i;
        int empty = 1;
        for (i = 0; i < n; i++)
            empty &= line->s[start + i] == ' ' || line->s[start + i] == '\t';
        if (!empty && csv_cell_parse(line->s + start, n, &v) != 0)
            return 1;
    }
    return 0;
}

static int csv_push(csv_values *vals, double v)
{
    if (vals->n == vals->cap) {
        size_t ncap = vals->cap ? vals->cap * 2 : 1024;
        double *nv;
        if (ncap > SIZE_MAX / sizeof *nv)
            return -1;
        nv = realloc(vals->v, ncap * sizeof *nv);
        if (!nv)
            return -1;
        vals->v = nv;
        vals->cap = ncap;
    }
    vals->v[vals->n++] = v;
    return 0;
}

static int csv_bad_cell(const char *name, const csv_line *line, size_t col, const char *s,
                        size_t n, char *err, size_t errlen)
{
    char shown[40];
    size_t i, k = n < sizeof shown - 4 ? n : sizeof shown - 4;
    for (i = 0; i < k; i++) /* keep the message one printable line */
        shown[i] = (s[i] >= 0x20 && s[i] < 0x7F) ? s[i] : '?';
    strcpy(shown + k, k < n ? "..." : "");
    data_err(err, errlen, "%s:%ld: column %zu: expected a number, got '%s'", name, line->lineno,
             col, shown);
    return -1;
}

/* Appends data row `row` (0-based sample index) of exactly `cols` cells; a NaN or
 * Inf cell ("nan", "inf", or a number past the double range) is refused, as in
 * data_array_finite_check. */
static int csv_row_parse(const csv_line *line, size_t row, size_t cols, csv_values *vals,
                         const char *name, char *err, size_t errlen)
{
    size_t k, at = 0, cells = csv_count_cells(line);
    if (cells != cols) {
        data_err(err, errlen, "%s:%ld: expected %zu columns, got %zu", name, line->lineno, cols,
                 cells);
        return -1;
    }
    for (k = 0; k < cells; k++) {
        size_t start = at, n = csv_cell_span(line, &at);
        double v;
        if (csv_cell_parse(line->s + start, n, &v) != 0)
            return csv_bad_cell(name, line, k + 1, line->s + start, n, err, errlen);
        if (!isfinite(v)) {
            data_err(err, errlen, "%s:%ld: sample %zu, column %zu is %s; training data must be "
                     "finite", name, line->lineno, row, k + 1, isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
            return -1;
        }
        if (csv_push(vals, v) != 0) {
            data_err(err, errlen, "%s:%ld: out of memory", name, line->lineno);
            return -1;
        }
    }
    return 0;
}

/* Walks the lines, dropping the header if asked (or if auto-detected). */
static int csv_rows_parse(const char *b, size_t len, const char *name, int skip_header,
                          csv_values *vals, size_t *rows, size_t *cols, char *err, size_t errlen)
{
    csv_line line = { NULL, 0, 0 };
    size_t pos = 0;
    int first = 1;
    if (len >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) /* UTF-8 byte-order mark */
        pos = 3;
    *rows = *cols = 0;
    while (csv_next_line(b, len, &pos, &line)) {
        if (csv_blank(&line))
            continue;
        if (first) {
            first = 0;
            if (skip_header > 0 || (skip_header < 0 && csv_is_header(&line)))
                continue;
        }
        if (*rows == 0)
            *cols = csv_count_cells(&line);
        if (csv_row_parse(&line, *rows, *cols, vals, name, err, errlen) != 0)
            return -1;
        (*rows)++;
    }
    if (*rows == 0) {
        data_err(err, errlen, "%s: no data rows%s", name, first ? " (empty file)" : "");
        return -1;
    }
    return 0;
}

int nnc_parse_csv(const void *buf, size_t len, const char *name, int skip_header, nnc_array *out,
                  char *err, size_t errlen)
{
    csv_values vals = { NULL, 0, 0 };
    size_t rows, cols;
    data_array_clear(out);
    name = data_name(name);
    if (csv_rows_parse(buf, len, name, skip_header, &vals, &rows, &cols, err, errlen) != 0) {
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

int nnc_load_csv(const char *path, int skip_header, nnc_array *out, char *err, size_t errlen)
{
    uint8_t *buf;
    size_t len;
    int rc;
    data_array_clear(out);
    if (data_file_read_all(path, &buf, &len, err, errlen) != 0)
        return -1;
    rc = nnc_parse_csv(buf, len, path, skip_header, out, err, errlen);
    free(buf);
    return rc;
}

