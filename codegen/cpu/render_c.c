/* render_c.c - renders a planned Program as one standalone C file.
 *
 * Layout of the output: the RNG and ABI headers (embedded copies), a model struct holding the
 * three memory blocks, one static function per launch, one function per entry point that calls
 * its launches in order, the initializer, and the nnc_model_abi table.  The file depends on
 * libc, libm, OpenMP (optional: without -fopenmp the pragmas are ignored) and a CBLAS sgemm, so
 * the in-process build and the ahead-of-time library are the same code.
 *
 * The launch functions are the kernel walker's (kernel.c) in the C dialect (dialect_c.c); this
 * file strings them together into entry points, and render_c_model.inc writes the model around
 * them.  Both speak of the model's members only through the dialect's spellings. */
#include "../kernel.h"

/* The model part's name for a kernel context; its dialect is set by render_entry. */
typedef Kernel R;

static int resolve(const R *r, int x) { return kernel_resolve(r->e, x); }

static void ptr(const R *r, Str *s, int x) { dialect_c.ptr(r, s, x); }

/* --check-numerics: after a launch, the first NaN or Inf in what it wrote stops the step with
 * the op, its .nn line and the step, as torch.autograd.detect_anomaly would. */
static void render_numerics_check(const Kernel *k, const Launch *L, int index) {
    const KernelDialect *d = k->d;
    for (int j = 0; j < L->nouts + (L->kind == L_GEMM && L->nouts == 0); j++) {
        int o = L->nouts ? L->outs[j] : L->root;
        const Node *n = &k->g->nodes[o];
        if (n->dtype != DT_F32) continue;
        Str what = {0};
        launch_describe(&what, k->p, k->e, index, o);
        str_puts(k->s, "    { const real *q = ");
        d->ptr(k, k->s, o);
        str_puts(k->s, "; const int64_t nq = ");
        render_numel(k->s, n->shape);
        str_printf(k->s, ";\n      for (int64_t i = 0; i < nq; i++) if (!isfinite(q[i])) {\n"
                         "        %s = 4;\n"
                         "        snprintf(%s, sizeof %s, \"%%s at element %%lld of %%s at step %%lld\",\n"
                         "                 isnan(q[i]) ? \"NaN\" : \"Inf\", (long long)i, \"", d->status, d->msg, d->msg);
        render_c_string_body(k->s, what.buf);
        str_printf(k->s, "\", (long long)%s);\n        return %s;\n      } }\n", d->step, d->status);
        str_free(&what);
    }
}

/* The entry point: every launch in order; a row-wise kernel can fail (a bad label). */
static void render_entry(const R *r) {
    Kernel k = *r;
    k.d = &dialect_c;
    const char *status = k.d->status;
    for (int i = 0; i < k.e->nlaunch; i++) kernel_render(&k, &k.e->launches[i], i);
    str_printf(k.s, "\nstatic int %s_run_%s(struct %s *m, const void *const *in, int64_t B) {\n", k.mn, k.e->name, k.mn);
    if (k.e->kind == ENTRY_TRAIN) str_printf(k.s, "    %s++;\n", k.d->step);
    for (int i = 0; i < k.e->nlaunch; i++) {
        str_printf(k.s, "    %s_%s_%d(m, in, B);\n", k.mn, k.e->name, i);
        if (k.e->launches[i].kind == L_ROW) str_printf(k.s, "    if (%s) return %s;\n", status, status);
        if (k.o->check_numerics) render_numerics_check(&k, &k.e->launches[i], i);
    }
    str_printf(k.s, "    return %s;\n}\n", status);
}

#include "render_c_model.inc"
