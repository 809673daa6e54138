/* render_c.c - renders a planned Program as one standalone C file.
 *
 * This file strings the kernels into entry points: the launch functions are the kernel
 * walker's (kernel.c) in the C dialect (dialect_c.c), over struct NAME, the kernels' view of the
 * memory blocks; one function per entry point calls them in order.  render_c_model.c renders
 * everything around them from the model's description (the runtime that implements
 * nnc_model_abi is include/nnc_runtime.h, embedded).  The file depends on libc, libm, OpenMP
 * (optional: without -fopenmp the pragmas are ignored) and a CBLAS sgemm, so the in-process
 * build and the ahead-of-time library are the same code.  Both parts speak of the model's
 * members only through the dialect's spellings. */
#include "../kernel.h"
#include "cpu.h"

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
                         "        %s = NNC_STATUS_ARG;\n"
                         "        snprintf(%s, sizeof %s, NNC_RT_NONFINITE_FMT,\n"
                         "                 isnan(q[i]) ? \"NaN\" : \"Inf\", (long long)i, \"", d->status, d->msg, d->msg);
        render_c_string_body(k->s, what.buf);
        str_printf(k->s, "\", (long long)%s);\n        return %s;\n      } }\n", d->step, d->status);
        str_free(&what);
    }
}

/* An entry's launches in schedule order: each launch's function NAME(m, in, B) passes its
 * values to the kernel it shares (render_program), then the run function calls them.  A
 * row-wise kernel's failed check (a label out of range) stops the call; the runtime has already
 * advanced the step of a train_step. */
static void render_entry(const Kernel *r, const KernelSet *ks) {
    Kernel k = *r;
    k.d = &dialect_c;
    const char *status = k.d->status;
    for (int i = 0; i < k.e->nlaunch; i++) {
        str_printf(k.s, "static void %s_%s_%d(struct %s_frame *m, const void *const *in, int64_t B) {\n", k.mn,
                   k.e->name, i, k.mn);
        /* the launch's own values: its text does not name their blocks, so launches whose
         * buffers lie in different blocks share it too */
        const KernelUse *u = kernel_set_use(ks, k.e->kind, i);
        if (u->n) {
            str_puts(k.s, "    void *const o[] = {");
            for (int j = 0; j < u->n; j++) {
                long long v = (long long)u->val[j];
                char b = u->base[j];
                if (b == 'I') str_printf(k.s, "%s(void *)(intptr_t)%lld", j ? ", " : "", v);
                else
                    str_printf(k.s, "%s%s + %lld", j ? ", " : "",
                               b == 'P'       ? "m->params"
                                   : b == 'S' ? "m->state"
                                              : "m->act",
                               v);
            }
            str_puts(k.s, "};\n");
        }
        str_printf(k.s, "    %s_k%d(m, in, B, %s);\n}\n", k.mn, u->kernel, u->n ? "o" : "NULL");
    }
    str_printf(k.s, "\nstatic int %s_run_%s(struct %s_frame *m, const void *const *in, int64_t B) {\n", k.mn, k.e->name, k.mn);
    for (int i = 0; i < k.e->nlaunch; i++) {
        str_printf(k.s, "    %s_%s_%d(m, in, B);\n", k.mn, k.e->name, i);
        const Launch *L = &k.e->launches[i];
        if (L->kind == L_ROW || L->kind == L_COLLECTIVE ||
            (L->kind == L_HELPER && op_has(k.g->nodes[L->root].op, OPF_MAY_FAIL)))
            str_printf(k.s, "    if (%s) return %s;\n", status, status);
        if (k.o->check_numerics) render_numerics_check(&k, &k.e->launches[i], i);
    }
    str_printf(k.s, "    return %s;\n}\n", status);
}

/* BuildOpts.launch_access (--check-against's reference, --profile): NAME_launch runs one launch
 * of an entry alone over an instance's blocks, and NAME_block gives a block's memory, so that
 * the checker can write each launch's inputs before it runs; NAME_timed makes a whole call as
 * NAME_run does, through the runtime (checks, step, outputs), with the host's clock read around
 * each launch (Backend.launch_access and run_timed find them by name). */
static void render_launch_lists(const Program *p, const nnc_model_desc *d, Str *s) {
    const char *mn = model_c_name(p);
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &p->entry[k];
        if (!d->entry[k].present || !e->nlaunch) continue;
        str_printf(s, "static const %s_launch_fn %s_%s_launches[] = {", mn, mn, e->name);
        for (int i = 0; i < e->nlaunch; i++) str_printf(s, "%s%s_%s_%d", i ? ", " : "", mn, e->name, i);
        str_puts(s, "};\n");
    }
    str_printf(s, "static const %s_launch_fn *const %s_lists[NNC_ENTRY_COUNT] = {", mn, mn);
    for (int k = 0; k < ENTRY_COUNT; k++)
        if (d->entry[k].present && p->entry[k].nlaunch)
            str_printf(s, "%s%s_%s_launches", k ? ", " : "", mn, p->entry[k].name);
        else str_printf(s, "%sNULL", k ? ", " : "");
    str_printf(s, "};\nstatic const int %s_counts[NNC_ENTRY_COUNT] = {", mn);
    for (int k = 0; k < ENTRY_COUNT; k++)
        str_printf(s, "%s%d", k ? ", " : "", d->entry[k].present ? p->entry[k].nlaunch : 0);
    str_puts(s, "};\n");
}

static const char launch_access_text[] =
    "int @_launch(void *inst, int entry, int k, const void *const *in, int64_t B) {\n"
    "    nnc_rt *rt = inst;\n"
    "    if (entry < 0 || entry >= NNC_ENTRY_COUNT || k < 0 || k >= @_counts[entry])\n"
    "        return nnc_rt_fail(rt, NNC_STATUS_ENTRY, \"no launch %d in entry %d\", k, entry);\n"
    "    struct @_frame m = @_frame_of(rt);\n"
    "    @_lists[entry][k](&m, in, B);\n"
    "    return m.status ? nnc_rt_fail(rt, m.status, \"%s\", m.msg) : 0;\n"
    "}\n"
    "void *@_block(void *inst, int b) {\n"
    "    return b >= 0 && b < NNC_BLOCK_COUNT ? ((nnc_rt *)inst)->host[b] : NULL;\n"
    "}\n"
    "/* The CPU device has no state of its own (rt->dev is NULL): during @_timed it points at the\n"
    " * clock and where the times go, and the device's run is this one. */\n"
    "struct @_timing {\n"
    "    double (*now)(void);\n"
    "    double *t;\n"
    "};\n"
    "static int @_run_timed(nnc_rt *rt, int entry, const void *const *in, int64_t B) {\n"
    "    const struct @_timing *tm = rt->dev;\n"
    "    nnc_pool_adapt(); /* as @_run does */\n"
    "    struct @_frame m = @_frame_of(rt);\n"
    "    for (int k = 0; k < @_counts[entry]; k++) {\n"
    "        const double t0 = tm->now();\n"
    "        @_lists[entry][k](&m, in, B);\n"
    "        tm->t[k] = tm->now() - t0;\n"
    "        if (m.status) return nnc_rt_fail(rt, m.status, \"%s\", m.msg);\n"
    "    }\n"
    "    return 0;\n"
    "}\n"
    "static const nnc_device_ops @_cpu_timed = NNC_RT_CPU_DEVICE(@_run_timed);\n"
    "int @_timed(void *inst, int entry, const void *const *in, int64_t B, double (*now)(void), double *t) {\n"
    "    nnc_rt *rt = inst;\n"
    "    struct @_timing tm = {now, t};\n"
    "    const nnc_device_ops *ops = rt->ops;\n"
    "    rt->ops = &@_cpu_timed;\n"
    "    rt->dev = &tm;\n"
    "    const int rc = nnc_rt_run(rt, entry, in, B);\n"
    "    rt->ops = ops;\n"
    "    rt->dev = NULL;\n"
    "    return rc;\n"
    "}\n";

static void render_launch_access(const Program *p, const nnc_model_desc *d, Str *s) {
    const char *mn = model_c_name(p);
    render_template(s,
                    "\n/* ---- each launch alone, for --check-against (driver/check.c) and --profile ---- */\n"
                    "typedef void (*@_launch_fn)(struct @_frame *, const void *const *, int64_t);\n",
                    mn);
    render_launch_lists(p, d, s);
    render_template(s, launch_access_text, mn);
}

/* The whole file: prelude, each entry's kernels and entry function, then the model's
 * description, device and typed API (render_c_model.c), from one description. */
void render_program(const Program *p, const BuildOpts *o, Str *s) {
    Arena arena = {0};
    const nnc_model_desc *d = model_desc_build(p, o->f64, NULL, &arena);
    Kernel r = {.p = p, .g = p->g, .o = o, .mn = model_c_name(p), .s = s};
    render_c_prelude(s, p, o);
    str_puts(s,
             "\n/* A pooled launch's part gets the frame and its values (o) through this (and a total's rows\n"
             " * their blocks' totals, bt).  A kernel that launches share is neither inlined into nor cloned\n"
             " * for each launch's function (gcc's constant propagation would make a copy per launch again). */\n"
             "struct nnc_launch_ctx {\n    void *m;\n    void *const *o;\n    double *bt;\n};\n"
             "#if defined(__GNUC__) && !defined(__clang__)\n"
             "#define NNC_SHARED __attribute__((noinline, noclone))\n"
             "#else\n"
             "#define NNC_SHARED __attribute__((noinline))\n"
             "#endif\n");
    /* the kernels: one per distinct text among all entries' launches (kernel_set.c), named
     * NAME_k<j>; each launch's own function passes it its values */
    KernelSet *ks = kernel_set_new(p, "\nstatic void ");
    Kernel k = r;
    k.d = &dialect_c;
    for (int e = 0; e < ENTRY_COUNT; e++) {
        k.e = &p->entry[e];
        for (int i = 0; d->entry[e].present && i < k.e->nlaunch; i++) kernel_set_add(ks, &k, &k.e->launches[i], i);
    }
    for (int j = 0; j < kernel_set_count(ks); j++) {
        char name[300];
        snprintf(name, sizeof name, "%s_k%d", r.mn, j);
        /* a kernel only one launch runs stays inlinable into it, as before kernels were shared */
        kernel_set_emit(ks, j, s, name, kernel_set_uses(ks, j) > 1 ? " NNC_SHARED" : "");
    }
    for (int e = 0; e < ENTRY_COUNT; e++) {
        r.e = &p->entry[e];
        if (d->entry[e].present) render_entry(&r, ks);
    }
    kernel_set_free(ks);
    render_c_model(s, p, d);
    if (o->launch_access) render_launch_access(p, d, s);
    arena_free(&arena);
}
