/* aot.c - ahead-of-time output: DIR/NAME.c, DIR/NAME.h and DIR/libNAME.a.
 *
 * The .c is exactly what the in-process path compiles; the header opens with a usage example
 * and declares the typed API.  The library is built without OpenMP, so it needs only libc,
 * libm and a CBLAS (link with -lopenblas -lm); build NAME.c yourself with -fopenmp for
 * threaded elementwise kernels. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu.h"

static void header(const Program *p, const BuildOpts *o, Str *h) {
    const char *mn = model_c_name(p);
    const char *rt = o->f64 ? "double" : "float";
    Str params = {0}, call = {0};
    for (int i = 0; i < p->g->n; i++) {
        const Node *n = &p->g->nodes[i];
        if (n->op != OP_INPUT) continue;
        /* in_NAME, as in the generated definition: never a keyword, m, n or in */
        str_printf(&params, "const %s *in_%s, ", n->dtype == DT_I32 ? "int32_t" : rt, n->name);
        str_printf(&call, "in_%s, ", n->name);
    }
    str_printf(h,
        "/* %s.h - the %s model, compiled ahead of time by nnc.\n"
        " *\n"
        " *   #include \"%s.h\"\n"
        " *   %s_t *m = %s_create();              // or %s_create_in(mem) with %s_memory_bytes()\n"
        " *   %s_init(m, 42);                      // parameters from a seed, as nnc does\n"
        " *   if (%s_train_step(m, %sn) != 0)    // forward, backward, update\n"
        " *       fprintf(stderr, \"%%s\\n\", %s_error_message(m));\n"
        " *   printf(\"loss %%f\\n\", %s_loss(m));\n"
        " *   %s_eval(m, %sn);                  // forward only\n"
        " *   const %s *out = %s_output(m, \"loss\");   // an output of the last call, by name\n"
        " *   %s *w = %s_param(m, \"NAME\", &numel);     // parameters by their .nn names\n"
        " *   %s_free(m);\n"
        " *\n"
        " * Build: cc app.c lib%s.a -lopenblas -lm.  n is the batch size, at most %d.\n"
        " * Inputs are row-major arrays with the shapes in %s_abi()->inputs.\n"
        " *\n"
        " * Outputs belong to the call that last succeeded: _loss() is its loss (NAN if it has none,\n"
        " * or if none succeeded), and _output() finds only its outputs -- train_step and grad give\n"
        " * \"loss\" (grad also \"grad.PARAM\"), eval gives \"loss\", the metrics and the outputs; any\n"
        " * other name is NULL.  The pointers stay valid until the next call.\n"
        " *\n"
        " * Errors: the int functions return 0 on success, 1 a failed check in a kernel (a label out\n"
        " * of range), 2 a batch outside [1, max], 3 no such entry, 4 a NULL argument (the model, an\n"
        " * input the call reads, a name).  Pointer functions return NULL (_loss NAN).  The message\n"
        " * is in _error_message(m), which also takes NULL.  _create_in(mem) needs mem non-NULL and\n"
        " * aligned for the element type (64 bytes is best); _free(NULL) does nothing. */\n"
        "#ifndef %s_H\n#define %s_H\n#include <stddef.h>\n#include <stdint.h>\n\n",
        mn, mn, mn, mn, mn, mn, mn, mn, mn, call.buf ? call.buf : "", mn, mn, mn, call.buf ? call.buf : "",
        rt, mn, rt, mn, mn, mn, p->g->batch_max, mn, mn, mn);
    str_puts(h, nnc_embed_abi_h);
    str_printf(h,
        "\ntypedef struct %s %s_t;\n"
        "const nnc_model_abi *%s_abi(void);\n"
        "%s_t *%s_create(void);\n%s_t *%s_create_in(void *mem);\nvoid %s_free(%s_t *m);\n"
        "size_t %s_memory_bytes(void);\nint %s_init(%s_t *m, uint64_t seed);\n"
        "int %s_train_step(%s_t *m, %sint64_t n);\nint %s_grad(%s_t *m, %sint64_t n);\nint %s_eval(%s_t *m, %sint64_t n);\n"
        "float %s_loss(%s_t *m);\nconst %s *%s_output(%s_t *m, const char *name);\n"
        "%s *%s_param(%s_t *m, const char *name, int64_t *numel);\nconst char *%s_error_message(%s_t *m);\n"
        "#endif\n",
        mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, params.buf ? params.buf : "", mn, mn,
        params.buf ? params.buf : "", mn, mn, params.buf ? params.buf : "", mn, mn, rt, mn, mn, rt, mn, mn, mn, mn);
    str_free(&params);
    str_free(&call);
}

static char *join(const char *dir, const char *pre, const char *mn, const char *ext) {
    Str s = {0};
    str_printf(&s, "%s/%s%s%s", dir, pre, mn, ext);
    return s.buf;
}

/* cc [CC words] -O3 ... -c -o opath cpath: CC may be "ccache gcc", like the in-process path. */
static int compile_object(const BuildOpts *o, const char *opath, const char *cpath, const char *log) {
    char **cc = cpu_split_words(cpu_cc(o), NULL);
    static const char *const flags[] = {"-O3", "-std=c11", "-ffp-contract=off", "-fPIC", "-c", "-o"};
    int k = 0, nflags = (int)(sizeof flags / sizeof *flags);
    while (cc[k]) k++;
    char **argv = xcalloc((size_t)(k + nflags + 3), sizeof *argv);
    for (int i = 0; i < k; i++) argv[i] = cc[i];
    for (int i = 0; i < nflags; i++) argv[k + i] = (char *)flags[i];
    argv[k + nflags] = (char *)opath;
    argv[k + nflags + 1] = (char *)cpath;
    int rc = k ? cpu_run_tool(argv, log) : -1;
    free(argv);
    cpu_words_free(cc);
    return rc;
}

bool aot_write(const Program *p, const BuildOpts *o, const char *dir, char *err, size_t n) {
    const char *mn = model_c_name(p);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, n, "%s: cannot create: %s", dir, strerror(errno));
        return false;
    }
    /* whole paths, however long: a cut path would name another file */
    char *cpath = join(dir, "", mn, ".c"), *hpath = join(dir, "", mn, ".h"), *opath = join(dir, "", mn, ".o");
    char *apath = join(dir, "lib", mn, ".a"), *log = join(dir, "", "build", ".log");
    Str c = {0}, h = {0};
    render_program(p, o, &c);
    header(p, o, &h);
    bool ok = cpu_write_file(cpath, c.buf, err, n) && cpu_write_file(hpath, h.buf, err, n);
    str_free(&c);
    str_free(&h);
    int rc = ok ? compile_object(o, opath, cpath, log) : 0;
    if (ok && rc != 0) {
        snprintf(err, n, "compiling %s failed (exit %d); see %s", cpath, rc, log);
        ok = false;
    }
    if (ok) {
        unlink(apath);
        char *aargv[] = {"ar", "rcs", apath, opath, NULL};
        rc = cpu_run_tool(aargv, log);
        if (rc != 0) snprintf(err, n, "ar failed on %s (exit %d); see %s", apath, rc, log);
        ok = rc == 0;
    }
    if (ok) {
        unlink(opath);
        unlink(log);
    }
    free(cpath);
    free(hpath);
    free(opath);
    free(apath);
    free(log);
    return ok;
}
