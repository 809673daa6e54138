/* util.c - arenas, strings and diagnostics (see util.h). */
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) nnc_fatal("out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc(size_t n, size_t m) {
    void *p = calloc(n ? n : 1, m ? m : 1);
    if (!p) nnc_fatal("out of memory allocating %zu x %zu bytes", n, m);
    return p;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) nnc_fatal("out of memory allocating %zu bytes", n);
    return q;
}

void *arena_alloc(Arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->used + n > a->head->cap) {
        size_t cap = n > 65536 ? n : 65536;
        ArenaBlock *b = xmalloc(sizeof *b + cap);
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strdup(Arena *a, const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(arena_alloc(a, n), s, n);
}

char *arena_printf(Arena *a, const char *fmt, ...) {
    Str s = {0};
    va_list ap;
    va_start(ap, fmt);
    str_vprintf(&s, fmt, ap);
    va_end(ap);
    char *r = arena_strdup(a, s.buf ? s.buf : "");
    str_free(&s);
    return r;
}

void arena_free(Arena *a) {
    while (a->head) {
        ArenaBlock *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

static void str_reserve(Str *s, size_t extra) {
    if (s->len + extra + 1 <= s->cap) return;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < s->len + extra + 1) cap *= 2;
    s->buf = xrealloc(s->buf, cap);
    s->cap = cap;
}

void str_putc(Str *s, char c) {
    str_reserve(s, 1);
    s->buf[s->len++] = c;
    s->buf[s->len] = 0;
}

void str_puts(Str *s, const char *t) {
    size_t n = strlen(t);
    str_reserve(s, n);
    memcpy(s->buf + s->len, t, n + 1);
    s->len += n;
}

void str_vprintf(Str *s, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    str_reserve(s, (size_t)n);
    vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
    s->len += (size_t)n;
}

void str_printf(Str *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    str_vprintf(s, fmt, ap);
    va_end(ap);
}

void str_free(Str *s) {
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* The start of line `line` of the source (or its end, past the last line).  Callers ask in
 * runs of nearby lines (diagnostics in file order, kernels quoting the lines they compute,
 * forward then backward), so the scan moves from the last line asked in either direction:
 * N nearby requests cost their distance, not N passes over the file. */
const char *diag_source_line(Diag *d, int line) {
    const char *p = d->src;
    int l = 1;
    if (d->q_at && line >= d->q_line / 2) {
        p = d->q_at;
        l = d->q_line;
    }
    for (; l > line; l--) {   /* back to the start of the previous line */
        p--;
        while (p > d->src && p[-1] != '\n') p--;
    }
    for (; l < line && *p; p++)
        if (*p == '\n') l++;
    d->q_at = p;
    d->q_line = l;
    return p;
}

/* Quote the source line and put a caret under the column, the way gcc and clang do.  A very
 * long line is cut to a window around the column, so one error never prints megabytes. */
enum { QUOTE_WINDOW = 160 };
static void diag_quote(Diag *d, SrcLoc loc) {
    if (!d->src || loc.line <= 0) return;
    const char *p = diag_source_line(d, loc.line);
    const char *e = strchr(p, '\n');
    int n = e ? (int)(e - p) : (int)strlen(p);
    int from = 0, col = loc.col;
    if (n > QUOTE_WINDOW) {
        from = col - 1 - QUOTE_WINDOW / 2;
        if (from > n - QUOTE_WINDOW) from = n - QUOTE_WINDOW;
        if (from < 0) from = 0;
    }
    int len = n - from > QUOTE_WINDOW ? QUOTE_WINDOW : n - from;
    const char *pre = from > 0 ? "..." : "";
    fprintf(d->out, "%5d | %s%.*s%s\n      | %s", loc.line, pre, len, p + from, from + len < n ? "..." : "",
            from > 0 ? "   " : "");
    for (int i = from + 1; i < col && i <= from + len; i++) fputc(p[i - 1] == '\t' ? '\t' : ' ', d->out);
    fputs("^\n", d->out);
}

static void diag_vemit(Diag *d, SrcLoc loc, const char *kind, const char *fmt, va_list ap) {
    if (!d->out) d->out = stderr;
    const char *file = loc.file ? loc.file : d->file;
    if (loc.line > 0)
        fprintf(d->out, "%s:%d:%d: %s: ", file, loc.line, loc.col, kind);
    else
        fprintf(d->out, "%s: %s: ", file ? file : "nnc", kind);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    diag_quote(d, loc);
}

bool diag_stopped(const Diag *d) { return d->stopped; }

void diag_error(Diag *d, SrcLoc loc, const char *fmt, ...) {
    if (d->stopped) return;
    if (d->errors >= DIAG_MAX_ERRORS) {
        if (!d->out) d->out = stderr;
        fprintf(d->out, "%s: error: too many errors (more than %d); stopping\n", d->file ? d->file : "nnc",
                DIAG_MAX_ERRORS);
        d->stopped = true;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    diag_vemit(d, loc, "error", fmt, ap);
    va_end(ap);
    d->errors++;
}

void diag_note(Diag *d, SrcLoc loc, const char *fmt, ...) {
    if (d->stopped) return;   /* its error was dropped */
    va_list ap;
    va_start(ap, fmt);
    diag_vemit(d, loc, "note", fmt, ap);
    va_end(ap);
}

void nnc_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("nnc: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    Str s = {0};
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        str_reserve(&s, n);
        memcpy(s.buf + s.len, buf, n);
        s.len += n;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        str_free(&s);
        errno = EIO;
        return NULL;
    }
    str_reserve(&s, 0);
    s.buf[s.len] = 0;
    if (len) *len = s.len;
    return s.buf;
}

uint64_t hash_fnv1a(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

double py_mod(double a, double b) {
    double m = fmod(a, b);
    return m != 0 && (b < 0) != (m < 0) ? m + b : m;
}

double py_floordiv(double a, double b) {
    if (b == 0) return a / b;
    double m = fmod(a, b), d = (a - m) / b;
    if (m != 0 && (b < 0) != (m < 0)) d -= 1;
    if (d == 0) return 0 * (a / b); /* a zero with the quotient's sign */
    double f = floor(d);
    return d - f > 0.5 ? f + 1 : f;
}
