/*
 * bomb.h - gzip bombs for the loaders' unit tests, and a way to measure what one costs.
 *
 * bomb_write makes a .gz of a few hundred kilobytes that inflates to a given header followed
 * by `mib` MiB of one byte: gzip members may be concatenated (RFC 1952, and zlib's gzread
 * reads on through them), so one compressed member of 1 MiB is written once and repeated.
 * bomb_load runs a loader in a child process and reports the child's peak resident memory,
 * so a test can assert that refusing the bomb stayed far below what inflating it would take.
 */
#ifndef NNC_TEST_BOMB_H
#define NNC_TEST_BOMB_H

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <zlib.h>

#include "check.h"
#include "data.h"

/* buf[0..len) as one complete gzip member appended to fp. */
static inline void bomb_member(FILE *fp, const void *buf, size_t len)
{
    static unsigned char out[1 << 16];
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        check_die("deflateInit2");
    z.next_in = (Bytef *)(uintptr_t)buf;
    z.avail_in = (uInt)len;
    for (;;) {
        int rc;
        z.next_out = out;
        z.avail_out = sizeof out;
        rc = deflate(&z, Z_FINISH);
        if (fwrite(out, 1, sizeof out - z.avail_out, fp) != sizeof out - z.avail_out)
            check_die("bomb write");
        if (rc == Z_STREAM_END)
            break;
        if (rc != Z_OK)
            check_die("deflate");
    }
    deflateEnd(&z);
}

/* path: head[0..hlen) then `mib` MiB of the byte `fill`, gzip'd. */
static inline void bomb_write(const char *path, const void *head, size_t hlen, int fill, int mib)
{
    static unsigned char mb[1 << 20];
    FILE *fp = fopen(path, "wb");
    long pos, end;
    int i;
    if (!fp)
        check_die(path);
    memset(mb, fill, sizeof mb);
    bomb_member(fp, head, hlen);
    pos = ftell(fp);
    bomb_member(fp, mb, sizeof mb);
    end = ftell(fp);
    if (pos < 0 || end < 0 || fclose(fp) != 0)
        check_die(path);
    {   /* repeat the 1 MiB member by copying its bytes */
        size_t n = (size_t)(end - pos), got;
        unsigned char *m = malloc(n);
        fp = fopen(path, "r+b");
        if (!m || !fp || fseek(fp, pos, SEEK_SET) != 0 || (got = fread(m, 1, n, fp)) != n ||
            fseek(fp, 0, SEEK_END) != 0)
            check_die(path);
        for (i = 1; i < mib; i++)
            if (fwrite(m, 1, n, fp) != n)
                check_die(path);
        free(m);
        if (fclose(fp) != 0)
            check_die(path);
    }
}

typedef int (*bomb_loader)(const char *path, nnc_array *out, char *err, size_t errlen);

/* Runs load(path) in a child process: its return code, its message (into err) and its peak
 * resident memory in MiB (into *peak_mib), which the child measures itself. */
static inline int bomb_load(bomb_loader load, const char *path, char *err, size_t errlen,
                            long *peak_mib)
{
    int fds[2], status;
    char msg[1024] = "";
    ssize_t got;
    pid_t pid;
    fflush(stdout);
    if (pipe(fds) != 0 || (pid = fork()) < 0)
        check_die("fork");
    if (pid == 0) {
        nnc_array a;
        struct rusage ru;
        int rc = load(path, &a, err, errlen);
        if (rc == 0)
            snprintf(err, errlen, "loaded");
        getrusage(RUSAGE_SELF, &ru);
        snprintf(msg, sizeof msg, "%ld %s", ru.ru_maxrss / 1024, err);
        if (write(fds[1], msg, strlen(msg)) < 0)
            _exit(3);
        _exit(rc == 0 ? 0 : 1);
    }
    close(fds[1]);
    got = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    if (got < 0 || waitpid(pid, &status, 0) != pid)
        check_die("waitpid");
    msg[got] = '\0';
    *peak_mib = strtol(msg, NULL, 10);
    snprintf(err, errlen, "%s", strchr(msg, ' ') ? strchr(msg, ' ') + 1 : msg);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

#endif /* NNC_TEST_BOMB_H */
