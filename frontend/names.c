/* names.c - the model's name as it appears in generated C and CUDA.
 *
 * The model name NAME prefixes every symbol of the generated code and of an ahead-of-time
 * library (NAME_create, NAME_train_step, NAME_t, the kernels NAME_train_step_3, ...).  What
 * keeps those symbols from colliding with the language and the headers is mostly how they are
 * built, not a list:
 *   - NAME never appears alone (the kernels' frame is struct NAME_frame, an AOT header's guard
 *     is NNC_MODEL_NAME_H), so no keyword and no macro that is a whole word (INFINITY, EOF,
 *     errno, stdin, int) can meet it: INFINITY.nn gives INFINITY_create;
 *   - every suffix after NAME_ holds a lowercase letter, so no upper-case macro (INT64_MAX,
 *     SIG_ERR) can either;
 *   - what is left is a lower-case identifier X_suffix of a C library or of a library the code
 *     calls, and those live in name spaces that the C standard (7.31: atomic_, mtx_, thrd_, ...),
 *     POSIX (pthread_, timer_, sem_, ..., and every name ending in _t) or the library reserves.
 *     A NAME that would enter one gets the prefix "m_" (timer.nn gives m_timer: timer_create is
 *     POSIX's; size.nn gives m_size: size_t).
 * The rest of the rule makes NAME a C identifier that C++ does not reserve either: every
 * character that is not a letter, digit or '_' becomes '_', runs of '_' become one and a
 * trailing '_' goes (NAME_x would hold "__"), and "m_" also goes before a name that is then
 * empty or starts with a digit or '_'.  tests/e2e/file_name_test.sh checks the rule against this machine's
 * headers: no identifier they declare is NAME_suffix for a NAME the rule leaves alone.  The
 * result maps to itself.
 *
 * User names inside the model (inputs, parameters) never become C identifiers on their own:
 * the renderers prefix them (an input x is the parameter in_x of NAME_train_step) or quote
 * them in strings. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "frontend.h"

/* Name spaces: a NAME is in one when NAME_ starts with the entry (ignoring case).  An entry
 * ending in '_' is a family of names (timer_create, timer_delete); one without is a library
 * prefix that takes any continuation (cudaError_t, cublasCreate). */
static const char *const reserved_prefixes[] = {
    /* nnc's own symbols, and the libraries the generated code calls */
    "nnc", "omp", "cblas", "openblas", "dnnl", "cuda", "cublas", "nvrtc", "nccl",
    /* C11 7.31 future library directions: <stdatomic.h>, <threads.h> */
    "atomic_", "memory_order_", "cnd_", "mtx_", "thrd_", "tss_",
    /* POSIX and glibc: threads, timers, semaphores, scheduling, message queues, shared memory */
    "pthread", "posix_", "timer_", "clock_", "sem_", "sched_", "mq_", "shm_", "aio_", "lio_", "memfd_", "pkey_",
    "inet6_",
};

/* NAME_t must not be a type of the C library or POSIX: size_t, sigset_t, ... (<stdint.h>'s
 * int8_t, uint_least16_t and the like are matched by is_stdint_name). */
static const char *const standard_t_types[] = {
    "size", "ssize", "rsize", "ptrdiff", "wchar", "wint", "wctype", "wctrans", "intptr", "uintptr", "max_align",
    "char8", "char16", "char32", "mbstate", "errno", "error", "div", "ldiv", "lldiv", "imaxdiv", "float", "double",
    "fenv", "fexcept", "femode", "fpos", "fpos64", "locale", "time", "clock", "clockid", "timer", "sig_atomic",
    "sig", "sigset", "siginfo", "sigval", "sigevent", "sighandler", "stack", "ucontext", "mcontext", "greg", "gregset",
    "fpregset", "off", "off64", "loff", "ino", "ino64", "dev", "mode", "nlink", "uid", "gid", "pid", "id", "key",
    "blkcnt", "blkcnt64", "blksize", "fsblkcnt", "fsblkcnt64", "fsfilcnt", "fsfilcnt64", "fsid", "useconds",
    "suseconds", "caddr", "daddr", "quad", "u_quad", "register", "cpu_set", "socklen", "sa_family", "in_addr",
    "in_port", "nfds", "regex", "regoff", "regmatch", "glob", "glob64", "wordexp", "cc", "speed", "tcflag", "mqd",
    "va_list", "comparison_fn",
};

/* int8, uint64, int_least16, uint_fast32, u_int8, intmax: <stdint.h> and <sys/types.h> names of NAME_t. */
static bool is_stdint_name(const char *s) {
    const char *p = s;
    if (!strncmp(p, "u_", 2)) p += 2;
    else if (*p == 'u') p++;
    if (strncmp(p, "int", 3)) return false;
    p += 3;
    if (!strcmp(p, "max") || !strcmp(p, "ptr")) return true;
    if (!strncmp(p, "_least", 6)) p += 6;
    else if (!strncmp(p, "_fast", 5)) p += 5;
    if (!isdigit((unsigned char)*p)) return false;   /* int_t is nobody's */
    while (isdigit((unsigned char)*p)) p++;
    return !*p;
}

static bool in_reserved_space(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < NNC_COUNTOF(reserved_prefixes); i++) {
        const char *r = reserved_prefixes[i];
        size_t k = strlen(r);
        /* NAME_ starts with r: NAME starts with r, or NAME is r without its '_' */
        if (!strncasecmp(s, r, k < n ? k : n) && (k <= n || (k == n + 1 && r[n] == '_'))) return true;
    }
    for (size_t i = 0; i < NNC_COUNTOF(standard_t_types); i++)
        if (!strcmp(s, standard_t_types[i])) return true;
    return is_stdint_name(s);
}

/* Runs of '_' become one and a trailing '_' goes: C++ reserves every name that holds "__". */
static void squeeze_underscores(char *s) {
    char *w = s;
    for (const char *r = s; *r; r++)
        if (*r != '_' || w == s || w[-1] != '_') *w++ = *r;
    while (w > s && w[-1] == '_') w--;
    *w = 0;
}

const char *nn_model_c_name(Arena *a, const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *s = arena_strdup(a, base);
    char *dot = strrchr(s, '.');
    if (dot && dot != s) *dot = 0;
    for (char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') *p = '_';
    squeeze_underscores(s);
    if (!*s || isdigit((unsigned char)*s) || *s == '_' || in_reserved_space(s)) {
        s = arena_printf(a, "m_%s", s);
        squeeze_underscores(s);   /* m__x */
    }
    return s;
}
