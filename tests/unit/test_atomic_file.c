/* test_atomic_file.c - io/atomic_file.c, the writer that the checkpoints (path names) and the
 * compile cache (relative to its open directory) share: a file replaced whole or not at all,
 * its permission bits (kept, or exact whatever the umask), links planted at either name, and a
 * write that fails half way (file size limit: a full disk) leaving the old file and no
 * temporary. */
#define _XOPEN_SOURCE 700

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "atomic_file.h"
#include "check.h"

/* name in dir holds exactly s. */
static int holds(const char *name, const char *s) {
    size_t len;
    unsigned char *buf = check_read(check_path(name), &len);
    int ok = len == strlen(s) && memcmp(buf, s, len) == 0;
    free(buf);
    return ok;
}

static mode_t mode_of(const char *name) {
    struct stat st;
    return lstat(check_path(name), &st) == 0 ? st.st_mode & 0777 : (mode_t)-1;
}

static int put(int dirfd, const char *name, const char *tmp, mode_t mode, const char *s, int flags) {
    AtomicFile f;
    if (atomic_file_open(&f, dirfd, name, tmp, mode) == 0) atomic_file_write(&f, s, strlen(s));
    return atomic_file_commit(&f, flags);
}

static void test_replace(int dirfd) {
    CHECK(put(dirfd, "a", "a.tmp", 0640, "first", 0) == 0 && holds("a", "first"),
          "a new file, relative to a directory");
    CHECK(put(dirfd, "a", "a.tmp", 0640, "second", 0) == 0 && holds("a", "second"), "replaced whole");
    CHECK(access(check_path("a.tmp"), F_OK) != 0, "the temporary is gone after the rename");
    CHECK(put(AT_FDCWD, check_path("b"), check_path("b.tmp"), ATOMIC_FILE_KEEP_MODE, "durable", ATOMIC_FILE_DURABLE) ==
                  0 &&
              holds("b", "durable"),
          "a path name, fsynced with its directory");
}

static void test_modes(int dirfd) {
    mode_t old = umask(077);
    CHECK(put(dirfd, "m", "m.tmp", 0644, "x", 0) == 0 && mode_of("m") == 0644, "an explicit mode whatever the umask");
    umask(027);
    CHECK(put(dirfd, "k", "k.tmp", ATOMIC_FILE_KEEP_MODE, "x", 0) == 0 && mode_of("k") == 0640,
          "a new file kept-mode: 0666 less the umask");
    if (chmod(check_path("k"), 0604) != 0) check_die("chmod");
    AtomicFile f;
    CHECK(atomic_file_open(&f, dirfd, "k", "k.tmp", ATOMIC_FILE_KEEP_MODE) == 0 && f.replaces, "it replaces a file");
    CHECK(atomic_file_commit(&f, 0) == 0 && mode_of("k") == 0604, "whose bits it keeps, umask or not (%o)",
          (unsigned)mode_of("k"));
    umask(old);
}

static void test_links(int dirfd) {
    check_write(check_path("victim"), "precious", 8);
    if (symlink(check_path("victim"), check_path("t.tmp")) != 0) check_die("symlink");
    AtomicFile f;
    CHECK(atomic_file_open(&f, dirfd, "t", "t.tmp", 0600) == EEXIST, "a link at the temporary's name is not opened");
    CHECK(atomic_file_commit(&f, 0) == EEXIST && access(check_path("t"), F_OK) != 0,
          "committing a failed open reports it and creates nothing");
    if (symlink(check_path("victim"), check_path("l")) != 0) check_die("symlink");
    CHECK(put(dirfd, "l", "l.tmp", 0600, "new", 0) == 0 && holds("victim", "precious"),
          "a link at the destination is replaced; what it led to is untouched");
    struct stat st;
    CHECK(lstat(check_path("l"), &st) == 0 && S_ISREG(st.st_mode) && holds("l", "new"), "... by a regular file");
}

/* In a child with a 4 KiB file size limit, a 64 KiB write fails as on a full disk. */
static void test_failed_write(int dirfd) {
    check_write(check_path("f"), "old", 3);
    pid_t pid = fork();
    if (pid == 0) {
        static char big[65536];
        struct rlimit rl = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
        AtomicFile f;
        if (atomic_file_open(&f, dirfd, "f", "f.tmp", ATOMIC_FILE_KEEP_MODE) != 0) _exit(4);
        atomic_file_write(&f, big, sizeof big);
        atomic_file_write(&f, "more", 4); /* after a failure: nothing */
        _exit(atomic_file_commit(&f, ATOMIC_FILE_DURABLE) == EFBIG && f.unlink_err == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a write that fails half way is reported by the commit (EFBIG)");
    CHECK(holds("f", "old") && access(check_path("f.tmp"), F_OK) != 0, "the old file stays, the temporary is removed");
}

int main(void) {
    int dirfd = open(check_tmpdir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) check_die("open the test directory");
    test_replace(dirfd);
    test_modes(dirfd);
    test_links(dirfd);
    test_failed_write(dirfd);
    close(dirfd);
    return check_done();
}
