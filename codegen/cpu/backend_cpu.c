/* backend_cpu.c - the CPU backend: generated C, compiled by the system compiler, loaded with
 * dlopen, and cached by content (io/cache.c).
 *
 * The cache key hashes the generated source, every word of the compiler command and of
 * NNC_CFLAGS, and the identity (path, size, mtime) of every word that names a program, so a
 * second run of the same model skips the compiler entirely.  The compiler only ever writes
 * into a private mkdtemp directory; the result is then published into the cache with its
 * checksum (cache_put), and a cached object is loaded only after its checksum matched, through
 * the descriptor the checksum was read from (load_entry), never again by its path.
 *
 * Model objects are opened with RTLD_NODELETE: the generated code uses OpenMP, and the model
 * object is often the only one that loaded libgomp; unmapping libgomp at dlclose while its
 * worker threads still spin crashed successful runs at exit.  Keeping the object (and so
 * libgomp) mapped until the process ends costs one small mapping per model compiled, and one
 * file descriptor (load_entry).
 * The ahead-of-time path (aot.c) writes the same source. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../io/cache.h"
#include "../codegen.h"
#include "cpu.h"

extern char **environ;

void render_program(const Program *p, const BuildOpts *o, Str *s);

static void cpu_render(const Program *p, const BuildOpts *o, Str *out) { render_program(p, o, out); }

/* Finds an executable on PATH (heap path, or NULL), for the compiler's identity in the key. */
static char *which(const char *cmd) {
    Str s = {0};
    if (strchr(cmd, '/')) {
        str_puts(&s, cmd);
        if (access(s.buf, X_OK) == 0) return s.buf;
        str_free(&s);
        return NULL;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    while (*path) {
        const char *e = strchr(path, ':');
        size_t len = e ? (size_t)(e - path) : strlen(path);
        str_free(&s);
        str_printf(&s, "%.*s/%s", (int)len, path, cmd);
        if (access(s.buf, X_OK) == 0) return s.buf;
        path += len + (e ? 1 : 0);
    }
    str_free(&s);
    return NULL;
}

/* Shell-like word splitting: blanks separate words; '...' keeps everything literally, "..."
 * keeps blanks, and a backslash outside single quotes takes the next character literally.
 * No expansions ($VAR, globs, ~).  A NULL-terminated heap vector, any number of words. */
char **cpu_split_words(const char *s, int *count) {
    char **w = xcalloc(strlen(s) / 2 + 2, sizeof *w);   /* at most one word per two chars, +1 */
    int n = 0;
    for (const char *p = s; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        Str word = {0};
        str_puts(&word, "");
        for (char q = 0; *p && (q || (*p != ' ' && *p != '\t' && *p != '\n')); p++) {
            if (q == '\'' ? *p == '\'' : q == '"' ? *p == '"' : (*p == '\'' || *p == '"')) q = q ? 0 : *p;
            else if (*p == '\\' && q != '\'' && p[1]) str_putc(&word, *++p);
            else str_putc(&word, *p);
        }
        w[n++] = word.buf;
    }
    if (count) *count = n;
    return w;
}

void cpu_words_free(char **w) {
    for (char **p = w; p && *p; p++) free(*p);
    free(w);
}

const char *cpu_cc(const BuildOpts *o) {
    if (o->cc && *o->cc) return o->cc;
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
}

/* Starts argv, sending its output to `log`; its pid, or -1. */
pid_t cpu_spawn_tool(char *const *argv, const char *log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (log) {
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc != 0 ? -1 : pid;
}

int cpu_wait_tool(pid_t pid) {
    int st;
    if (pid < 0) return -1;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int cpu_run_tool(char *const *argv, const char *log) { return cpu_wait_tool(cpu_spawn_tool(argv, log)); }

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

static void argv_push(char ***argv, int *n, int *cap, const char *word) {
    if (*n + 1 >= *cap) {
        *cap = *cap ? 2 * *cap : 32;
        *argv = xrealloc(*argv, (size_t)*cap * sizeof **argv);
    }
    (*argv)[(*n)++] = (char *)word;
    (*argv)[*n] = NULL;
}

/* The fixed flags, the optimisation level first; part of the cache key. */
/* Whether the in-process build compiles the generated C with -DNNC_DNNL_SGEMM (f32 products by
 * oneDNN where the program has one it takes: helpers.c, dnnl_sgemm_text): where nnc has oneDNN,
 * unless NNC_NO_DNNL_SGEMM is set and not 0.  The link has oneDNN then. */
static bool dnnl_sgemm_on(void) {
#ifdef NNC_DNNL_LIB
    const char *off = getenv("NNC_NO_DNNL_SGEMM");
    return !off || !strcmp(off, "0");
#else
    return false;
#endif
}

/* -ffp-contract=off: the same rounding with gcc and clang.  -fno-math-errno: sqrt becomes one
 * instruction a loop can vectorise (with errno to set, gcc keeps a branch to libm's sqrtf in
 * every loop that takes a root, and vectorises none of them: AdamW's update ran scalar); the
 * generated code never reads errno, and the root is correctly rounded either way, so no result
 * changes. */
static const char *const cpu_flags[] = {"-O3",     "-march=native", "-fopenmp",          "-fPIC",
                                        "-shared", "-std=c11",      "-ffp-contract=off", "-fno-math-errno"};

/* Whether `cc --version` says GCC (its output goes through `log`).  GCC 12's identical-code
 * folding, together with its IPA side-effect summaries, miscompiles generated models that hold
 * two identical launch functions (an unfused x @ transpose(W) computed twice): at -O2 the
 * gradients came out wrong.  -fno-ipa-icf avoids it; clang has no such flag (and refuses it).
 * The compiler's identity is in the cache key, so the answer never changes under a key. */
static bool cc_is_gcc(char **cc, const char *log) {
    char **argv = NULL;
    int a = 0, cap = 0;
    for (char **w = cc; *w; w++) argv_push(&argv, &a, &cap, *w);
    argv_push(&argv, &a, &cap, "--version");
    int rc = cpu_run_tool(argv, log);
    free(argv);
    char *text = rc == 0 ? read_file(log, NULL) : NULL;
    bool gcc = text && strstr(text, "Free Software Foundation") && !strstr(text, "clang");
    free(text);
    return gcc;
}

/* Starts cc [CC words] FLAGS [NNC_CFLAGS words] -o so src BLAS -lm, with the log in `log`;
 * `opt` replaces FLAGS' -O3 (the quick first build of a tiered start), and a quick build trains on
 * one thread (NNC_POOL_QUICK_BUILD, include/nnc_pool.h), leaving the other cores to the -O3
 * compiler: the thread count never changes a result, so both builds still compute alike.  Its
 * pid, or -1. */
static pid_t compile_start(char **cc, char **extra, const char *opt, const char *src, const char *so, const char *log) {
    char **argv = NULL;
    int a = 0, cap = 0;
    bool gcc = cc_is_gcc(cc, log);
    for (char **w = cc; *w; w++) argv_push(&argv, &a, &cap, *w);
    argv_push(&argv, &a, &cap, opt);
    for (size_t i = 1; i < sizeof cpu_flags / sizeof *cpu_flags; i++) argv_push(&argv, &a, &cap, cpu_flags[i]);
    if (gcc) argv_push(&argv, &a, &cap, "-fno-ipa-icf");
    if (strcmp(opt, "-O3")) argv_push(&argv, &a, &cap, "-DNNC_POOL_QUICK_BUILD");
    if (dnnl_sgemm_on()) argv_push(&argv, &a, &cap, "-DNNC_DNNL_SGEMM");
    for (char **w = extra; *w; w++) argv_push(&argv, &a, &cap, *w);
#ifdef NNC_DNNL_LIB   /* linked only when the model calls it (its convolutions) */
    const char *tail[] = {"-o", so, src, NNC_BLAS_LIB, "-Wl,--as-needed", NNC_DNNL_LIB, "-Wl,--no-as-needed", "-lm"};
#else
    const char *tail[] = {"-o", so, src, NNC_BLAS_LIB, "-lm"};
#endif
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++) argv_push(&argv, &a, &cap, tail[i]);
    pid_t pid = cpu_spawn_tool(argv, log);
    free(argv);
    return pid;
}

/* The compiler's exit status `rc` (cpu_wait_tool) as a result: false with err saying why. */
static bool compile_result(int rc, const char *cc0, const char *log, char *err, size_t n) {
    if (rc < 0) snprintf(err, n, "cannot run the C compiler '%s' (set CC to one that exists)", cc0);
    else if (rc > 0) {
        snprintf(err, n, "the C compiler failed on the generated code, exit %d; its log:", rc);
        tail_log(log, err, n);
    }
    return rc == 0;
}

static bool compile_so(char **cc, char **extra, const char *opt, const char *src, const char *so, const char *log,
                       char *err, size_t n) {
    return compile_result(cpu_wait_tool(compile_start(cc, extra, opt, src, so, log)), cc[0], log, err, n);
}

static uint64_t hash_words(char **w, uint64_t h) {
    for (; *w; w++) h = hash_fnv1a(*w, strlen(*w) + 1, h);   /* with the NUL: "a b" != "ab" */
    return hash_fnv1a("|", 1, h);
}

static uint64_t cache_key(const char *src, char **cc, char **extra) {
    uint64_t h = hash_fnv1a(src, strlen(src), HASH_FNV_INIT);
    h = hash_words(cc, h);
    for (char **w = cc; *w; w++) {   /* "ccache gcc": the identity of both programs */
        char *path = which(*w);
        struct stat st;
        if (path && stat(path, &st) == 0) {
            h = hash_fnv1a(path, strlen(path), h);
            h = hash_fnv1a(&st.st_size, sizeof st.st_size, h);
            h = hash_fnv1a(&st.st_mtime, sizeof st.st_mtime, h);
        }
        free(path);
    }
    h = hash_words(extra, h);
    for (size_t i = 0; i < sizeof cpu_flags / sizeof *cpu_flags; i++) h = hash_fnv1a(cpu_flags[i], strlen(cpu_flags[i]) + 1, h);
#ifdef NNC_DNNL_LIB /* with NNC_NO_DNNL_SGEMM another build: the products by the CBLAS alone */
    const char *version =
        dnnl_sgemm_on() ? NNC_BLAS_LIB " " NNC_DNNL_LIB " v4" : NNC_BLAS_LIB " " NNC_DNNL_LIB " v4 cblas";
#else
    const char *version = NNC_BLAS_LIB " v3";
#endif
    return hash_fnv1a(version, strlen(version) + 1, h);
}

/* Compiles src in the private directory b into b/name; publishes a copy into `cache` unless
 * that is the private directory itself.  Failing to publish is a warning: the run goes on. */
static bool compile_in(const Cache *b, const Cache *cache, const char *name, const char *src, char **cc, char **extra,
                       const char *opt, char *err, size_t n) {
    char *cpath = cache_path(b, "model.c"), *log = cache_path(b, "build.log"), *so = cache_path(b, name);
    bool ok = cpu_write_file(cpath, src, err, n) && compile_so(cc, extra, opt, cpath, so, log, err, n);
    void *data = NULL;
    size_t len;
    if (ok && b != cache && cache_read(b, name, &data, &len) && !cache_put(cache, name, data, len, 0600))
        fprintf(stderr, "nnc: warning: %s: cannot write to the cache (%s); continuing without it\n", cache->dir,
                strerror(errno));
    free(data);
    free(cpath);
    free(log);
    free(so);
    return ok;
}

/* dlopen + the ABI check.  RTLD_NODELETE: see the top of this file. */
/* A model's products run on its own pool (include/nnc_pool.h), which keeps OpenBLAS on one
 * thread: OpenBLAS need not start a pool of its own when the model object loads it, so unless the
 * user chose a count it starts none.  OpenMP (oneDNN's convolutions, the kernels' large loops)
 * would spin between its regions by default, on the cores the pool's workers use right after a
 * product: so, unless the user chose a policy, its threads wait passively (measured on 2 cores
 * when OpenBLAS still had its pool: the 784-1024-1024-10 step 43 ms -> 18 ms).  libgomp and
 * OpenBLAS read the variables when the model object first loads them, just below. */
static void choose_thread_waits(void) {
    if (!getenv("OMP_WAIT_POLICY")) setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("GOTO_NUM_THREADS")) setenv("OPENBLAS_NUM_THREADS", "1", 0);
}

static bool open_model(LoadedModel *lm, const char *path, const char *label, const char *mn, char *err, size_t n) {
    choose_thread_waits();
    lm->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lm->handle) {
        snprintf(err, n, "cannot load %s: %s", label, dlerror());
        return false;
    }
    Str sym = {0};
    str_printf(&sym, "%s_abi", mn);
    const nnc_model_abi *(*get)(void);
    *(void **)&get = dlsym(lm->handle, sym.buf);
    bool ok = get && get()->abi_version == NNC_ABI_VERSION;
    if (ok) lm->abi = get();
    else snprintf(err, n, "%s: no %s of this version", label, sym.buf);
    str_free(&sym);
    if (!ok) {
        dlclose(lm->handle);
        lm->handle = NULL;
    }
    if (ok && strlen(label) < sizeof lm->so_path) snprintf(lm->so_path, sizeof lm->so_path, "%s", label);
    return ok;
}

/* Loads the object `name` of directory d, the cache (`verified`: its checksum) or a private
 * build directory, through the descriptor it was checked on: dlopen is given /proc/self/fd/N,
 * the open file itself, not d's path, which whoever controls a parent of d can make lead to a
 * directory of theirs between the check and the load (docs/security.md).  glibc returns the
 * object it loaded earlier under the same name without opening anything, so once dlopen has
 * seen /proc/self/fd/N, N stays open for good, as the object does (RTLD_NODELETE): one
 * descriptor per model loaded.  Without /proc, a private copy of the checked bytes is loaded. */
static bool load_entry(LoadedModel *lm, const Cache *d, const char *name, bool verified, const char *mn, char *err,
                       size_t n) {
    char *label = cache_path(d, name);
    int fd = verified ? cache_get_fd(d, name) : cache_open_entry(d, name);
    Cache copy = {.dirfd = -1};
    char *path = fd >= 0 ? cache_fd_path(fd, &copy, name) : NULL;
    bool ok = path && open_model(lm, path, label, mn, err, n);
    if (!path)
        snprintf(err, n, "cannot load %s: %s", label,
                 fd < 0 ? "missing, not yours or corrupted" : "no /proc, and no private copy");
    if (fd >= 0 && (!path || copy.dirfd >= 0)) close(fd);   /* dlopen never saw /proc/self/fd/N */
    cache_close(&copy);   /* a loaded copy stays mapped after its file is removed */
    free(path);
    free(label);
    return ok;
}

/* ---- tiered start ----------------------------------------------------------------------------
 * On a cache miss the C compiler at -O3 is most of the time to the first step (0.46 s of about
 * 0.5 for models/mlp.nn; at -O1 it takes 0.21 s).  A tiered start compiles at -O1 and trains on
 * that build, while a child of nnc compiles at -O3 beside it and publishes the object into the
 * cache; between steps the trainer asks (Backend.upgrade), and the -O3 build takes over with
 * the parameters, state and step so far.  Both builds come from one source with
 * -ffp-contract=off and no fast-math, so they compute alike, bit for bit: only the speed
 * changes.  load() returns with the -O1 compiler still running (lm->abi NULL): the trainer
 * reads its data meanwhile, then waits for it (upgrade with wait).  The child is forked
 * before either build, while nnc has a single thread.  It starts compiling only when the -O1
 * compiler has exited (the gate: nnc sends it that compiler's pid through a pipe, and it
 * waits on a pidfd; a compiler that left a daemon behind, as sccache's, is still seen to
 * exit), and reniced: on two cores the -O1 build and the decompression of the training data
 * each had a core to themselves only without it (the first step of models/mlp.nn with
 * nothing cached came ~0.1 s sooner).  No pid (the compiler did not start, nnc died) or no
 * pidfd (an older kernel, a sandbox) opens the gate at once.  At the end of the run nnc
 * waits for it, so the next run finds the -O3 object in the cache and starts on it directly. */
typedef struct {
    pid_t pid;        /* the child: compile at -O3, publish, exit 0 */
    char *cache_dir;  /* where it publishes */
    char *name;       /* the entry */
    char *mn;         /* the model's C name: its NAME_abi symbol */
    pid_t quick;      /* the -O1 compiler, until its object is loaded (then -1) */
    Cache priv;       /* the -O1 build's private directory (its object, log and source) */
    char *cc0;        /* the compiler's first word, for messages */
    int gate;         /* the gate's write end, until the -O1 compiler's pid is sent (then -1) */
} Tier;

/* In the -O3 child: until the -O1 compiler whose pid comes through the pipe has exited. */
static void tier_gate_wait(int fd) {
    pid_t quick;
    size_t got = 0;
    while (got < sizeof quick) {
        ssize_t r = read(fd, (char *)&quick + got, sizeof quick - got);
        if (r > 0) got += (size_t)r;
        else if (r == 0 || errno != EINTR) break;   /* end of file: no compiler to wait for */
    }
    if (got < sizeof quick || quick <= 0) return;
#ifdef SYS_pidfd_open   /* Linux 5.3: readable once the process has exited (a zombie counts) */
    int pfd = (int)syscall(SYS_pidfd_open, quick, 0);
    if (pfd < 0) return;
    struct pollfd p = {.fd = pfd, .events = POLLIN};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {}
    close(pfd);
#endif
}

static Tier *tier_start(const Cache *cache, const char *name, const char *src, char **cc, char **extra, const char *mn) {
    int gate[2];
    if (pipe(gate) != 0) return NULL;   /* nnc has one thread here: no spawn can race the flags */
    fcntl(gate[0], F_SETFD, FD_CLOEXEC);
    fcntl(gate[1], F_SETFD, FD_CLOEXEC);
    fflush(NULL);   /* nothing buffered twice */
    pid_t pid = fork();
    if (pid < 0) {
        close(gate[0]);
        close(gate[1]);
        return NULL;
    }
    if (pid == 0) {
        char err[2048];
        Cache priv = {.dirfd = -1};
        close(gate[1]);
        tier_gate_wait(gate[0]);
        close(gate[0]);
        if (nice(5) < 0) {}   /* a lower priority only; failing to get it changes nothing else */
        bool ok = cache_open(&priv, NULL, err, sizeof err) && compile_in(&priv, cache, name, src, cc, extra, "-O3", err, sizeof err);
        if (!ok) fprintf(stderr, "nnc: warning: the -O3 build failed, training goes on with the -O1 one: %s\n", err);
        cache_close(&priv);
        _exit(ok ? 0 : 1);
    }
    Tier *t = xcalloc(1, sizeof *t);
    *t = (Tier){pid, xstrdup(cache->dir), xstrdup(name), xstrdup(mn), -1, {.dirfd = -1}, xstrdup(cc[0]), gate[1]};
    close(gate[0]);
    return t;
}

/* Opens the gate: after the -O1 compiler's pid was sent, or at once when it did not start. */
static void tier_gate_close(Tier *t) {
    if (t->gate >= 0) close(t->gate);
    t->gate = -1;
}

/* Waits for both compilers (the -O3 child publishes whatever it has) and frees t. */
static void tier_end(Tier *t) {
    if (!t) return;
    tier_gate_close(t);
    cpu_wait_tool(t->quick);
    cpu_wait_tool(t->pid);
    if (t->priv.dir) cache_close(&t->priv);
    free(t->cache_dir);
    free(t->name);
    free(t->mn);
    free(t->cc0);
    free(t);
}

/* The -O1 compiler started in the private directory (the -O3 child already forked). */
static bool quick_start(Tier *t, const char *src, char **cc, char **extra, char *err, size_t n) {
    if (!cache_open(&t->priv, NULL, err, n)) return false;
    char *cpath = cache_path(&t->priv, "model.c"), *log = cache_path(&t->priv, "build.log"),
         *so = cache_path(&t->priv, t->name);
    bool ok = cpu_write_file(cpath, src, err, n);
    if (ok) t->quick = compile_start(cc, extra, "-O1", cpath, so, log);
    if (t->quick > 0 && write(t->gate, &t->quick, sizeof t->quick) != (ssize_t)sizeof t->quick) {}   /* short: no gate */
    tier_gate_close(t);
    free(cpath);
    free(log);
    free(so);
    return ok;
}

/* Waits for the -O1 compiler and loads its object into lm. */
static bool quick_finish(LoadedModel *lm, Tier *t, char *err, size_t n) {
    char *log = cache_path(&t->priv, "build.log");
    int rc = cpu_wait_tool(t->quick);
    t->quick = -1;
    bool ok = compile_result(rc, t->cc0, log, err, n) && load_entry(lm, &t->priv, t->name, false, t->mn, err, n);
    if (ok && !(lm->m = lm->abi->create(NULL))) {
        snprintf(err, n, "cannot allocate %zu bytes for the model", lm->abi->param_bytes + lm->abi->state_bytes + lm->abi->act_bytes);
        ok = false;
    }
    free(log);
    cache_close(&t->priv);   /* the loaded object stays mapped after its file is removed */
    return ok;
}

/* The new instance takes the old one's parameters, state, step and seed. */
static bool tier_carry(const LoadedModel *from, LoadedModel *to, uint64_t seed) {
    const nnc_model_abi *a = from->abi, *b = to->abi;
    if (a->nparams != b->nparams || a->nstates != b->nstates || a->param_bytes != b->param_bytes ||
        a->state_bytes != b->state_bytes || a->real_bytes != b->real_bytes)
        return false;
    b->init(to->m, seed);
    a->sync(from->m, NNC_SYNC_TO_HOST);
    for (int i = 0; i < a->nparams; i++) memcpy(b->param(to->m, i), a->param(from->m, i), nnc_tensor_bytes(&a->params[i]));
    for (int i = 0; i < a->nstates; i++) memcpy(b->state(to->m, i), a->state(from->m, i), nnc_tensor_bytes(&a->states[i]));
    b->set_step(to->m, a->get_step(from->m));
    b->sync(to->m, NNC_SYNC_TO_DEVICE);
    return true;
}

/* The published -O3 object, loaded, given lm's training so far, and swapped in. */
static bool tier_swap(LoadedModel *lm, const Tier *t, uint64_t seed) {
    char err[1024];
    Cache cache;
    LoadedModel nl = {0};
    if (!cache_open(&cache, t->cache_dir, err, sizeof err)) return false;
    bool ok = !cache.temporary && load_entry(&nl, &cache, t->name, true, t->mn, err, sizeof err) &&
              (nl.m = nl.abi->create(NULL)) != NULL && tier_carry(lm, &nl, seed);
    cache_close(&cache);
    if (!ok) {
        if (nl.m) nl.abi->destroy(nl.m);
        if (nl.handle) dlclose(nl.handle);
        return false;
    }
    lm->abi->destroy(lm->m);
    dlclose(lm->handle);
    nl.cache_hit = lm->cache_hit, nl.compile_seconds = lm->compile_seconds, nl.tier = lm->tier;
    *lm = nl;
    return true;
}

static bool cpu_upgrade(LoadedModel *lm, uint64_t seed, bool wait, char *err, size_t n) {
    Tier *t = lm->tier;
    if (!t) return false;
    if (!lm->abi) {   /* the -O1 build: the trainer cannot go on without it */
        bool ok = quick_finish(lm, t, err, n);
        if (!ok) {
            tier_end(t);
            lm->tier = NULL;
        }
        return ok;
    }
    int st = 0;
    pid_t r;
    while ((r = waitpid(t->pid, &st, wait ? 0 : WNOHANG)) < 0 && errno == EINTR) {}
    if (r == 0) return false;   /* still compiling */
    t->pid = -1;
    bool ok = r > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && tier_swap(lm, t, seed);
    tier_end(t);
    lm->tier = NULL;
    return ok;
}

/* A verified cache entry, else a fresh build (which also replaces a bad entry): tiered, the -O3
 * child forked and the -O1 compiler started (lm->abi stays NULL until upgrade); else the -O3
 * build, published. */
static bool find_or_build(LoadedModel *lm, Cache *cache, const char *name, const char *src, char **cc, char **extra,
                          const char *mn, bool tiered, char *err, size_t n) {
    if (!cache->temporary && (lm->cache_hit = load_entry(lm, cache, name, true, mn, err, n))) return true;
    if (tiered && !cache->temporary && (lm->tier = tier_start(cache, name, src, cc, extra, mn))) {
        if (quick_start(lm->tier, src, cc, extra, err, n)) return true;
        tier_end(lm->tier);
        lm->tier = NULL;
        return false;
    }
    Cache priv = {.dirfd = -1}, *b = cache;
    if (!cache->temporary) {
        if (!cache_open(&priv, NULL, err, n)) return false;
        b = &priv;
    }
    bool ok = compile_in(b, cache, name, src, cc, extra, "-O3", err, n) && load_entry(lm, b, name, false, mn, err, n);
    cache_close(&priv);   /* the loaded object stays mapped after its file is removed */
    return ok;
}

/* NNC_CFLAGS with its own -O level: it comes last and wins over both tiers, so they would be
 * the same build twice (the sanitizer tests' -O0). */
static bool sets_opt_level(char **words) {
    for (; *words; words++)
        if (!strncmp(*words, "-O", 2)) return true;
    return false;
}

static LoadedModel *cpu_load(const Program *p, const BuildOpts *o, char *err, size_t n) {
    Str src = {0};
    render_program(p, o, &src);
    const char *mn = model_c_name(p), *cflags = getenv("NNC_CFLAGS");
    char **cc = cpu_split_words(cpu_cc(o), NULL), **extra = cpu_split_words(cflags ? cflags : "", NULL);
    LoadedModel *lm = xcalloc(1, sizeof *lm);
    Cache cache;
    bool ok = cc[0] != NULL;
    if (!ok) snprintf(err, n, "CC names no compiler");
    ok = ok && cache_open(&cache, o->cache_dir, err, n);
    if (ok) {
        /* the hash first; the model name only as a label, cut so the name stays short */
        Str name = {0};
        str_printf(&name, "%016llx-%.64s.so", (unsigned long long)cache_key(src.buf, cc, extra), mn);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ok = find_or_build(lm, &cache, name.buf, src.buf, cc, extra, mn, o->tiered && !sets_opt_level(extra), err, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        lm->compile_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        str_free(&name);
        cache_close(&cache);
    }
    if (ok && lm->abi && !(lm->m = lm->abi->create(NULL))) {   /* else the -O1 build is on its way */
        snprintf(err, n, "cannot allocate %zu bytes for the model", lm->abi->param_bytes + lm->abi->state_bytes + lm->abi->act_bytes);
        ok = false;
    }
    cpu_words_free(cc);
    cpu_words_free(extra);
    str_free(&src);
    if (!ok) {
        if (lm->handle) dlclose(lm->handle);
        free(lm);
        return NULL;
    }
    return lm;
}

static void cpu_unload(LoadedModel *lm) {
    if (!lm) return;
    tier_end(lm->tier);   /* the -O3 build finishes publishing, for the next run */
    if (lm->abi && lm->m) lm->abi->destroy(lm->m);
    if (lm->handle) dlclose(lm->handle);
    free(lm);
}

/* NAME_launch and NAME_block, which a build with BuildOpts.launch_access exports. */
static bool cpu_launch_access(const LoadedModel *lm, LaunchAccess *out) {
    if (!lm->handle || !lm->abi) return false;
    Str sym = {0};
    str_printf(&sym, "%s_launch", lm->abi->name);
    *(void **)&out->run = dlsym(lm->handle, sym.buf);
    str_free(&sym);
    str_printf(&sym, "%s_block", lm->abi->name);
    *(void **)&out->block = dlsym(lm->handle, sym.buf);
    str_free(&sym);
    return out->run && out->block;
}

/* Reductions accumulate in double (kernel.c) but for the C dialect's scatter, which adds into
 * the output; products (BLAS, the small loops, oneDNN, convolutions) accumulate in `real`. */
static void cpu_numerics(const Program *p, const Launch *L, const BuildOpts *o, LaunchNumerics *out) {
    double u = o->f64 ? 0x1p-53 : 0x1p-24;
    out->sum_unit = L->kind == L_REDUCE && !c_reduce_sums_in_real(p->g, L) ? 0x1p-53 : u;
    out->input_unit = 0;
}

const Backend backend_cpu = {
    .name = "cpu",
    .render = cpu_render,
    .load = cpu_load,
    .unload = cpu_unload,
    .build_library = aot_write,
    .upgrade = cpu_upgrade,
    .launch_access = cpu_launch_access,
    .numerics = cpu_numerics,
    .run_timed = cpu_run_timed,
    .timed_how = "the monotonic clock around each launch; the step runs its launches one after another",
    .ceilings = cpu_ceilings,
};
