/* aot.c - ahead-of-time output: DIR/NAME.c, DIR/NAME.h and DIR/libNAME.a.
 *
 * The .c is exactly what the in-process path compiles; the header opens with a usage example
 * and declares the typed API.  The library is built without OpenMP, so it needs only libc,
 * libm and a CBLAS (link with -lopenblas -lm); build NAME.c yourself with -fopenmp for
 * threaded elementwise kernels. */
#include <errno.h>
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
        " *   const %s *out = %s_output(m, \"loss\");   // any loss, metric or output by name\n"
        " *   %s *w = %s_param(m, \"NAME\", &numel);     // parameters by their .nn names\n"
        " *   %s_free(m);\n"
        " *\n"
        " * Build: cc app.c lib%s.a -lopenblas -lm.  n is the batch size, at most %d.\n"
        " * Inputs are row-major arrays with the shapes in %s_abi()->inputs. */\n"
        "#ifndef %s_H\n#define %s_H\n#include <stddef.h>\n#include <stdint.h>\n\n",
        mn, mn, mn, mn, mn, mn, mn, mn, mn, call.buf ? call.buf : "", mn, mn, mn, call.buf ? call.buf : "",
        rt, mn, rt, mn, mn, mn, p->g->batch_max, mn, mn, mn);
    str_puts(h, nnc_embed_abi_h);
    str_printf(h,
        "\ntypedef struct %s %s_t;\n"
        "const nnc_model_abi *%s_abi(void);\n"
        "%s_t *%s_create(void);\n%s_t *%s_create_in(void *mem);\nvoid %s_free(%s_t *m);\n"
        "size_t %s_memory_bytes(void);\nvoid %s_init(%s_t *m, uint64_t seed);\n"
        "int %s_train_step(%s_t *m, %sint64_t n);\nint %s_grad(%s_t *m, %sint64_t n);\nint %s_eval(%s_t *m, %sint64_t n);\n"
        "float %s_loss(%s_t *m);\nconst %s *%s_output(%s_t *m, const char *name);\n"
        "%s *%s_param(%s_t *m, const char *name, int64_t *numel);\nconst char *%s_error_message(%s_t *m);\n"
        "#endif\n",
        mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, mn, params.buf ? params.buf : "", mn, mn,
        params.buf ? params.buf : "", mn, mn, params.buf ? params.buf : "", mn, mn, rt, mn, mn, rt, mn, mn, mn, mn);
    str_free(&params);
    str_free(&call);
}

bool aot_write(const Program *p, const BuildOpts *o, const char *dir, char *err, size_t n) {
    const char *mn = model_c_name(p);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, n, "%s: cannot create: %s", dir, strerror(errno));
        return false;
    }
    char cpath[1024], hpath[1024], opath[1024], apath[1024], log[1100];
    snprintf(cpath, sizeof cpath, "%s/%s.c", dir, mn);
    snprintf(hpath, sizeof hpath, "%s/%s.h", dir, mn);
    snprintf(opath, sizeof opath, "%s/%s.o", dir, mn);
    snprintf(apath, sizeof apath, "%s/lib%s.a", dir, mn);
    snprintf(log, sizeof log, "%s/build.log", dir);
    Str c = {0}, h = {0};
    render_program(p, o, &c);
    header(p, o, &h);
    bool ok = cpu_write_file(cpath, c.buf, err, n) && cpu_write_file(hpath, h.buf, err, n);
    str_free(&c);
    str_free(&h);
    if (!ok) return false;
    const char *cc = cpu_cc(o);
    char *cargv[] = {(char *)cc, "-O3", "-std=c11", "-ffp-contract=off", "-fPIC", "-c", "-o", opath, cpath, NULL};
    int rc = cpu_run_tool(cargv, log);
    if (rc != 0) {
        snprintf(err, n, "compiling %s failed (exit %d); see %s", cpath, rc, log);
        return false;
    }
    unlink(apath);
    char *aargv[] = {"ar", "rcs", apath, opath, NULL};
    rc = cpu_run_tool(aargv, log);
    if (rc != 0) {
        snprintf(err, n, "ar failed on %s (exit %d); see %s", apath, rc, log);
        return false;
    }
    unlink(opath);
    unlink(log);
    return true;
}
