/*
 * check.h - the little harness every unit test shares.
 *
 * Each CHECK prints one line, "ok   - what" or "FAIL - what (file:line)",
 * so a CTest log reads as a list of claims; check_done() prints the tally
 * and gives the exit status.  CHECK_ERR asserts a call failed with -1 and
 * that its message contains an expected fragment (messages are part of the
 * contract: they must name the file and say what was wrong).  Temporary
 * files live in one mkdtemp directory removed by check_done().
 */
#ifndef NNC_TEST_CHECK_H
#define NNC_TEST_CHECK_H

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_failed, check_total;
static char check_dir[256];

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline int check_report(int ok, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    check_total++;
    check_failed += !ok;
    printf("%s - ", ok ? "ok  " : "FAIL");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (!ok)
        printf(" (%s:%d)", file, line);
    printf("\n");
    fflush(stdout);
    return ok;
}

#define CHECK(cond, ...) check_report(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* rc must be -1 and err must contain want; prints err either way. */
#define CHECK_ERR(rc, err, want, what)                                                          \
    check_report((rc) == -1 && strstr((err), (want)) != NULL, __FILE__, __LINE__,              \
                 "%s: error \"%s\" (want \"%s\")", (what), (err), (want))

static inline _Noreturn void check_die(const char *what)
{
    printf("FAIL - setup: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* A fresh temporary directory for this test (under $TMPDIR or /tmp). */
static inline const char *check_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    if (check_dir[0])
        return check_dir;
    snprintf(check_dir, sizeof check_dir, "%s/nnc-unit-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(check_dir))
        check_die("mkdtemp");
    return check_dir;
}

/* tmpdir/name in a static ring of buffers (several may be live at once). */
static inline const char *check_path(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *p = bufs[next++ % 8];
    snprintf(p, sizeof bufs[0], "%s/%s", check_tmpdir(), name);
    return p;
}

static inline void check_write(const char *path, const void *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        check_die(path);
    if ((len && fwrite(buf, 1, len, fp) != len) || fclose(fp) != 0)
        check_die(path);
}

/* Reads a whole file into a malloc'd buffer. */
static inline unsigned char *check_read(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    unsigned char *buf;
    long n = 0;
    if (!fp || fseek(fp, 0, SEEK_END) != 0 || (n = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0)
        check_die(path);
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, fp) != (size_t)n || fclose(fp) != 0)
        check_die(path);
    *len = (size_t)n;
    return buf;
}

static inline int check_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0)
        printf("warning: cannot remove %s: %s\n", path, strerror(errno));
    return 0;
}

/* Prints the tally, removes the temporary directory, returns the exit code. */
static inline int check_done(void)
{
    if (check_dir[0] && nftw(check_dir, check_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        printf("warning: cannot clean %s\n", check_dir);
    printf("%d checks, %d failed\n", check_total, check_failed);
    return check_failed ? 1 : 0;
}

#endif /* NNC_TEST_CHECK_H */
