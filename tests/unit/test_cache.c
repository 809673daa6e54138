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

/* Which files are nnc's entries (cache_admin.c): what --cache-clear may remove. */
static void test_entry_kinds(void) {
    static const struct {
        const char *name, *base;
        CacheKind kind;
    } cases[] = {
        {"0123456789abcdef-mlp.so", "0123456789abcdef-mlp.so", CACHE_CPU},
        {"0123456789abcdef-mlp.so.sum", "0123456789abcdef-mlp.so", CACHE_CPU},
        {"0123456789abcdef-m_timer_2.cubin", "0123456789abcdef-m_timer_2.cubin", CACHE_CUBIN},
        {"0123456789abcdef-mlp.cubin.cu.sum", "0123456789abcdef-mlp.cubin", CACHE_CUBIN},
        {"0123456789abcdef-fedcba9876543210-data.idx", "0123456789abcdef-fedcba9876543210-data.idx", CACHE_DATA},
        {"0123456789abcdef-data.idx.sum", "0123456789abcdef-data.idx", CACHE_DATA}, /* before SOURCE- */
        {"0123456789abcdeg-mlp.so", "", CACHE_NOT_OURS}, /* not a hash */
        {"0123456789ABCDEF-mlp.so", "", CACHE_NOT_OURS}, /* nnc writes lower-case hex */
        {"0123456789abcdef-.so", "", CACHE_NOT_OURS}, /* no model name */
        {"0123456789abcdef-my model.so", "", CACHE_NOT_OURS}, /* not a C name */
        {"0123456789abcdef-mlp.so.bak", "", CACHE_NOT_OURS},
        {"0123456789abcdef-mlp.so.cu", "", CACHE_NOT_OURS}, /* only a cubin has a source */
        {"notes.txt", "", CACHE_NOT_OURS},
        {".sum", "", CACHE_NOT_OURS},
        {"", "", CACHE_NOT_OURS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char base[NAME_MAX + 1];
        CacheKind k = cache_entry_kind(cases[i].name, base);
        CHECK(k == cases[i].kind && (k == CACHE_NOT_OURS || !strcmp(base, cases[i].base)), "'%s': kind %d, base '%s'",
              cases[i].name, (int)k, k == CACHE_NOT_OURS ? "" : base);
    }
    char name[128]; /* the model name is at most 64 characters (the .so name's %.64s) */
    snprintf(name, sizeof name, "0123456789abcdef-%064d.so", 0);
    CHECK(cache_entry_kind(name, (char[NAME_MAX + 1]){0}) == CACHE_CPU, "a 64-character model name");
    snprintf(name, sizeof name, "0123456789abcdef-%065d.so", 0);
    CHECK(cache_entry_kind(name, (char[NAME_MAX + 1]){0}) == CACHE_NOT_OURS, "a 65-character model name");
}

int main(void) {
    setenv("TMPDIR", check_tmpdir(), 1);   /* private fallbacks land here, and are checked gone */
    test_default_dir();
    test_refused();
    test_entries();
    test_load_fd();
    test_words();
    test_entry_kinds();
    return check_done();
}
