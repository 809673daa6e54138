/* backend_cpu.c - the CPU backend: generated C, compiled by the system compiler, loaded with
 * dlopen, and cached by content.
 *
 * The cache key hashes the generated source, the compiler command, its flags and the
 * compiler binary's identity (path, size, mtime), so a second run of the same model skips the
 * compiler entirely; entries are written to a temporary name and renamed, so concurrent runs
 * never load a half-written library.  The ahead-of-time path (aot.c) writes the same source. */
#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../codegen.h"
#include "cpu.h"

extern char **environ;

void render_program(const Program *p, const BuildOpts *o, Str *s);

static void cpu_render(const Program *p, const BuildOpts *o, Str *out) { render_program(p, o, out); }

/* Finds an executable on PATH, for the compiler's identity in the cache key. */
static bool which(const char *cmd, char *out, size_t n) {
    if (strchr(cmd, '/')) {
        snprintf(out, n, "%s", cmd);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    while (*path) {
        const char *e = strchr(path, ':');
        size_t len = e ? (size_t)(e - path) : strlen(path);
        snprintf(out, n, "%.*s/%s", (int)len, path, cmd);
        if (access(out, X_OK) == 0) return true;
        path += len + (e ? 1 : 0);
    }
    return false;
}

const char *cpu_cc(const BuildOpts *o) {
    if (o->cc && *o->cc) return o->cc;
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
}

/* Runs argv, sending its output to `log`; returns the exit status or -1. */
int cpu_run_tool(char *const *argv, const char *log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (log) {
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int mkdirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

bool cpu_write_file(const char *path, const char *text, char *err, size_t n) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, n, "%s: cannot write: %s", path, strerror(errno));
        return false;
    }
    size_t len = strlen(text);
    bool ok = fwrite(text, 1, len, f) == len;
    ok &= fclose(f) == 0;
    if (!ok) snprintf(err, n, "%s: write failed: %s", path, strerror(errno));
    return ok;
}

static void tail_log(const char *log, char *err, size_t n) {
    size_t k = strlen(err);
    char *text = read_file(log, NULL);
    if (text) {
        snprintf(err + k, n - k, "\n%.*s", (int)(n - k > 2 ? n - k - 2 : 0), text);
        free(text);
    }
}

static bool compile_so(const char *cc, const char *src, const char *so, char *err, size_t n) {
    char tmp[1100], log[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", so, (int)getpid());
    snprintf(log, sizeof log, "%s.log", so);
    const char *extra = getenv("NNC_CFLAGS");
    char *argv[48], *words = extra ? xmalloc(strlen(extra) + 1) : NULL;
    int a = 0;
    argv[a++] = (char *)cc;
    argv[a++] = "-O3";
    argv[a++] = "-march=native";
    argv[a++] = "-fopenmp";
    argv[a++] = "-fPIC";
    argv[a++] = "-shared";
    argv[a++] = "-std=c11";
    argv[a++] = "-ffp-contract=off";   /* same rounding with gcc and clang */
    if (words) {   /* NNC_CFLAGS: whitespace-separated extra flags */
        strcpy(words, extra);
        for (char *w = strtok(words, " \t"); w && a < 36; w = strtok(NULL, " \t")) argv[a++] = w;
    }
    argv[a++] = "-o";
    argv[a++] = tmp;
    argv[a++] = (char *)src;
    argv[a++] = NNC_BLAS_LIB;
    argv[a++] = "-lm";
    argv[a] = NULL;
    int rc = cpu_run_tool(argv, log);
    free(words);
    if (rc != 0) {
        if (rc < 0) snprintf(err, n, "cannot run the C compiler '%s' (set CC to one that exists)", cc);
        else snprintf(err, n, "the C compiler failed on the generated code (%s), exit %d; its log (%s):", src, rc, log);
        if (rc > 0) tail_log(log, err, n);
        unlink(tmp);
        return false;
    }
    unlink(log);
    if (rename(tmp, so) != 0) {
        snprintf(err, n, "%s: cannot rename: %s", so, strerror(errno));
        return false;
    }
    return true;
}

static uint64_t cache_key(const char *src, const char *cc) {
    uint64_t h = hash_fnv1a(src, strlen(src), HASH_FNV_INIT);
    char path[1024];
    struct stat st;
    h = hash_fnv1a(cc, strlen(cc), h);
    if (which(cc, path, sizeof path) && stat(path, &st) == 0) {
        h = hash_fnv1a(path, strlen(path), h);
        h = hash_fnv1a(&st.st_size, sizeof st.st_size, h);
        h = hash_fnv1a(&st.st_mtime, sizeof st.st_mtime, h);
    }
    const char *extra = getenv("NNC_CFLAGS");
    if (extra) h = hash_fnv1a(extra, strlen(extra), h);
    static const char flags[] = "O3 march=native fopenmp shared fp-contract=off " NNC_BLAS_LIB " v1";
    return hash_fnv1a(flags, sizeof flags, h);
}

static LoadedModel *cpu_load(const Program *p, const BuildOpts *o, char *err, size_t n) {
    Str src = {0};
    render_program(p, o, &src);
    const char *cc = cpu_cc(o);
    const char *mn = model_c_name(p);
    LoadedModel *lm = xcalloc(1, sizeof *lm);
    char dir[900], cpath[1100];
    snprintf(dir, sizeof dir, "%s", o->cache_dir ? o->cache_dir : "/tmp/nnc-nocache");
    if (mkdirs(dir) != 0) {
        snprintf(err, n, "%s: cannot create the kernel cache directory: %s", dir, strerror(errno));
        goto fail;
    }
    uint64_t key = cache_key(src.buf, cc);
    snprintf(lm->so_path, sizeof lm->so_path, "%s/%s-%016llx.so", dir, mn, (unsigned long long)key);
    snprintf(cpath, sizeof cpath, "%s/%s-%016llx.c", dir, mn, (unsigned long long)key);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (access(lm->so_path, R_OK) == 0 && o->cache_dir) lm->cache_hit = true;
    else if (!cpu_write_file(cpath, src.buf, err, n) || !compile_so(cc, cpath, lm->so_path, err, n))
        goto fail;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    lm->compile_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* RTLD_NODELETE: unload() must not unmap the module, or the libgomp it pulled in goes with
     * it while heap blocks libgomp allocated are still referenced only from its globals (LSan
     * reported every model with an OpenMP construct, e.g. cross_entropy, as leaking). */
    lm->handle = dlopen(lm->so_path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lm->handle) {
        snprintf(err, n, "cannot load %s: %s", lm->so_path, dlerror());
        goto fail;
    }
    char sym[300];
    snprintf(sym, sizeof sym, "%s_abi", mn);
    const nnc_model_abi *(*get)(void);
    *(void **)&get = dlsym(lm->handle, sym);
    if (!get || get()->abi_version != NNC_ABI_VERSION) {
        snprintf(err, n, "%s: no %s of this version (stale cache? delete %s)", lm->so_path, sym, dir);
        goto fail;
    }
    lm->abi = get();
    lm->m = lm->abi->create(NULL);
    if (!lm->m) {
        snprintf(err, n, "cannot allocate %zu bytes for the model", lm->abi->param_bytes + lm->abi->state_bytes + lm->abi->act_bytes);
        goto fail;
    }
    if (!o->cache_dir) unlink(lm->so_path);
    str_free(&src);
    return lm;
fail:
    if (lm->handle) dlclose(lm->handle);
    free(lm);
    str_free(&src);
    return NULL;
}

static void cpu_unload(LoadedModel *lm) {
    if (!lm) return;
    if (lm->abi && lm->m) lm->abi->destroy(lm->m);
    if (lm->handle) dlclose(lm->handle);
    free(lm);
}

const Backend backend_cpu = {"cpu", cpu_render, cpu_load, cpu_unload, NULL};
