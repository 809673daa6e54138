/* util.h - the small things every part of nnc leans on.
 *
 * Arena: compile-time objects (AST, IR, schedules) are carved from one arena and freed together,
 * so passes never free anything individually.  Str: a growable string used by every renderer.
 * Diag: diagnostics that point at the model file (file:line:col, the source line, a caret), with
 * an error count so front-end checks keep going after the first error and report them all. */
#ifndef NNC_UTIL_H
#define NNC_UTIL_H
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NNC_COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct ArenaBlock ArenaBlock;
typedef struct {
    ArenaBlock *head;
} Arena;

void *arena_alloc(Arena *a, size_t n);          /* zeroed, 16-byte aligned; aborts on OOM */
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

typedef struct {
    char *buf;
    size_t len, cap;
} Str;

void str_putc(Str *s, char c);
void str_puts(Str *s, const char *t);
void str_printf(Str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void str_vprintf(Str *s, const char *fmt, va_list ap);
void str_free(Str *s);

/* Where a node, a statement or a kernel came from in the user's model file. */
typedef struct {
    const char *file;
    int line, col;
} SrcLoc;

typedef struct {
    const char *file;      /* name shown in messages */
    const char *src;       /* whole text of the model, for quoting the line */
    int errors;            /* errors reported (at most DIAG_MAX_ERRORS) */
    FILE *out;             /* stderr unless a test captures it */
    bool stopped;          /* DIAG_MAX_ERRORS reached: later errors are dropped */
    const char *q_at;      /* start of the last line asked for (diag_source_line) */
    int q_line;            /* its number (0: none yet) */
} Diag;

/* Like compilers do (gcc -fmax-errors), stop reporting after this many errors: a file of junk
 * then costs a bounded amount of output and time.  Callers that loop over input check
 * diag_stopped() to stop early. */
#define DIAG_MAX_ERRORS 20

void diag_error(Diag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool diag_stopped(const Diag *d);
/* The start of a line of d->src; linear over runs of nearby requests (it remembers the last). */
const char *diag_source_line(Diag *d, int line);
/* Errors with no location (flags, files): "nnc: error: ..." */
void nnc_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *read_file(const char *path, size_t *len);   /* NULL with errno set on failure */
uint64_t hash_fnv1a(const void *data, size_t n, uint64_t h);
/* Python's a // b and a % b (its float_floor_div and float_rem, torch's floor_divide and
 * remainder): from fmod, the remainder with the divisor's sign; b == 0 gives a / b and NaN.  The
 * kernels' FLOORDIV and REMAINDER (codegen/kernel.c's math prelude) are these in `real`. */
double py_floordiv(double a, double b);
double py_mod(double a, double b);
#define HASH_FNV_INIT 0xcbf29ce484222325ULL
#endif
