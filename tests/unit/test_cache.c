/* test_cache.c - codegen/cache.c and the compiler-command word splitting, checked directly:
 * which directory is chosen (also with HOME unset), which are refused, what a planted symlink,
 * a truncated or a corrupted entry does, and that the private directory goes away. */
#define _XOPEN_SOURCE 700   /* nftw, in check.h */
#include <pwd.h>
#include <sys/stat.h>

#include "../../io/cache.h"
#include "../../codegen/cpu/cpu.h"
#include "check.h"

static void test_default_dir(void) {
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    setenv("HOME", "/home/u", 1);
    char *d = cache_default_dir();
    CHECK(d && !strcmp(d, "/x/cache/nnc"), "XDG_CACHE_HOME first: %s", d ? d : "(null)");
    free(d);
    unsetenv("XDG_CACHE_HOME");
    d = cache_default_dir();
    CHECK(d && !strcmp(d, "/home/u/.cache/nnc"), "then HOME: %s", d ? d : "(null)");
    free(d);
    unsetenv("HOME");
    d = cache_default_dir();
    const struct passwd *pw = getpwuid(geteuid());
    char want[512];
    snprintf(want, sizeof want, "%s/.cache/nnc", pw ? pw->pw_dir : "?");
    CHECK(pw ? d && !strcmp(d, want) : d == NULL, "HOME unset: the password database's home: %s",
          d ? d : "(null)");
    CHECK(!d || strncmp(d, "/tmp/", 5), "HOME unset: never a shared /tmp directory");
    free(d);
}

static void test_refused(void) {
    char err[256];
    Cache c;
    const char *dir = check_path("open");
    mkdir(dir, 0777);
    chmod(dir, 0777);
    CHECK(cache_open(&c, dir, err, sizeof err) && c.temporary, "a world-writable directory is refused");
    char priv[512];
    snprintf(priv, sizeof priv, "%s", c.dir);
    struct stat st;
    CHECK(stat(priv, &st) == 0 && (st.st_mode & 0777) == 0700, "the fallback is a private 0700 directory");
    cache_close(&c);
    CHECK(stat(priv, &st) != 0, "cache_close removes the private directory");
    chmod(dir, 0750);
    CHECK(cache_open(&c, dir, err, sizeof err) && !c.temporary, "mode 0750 (group may read) is accepted");
    cache_close(&c);
    const char *fresh = check_path("a/b/nnc");
    CHECK(cache_open(&c, fresh, err, sizeof err) && !c.temporary, "a missing directory is created");
    CHECK(stat(fresh, &st) == 0 && (st.st_mode & 0777) == 0700, "... with mode 0700");
    cache_close(&c);
}

static void test_entries(void) {
    char err[256];
    Cache c;
    char dir[512];   /* check_path's buffers are reused */
    snprintf(dir, sizeof dir, "%s", check_path("entries"));
    if (!cache_open(&c, dir, err, sizeof err) || c.temporary) check_die("cache_open");
    void *data;
    size_t len;
    CHECK(cache_put(&c, "k-x.so", "hello world", 11, 0600), "put");
    CHECK(cache_get(&c, "k-x.so", &data, &len) && len == 11 && !memcmp(data, "hello world", 11), "get what was put");
    free(data);
    check_write(check_path("entries/k-x.so"), "hello", 5);
    CHECK(!cache_get(&c, "k-x.so", &data, &len) && !data, "a truncated entry is rejected");
    check_write(check_path("entries/k-x.so"), "hellO world", 11);
    CHECK(!cache_get(&c, "k-x.so", &data, &len), "a corrupted entry of the same size is rejected");
    /* a symlink to a valid entry is not followed */
    CHECK(cache_put(&c, "k-y.so", "hello world", 11, 0600), "put another");
    unlink(check_path("entries/k-x.so"));
    rename(check_path("entries/k-x.so.sum"), check_path("entries/k-x.so.sum.keep"));
    if (symlink(check_path("entries/k-y.so"), check_path("entries/k-x.so")) != 0) check_die("symlink");
    rename(check_path("entries/k-y.so.sum"), check_path("entries/k-x.so.sum"));
    CHECK(!cache_get(&c, "k-x.so", &data, &len), "a symlinked entry is not read");
    /* writing over a planted symlink replaces the link; the victim is untouched */
    check_write(check_path("victim"), "precious", 8);
    unlink(check_path("entries/k-z.so"));
    if (symlink(check_path("victim"), check_path("entries/k-z.so")) != 0) check_die("symlink");
    umask(0);
    CHECK(cache_put(&c, "k-z.so", "new", 3, 0600), "put over a symlink");
    umask(022);
    size_t vlen;
    unsigned char *v = check_read(check_path("victim"), &vlen);
    CHECK(vlen == 8 && !memcmp(v, "precious", 8), "the symlink's target is untouched");
    free(v);
    struct stat st;
    CHECK(lstat(check_path("entries/k-z.so"), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
          "the entry is a regular file, mode 0600 under umask 0");
    cache_close(&c);
    /* a dead writer's temporary file is removed at the next open; a live one's is kept */
    char live[64];
    snprintf(live, sizeof live, "entries/.tmp-%ld-0-k.so", (long)getpid());
    check_write(check_path("entries/.tmp-999999999-0-k.so"), "x", 1);
    check_write(check_path(live), "x", 1);
    if (!cache_open(&c, dir, err, sizeof err)) check_die("cache_open");
    CHECK(lstat(check_path("entries/.tmp-999999999-0-k.so"), &st) != 0, "a dead writer's temporary file is removed");
    CHECK(lstat(check_path(live), &st) == 0, "a live writer's temporary file is kept");
    cache_close(&c);
}

/* What is loaded is the file that was checked: the descriptor cache_get_fd hands out, and the
 * path cache_fd_path makes of it, keep giving the checked bytes after the cache directory's
 * name was given to another directory, and entries others could write are refused. */
static void test_load_fd(void) {
    char err[256], dir[512], aside[512];
    Cache c, priv = {.dirfd = -1};
    snprintf(dir, sizeof dir, "%s", check_path("load"));
    snprintf(aside, sizeof aside, "%s", check_path("load.aside"));
    if (!cache_open(&c, dir, err, sizeof err) || c.temporary) check_die("cache_open");
    CHECK(cache_put(&c, "k-a.so", "hello world", 11, 0600), "put");
    int fd = cache_get_fd(&c, "k-a.so");
    char *path = fd >= 0 ? cache_fd_path(fd, &priv, "k-a.so") : NULL;
    CHECK(path && !strncmp(path, "/proc/self/fd/", 14) && priv.dirfd < 0, "loaded through /proc/self/fd: %s",
          path ? path : "(null)");
    if (rename(dir, aside) != 0 || mkdir(dir, 0700) != 0) check_die("swap the directory");
    check_write(check_path("load/k-a.so"), "evil world", 10);
    size_t len = 0;
    unsigned char *got = path ? check_read(path, &len) : NULL;
    CHECK(got && len == 11 && !memcmp(got, "hello world", 11), "the checked file, not what is at its path now");
    free(got);
    free(path);
    if (fd >= 0) close(fd);
    cache_close(&c);
    if (!cache_open(&c, aside, err, sizeof err) || c.temporary) check_die("cache_open");
    check_write(check_path("load.aside/k-a.so"), "hellO world", 11);
    CHECK(cache_get_fd(&c, "k-a.so") < 0, "a corrupted entry is not handed out");
    CHECK(cache_put(&c, "k-b.so", "hello world", 11, 0620), "put, group-writable");
    void *data;
    CHECK(cache_get_fd(&c, "k-b.so") < 0 && !cache_get(&c, "k-b.so", &data, &len),
          "an entry others can write is refused");
    int raw = cache_open_entry(&c, "k-b.so");
    CHECK(raw >= 0, "... but may be opened as a private build's output");
    if (raw >= 0) close(raw);
    cache_close(&c);
}

static void test_words(void) {
    int n;
    char **w = cpu_split_words("ccache  gcc", &n);
    CHECK(n == 2 && !strcmp(w[0], "ccache") && !strcmp(w[1], "gcc") && !w[2], "CC=\"ccache gcc\": two words");
    cpu_words_free(w);
    w = cpu_split_words(" -DA='1 + 2' \"-DB=x y\" -DC=a\\ b '' ", &n);
    CHECK(n == 4 && !strcmp(w[0], "-DA=1 + 2") && !strcmp(w[1], "-DB=x y") && !strcmp(w[2], "-DC=a b") && !strcmp(w[3], ""),
          "quotes and backslash: [%s] [%s] [%s]", n > 0 ? w[0] : "", n > 1 ? w[1] : "", n > 2 ? w[2] : "");
    cpu_words_free(w);
    char many[4000] = "";
    for (int i = 0; i < 100; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "-DW%d ", i);
    w = cpu_split_words(many, &n);
    CHECK(n == 100 && !strcmp(w[99], "-DW99"), "100 words, none dropped (%d)", n);
    cpu_words_free(w);
    w = cpu_split_words("   ", &n);
    CHECK(n == 0 && !w[0], "blanks only: no words");
    cpu_words_free(w);
}

int main(void) {
    setenv("TMPDIR", check_tmpdir(), 1);   /* private fallbacks land here, and are checked gone */
    test_default_dir();
    test_refused();
    test_entries();
    test_load_fd();
    test_words();
    return check_done();
}
