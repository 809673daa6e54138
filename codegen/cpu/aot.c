/* aot.c - ahead-of-time output: DIR/NAME.c, DIR/NAME.h and DIR/libNAME.a.
 *
 * The .c is exactly what the in-process path compiles, runtime included (nnc_runtime.h is
 * embedded, with static functions, so two models link into one program); the header opens with
 * a usage example and declares the typed API, whose handle NAME_t is opaque.  The library is built
 * without OpenMP, so it needs only libc, pthreads (the products' pool, nnc_pool.h), libm and a
 * CBLAS (link with -lopenblas -lm -lpthread); build NAME.c yourself with -fopenmp for threaded
 * elementwise kernels. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../helpers.h"
#include "../kernel.h"
#include "cpu.h"

/* A metric that counts (accuracy) gives the count for the call's batch, where nnc's --eval
 * prints the fraction of the whole set: say so where a program reads it. */
static void header_counts(const Program *p, Str *h) {
    const Graph *g = p->g;
    for (int i = 0; i < g->nouts; i++) {
        const Node *n = &g->nodes[g->outs[i].node];
        while (n->op == OP_COPY) n = &g->nodes[n->in[0]];
        if (n->op != OP_ACCURACY) continue;
        str_printf(h,
                   " * _output(m, \"%s\") after _eval is a count: the rows of that batch whose largest logit is\n"
                   " * at the label (0 to n, as a float).  Divide by n for the fraction (nnc --eval prints the\n"
                   " * set's as a percentage).\n *\n",
                   g->outs[i].name);
    }
}

/* The usage example at the top of NAME.h, with the model's own inputs in the calls. */
static void header_usage(const Program *p, const BuildOpts *o, const char *rt, const char *call, Str *h) {
    const char *mn = model_c_name(p);
    str_printf(h, "/* %s.h - the %s model, compiled ahead of time by nnc.\n *\n *   #include \"%s.h\"\n", mn, mn, mn);
    render_template(h, " *   @_t *m = @_create();              // or @_create_in(mem, @_memory_bytes())\n"
                       " *   @_init(m, 42);                      // parameters from a seed, before any call\n", mn);
    str_printf(h, " *   if (%s_train_step(m, %sn) != 0)    // forward, backward, update\n", mn, call);
    render_template(h, " *       fprintf(stderr, \"%s\\n\", @_error_message(m));\n"
                       " *   printf(\"loss %f\\n\", @_loss(m));\n", mn);
    str_printf(h, " *   %s_eval(m, %sn);                  // forward only\n", mn, call);
    str_printf(h, " *   const %s *out = %s_output(m, \"loss\");   // an output of the last call, by name\n", rt, mn);
    str_printf(h, " *   %s *w = %s_param(m, \"NAME\", &numel);     // parameters by their .nn names\n", rt, mn);
    render_template(h, " *   @_free(m);\n *\n", mn);
    str_printf(h, " * Build: cc app.c lib%s.a%s -lopenblas -lm -lpthread.\n", mn,
               helper_uses_dnnl(p, o) ? " -ldnnl" : "");
    str_printf(h,
               " * n is the batch size, 1 to %d: the batch nnc compiled this library for (the train section's,\n"
               " * or --batch N with -o); a larger n returns 2, so split it or build again with a larger --batch.\n",
               p->g->batch_max);
    render_template(h, " * Inputs are row-major arrays with the shapes in @_abi()->inputs.\n *\n", mn);
    header_counts(p, h);
}

static const char header_contract_text[] =
    " * Outputs belong to the call that last succeeded: _loss() is its loss (NAN if it has none,\n"
    " * or if none succeeded), and _output() finds only its outputs -- train_step and grad give\n"
    " * \"loss\" (grad also \"grad.PARAM\"), eval gives \"loss\", the metrics and the outputs; any\n"
    " * other name is NULL.  The pointers stay valid until the next call.\n"
    " *\n"
    " * _init(m, seed) gives the parameters their initial values (torch.nn's initializers, from\n"
    " * the seed): call it after _create, before any train_step, grad or eval, which otherwise\n"
    " * return 5.  To use parameters of your own, call _init, then write them through _param.\n"
    " *\n"
    " * Errors: the int functions return 0 on success, 1 a failed check in a kernel (a label out\n"
    " * of range), 2 a batch outside [1, max], 3 no such entry (or no learning rate to set), 4 a\n"
    " * NULL argument (the model, an input the call reads, a name), 5 no _init yet, 6 a value out\n"
    " * of range: a learning rate that is not a finite number >= 0, or a NaN or an infinity in a\n"
    " * train_step's float input (the step is not taken: the parameters stay as they were).\n"
    " * Pointer functions return NULL (_loss NAN).  The message is in _error_message(m), which\n"
    " * also takes NULL.  _create_in(mem, bytes) uses your memory: it returns NULL unless mem is\n"
    " * non-NULL, bytes >= _memory_bytes() and mem is aligned for the element type (64 bytes is\n"
    " * best); _free(m) leaves that memory to you.  _free(NULL) does nothing. */\n"
    "#ifndef NNC_MODEL_@_H\n#define NNC_MODEL_@_H\n#include <stddef.h>\n#include <stdint.h>\n\n";

/* The declarations; the definitions are the typed API at the end of NAME.c (render_c_model.c). */
static void header_api(const Program *p, const char *rt, const char *params, Str *h) {
    const char *mn = model_c_name(p);
    render_template(h, "\ntypedef struct @_model @_t;   /* opaque */\n"
                       "const nnc_model_abi *@_abi(void);\n"
                       "@_t *@_create(void);\n@_t *@_create_in(void *mem, size_t bytes);\nvoid @_free(@_t *m);\n"
                       "size_t @_memory_bytes(void);\nint @_init(@_t *m, uint64_t seed);\n", mn);
    for (int k = 0; k < ENTRY_COUNT; k++)
        if (k != ENTRY_ACCUM || p->entry[k].nlaunch || p->entry[k].noutputs)
            str_printf(h, "int %s_%s(%s_t *m, %sint64_t n);\n", mn, p->entry[k].name, mn, params);
    render_template(h, "float @_loss(@_t *m);\n", mn);
    str_printf(h, "const %s *%s_output(%s_t *m, const char *name);\n", rt, mn, mn);
    str_printf(h, "%s *%s_param(%s_t *m, const char *name, int64_t *numel);\n", rt, mn, mn);
    render_template(h, "int @_set_lr(@_t *m, double lr);   /* models with an lr_schedule: the rate from now on */\n"
                       "const char *@_error_message(@_t *m);\n#endif\n", mn);
}

static void header(const Program *p, const BuildOpts *o, Str *h) {
    const char *rt = o->f64 ? "double" : "float";
    Str params = {0}, call = {0};
    str_puts(&params, "");
    str_puts(&call, "");
    for (int i = 0; i < p->g->n; i++) {
        const Node *n = &p->g->nodes[i];
        if (n->op != OP_INPUT) continue;
        /* in_NAME, as in the generated definition: never a keyword, m, n or in */
        str_printf(&params, "const %s *in_%s, ", n->dtype == DT_I32 ? "int32_t" : rt, n->name);
        str_printf(&call, "in_%s, ", n->name);
    }
    header_usage(p, o, rt, call.buf, h);
    render_template(h, header_contract_text, model_c_name(p));
    str_puts(h, nnc_embed_abi_h);
    header_api(p, rt, params.buf, h);
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
    /* the in-process build's flags but -march=native (backend_cpu.c, cpu_flags) */
    static const char *const flags[] = {"-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-c", "-o"};
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
