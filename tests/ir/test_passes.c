/* test_passes.c - IR tests: assert what the passes produced, in the style of Lua's
 * testes/code.lua (`check(f, 'CLOSURE', ...)`): compile a model, then look at the graph, the
 * fusion groups, the launch schedule and the memory plan, and say what was expected and what
 * was found when they disagree.
 *
 *   autograd/optimizer  every parameter has a gradient and an update ending in an ASSIGN;
 *                       no forward node depends on a backward or update node
 *   fusion              mlp.nn: bias add + ReLU in one kernel, transposes folded into GEMMs,
 *                       cross_entropy + its gradient in one row-wise launch, one in-place kernel
 *                       per parameter update (sgd, sgd with momentum, adam); no fusion across a
 *                       matmul, a reduction, a reshape or a copy; --no-fuse: one launch per op
 *   written out         a bias add read by GELU's gradient too shares GELU's kernel, written out
 *   fold rows           layer norm's gradient reads dy and w and adds the residual's gradient
 *                       itself (not with --no-fuse)
 *   attention layout    split / view / transpose around fused attention: read in place on both
 *                       targets (packed, no permute, slice or concat), as written unfused
 *   attention           nanoGPT's causal self-attention: the split's gradient one concat, permutes
 *                       composed (one per tensor), the causal mask fused into the kernel that
 *                       applies it, transposes of the last two axes folded into products
 *   repeated layers     gpt.nn's list of blocks: parameters named as PyTorch names them
 *                       (transformer.h.0.attn.c_attn.weight), in order, with their optimizer state,
 *                       each block's computation scoped to its instance; nested and written-out
 *                       lists, h[i] and h[-1], for over a list
 *   memory plan         no two simultaneously live buffers overlap; outputs survive to the end;
 *                       planned <= unplanned
 *   placement/copies    --target cuda: one COPY per (value, device) on exactly the crossing
 *                       edges, with the right size; --strict-devices errors and the to() fix
 *   verifier            ir_verify after every pass for every model (pipeline_run verify=true)
 *   helper plans        every helper op, on both targets, at the batch bound and at 1: each call
 *                       passes what its helpers.def row declares, every GEMM group's matrices and
 *                       every scratch pointer stay inside their buffers, the chunks cover the batch
 *   horizontal          runs of launches that may run as one: gpt.nn's 52 sums of squares and
 *                       52 AdamW updates, each run independent in memory, of one kind and phase
 *   launch cost         --profile's bytes and FLOPs of mlp.nn's launches (a product, the bias and
 *                       ReLU kernel, a weight gradient with its SGD step, the input's copy to the
 *                       GPU) and of convnet.nn's first convolution, against hand-computed values
 *   attention           GPT-2 small's attention (T = 1024, 12 heads of 64, 12 layers): fused,
 *                       no planned buffer holds [B, H, T, T]; composed (attn_mask), it does */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/helpers.h"
#include "frontend/frontend.h"
#include "passes/passes.h"

static int failures, checks;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        checks++;                                                                     \
        if (!(cond)) {                                                                \
            failures++;                                                               \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            printf(__VA_ARGS__);                                                      \
            printf("\n");                                                             \
        }                                                                             \
    } while (0)

typedef struct {
    Arena arena;
    Diag diag;
    char *diag_text;
    size_t diag_len;
    Program p;
    bool ok;
    char *owned_src;
} Compiled;

/* Every program compiled here, freed at the end so LeakSanitizer sees a clean exit. */
static Compiled *all_compiled[512];
static int n_compiled;

static void free_all_compiled(void) {
    for (int i = 0; i < n_compiled; i++) {
        Compiled *c = all_compiled[i];
        program_free(&c->p);
        if (c->p.m) model_free(c->p.m);
        arena_free(&c->arena);
        free(c->diag_text);
        free(c->owned_src);
        free(c);
    }
    n_compiled = 0;
}

typedef struct {
    Device target;
    bool no_fuse, strict;
    int opt;            /* 0: the model's, 1: sgd momentum 0.9, 2: adam */
} Opts;

/* nn_load_model, resolve_train_config and pipeline_run, the sequence of driver/compile.c, with the
 * verifier on. */
static Compiled *compile_src(const char *file, const char *src, Opts o) {
    Compiled *c = xcalloc(1, sizeof *c);
    if (n_compiled < (int)NNC_COUNTOF(all_compiled)) all_compiled[n_compiled++] = c;
    FILE *df = open_memstream(&c->diag_text, &c->diag_len);
    c->diag = (Diag){.file = file, .src = src, .out = df};
    Model *m = nn_load_model(&c->arena, &c->diag, file, src, "m_test");
    char err[256];
    if (m && !resolve_train_config(m, &(TrainOverrides){0}, 1, NULL, err, sizeof err)) {
        fprintf(df, "%s\n", err);
        model_free(m);
        m = NULL;
    }
    if (m) {
        if (o.opt == 1) m->train.opt = (OptConfig){.kind = OPT_SGD, .lr = 0.01, .momentum = 0.9};
        if (o.opt == 2)
            m->train.opt = (OptConfig){.kind = OPT_ADAM, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
        c->p = (Program){.m = m, .g = m->g, .diag = &c->diag};
        PipelineOpts po = {.target = o.target, .fuse = !o.no_fuse, .strict_devices = o.strict, .verify = true};
        c->ok = pipeline_run(&c->p, &po);
    }
    fclose(df);
    return c;
}

static char *slurp(const char *path) {
    size_t n;
    char *s = read_file(path, &n);
    if (!s) {
        printf("FAIL: cannot read %s\n", path);
        exit(1);
    }
    return s;
}

static Compiled *compile_model(const char *name, Opts o) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", NNC_SOURCE_DIR, name);
    char *src = slurp(path);
    Compiled *c = compile_src(path, src, o);
    c->owned_src = src;
    CHECK(c->ok, "%s should compile (and pass ir_verify after every pass), found:\n%s", name, c->diag_text);
    return c;
}

static Entry *train_entry(Compiled *c) { return &c->p.entry[ENTRY_TRAIN]; }

/* ---- autograd and optimizer ---------------------------------------------------------------- */

static void test_autograd(const char *model, Opts o) {
    Compiled *c = compile_model(model, o);
    if (!c->ok) return;
    Graph *g = c->p.g;
    Entry *e = train_entry(c);
    for (int i = 0; i < g->n; i++) {
        Node *n = &g->nodes[i];
        if (n->op == OP_PARAM || n->op == OP_STATE) {
            if (n->op == OP_PARAM)
                CHECK(n->grad >= 0 && n->grad < g->n, "%s: parameter '%s' has a gradient node, found grad=%d",
                      model, n->name, n->grad);
            int assigns = 0;
            for (int j = 0; j < g->n; j++)
                if (e->live[j] && g->nodes[j].op == OP_ASSIGN && g->nodes[j].in[0] == i) assigns++;
            CHECK(assigns == 1, "%s: '%s' (%s) is updated by exactly one ASSIGN in train_step, found %d", model,
                  n->name ? n->name : "?", op_info[n->op].name, assigns);
        }
        for (int j = 0; j < n->nin; j++) {
            Node *x = &g->nodes[n->in[j]];
            CHECK(x->phase <= n->phase || n->op == OP_COPY || x->op == OP_COPY,
                  "%s: %%%d (%s, phase %d) depends on %%%d (%s, phase %d): a later phase feeds an earlier one",
                  model, i, op_info[n->op].name, n->phase, n->in[j], op_info[x->op].name, x->phase);
            CHECK(!(n->phase == PH_FORWARD && x->phase != PH_FORWARD),
                  "%s: forward node %%%d (%s) depends on %%%d (%s) of phase %d", model, i,
                  op_info[n->op].name, n->in[j], op_info[x->op].name, x->phase);
        }
    }
}

/* ---- fusion -------------------------------------------------------------------------------- */

static int find_user(Graph *g, Entry *e, int x, Op op) {
    for (int i = x + 1; i < g->n; i++)
        if (e->live[i] && g->nodes[i].op == op)
            for (int j = 0; j < g->nodes[i].nin; j++)
                if (g->nodes[i].in[j] == x) return i;
    return -1;
}

static int launch_of(Entry *e, int node) {
    for (int l = 0; l < e->nlaunch; l++)
        for (int k = 0; k < e->launches[l].nnodes; k++)
            if (e->launches[l].nodes[k] == node) return l;
    return -1;
}

static const char *lk_name(LaunchKind k) {
    static const char *n[] = {"kernel", "reduce", "rowwise", "gemm", "copy", "assign"};
    return n[k];
}

/* Each parameter's update is one launch that writes it in place (and its optimizer state). */
static void check_updates(Compiled *c, const char *what, int state_per_param) {
    Graph *g = c->p.g;
    Entry *e = train_entry(c);
    for (int a = 0; a < g->n; a++) {
        if (!e->live[a] || g->nodes[a].op != OP_ASSIGN || g->nodes[g->nodes[a].in[0]].op != OP_PARAM) continue;
        int leaf = g->nodes[a].in[0], v = g->nodes[a].in[1];
        const char *pname = g->nodes[leaf].name;
        int l = launch_of(e, v);
        CHECK(l >= 0, "%s: the new value of '%s' is computed by a launch", what, pname);
        if (l < 0) continue;
        Launch *L = &e->launches[l];
        CHECK(L->kind == L_EW || (L->kind == L_GEMM && L->fold == v),
              "%s: '%s' is updated by an elementwise kernel (or a GEMM with the update folded in), found %s",
              what, pname, lk_name(L->kind));
        CHECK(e->inplace[v] == leaf && e->buf[v].kind == BUF_PARAM && e->buf[v].offset == e->buf[leaf].offset,
              "%s: '%s' is written in place into the parameter block at offset %lld, found buffer kind %d offset %lld",
              what, pname, (long long)e->buf[leaf].offset, e->buf[v].kind, (long long)e->buf[v].offset);
        int state_outs = 0;
        for (int k = 0; k < L->nouts; k++)
            if (e->buf[L->outs[k]].kind == BUF_STATE) state_outs++;
        CHECK(state_outs == state_per_param,
              "%s: the kernel updating '%s' also writes its %d optimizer-state buffer(s) in place, found %d",
              what, pname, state_per_param, state_outs);
        for (int m = 0; m < e->nlaunch; m++)
            CHECK(m == l || e->launches[m].kind != L_ASSIGN || e->launches[m].root != a,
                  "%s: '%s' needs no separate assign launch (#%d)", what, pname, m);
    }
}

/* No group contains both ends of an edge through a matmul, reduction, reshape or copy. */
static void check_fusion_barriers(Compiled *c, const char *what) {
    Graph *g = c->p.g;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *e = &c->p.entry[k];
        for (int i = 0; i < g->n; i++) {
            if (!e->live[i]) continue;
            Node *n = &g->nodes[i];
            OpKind ok = op_info[n->op].kind;
            if (ok != OK_MATMUL && ok != OK_REDUCE && ok != OK_VIEW && ok != OK_COPY) continue;
            for (int u = i + 1; u < g->n; u++) {
                if (!e->live[u] || g->nodes[u].op == OP_ASSIGN) continue;
                for (int j = 0; j < g->nodes[u].nin; j++) {
                    if (g->nodes[u].in[j] != i) continue;
                    int gi = ok == OK_VIEW ? e->group[n->in[0]] : e->group[i];
                    bool gemm_fold = ok == OK_MATMUL && e->launches[launch_of(e, i)].fold == u;
                    bool gemm_fold_mul = ok == OK_MATMUL && launch_of(e, i) >= 0 &&
                                         e->launches[launch_of(e, i)].kind == L_GEMM &&
                                         e->launches[launch_of(e, i)].fold >= 0;
                    CHECK(gi < 0 || gi != e->group[u] || gemm_fold || gemm_fold_mul,
                          "%s/%s: %s %%%d and its user %s %%%d are not in one kernel, found both in group %d",
                          what, e->name, op_info[n->op].name, i, op_info[g->nodes[u].op].name, u, gi);
                }
            }
        }
    }
}

static int count_kernels(Entry *e) { return e->nlaunch; }

static void test_fusion_mlp(void) {
    Compiled *c = compile_model("mlp.nn", (Opts){0});
    if (!c->ok) return;
    Graph *g = c->p.g;
    Entry *e = train_entry(c);
    int x = -1;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_INPUT && !strcmp(g->nodes[i].name, "x")) x = i;
    int mm = find_user(g, e, x, OP_MATMUL), add = mm >= 0 ? find_user(g, e, mm, OP_ADD) : -1;
    int relu = add >= 0 ? find_user(g, e, add, OP_RELU) : -1;
    CHECK(mm >= 0 && add >= 0 && relu >= 0, "mlp: x @ W1^T -> + b1 -> relu in the graph, found %d %d %d", mm, add, relu);
    if (relu >= 0) {
        CHECK(e->group[add] == e->group[relu] && launch_of(e, relu) >= 0 && e->launches[launch_of(e, relu)].kind == L_EW,
              "mlp: fc1's bias add %%%d and relu %%%d in one elementwise kernel, found launches #%d and #%d",
              add, relu, launch_of(e, add), launch_of(e, relu));
        CHECK(e->group[mm] != e->group[add], "mlp: the matmul %%%d is its own launch, found it grouped with the add", mm);
    }
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *en = &c->p.entry[k];
        for (int i = 0; i < g->n; i++)
            if (en->live[i] && g->nodes[i].op == OP_TRANSPOSE)
                CHECK(en->folded[i], "mlp/%s: transpose %%%d folded into its GEMM, found group %d", en->name, i,
                      en->group[i]);
        for (int l = 0; l < en->nlaunch; l++)
            for (int j = 0; j < en->launches[l].nnodes; j++)
                CHECK(g->nodes[en->launches[l].nodes[j]].op != OP_TRANSPOSE, "mlp/%s: no transpose kernel, found one in #%d",
                      en->name, l);
    }
    int ce = -1, ceg = -1;
    for (int i = 0; i < g->n; i++) {
        if (e->live[i] && g->nodes[i].op == OP_CROSS_ENTROPY) ce = i;
        if (e->live[i] && g->nodes[i].op == OP_CE_GRAD) ceg = i;
    }
    CHECK(ce >= 0 && ceg >= 0 && launch_of(e, ce) == launch_of(e, ceg) && e->launches[launch_of(e, ce)].kind == L_ROW,
          "mlp: cross_entropy %%%d and its gradient %%%d share one row-wise launch, found #%d and #%d", ce, ceg,
          ce >= 0 ? launch_of(e, ce) : -1, ceg >= 0 ? launch_of(e, ceg) : -1);
    check_updates(c, "mlp sgd", 0);
    check_fusion_barriers(c, "mlp");

    Compiled *mom = compile_model("mlp.nn", (Opts){.opt = 1});
    if (mom->ok) check_updates(mom, "mlp sgd momentum", 1);
    Compiled *adam = compile_model("mlp.nn", (Opts){.opt = 2});
    if (adam->ok) check_updates(adam, "mlp adam", 2);

    Compiled *nf = compile_model("mlp.nn", (Opts){.no_fuse = true});
    if (!nf->ok) return;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *en = &nf->p.entry[k];
        int ops = 0;
        for (int i = 0; i < g->n; i++) {
            const Node *n = &nf->p.g->nodes[i];
            OpKind ok = op_info[n->op].kind;
            if (en->live[i] && ok != OK_LEAF && ok != OK_VIEW && ok != OK_ASSIGN && !node_is_inline(n) &&
                !en->folded[i])
                ops++;
        }
        int assigns = 0;
        for (int l = 0; l < en->nlaunch; l++) {
            CHECK(en->launches[l].nnodes == 1, "mlp --no-fuse/%s: one op per launch, found %d in #%d", en->name,
                  en->launches[l].nnodes, l);
            assigns += en->launches[l].kind == L_ASSIGN;
        }
        CHECK(en->nlaunch - assigns == ops, "mlp --no-fuse/%s: one launch per op (%d ops), found %d launches", en->name,
              ops, en->nlaunch - assigns);
        printf("mlp.nn %-10s kernels: fused %d, unfused %d\n", en->name, count_kernels(&c->p.entry[k]),
               count_kernels(en));
    }
}

/* Barriers on a model that has every kind: reshape, reduction, matmul. */
static void test_fusion_barriers(void) {
    const char *src =
        "input x: f32[B, 4]\n"
        "param W: f32[4, 4] = normal(0, 1)\n"
        "h = relu(x @ W) * 2\n"
        "r = reshape(h, B, 2, 2)\n"
        "s = sum(exp(r) + 1, axis = 2)\n"
        "loss = mean(tanh(s) * 3)\n"
        "train {\n    data x = randn(8, 4)\n    batch = 4\n    minimize loss\n}\n";
    Compiled *c = compile_src("barriers.nn", src, (Opts){0});
    CHECK(c->ok, "barriers.nn compiles, found:\n%s", c->diag_text);
    if (!c->ok) return;
    check_fusion_barriers(c, "barriers.nn");
    Compiled *cu = compile_src("barriers.nn", src, (Opts){.target = DEV_CUDA});
    CHECK(cu->ok, "barriers.nn compiles for cuda, found:\n%s", cu->diag_text);
    if (cu->ok) check_fusion_barriers(cu, "barriers.nn cuda");
}

/* ---- attention's tensor ops --------------------------------------------------------------- */

static void check_plan(Compiled *c, const char *what);

static int count_live(Graph *g, Entry *e, Op op, Phase ph) {
    int n = 0;
    for (int i = 0; i < g->n; i++) n += e->live[i] && g->nodes[i].op == op && g->nodes[i].phase == ph;
    return n;
}

static void test_attention(void) {
    const char *src =
        "input x: f32[B, 4, 8]\n"
        "input y: i32[B, 4]\n"
        "param Wqkv: f32[8, 24] = normal(0, 0.3)\n"
        "q, k, v = (x @ Wqkv).split(8, dim = 2)\n"
        "q = q.view(B, 4, 2, 4).transpose(1, 2)\n"
        "k = k.view(B, 4, 2, 4).transpose(1, 2)\n"
        "v = permute(permute(v.view(B, 4, 2, 4), 0, 2, 1, 3), 0, 2, 1, 3).transpose(1, 2)\n"
        "att = (q @ k.transpose(-2, -1)) * 0.5\n"
        "att = softmax(att.masked_fill(tril(ones(4, 4)) == 0, -inf))\n"
        "h = (att @ v).transpose(1, 2).reshape(-1, 8)\n"
        "loss = cross_entropy(h, y.view(-1))\n"
        "train {\n    data x = randn(8, 4, 8)\n    data y = randn(8, 4)\n    batch = 4\n    minimize loss\n}\n";
    Compiled *c = compile_src("attention.nn", src, (Opts){0});
    CHECK(c->ok, "attention.nn compiles, found:\n%s", c->diag_text);
    if (!c->ok) return;
    Graph *g = c->p.g;
    Entry *e = train_entry(c);
    /* q, k (its transpose composed in: one permute), v (two permutes that undo each other, then a
     * transpose: one), and the heads joined back */
    CHECK(count_live(g, e, OP_PERMUTE, PH_FORWARD) == 4, "attention: 4 forward permutes, found %d",
          count_live(g, e, OP_PERMUTE, PH_FORWARD));
    CHECK(count_live(g, e, OP_CONCAT, PH_BACKWARD) == 1 && count_live(g, e, OP_SLICE_GRAD, PH_BACKWARD) == 0,
          "attention: the split's gradient is one concat (found %d) and no slice_grad (found %d)",
          count_live(g, e, OP_CONCAT, PH_BACKWARD), count_live(g, e, OP_SLICE_GRAD, PH_BACKWARD));
    for (int i = 0; i < g->n; i++) {
        const Node *n = &g->nodes[i];
        if (!e->live[i]) continue;
        if (n->op == OP_TRANSPOSE) CHECK(e->folded[i], "attention: transpose %%%d folded into its product", i);
        if (n->op == OP_TRIL) {
            int eq = find_user(g, e, i, OP_EQ);
            CHECK(eq >= 0 && e->group[eq] == e->group[i] && e->launches[launch_of(e, i)].kind == L_EW,
                  "attention: the mask's tril %%%d and == %%%d in one kernel, found #%d and #%d", i, eq,
                  launch_of(e, i), eq >= 0 ? launch_of(e, eq) : -1);
        }
        if (n->op == OP_SELECT && n->phase == PH_FORWARD)
            CHECK(e->group[n->in[2]] == e->group[i], "attention: masked_fill %%%d in the kernel that scales att", i);
    }
    check_plan(c, "attention.nn");
}

/* nanoGPT's flash path: split, view, transpose around scaled_dot_product_attention.  Fused, on
 * either target, attention reads the heads in the projection's rows: no slice, permute or concat
 * is computed, the forward node is packed with the pieces' columns, and the backward is one node
 * of the projection's shape; with --no-fuse the permutes stay. */
static void test_attention_layout(void) {
    const char *src = "input x: f32[B, 5, 8]\n"
                      "param W: f32[8, 24] = normal(0, 0.3)\n"
                      "k, q, v = (x @ W).split(8, dim = 2)\n"
                      "q = q.view(B, 5, 2, 4).transpose(1, 2)\n"
                      "k = k.view(B, 5, 2, 4).transpose(1, 2)\n"
                      "v = v.view(B, 5, 2, 4).transpose(1, 2)\n"
                      "y = scaled_dot_product_attention(q, k, v, is_causal = true)\n"
                      "y = y.transpose(1, 2).contiguous().view(B, 5, 8)\n"
                      "loss = mean(y * y)\n"
                      "train {\n    data x = randn(8, 5, 8)\n    batch = 4\n    minimize loss\n}\n";
    for (int t = 0; t < 3; t++) { /* cpu, cuda, cpu --no-fuse */
        Compiled *c = compile_src("layout.nn", src, (Opts){.target = t == 1 ? DEV_CUDA : DEV_CPU, .no_fuse = t == 2});
        const char *what = t == 0 ? "cpu" : t == 1 ? "cuda" : "cpu --no-fuse";
        CHECK(c->ok, "layout.nn compiles (%s), found:\n%s", what, c->diag_text);
        if (!c->ok) continue;
        Graph *g = c->p.g;
        Entry *e = train_entry(c);
        int moves = 0, sdpa = -1, grads = 0;
        for (int i = 0; i < g->n; i++) {
            if (!e->live[i]) continue;
            Op op = g->nodes[i].op;
            moves += op == OP_PERMUTE || op == OP_SLICE || op == OP_CONCAT;
            if (op == OP_SDPA) sdpa = i;
            grads += op == OP_SDPA_DQ || op == OP_SDPA_DK || op == OP_SDPA_DV;
        }
        CHECK(sdpa >= 0, "layout.nn (%s): a fused attention", what);
        if (sdpa < 0) continue;
        const Node *n = &g->nodes[sdpa];
        if (t < 2) {
            CHECK(moves == 0, "layout.nn (%s): no slice, permute or concat computed, found %d", what, moves);
            CHECK(n->attr.attn.heads == 2 && n->attr.attn.packed && n->attr.attn.col[0] == 8 &&
                      n->attr.attn.col[1] == 0 && n->attr.attn.col[2] == 16 && n->in[0] == n->in[1] &&
                      n->in[1] == n->in[2],
                  "layout.nn (%s): attention packed, 2 heads, q k v at columns 8 0 16 of one tensor; found heads %d "
                  "packed %d cols %d %d %d",
                  what, n->attr.attn.heads, n->attr.attn.packed, n->attr.attn.col[0], n->attr.attn.col[1],
                  n->attr.attn.col[2]);
            CHECK(grads == 1, "layout.nn (%s): one attention gradient node, found %d", what, grads);
        } else {
            CHECK(
                n->attr.attn.heads == 0 && moves >= 7 && grads == 3,
                "layout.nn (%s): the heads as written (permutes, 3 gradients); found heads %d, %d moves, %d gradients",
                what, n->attr.attn.heads, moves, grads);
        }
        check_plan(c, "layout.nn");
    }
}

/* A producer read outside its consumer's kernel too is computed in that kernel and written out:
 * the bias add before GELU (whose gradient reads the pre-activation) shares GELU's launch, which
 * writes both; on both targets.  (Into an elementwise kernel only: GELU here feeds a product.) */
static void test_fusion_written_out(void) {
    const char *src = "input x: f32[B, 6]\n"
                      "param W: f32[6, 5] = normal(0, 0.3)\n"
                      "param b: f32[5] = zeros()\n"
                      "param V: f32[5, 3] = normal(0, 0.3)\n"
                      "loss = mean(gelu(x @ W + b) @ V)\n"
                      "train {\n    data x = randn(8, 6)\n    batch = 4\n    minimize loss\n}\n";
    for (int t = 0; t < 2; t++) {
        Compiled *c = compile_src("written.nn", src, (Opts){.target = (Device)t});
        CHECK(c->ok, "written.nn compiles, found:\n%s", c->diag_text);
        if (!c->ok) continue;
        Graph *g = c->p.g;
        Entry *e = train_entry(c);
        for (int i = 0; i < g->n; i++) {
            if (!e->live[i] || g->nodes[i].op != OP_GELU || g->nodes[i].phase != PH_FORWARD) continue;
            int add = g->nodes[i].in[0];
            CHECK(g->nodes[add].op == OP_ADD && e->group[add] == e->group[i],
                  "written.nn (%s): the bias add %%%d in GELU's kernel (#%d), found #%d", t ? "cuda" : "cpu", add,
                  launch_of(e, i), launch_of(e, add));
            const Launch *L = &e->launches[launch_of(e, i)];
            bool writes_add = false;
            for (int j = 0; j < L->nouts; j++) writes_add |= L->outs[j] == add;
            CHECK(writes_add && L->nouts == 2,
                  "written.nn (%s): GELU's launch writes the pre-activation too (%d outputs)", t ? "cuda" : "cpu",
                  L->nouts);
        }
        check_plan(c, "written.nn");
    }
}

/* layer norm's gradient on a residual stream: the row kernel reads dy and w and adds the
 * stream's gradient itself (passes/fold_rows.c), on both targets; --no-fuse keeps the three ops. */
static void test_fold_rows(void) {
    const char *src = "input x: f32[B, 6]\n"
                      "param W: f32[6, 6] = normal(0, 0.3)\n"
                      "param w: f32[6] = ones()\n"
                      "param b: f32[6] = zeros()\n"
                      "h = x @ W\n"
                      "y = h + layer_norm(h, w, b, eps = 1e-5)\n"
                      "loss = mean(tanh(y @ W))\n"
                      "train {\n    data x = randn(8, 6)\n    batch = 4\n    minimize loss\n}\n";
    for (int t = 0; t < 3; t++) { /* cpu, cuda, cpu --no-fuse */
        Compiled *c = compile_src("rows.nn", src, (Opts){.target = t == 1 ? DEV_CUDA : DEV_CPU, .no_fuse = t == 2});
        const char *what = t == 0 ? "cpu" : t == 1 ? "cuda" : "cpu --no-fuse";
        CHECK(c->ok, "rows.nn compiles (%s), found:\n%s", what, c->diag_text);
        if (!c->ok) continue;
        Graph *g = c->p.g;
        Entry *e = train_entry(c);
        int found = 0;
        for (int i = 0; i < g->n; i++) {
            const Node *n = &g->nodes[i];
            if (!e->live[i] || n->op != OP_LN_GRAD) continue;
            found++;
            if (t < 2)
                CHECK(n->nin == 4 && n->attr.scalars.p[1] == 1 && n->attr.scalars.p[2] == 1 &&
                          g->nodes[n->in[2]].op == OP_PARAM && !strcmp(g->nodes[n->in[2]].name, "w"),
                      "rows.nn (%s): layer norm's gradient reads dy, x, w and the stream's gradient; found %d operands",
                      what, n->nin);
            else
                CHECK(n->nin == 2, "rows.nn (%s): layer norm's gradient of dxhat and x, found %d operands", what,
                      n->nin);
        }
        CHECK(found == 1, "rows.nn (%s): one layer norm gradient, found %d", what, found);
        check_plan(c, "rows.nn");
    }
}

/* Under mixed precision cross_entropy and its gradient read the half logits and the gradient is
 * written in half: no cast kernel on either side (fold_rows.c), one row launch for both; not with
 * --no-fuse (casts as autocast wrote them). */
static void test_fold_ce_casts(void) {
    const char *src = "input x: f32[B, 6]\ninput y: i32[B]\n"
                      "param W: f32[6, 5] = normal(0, 0.3)\n"
                      "loss = cross_entropy(x @ W, y)\n"
                      "train {\n    data x = randn(8, 6)\n    data y = randn(8)\n    batch = 4\n"
                      "    precision = bf16\n    minimize loss\n}\n";
    for (int t = 0; t < 3; t++) { /* cpu, cuda, cpu --no-fuse */
        Compiled *c = compile_src("ce16.nn", src, (Opts){.target = t == 1 ? DEV_CUDA : DEV_CPU, .no_fuse = t == 2});
        const char *what = t == 0 ? "cpu" : t == 1 ? "cuda" : "cpu --no-fuse";
        CHECK(c->ok, "ce16.nn compiles (%s), found:\n%s", what, c->diag_text);
        if (!c->ok) continue;
        Graph *g = c->p.g;
        Entry *e = train_entry(c);
        int ce = -1, ceg = -1, casts = 0;
        for (int i = 0; i < g->n; i++) { /* what the step launches */
            const Node *n = &g->nodes[i];
            if (launch_of(e, i) < 0) continue;
            if (n->op == OP_CROSS_ENTROPY) ce = i;
            if (n->op == OP_CE_GRAD) ceg = i;
            /* the logits' cast up and the gradient's cast down: [B, 5] either way */
            casts += n->op == OP_CAST && n->shape.rank == 2 && n->shape.d[0] < 0 && n->shape.d[1] == 5;
        }
        CHECK(ce >= 0 && ceg >= 0, "ce16.nn (%s): cross_entropy and its gradient", what);
        if (ce < 0 || ceg < 0) continue;
        if (t < 2) {
            CHECK(g->nodes[g->nodes[ce].in[0]].dtype == DT_BF16 && g->nodes[ceg].dtype == DT_BF16 && casts == 0,
                  "ce16.nn (%s): cross_entropy reads the bf16 logits and writes a bf16 gradient; found %s logits, "
                  "a %s gradient, %d casts of [B, 5]",
                  what, dtype_name(g->nodes[g->nodes[ce].in[0]].dtype), dtype_name(g->nodes[ceg].dtype), casts);
            CHECK(launch_of(e, ce) == launch_of(e, ceg), "ce16.nn (%s): one row launch for both, found #%d and #%d",
                  what, launch_of(e, ce), launch_of(e, ceg));
        } else
            CHECK(g->nodes[g->nodes[ce].in[0]].dtype == DT_F32 && casts == 2,
                  "ce16.nn (%s): the casts as autocast wrote them, found %d", what, casts);
        check_plan(c, "ce16.nn");
    }
}

/* Under mixed precision attention's gradients are stored in bf16 by the attention kernels: no
 * cast after them (fold_rows.c), all three or none; not with --no-fuse. */
static void test_fold_attention_casts(void) {
    const char *src = "input x: f32[B, 8, 16]\n"
                      "param wq: f32[16, 16] = normal(0, 0.3)\nparam wk: f32[16, 16] = normal(0, 0.3)\n"
                      "param wv: f32[16, 16] = normal(0, 0.3)\n"
                      "h = scaled_dot_product_attention(x @ wq, x @ wk, x @ wv, is_causal = true)\n"
                      "loss = mean(h * h)\n"
                      "train {\n    data x = randn(8, 8, 16)\n    batch = 4\n"
                      "    precision = bf16\n    minimize loss\n}\n";
    for (int t = 0; t < 3; t++) { /* cpu, cuda, cpu --no-fuse */
        Compiled *c = compile_src("attn16.nn", src, (Opts){.target = t == 1 ? DEV_CUDA : DEV_CPU, .no_fuse = t == 2});
        const char *what = t == 0 ? "cpu" : t == 1 ? "cuda" : "cpu --no-fuse";
        CHECK(c->ok, "attn16.nn compiles (%s), found:\n%s", what, c->diag_text);
        if (!c->ok) continue;
        Graph *g = c->p.g;
        Entry *e = train_entry(c);
        int grads = 0, half = 0, casts = 0;
        for (int i = 0; i < g->n; i++) { /* what the step launches */
            const Node *n = &g->nodes[i];
            if (launch_of(e, i) < 0) continue;
            if (n->op == OP_SDPA_DQ || n->op == OP_SDPA_DK || n->op == OP_SDPA_DV) {
                grads++;
                half += n->dtype == DT_BF16;
            }
            const Node *in = n->nin ? &g->nodes[n->in[0]] : NULL;
            casts += n->op == OP_CAST && (in->op == OP_SDPA_DQ || in->op == OP_SDPA_DK || in->op == OP_SDPA_DV);
        }
        CHECK(grads == 3, "attn16.nn (%s): dq, dk and dv, found %d", what, grads);
        if (t < 2)
            CHECK(half == 3 && casts == 0,
                  "attn16.nn (%s): the three gradients in bf16 and no cast after them, found %d "
                  "in bf16 and %d casts",
                  what, half, casts);
        else CHECK(half == 0 && casts == 3, "attn16.nn (%s): the casts as autocast wrote them, found %d", what, casts);
        check_plan(c, "attn16.nn");
    }
}

/* Under mixed precision a half product's gradient goes back to f32 for layer norm's gradient and
 * its weight's and bias's sums: they read the half value, widening it as they load (fold_rows.c),
 * so no launch widens it; and layer norm's gradient's launch writes its cast back to bf16 too
 * (fuse.c); with --no-fuse the casts stay. */
static void test_fold_widening_casts(void) {
    const char *src = "input x: f32[B, 8]\n"
                      "param W: f32[8, 8] = normal(0, 0.3)\n"
                      "param w: f32[8] = ones()\nparam b: f32[8] = zeros()\n"
                      "h = x + layer_norm(x @ W, w, b, eps = 1e-5)\n"
                      "loss = mean(tanh(h @ W))\n"
                      "train {\n    data x = randn(8, 8)\n    batch = 4\n"
                      "    precision = bf16\n    minimize loss\n}\n";
    for (int t = 0; t < 3; t++) { /* cpu, cuda, cpu --no-fuse */
        Compiled *c = compile_src("widen.nn", src, (Opts){.target = t == 1 ? DEV_CUDA : DEV_CPU, .no_fuse = t == 2});
        const char *what = t == 0 ? "cpu" : t == 1 ? "cuda" : "cpu --no-fuse";
        CHECK(c->ok, "widen.nn compiles (%s), found:\n%s", what, c->diag_text);
        if (!c->ok) continue;
        Graph *g = c->p.g;
        Entry *e = train_entry(c);
        int ln = -1, widen = 0, half_reads = 0;
        for (int i = 0; i < g->n; i++) { /* what the step launches */
            const Node *n = &g->nodes[i];
            if (launch_of(e, i) < 0 || n->phase != PH_BACKWARD) continue;
            if (n->op == OP_LN_GRAD) ln = i;
            /* a backward launch that widens a half [B, 8] value to f32 */
            widen += n->op == OP_CAST && n->dtype == DT_F32 && DTYPE_IS_HALF(g->nodes[n->in[0]].dtype) &&
                n->shape.rank == 2 && n->shape.d[1] == 8;
            half_reads += op_info[n->op].kind == OK_REDUCE && DTYPE_IS_HALF(g->nodes[n->in[0]].dtype);
        }
        CHECK(ln >= 0, "widen.nn (%s): layer norm's gradient", what);
        if (ln < 0) continue;
        int hc = -1; /* its cast to bf16, for the product below: a second output of its launch (fuse.c) */
        for (int i = 0; i < g->n; i++)
            if (launch_of(e, i) >= 0 && g->nodes[i].op == OP_CAST && g->nodes[i].in[0] == ln) hc = i;
        CHECK(hc >= 0, "widen.nn (%s): layer norm's gradient cast to bf16", what);
        if (hc >= 0)
            CHECK((launch_of(e, hc) == launch_of(e, ln)) == (t < 2),
                  "widen.nn (%s): the cast %s layer norm's gradient's launch, found #%d and #%d", what,
                  t < 2 ? "in" : "not in", launch_of(e, hc), launch_of(e, ln));
        if (t < 2)
            CHECK(DTYPE_IS_HALF(g->nodes[g->nodes[ln].in[0]].dtype) && widen == 0,
                  "widen.nn (%s): layer norm's gradient reads the half dy and nothing widens it; found %s dy and %d "
                  "casts to f32",
                  what, dtype_name(g->nodes[g->nodes[ln].in[0]].dtype), widen);
        else
            CHECK(g->nodes[g->nodes[ln].in[0]].dtype == DT_F32 && widen >= 1 && half_reads == 0,
                  "widen.nn (%s): the cast as autocast wrote it, found %d", what, widen);
        check_plan(c, "widen.nn");
    }
}

/* ---- repeated layers ----------------------------------------------------------------------- */

static int node_named(Graph *g, Op op, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == op && g->nodes[i].name && !strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

/* models/gpt.nn: [Block(n_embd, n_head) for _ in range(n_layer)] inside the Transformer block makes
 * transformer.h.0 ... transformer.h.3, each with nanoGPT's twelve parameters, in that order. */
static void test_repeat_gpt(void) {
    static const char *per_block[] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
        "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    Compiled *c = compile_model("gpt.nn", (Opts){0});
    if (!c->ok) return;
    Graph *g = c->p.g;
    int nparams = 0, last = node_named(g, OP_PARAM, "transformer.wpe.weight");
    for (int i = 0; i < g->n; i++) nparams += g->nodes[i].op == OP_PARAM;
    CHECK(nparams == 4 * 12 + 4, "gpt.nn: 52 parameters (wte, wpe, 4 blocks of 12, ln_f), found %d", nparams);
    for (int b = 0; b < 4; b++)
        for (size_t k = 0; k < NNC_COUNTOF(per_block); k++) {
            char name[96];
            snprintf(name, sizeof name, "transformer.h.%d.%s", b, per_block[k]);
            int p = node_named(g, OP_PARAM, name);
            CHECK(p > last, "gpt.nn: parameter '%s' after the one before it (node %d), found node %d", name, last, p);
            last = p > last ? p : last;
            char st[128];
            snprintf(st, sizeof st, "%s.exp_avg_sq", name);
            CHECK(p < 0 || node_named(g, OP_STATE, st) >= 0, "gpt.nn: AdamW's state '%s' exists", st);
        }
    CHECK(node_named(g, OP_PARAM, "transformer.h.4.ln_1.weight") < 0, "gpt.nn: no fifth block");
    CHECK(node_named(g, OP_PARAM, "transformer.ln_f.weight") > last, "gpt.nn: ln_f after the blocks");
    /* block 2's attention is computed under its scope (kernels name their instance) */
    int scoped = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_SDPA && g->nodes[i].phase == PH_FORWARD)
            scoped += g->nodes[i].scope && !strcmp(g->nodes[i].scope, "transformer.h.2.attn");
    CHECK(scoped == 1, "gpt.nn: one forward attention scoped transformer.h.2.attn, found %d", scoped);
}

/* Lists written out, nested, inside a block, indexed and walked: each instance once, named by its
 * place, and the computation as written (three matmuls through the walk, one for h[-1]); the
 * train section's data x feeds the input x after the model rebinds the name. */
static void test_repeat_forms(void) {
    const char *src = "block Lin(n_in, n_out) {\n"
                      "    param weight: f32[n_out, n_in] = normal(0, 0.3)\n"
                      "    forward(x) = x @ weight.T\n"
                      "}\n"
                      "block Stack(n) {\n"
                      "    h = [Lin(4, 4) for _ in range(n)]\n"
                      "    forward(x) {\n"
                      "        for block in h {\n"
                      "            x = tanh(block(x))\n"
                      "        }\n"
                      "        return x\n"
                      "    }\n"
                      "}\n"
                      "input x: f32[B, 4]\n"
                      "net = Stack(3)\n"
                      "seq = [Lin(4, 8), Lin(8, 4)]\n"
                      "grid = [[Lin(4, 4) for _ in range(2)] for _ in range(2)]\n"
                      "y = seq[1](seq[0](net(x)))\n"
                      "for i in range(len(grid)) {\n"
                      "    y = grid[i][-1](y)\n"
                      "}\n"
                      "loss = sum(y * y) + sum(net.h[-1](x)) + sum(grid[0][0].weight) + sum(grid[1][0].weight)\n"
                      "x = y\n" /* data x still feeds the input x */
                      "train {\n    data x = randn(8, 4)\n    minimize loss\n}\n";
    Compiled *c = compile_src("repeat.nn", src, (Opts){0});
    CHECK(c->ok, "repeat.nn compiles, found:\n%s", c->diag_text);
    if (!c->ok) return;
    Graph *g = c->p.g;
    static const char *names[] = {"net.h.0.weight",  "net.h.1.weight",  "net.h.2.weight",
                                  "seq.0.weight",    "seq.1.weight",    "grid.0.0.weight",
                                  "grid.0.1.weight", "grid.1.0.weight", "grid.1.1.weight"};
    int nparams = 0, last = -1;
    for (int i = 0; i < g->n; i++) nparams += g->nodes[i].op == OP_PARAM;
    CHECK(nparams == (int)NNC_COUNTOF(names), "repeat.nn: %d parameters, found %d", (int)NNC_COUNTOF(names), nparams);
    for (size_t k = 0; k < NNC_COUNTOF(names); k++) {
        int p = node_named(g, OP_PARAM, names[k]);
        CHECK(p > last, "repeat.nn: parameter '%s' in order, found node %d after %d", names[k], p, last);
        last = p > last ? p : last;
    }
    int net_mm = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_MATMUL && g->nodes[i].phase == PH_FORWARD && g->nodes[i].scope &&
            !strncmp(g->nodes[i].scope, "net.h.", 6))
            net_mm++;
    CHECK(net_mm == 4, "repeat.nn: net's walk makes 3 forward products and net.h[-1] one, found %d", net_mm);
}

/* ---- memory plan --------------------------------------------------------------------------- */

static int resolve(Entry *e, Graph *g, int x) {
    for (int guard = 0; guard < g->n; guard++) {
        if (e->folded[x]) x = g->nodes[x].in[0];
        else if (e->buf[x].kind == BUF_ALIAS) x = e->buf[x].alias;
        else break;
    }
    return x;
}

static void check_plan(Compiled *c, const char *what) {
    Graph *g = c->p.g;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *e = &c->p.entry[k];
        int nl = e->nlaunch;
        if (!nl) continue;
        int *wr = xmalloc((size_t)g->n * sizeof(int)), *last = xmalloc((size_t)g->n * sizeof(int));
        for (int i = 0; i < g->n; i++) wr[i] = last[i] = -1;
        for (int l = 0; l < nl; l++) {
            Launch *L = &e->launches[l];
            for (int j = 0; j < L->nouts; j++) wr[L->outs[j]] = l;
            for (int j = 0; j < L->nins; j++) last[resolve(e, g, L->ins[j])] = l;
            if (L->kind == L_GEMM) {
                last[resolve(e, g, L->a)] = l;
                last[resolve(e, g, L->b)] = l;
            }
        }
        for (int j = 0; j < e->noutputs; j++) {
            int o = resolve(e, g, e->outputs[j]);
            last[o] = nl;   /* read by the caller after the last launch */
            CHECK(e->buf[o].kind != BUF_NONE, "%s/%s: entry output %%%d is materialized", what, e->name, o);
        }
        for (int a = 0; a < g->n; a++) {
            if (wr[a] < 0 || e->buf[a].kind != BUF_ACT) continue;
            int la = last[a] < 0 ? wr[a] : last[a];
            for (int b = a + 1; b < g->n; b++) {
                if (wr[b] < 0 || e->buf[b].kind != BUF_ACT || e->buf[b].dev != e->buf[a].dev) continue;
                int lb = last[b] < 0 ? wr[b] : last[b];
                /* offsets count real-sized slots; a half buffer takes one per two elements (plan.c) */
                const int64_t sa = DTYPE_IS_HALF(g->nodes[a].dtype) ? (e->buf[a].elems + 1) / 2 : e->buf[a].elems;
                const int64_t sb = DTYPE_IS_HALF(g->nodes[b].dtype) ? (e->buf[b].elems + 1) / 2 : e->buf[b].elems;
                bool mem = e->buf[a].offset < e->buf[b].offset + sb && e->buf[b].offset < e->buf[a].offset + sa;
                bool time = wr[a] <= lb && wr[b] <= la;
                /* a kernel may write its output over an input it reads for the last time, at the
                 * same index (elementwise) or row by row (row-wise), when the element counts agree
                 * (the input may be a view of the buffer: cross_entropy's gradient over logits that
                 * a reshape merged, [B, T, V] read as [B*T, V]) */
                int w = wr[a] > wr[b] ? wr[a] : wr[b], r = wr[a] > wr[b] ? lb : la;
                int later = wr[a] > wr[b] ? a : b, earlier = later == a ? b : a;
                bool inplace = w == r && (e->launches[w].kind == L_EW || e->launches[w].kind == L_ROW) &&
                    e->buf[a].offset == e->buf[b].offset &&
                    shape_numel(g->nodes[later].shape, g->batch_max) ==
                        shape_numel(g->nodes[earlier].shape, g->batch_max);
                CHECK(!(mem && time) || inplace,
                      "%s/%s: %%%d [%lld,+%lld) live #%d..#%d and %%%d [%lld,+%lld) live #%d..#%d must not overlap",
                      what, e->name, a, (long long)e->buf[a].offset, (long long)e->buf[a].elems, wr[a], la, b,
                      (long long)e->buf[b].offset, (long long)e->buf[b].elems, wr[b], lb);
            }
        }
        CHECK(e->act_elems[0] + e->act_elems[1] <= e->naive_elems,
              "%s/%s: planned activations (%lld elements) <= unplanned sum (%lld)", what, e->name,
              (long long)(e->act_elems[0] + e->act_elems[1]), (long long)e->naive_elems);
        printf("%s %-10s activations: planned %lld bytes, unplanned %lld\n", what, e->name,
               (long long)(e->act_elems[0] + e->act_elems[1]) * 4, (long long)e->naive_elems * 4);
        free(wr);
        free(last);
    }
}

/* ---- horizontal: runs of launches that may run as one ------------------------------------ */

/* node x's memory: its block (kind, device) and [lo, hi) in real slots; false: none */
static bool slots_of(Entry *e, Graph *g, int x, int *block, int64_t *lo, int64_t *hi) {
    x = resolve(e, g, x);
    const Buffer *b = &e->buf[x];
    if (b->kind != BUF_PARAM && b->kind != BUF_STATE && b->kind != BUF_ACT) return false;
    *block = (int)b->kind * NNC_MAX_DEVICES + (b->kind == BUF_ACT ? (int)b->dev : 0);
    *lo = b->offset;
    *hi = b->offset + (DTYPE_IS_HALF(g->nodes[x].dtype) ? (b->elems + 1) / 2 : b->elems);
    return true;
}

/* Whether some buffer launch A writes overlaps one launch B reads or writes. */
static bool writes_into(Entry *e, Graph *g, const Launch *A, const Launch *B) {
    for (int i = 0; i < A->nouts + (A->nouts == 0); i++) {
        int bw, bx;
        int64_t lw, hw, lx, hx;
        if (!slots_of(e, g, A->nouts ? A->outs[i] : A->root, &bw, &lw, &hw)) continue;
        for (int j = 0; j < B->nins + B->nouts; j++) {
            int x = j < B->nins ? B->ins[j] : B->outs[j - B->nins];
            if (slots_of(e, g, x, &bx, &lx, &hx) && bx == bw && lw < hx && lx < hw) return true;
        }
    }
    return false;
}

/* Every run (Launch.hfirst, hcount): two or more consecutive launches, each an elementwise kernel
 * or a sum of a whole tensor over a space without the batch axis, of one kind, phase and device,
 * none writing memory another reads or writes; *nruns and *in_runs count them. */
static void check_runs(Compiled *c, const char *what, int *nruns, int *in_runs) {
    Graph *g = c->p.g;
    *nruns = *in_runs = 0;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *e = &c->p.entry[k];
        for (int l = 0; l < e->nlaunch; l++) {
            Launch *L = &e->launches[l];
            if (!L->hcount) continue;
            Launch *F = &e->launches[L->hfirst];
            CHECK(L->hcount > 1 && L->hfirst <= l && l < L->hfirst + L->hcount && L->hfirst + L->hcount <= e->nlaunch,
                  "%s/%s: #%d in a run of %d from #%d", what, e->name, l, L->hcount, L->hfirst);
            CHECK(F->hfirst == L->hfirst && F->hcount == L->hcount, "%s/%s: #%d's run is its first's", what, e->name,
                  l);
            CHECK(L->kind == L_EW || (L->kind == L_REDUCE && shape_numel(g->nodes[L->root].shape, 1) == 1),
                  "%s/%s: #%d, in a run, is elementwise or a whole sum", what, e->name, l);
            CHECK(L->kind == F->kind && L->phase == F->phase && g->nodes[L->root].dev == g->nodes[F->root].dev,
                  "%s/%s: #%d is of its run's kind, phase and device", what, e->name, l);
            for (int a = 0; a < L->space.rank; a++)
                CHECK(!dim_is_batch(L->space.d[a]), "%s/%s: #%d, in a run, has no batch axis", what, e->name, l);
            for (int m = L->hfirst; m < L->hfirst + L->hcount; m++)
                CHECK(m == l || !writes_into(e, g, L, &e->launches[m]),
                      "%s/%s: #%d writes memory that #%d of its run reads or writes", what, e->name, l, m);
            *in_runs += 1;
            *nruns += L->hfirst == l;
        }
    }
}

/* The optimizer's per-parameter launches: gpt.nn's 52 sums of squares (clip_grad_norm) are one
 * run and its 52 AdamW updates another, on both targets; no run in grad or eval (f32); runs in
 * the models of main's loop keep the invariants; under bf16, the weights' casts to bf16 before
 * their products are a run too. */
static void test_horizontal(void) {
    for (int t = 0; t < 2; t++) {
        Compiled *c = compile_model("gpt.nn", (Opts){.target = (Device)t});
        if (!c->ok) continue;
        int nruns, in_runs;
        check_runs(c, "gpt.nn", &nruns, &in_runs);
        CHECK(nruns == 2 && in_runs == 104, "gpt.nn %s: 2 runs of 52 launches, found %d runs of %d", t ? "cuda" : "cpu",
              nruns, in_runs);
        Entry *e = train_entry(c);
        int sums = 0, updates = 0;
        for (int l = 0; l < e->nlaunch; l++) {
            const Launch *L = &e->launches[l];
            sums += L->hcount == 52 && L->kind == L_REDUCE && L->phase == PH_UPDATE;
            updates += L->hcount == 52 && L->kind == L_EW && L->phase == PH_UPDATE;
        }
        CHECK(sums == 52 && updates == 52, "gpt.nn: a run of the 52 sums and one of the 52 updates, found %d and %d",
              sums, updates);
    }
    char *src = slurp(NNC_SOURCE_DIR "/models/gpt.nn");
    Str bf = {0};
    const char *at = strstr(src, "train {\n");
    str_printf(&bf, "%.*strain {\n    precision = bf16\n%s", at ? (int)(at - src) : 0, src, at ? at + 8 : src);
    free(src);
    Compiled *h = compile_src("gpt_bf16.nn", bf.buf, (Opts){.target = DEV_CUDA});
    h->owned_src = bf.buf;
    CHECK(at && h->ok, "gpt.nn in bf16 compiles, found:\n%s", h->diag_text);
    if (h->ok) {
        int nruns, in_runs, casts = 0;
        check_runs(h, "gpt.nn bf16", &nruns, &in_runs);
        Entry *e = train_entry(h);
        for (int l = 0; l < e->nlaunch; l++) {
            const Launch *L = &e->launches[l];
            casts += L->hcount > 1 && L->phase == PH_FORWARD && L->nnodes == 1 && h->p.g->nodes[L->root].op == OP_CAST;
        }
        CHECK(casts >= 16, "gpt.nn bf16: the blocks' 16 weights' casts before their products are a run, found %d",
              casts);
    }
    const char *models[] = {"mlp.nn", "linreg.nn", "convnet.nn"};
    for (size_t i = 0; i < NNC_COUNTOF(models); i++)
        for (int opt = 0; opt < 3; opt++)
            for (int nf = 0; nf < 2; nf++) {
                Compiled *c = compile_model(models[i], (Opts){.target = DEV_CUDA, .opt = opt, .no_fuse = nf});
                char what[64];
                snprintf(what, sizeof what, "%s opt%d%s", models[i], opt, nf ? " --no-fuse" : "");
                int nruns, in_runs;
                if (c->ok) check_runs(c, what, &nruns, &in_runs);
            }
}

/* ---- placement and copies ------------------------------------------------------------------ */

static void check_copies(Compiled *c, const char *what) {
    Graph *g = c->p.g;
    Entry *e = train_entry(c);
    bool loss_home = false;
    for (int i = 0; i < g->n; i++) {
        Node *n = &g->nodes[i];
        if (n->op == OP_INPUT) CHECK(n->dev == DEV_CPU, "%s: input '%s' stays on the cpu, found %s", what, n->name, device_name(n->dev));
        if (n->op == OP_PARAM || n->op == OP_STATE || (n->op != OP_COPY && n->op != OP_INPUT && n->nin > 0))
            CHECK(n->dev == DEV_CUDA, "%s: %s %%%d (%s) lives on cuda, found %s", what, op_info[n->op].name, i,
                  n->name ? n->name : "", device_name(n->dev));
        for (int j = 0; j < n->nin; j++) {
            Node *x = &g->nodes[n->in[j]];
            if (n->op == OP_COPY)
                CHECK(x->dev != n->dev, "%s: copy %%%d moves between devices, found %s -> %s", what, i,
                      device_name(x->dev), device_name(n->dev));
            else if (!node_is_inline(x))
                CHECK(x->dev == n->dev, "%s: %s %%%d on %s reads %%%d on %s without a copy", what, op_info[n->op].name,
                      i, device_name(n->dev), n->in[j], device_name(x->dev));
        }
        if (n->op != OP_COPY) continue;
        for (int j = i + 1; j < g->n; j++)
            CHECK(!(g->nodes[j].op == OP_COPY && g->nodes[j].in[0] == n->in[0] && g->nodes[j].dev == n->dev),
                  "%s: one copy of %%%d to %s, found %%%d and %%%d", what, n->in[0], device_name(n->dev), i, j);
        if (i == g->loss && n->dev == DEV_CPU && g->nodes[n->in[0]].dev == DEV_CUDA && e->live[i]) loss_home = true;
        if (e->live[i]) {
            int64_t want = shape_numel(g->nodes[n->in[0]].shape, g->batch_max);
            CHECK(e->buf[i].elems == want, "%s: copy %%%d moves %lld bytes, found %lld", what, i,
                  (long long)want * 4, (long long)e->buf[i].elems * 4);
            int l = launch_of(e, i);
            CHECK(l >= 0 && e->launches[l].kind == L_COPY, "%s: copy %%%d is a copy launch, found #%d", what, i, l);
        }
    }
    CHECK(loss_home, "%s: the loss %%%d is copied back to the cpu in train_step", what, g->loss);
}

static void test_cuda(void) {
    const char *models[] = {"mlp.nn", "linreg.nn"};
    for (size_t i = 0; i < NNC_COUNTOF(models); i++) {
        Compiled *c = compile_model(models[i], (Opts){.target = DEV_CUDA});
        if (!c->ok) continue;
        char what[64];
        snprintf(what, sizeof what, "%s cuda", models[i]);
        check_copies(c, what);
        check_plan(c, what);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/models/mlp.nn", NNC_SOURCE_DIR);
    char *msrc = slurp(path);
    Compiled *s = compile_src("mlp.nn", msrc, (Opts){.target = DEV_CUDA, .strict = true});
    s->owned_src = msrc;
    CHECK(!s->ok, "mlp.nn --strict-devices --target cuda fails on the implicit input copy, found success");
    CHECK(s->diag_text && strstr(s->diag_text, "cpu") && strstr(s->diag_text, "cuda") && strstr(s->diag_text, "to(x, cuda)"),
          "the strict-devices error names both devices and the fix to(x, cuda), found:\n%s", s->diag_text);
    CHECK(s->diag_text && strstr(s->diag_text, "mlp.nn:9:20: error: 'x' is on cpu but this matmul runs on cuda"),
          "the strict-devices error points at fc1's x @ ..., found:\n%s", s->diag_text);
    CHECK(s->diag.errors == 2,
          "one strict-devices error per crossing value (x and y), found %d:\n%s", s->diag.errors, s->diag_text);
    const char *src =
        "input x: f32[B, 4]\ninput y: i32[B]\n"
        "param W: f32[4, 3] = normal(0, 0.1)\n"
        "logits = to(x, cuda) @ W\n"
        "loss = cross_entropy(logits, to(y, cuda))\n"
        "train {\n    data x = randn(8, 4)\n    data y = randn(8)\n    batch = 4\n    minimize loss\n}\n";
    Compiled *ok = compile_src("explicit.nn", src, (Opts){.target = DEV_CUDA, .strict = true});
    CHECK(ok->ok, "explicit to(x, cuda) passes --strict-devices, found:\n%s", ok->diag_text);
    if (ok->ok) check_copies(ok, "explicit.nn strict");
    /* on the CPU target to(x, cuda) is the identity: nothing may be planned on a device the CPU
     * backend does not have (it once put both devices' blocks at the same addresses) */
    Compiled *oc = compile_src("explicit.nn", src, (Opts){.target = DEV_CPU});
    CHECK(oc->ok, "explicit to(x, cuda) compiles for the cpu target, found:\n%s", oc->diag_text);
    for (int i = 0; oc->ok && i < oc->p.g->n; i++)
        CHECK(oc->p.g->nodes[i].dev == DEV_CPU, "explicit.nn --target cpu: node %d is on %s", i,
              device_name(oc->p.g->nodes[i].dev));
    for (int k = 0; oc->ok && k < ENTRY_COUNT; k++)
        CHECK(oc->p.entry[k].act_elems[DEV_CUDA] == 0, "explicit.nn --target cpu: %s plans %lld elements on cuda",
              oc->p.entry[k].name, (long long)oc->p.entry[k].act_elems[DEV_CUDA]);
}

/* ---- helper plans (codegen/helper_plan.c) ------------------------------------------------- */

/* The parameters in one of helpers.def's lists ("const real *x, int64_t n0": 2), and the kind
 * a call must pass as the j-th. */
static int param_count(const char *list) {
    int n = *list != 0;
    for (const char *c = list; *c; c++) n += *c == ',';
    return n;
}

static HelperArgKind param_kind(const char *list, int j) {
    while (j-- > 0) list = strchr(list, ',') + 1;
    size_t len = strcspn(list, ",");
    const char *star = memchr(list, '*', len);
    return star                                               ? HARG_PTR
        : strstr(list, "double") == list + strspn(list, " ")  ? HARG_F64
        : strstr(list, "int64_t") == list + strspn(list, " ") ? HARG_I64
                                                              : HARG_INT;
}

/* The reals a helper pointer may reach from where it points, or -1 when it points at none. */
static int64_t helper_room(Compiled *c, Entry *e, const Launch *L, HelperPtr p) {
    if (p.kind == HPTR_NODE) return e->buf[resolve(e, c->p.g, p.node)].elems;
    if (p.kind != HPTR_SCRATCH || p.off < L->scratch || p.off >= L->scratch + L->scratch_elems) return -1;
    return L->scratch + L->scratch_elems - p.off;
}

/* Group G-1's matrix of `rows` x `cols` with leading dimension ld, s reals per group, inside its buffer. */
static void check_gemm_operand(Compiled *c, Entry *e, const Launch *L, const char *what, char name, HelperPtr p,
                               int64_t G, int64_t s, int64_t rows, int64_t cols, int64_t ld) {
    int64_t room = helper_room(c, e, L, p), end = (G - 1) * s + (rows - 1) * ld + cols;
    CHECK(room >= 0 && cols <= ld && end <= room, "%s: GEMM operand %c reaches %lld reals of %lld (ld %lld)", what,
          name, (long long)end, (long long)room, (long long)ld);
}

static void check_helper_gemm(Compiled *c, Entry *e, const Launch *L, const char *what, const HelperStep *st,
                              const int64_t *v) {
    int64_t M = affine_eval(st->gemm.M, v), N = affine_eval(st->gemm.N, v), K = affine_eval(st->gemm.K, v);
    int64_t G = st->gemm.G;
    check_gemm_operand(c, e, L, what, 'A', st->gemm.a, G, affine_eval(st->gemm.sa, v), st->gemm.ta ? K : M,
                       st->gemm.ta ? M : K, affine_eval(st->gemm.lda, v));
    check_gemm_operand(c, e, L, what, 'B', st->gemm.b, G, affine_eval(st->gemm.sb, v), st->gemm.tb ? N : K,
                       st->gemm.tb ? K : N, affine_eval(st->gemm.ldb, v));
    check_gemm_operand(c, e, L, what, 'C', st->gemm.c, G, affine_eval(st->gemm.sc, v), M, N,
                       affine_eval(st->gemm.ldc, v));
}

static void check_helper_call(Compiled *c, Entry *e, const Launch *L, const char *what, const HelperStep *st) {
    const HelperInfo *f = &helper_info[st->call.h];
    CHECK(st->call.nptr == param_count(f->ptrs) && st->call.narg == param_count(f->after),
          "%s: %s(%s, n, %s) called with %d pointers and %d more", what, f->name, f->ptrs, f->after, st->call.nptr,
          st->call.narg);
    for (int j = 0; j < st->call.nptr; j++)
        CHECK(helper_room(c, e, L, st->call.ptr[j]) >= 0, "%s: %s's pointer %d points into its buffers", what, f->name,
              j);
    for (int j = 0; j < st->call.narg && st->call.narg == param_count(f->after); j++)
        CHECK(st->call.arg[j].kind == param_kind(f->after, j), "%s: %s's parameter %d after n (of %s) has kind %d",
              what, f->name, j, f->after, (int)st->call.arg[j].kind);
}

static void check_helper_steps(Compiled *c, Entry *e, const Launch *L, const char *what, const HelperPlan *hp, int from,
                               int to, int64_t *v) {
    for (int i = from; i < to; i++) {
        const HelperStep *st = &hp->step[i];
        if (st->kind == HS_CALL) check_helper_call(c, e, L, what, st);
        if (st->kind == HS_GEMM) check_helper_gemm(c, e, L, what, st, v);
        if (st->kind == HS_ZERO)
            CHECK(affine_eval(st->zero.count, v) <= helper_room(c, e, L, st->zero.p), "%s: zeroes inside its buffer",
                  what);
        if (st->kind != HS_CHUNKS) continue;
        int64_t rows = affine_eval(st->chunks.rows, v), covered = 0;
        CHECK(st->chunks.chunk > 0 && i + st->chunks.nbody < to, "%s: chunks of %lld over the next %d steps", what,
              (long long)st->chunks.chunk, st->chunks.nbody);
        for (v[AFF_N0] = 0; st->chunks.chunk > 0 && v[AFF_N0] < rows; v[AFF_N0] += st->chunks.chunk) {
            v[AFF_S] = rows - v[AFF_N0] < st->chunks.chunk ? rows - v[AFF_N0] : st->chunks.chunk;
            v[AFF_SP] = v[AFF_S] * st->chunks.P;
            covered += v[AFF_S];
            check_helper_steps(c, e, L, what, hp, i + 1, i + 1 + st->chunks.nbody, v);
        }
        CHECK(covered == rows, "%s: the chunks cover %lld of %lld samples", what, (long long)covered, (long long)rows);
        i += st->chunks.nbody;
    }
}

static void check_helper_plans(Compiled *c, const char *model, bool *seen) {
    for (int k = 0; c->ok && k < ENTRY_COUNT; k++) {
        Entry *e = &c->p.entry[k];
        for (int l = 0; l < e->nlaunch; l++) {
            const Launch *L = &e->launches[l];
            if (L->kind != L_HELPER) continue;
            Op op = c->p.g->nodes[L->root].op;
            seen[op] = true;
            HelperPlan hp = helper_plan(&c->p, e, L);
            for (int64_t B = 1; B <= c->p.g->batch_max; B = B < c->p.g->batch_max ? c->p.g->batch_max : B + 1) {
                char what[160];
                snprintf(what, sizeof what, "%s %s #%d %s at B=%lld", model, e->name, l, op_info[op].name,
                         (long long)B);
                int64_t v[AFF_NVARS] = {[AFF_1] = 1, [AFF_B] = B};
                check_helper_steps(c, e, L, what, &hp, 0, hp.nsteps, v);
            }
        }
    }
}

static void test_helper_plans(void) {
    static const char *const models[] = {"convnet.nn", "../tests/cuda/ops/conv.nn", "../tests/cuda/ops/concat.nn",
                                         "vae.nn"};
    bool seen[OP_COUNT] = {0};
    for (size_t i = 0; i < NNC_COUNTOF(models); i++)
        for (int t = 0; t < 2; t++)
            check_helper_plans(compile_model(models[i], (Opts){.target = (Device)t}), models[i], seen);
    const char *emb =
        "input t: i32[B, 5]\ninput y: f32[B, 1]\nparam E: f32[6, 3] = normal(0, 1)\n"
        "loss = mse_loss(sum(sum(embedding(t, E), axis = 2), axis = 1, keepdim = true), y)\n"
        "train {\n    data t = randn(8, 5)\n    data y = randn(8, 1)\n    batch = 4\n    minimize loss\n}\n";
    for (int t = 0; t < 2; t++) {
        Compiled *c = compile_src("embedding.nn", emb, (Opts){.target = (Device)t});
        CHECK(c->ok, "embedding.nn compiles, found:\n%s", c->diag_text);
        check_helper_plans(c, "embedding.nn", seen);
    }
    for (int op = 0; op < OP_COUNT; op++) /* a new helper op needs a model here */
        CHECK(op_info[op].kind != OK_HELPER || seen[op], "helper op %s has a launch in this test's models",
              op_info[op].name);
}

/* ---- launch cost (--profile) --------------------------------------------------------------- */

/* The first launch of entry e of `kind` in `phase` whose nodes include an op `op`, or NULL. */
static const Launch *find_launch(const Graph *g, const Entry *e, LaunchKind kind, int phase, Op op) {
    for (int l = 0; l < e->nlaunch; l++) {
        const Launch *L = &e->launches[l];
        for (int k = 0; L->kind == kind && L->phase == phase && k < L->nnodes; k++)
            if (g->nodes[L->nodes[k]].op == op) return L;
    }
    return NULL;
}

/* The GEMM launch with the SGD step of parameter `name` folded in, or NULL. */
static const Launch *find_fold(const Graph *g, const Entry *e, const char *name) {
    for (int l = 0; l < e->nlaunch; l++) {
        const Launch *L = &e->launches[l];
        if (L->kind == L_GEMM && L->fold >= 0 && !strcmp(g->nodes[g->nodes[L->fold].in[0]].name, name)) return L;
    }
    return NULL;
}

static void check_cost(const Program *p, const Launch *L, int64_t B, int64_t bytes, int64_t flops, FlopKind kind,
                       const char *what) {
    CHECK(L != NULL, "%s: the launch is there", what);
    if (!L) return;
    LaunchCost c = launch_cost(p, &p->entry[ENTRY_TRAIN], L, B, false, false);
    CHECK(c.bytes == bytes && c.flops == flops && c.kind == kind,
          "%s at batch %lld: %lld bytes, %lld FLOPs of kind %d, found %lld bytes, %lld FLOPs of kind %d", what,
          (long long)B, (long long)bytes, (long long)flops, kind, (long long)c.bytes, (long long)c.flops, c.kind);
}

/* SGD's update inside its weight gradient's product (fuse.c, sgd_fold_pays): at batch 64 every
 * weight's; at batch 256 only the weight too large for a core's L2 (1024 x 784 floats, 3.2 MB),
 * whose update pass would read it from memory: a long contraction pays for the small ones'.  On
 * CUDA every weight's. */
static void test_sgd_fold(void) {
    static const char fmt[] = "input x: f32[B, 784]\n"
                              "input y: i32[B]\n"
                              "param a: f32[128, 784] = normal(0, 0.05)\n"
                              "param b: f32[1024, 784] = normal(0, 0.05)\n"
                              "param c: f32[10, 128] = normal(0, 0.05)\n"
                              "param d: f32[10, 1024] = normal(0, 0.05)\n"
                              "logits = relu(x @ transpose(a)) @ transpose(c) + relu(x @ transpose(b)) @ transpose(d)\n"
                              "loss = cross_entropy(logits, y)\n"
                              "train {\n"
                              "    data x = randn(%d, 784)\n"
                              "    data y = randn(%d)\n"
                              "    batch = %d\n"
                              "    optimizer = sgd(lr = 0.01)\n"
                              "    minimize loss\n"
                              "}\n";
    for (int batch = 64; batch <= 256; batch *= 4) {
        char src[1024];
        snprintf(src, sizeof src, fmt, batch, batch, batch);
        Compiled *c = compile_src("sgd_fold.nn", src, (Opts){0});
        Compiled *gpu = compile_src("sgd_fold.nn", src, (Opts){.target = DEV_CUDA});
        CHECK(gpu->ok && find_fold(gpu->p.g, &gpu->p.entry[ENTRY_TRAIN], "a") != NULL,
              "sgd_fold.nn at batch %d on CUDA: a's update inside its product", batch);
        CHECK(c->ok, "sgd_fold.nn at batch %d compiles: %s", batch, c->diag_text);
        if (!c->ok) continue;
        const Graph *g = c->p.g;
        const Entry *e = &c->p.entry[ENTRY_TRAIN];
        const char *names[] = {"a", "b", "c", "d"};
        for (int i = 0; i < 4; i++) {
            bool want = batch == 64 || !strcmp(names[i], "b");
            CHECK((find_fold(g, e, names[i]) != NULL) == want, "sgd_fold.nn at batch %d: %s's update %s its product",
                  batch, names[i], want ? "inside" : "after");
        }
    }
}

/* The GEMM launch whose epilogue adds parameter `bias`, or NULL. */
static const Launch *find_epilogue(const Graph *g, const Entry *e, const char *bias) {
    for (int l = 0; l < e->nlaunch; l++) {
        const Launch *L = &e->launches[l];
        if (L->kind == L_GEMM && L->bias >= 0 && !strcmp(g->nodes[L->bias].name, bias)) return L;
    }
    return NULL;
}

/* On CUDA a bias added to a product's rows, and the ReLU after it, run in the GEMM's epilogue
 * (cuBLASLt): no kernel after the product.  Not on the CPU, not under bf16 (the kernel's add rounds
 * the half product first), not where the pre-activation has another reader (b3: relu(u) + u). */
static void test_bias_epilogue(void) {
    static const char fmt[] = "input x: f32[B, 5, 12]\n"
                              "input y: i32[B, 5]\n"
                              "param w1: f32[16, 12] = normal(0, 0.3)\n"
                              "param b1: f32[16] = zeros()\n"
                              "param w2: f32[16, 9] = normal(0, 0.3)\n"
                              "param b2: f32[9] = zeros()\n"
                              "param w3: f32[9, 7] = normal(0, 0.3)\n"
                              "param b3: f32[7] = zeros()\n"
                              "u = (relu(x @ transpose(w1) + b1) @ w2 + b2) @ w3 + b3\n"
                              "loss = cross_entropy(reshape(relu(u) + u * 0.5, -1, 7), reshape(y, -1))\n"
                              "train {\n    data x = randn(8, 5, 12)\n    data y = randn(8, 5)\n    batch = 4\n"
                              "%s    minimize loss\n}\n";
    char src[1024];
    snprintf(src, sizeof src, fmt, "");
    Compiled *cu = compile_src("epilogue.nn", src, (Opts){.target = DEV_CUDA});
    Compiled *cpu = compile_src("epilogue.nn", src, (Opts){0});
    snprintf(src, sizeof src, fmt, "    precision = bf16\n");
    Compiled *half = compile_src("epilogue.nn", src, (Opts){.target = DEV_CUDA});
    CHECK(cu->ok && cpu->ok && half->ok, "epilogue.nn compiles on both targets and in bf16: %s%s%s", cu->diag_text,
          cpu->diag_text, half->diag_text);
    if (!cu->ok || !cpu->ok || !half->ok) return;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        if (k == ENTRY_ACCUM) continue;
        const Entry *e = &cu->p.entry[k];
        const Launch *l1 = find_epilogue(cu->p.g, e, "b1"), *l2 = find_epilogue(cu->p.g, e, "b2");
        CHECK(l1 && l1->relu && l1->epi >= 0 && cu->p.g->nodes[l1->epi].op == OP_RELU,
              "%s on CUDA: b1 and its ReLU in the epilogue of x @ w1^T", e->name);
        CHECK(l2 && !l2->relu && l2->epi >= 0 && cu->p.g->nodes[l2->epi].op == OP_ADD, "%s on CUDA: b2 in the epilogue",
              e->name);
        CHECK(!find_epilogue(cu->p.g, e, "b3"), "%s on CUDA: b3's add stays a kernel (relu(u) + u reads u)", e->name);
        int ncu = 0; /* CUDA's launches but its copies between host and device */
        for (int l = 0; l < e->nlaunch; l++) ncu += e->launches[l].kind != L_COPY;
        CHECK(cpu->p.entry[k].nlaunch == ncu + 2, "%s: two launches fewer on CUDA (%d but copies, the CPU's %d)",
              e->name, ncu, cpu->p.entry[k].nlaunch);
        for (int l = 0; l < cpu->p.entry[k].nlaunch; l++)
            CHECK(cpu->p.entry[k].launches[l].kind != L_GEMM || cpu->p.entry[k].launches[l].bias < 0,
                  "%s on the CPU: no epilogue", e->name);
        for (int l = 0; l < half->p.entry[k].nlaunch; l++)
            CHECK(half->p.entry[k].launches[l].kind != L_GEMM || half->p.entry[k].launches[l].bias < 0,
                  "%s in bf16: no epilogue", e->name);
        if (!l1) continue;
        /* [B*5, 12] @ [12, 16] + b1, ReLU: reads x, w1 and b1, writes C once; the adds and maxima counted */
        for (int64_t B = 4; B >= 3; B--)
            check_cost(&cu->p, l1, B, 4 * (B * 5 * 12 + 16 * 12 + 16 + B * 5 * 16),
                       2 * B * 5 * 16 * 12 + 2 * B * 5 * 16, FLOP_F32, "x @ w1^T + b1, ReLU");
    }
}

/* A result never takes the buffer of an i32 input that dies in its kernel: an --f64 build's
 * reals are 8 bytes, an i32's 4, so writing element i would overwrite inputs not yet read (the
 * CUDA target's copy of labels compared, argmax's indices compared on either). */
static void test_no_i32_reuse(void) {
    static const char src[] = "input x: f32[B, 6]\ninput y: i32[B]\nparam w: f32[6, 6] = normal(0, 1)\n"
                              "h = x @ w\noutput e = argmax(h, -1) == y\noutput m = y == 1\nloss = mean(h * h)\n"
                              "train {\n    data x = randn(8, 6)\n    data y = randn(8)\n    batch = 4\n"
                              "    minimize loss\n}\n";
    for (int t = 0; t < 2; t++) {
        Compiled *c = compile_src("i32_reuse.nn", src, (Opts){.target = t ? DEV_CUDA : DEV_CPU});
        CHECK(c->ok, "i32_reuse.nn compiles: %s", c->diag_text);
        if (!c->ok) continue;
        const Graph *g = c->p.g;
        for (int k = 0; k < ENTRY_COUNT; k++) {
            const Entry *e = &c->p.entry[k];
            for (int l = 0; l < e->nlaunch; l++) {
                const Launch *L = &e->launches[l];
                for (int j = 0; j < L->nins; j++)
                    for (int o = 0; o < L->nouts; o++) {
                        const Buffer *bi = &e->buf[L->ins[j]], *bo = &e->buf[L->outs[o]];
                        bool i32 = g->nodes[L->ins[j]].dtype == DT_I32 && g->nodes[L->outs[o]].dtype != DT_I32;
                        CHECK(!i32 || bi->kind != BUF_ACT || bo->kind != BUF_ACT || bi->offset != bo->offset,
                              "%s on %s: launch %d writes %%%d over the i32 %%%d", e->name, t ? "cuda" : "cpu", l,
                              L->outs[o], L->ins[j]);
                    }
            }
        }
    }
}

/* Fused attention over [B*2, 5, 4] (the heads merged with the batch), causal: 15 (query, key)
 * pairs a head, 2B heads; the forward's products are 4 + 4 multiply-adds a pair, the backward's
 * 4 + 4 recomputed and 4 + 4 + 4 for dq, dk and dv. */
static void test_attention_cost(void) {
    static const char src[] =
        "input x: f32[B, 2, 5, 4]\nparam w: f32[4, 4] = normal(0, 1)\n"
        "h = reshape(x @ w, -1, 5, 4)\ny = scaled_dot_product_attention(h, h, h, is_causal = true)\n"
        "loss = mean(y * y)\ntrain {\n    data x = randn(8, 2, 5, 4)\n    batch = 4\n    minimize loss\n}\n";
    Compiled *c = compile_src("attention_cost.nn", src, (Opts){0});
    CHECK(c->ok, "attention_cost.nn should compile, found:\n%s", c->diag_text);
    if (!c->ok) return;
    const Graph *g = c->p.g;
    const Launch *fwd = find_launch(g, train_entry(c), L_ATTENTION, PH_FORWARD, OP_SDPA);
    const Launch *bwd = find_launch(g, train_entry(c), L_ATTENTION, PH_BACKWARD, OP_SDPA_DQ);
    for (int64_t B = 4; B >= 1; B -= 3) {
        CHECK(fwd && launch_cost(&c->p, train_entry(c), fwd, B, false, false).flops == 2 * 15 * 8 * 2 * B,
              "attention's forward at batch %lld: %lld FLOPs", (long long)B, (long long)(2 * 15 * 8 * 2 * B));
        CHECK(bwd && launch_cost(&c->p, train_entry(c), bwd, B, false, false).flops == 2 * 15 * 20 * 2 * B,
              "attention's gradients at batch %lld: %lld FLOPs", (long long)B, (long long)(2 * 15 * 20 * 2 * B));
    }
}

static void test_launch_cost(void) {
    Compiled *c = compile_model("mlp.nn", (Opts){0});
    if (!c->ok) return;
    const Graph *g = c->p.g;
    const Entry *e = train_entry(c);
    for (int64_t B = 64; B >= 10; B -= 54) { /* the batch bound, and a short last batch */
        /* x [B,784] @ transpose(fc1.weight [128,784]) -> [B,128]: each operand and the result once */
        check_cost(&c->p, find_launch(g, e, L_GEMM, PH_FORWARD, OP_MATMUL), B, 4 * (B * 784 + 128 * 784 + B * 128),
                   2 * B * 128 * 784, FLOP_F32, "mlp.nn fc1's product");
        /* relu(h + fc1.bias): reads h [B,128] and the bias [128], writes [B,128]; an add and a relu per element */
        check_cost(&c->p, find_launch(g, e, L_EW, PH_FORWARD, OP_RELU), B, 4 * (B * 128 + 128 + B * 128), 2 * B * 128,
                   FLOP_F32, "mlp.nn's bias and ReLU");
        /* fc1.weight -= lr * dh^T @ x, in the product: reads dh [B,128], x [B,784] and the weight, writes it */
        check_cost(&c->p, find_fold(g, e, "fc1.weight"), B, 4 * (B * 128 + B * 784 + 2 * 128 * 784),
                   2 * 128 * 784 * B + 2 * 128 * 784, FLOP_F32, "mlp.nn fc1.weight's gradient and SGD step");
    }
    Compiled *cu = compile_model("mlp.nn", (Opts){.target = DEV_CUDA});
    if (cu->ok) {
        const Launch *L = find_launch(cu->p.g, train_entry(cu), L_COPY, PH_FORWARD, OP_COPY);
        check_cost(&cu->p, L, 64, 4 * 64 * 784, 0, FLOP_F32, "mlp.nn's batch copied to the GPU (once: the bus)");
        CHECK(L && launch_cost(&cu->p, train_entry(cu), L, 64, false, false).bus, "the copy crosses a bus");
        L = find_launch(cu->p.g, train_entry(cu), L_GEMM, PH_FORWARD, OP_MATMUL);
        CHECK(L && launch_cost(&cu->p, train_entry(cu), L, 64, false, true).kind == FLOP_TF32,
              "with --tf32 a product is held to the TF32 ceiling");
    }
    Compiled *cv = compile_model("convnet.nn", (Opts){0});
    if (!cv->ok) return;
    const Launch *conv = NULL;
    for (int l = 0; l < train_entry(cv)->nlaunch && !conv; l++) {
        const Launch *L = &train_entry(cv)->launches[l];
        const Node *r = &cv->p.g->nodes[L->root];
        if (L->kind == L_HELPER && r->op == OP_CONV2D && cv->p.g->nodes[r->in[0]].shape.d[1] == 1) conv = L;
    }
    /* conv1: [B,1,28,28] * [32,1,5,5] "same" -> [B,32,28,28]: 2 FLOPs per multiply-add, 25 per output */
    check_cost(&cv->p, conv, 64, 4 * (64 * 784 + 32 * 25 + 64 * 32 * 784), 2 * 64 * 32 * 784 * 25, FLOP_F32,
               "convnet.nn's first convolution");
    test_attention_cost();
}

/* ---- fused attention's memory ------------------------------------------------------------- */

/* The largest buffer (elements at the batch bound) any entry plans in the activation block,
 * scratch included. */
static int64_t largest_buffer(Compiled *c) {
    int64_t big = 0;
    for (int k = 0; k < ENTRY_COUNT; k++) {
        Entry *e = &c->p.entry[k];
        for (int i = 0; e->buf && i < c->p.g->n; i++)
            if (e->buf[i].kind == BUF_ACT && e->buf[i].elems > big) big = e->buf[i].elems;
        for (int l = 0; l < e->nlaunch; l++)
            if (e->launches[l].scratch_elems > big) big = e->launches[l].scratch_elems;
    }
    return big;
}

/* A stack of 12 layers with GPT-2 small's attention sizes, in head-split form [B, 12, 1024, 64]
 * (the residual stream of GPT-2 holds the same numbers), each a causal attention and an MLP;
 * with `mask`, an attn_mask that makes the front end compose it. */
static Compiled *gpt2_attention(bool mask) {
    Str s = {0};
    str_puts(&s, "input x: f32[B, 12, 1024, 64]\n");
    if (mask) str_puts(&s, "input m: f32[B, 1, 1024, 1024]\n");
    str_puts(&s,
             "block Layer() {\n"
             "    param wq: f32[64, 64] = normal(0, 0.02)\n    param wk: f32[64, 64] = normal(0, 0.02)\n"
             "    param wv: f32[64, 64] = normal(0, 0.02)\n    param w1: f32[64, 256] = normal(0, 0.02)\n"
             "    param w2: f32[256, 64] = normal(0, 0.02)\n    forward(h) {\n");
    str_printf(&s, "        a = h + scaled_dot_product_attention(h @ wq, h @ wk, h @ wv, %s)\n",
               mask ? "attn_mask = m" : "is_causal = true");
    str_puts(&s, "        return a + gelu(a @ w1) @ w2\n    }\n}\nh = x\n");
    for (int l = 0; l < 12; l++) str_printf(&s, "l%d = Layer()\nh = l%d(h)\n", l, l);
    str_printf(&s,
               "loss = mean(h * h)\ntrain {\n    data x = randn(8, 12, 1024, 64)\n%s    batch = 4\n"
               "    optimizer = adamw(lr = 1e-4)\n    minimize loss\n}\n",
               mask ? "    data m = randn(8, 1, 1024, 1024)\n" : "");
    Compiled *c = compile_src("gpt2_attention.nn", s.buf, (Opts){0});
    c->owned_src = s.buf;
    CHECK(c->ok, "the GPT-2 sized attention stack should compile, found:\n%s", c->diag_text);
    return c;
}

static void test_attention_memory(void) {
    const int64_t bhtt = 4LL * 12 * 1024 * 1024; /* [B, H, T, T] at batch 4 */
    Compiled *f = gpt2_attention(false);
    if (f->ok) {
        check_plan(f, "gpt2 attention fused");
        CHECK(largest_buffer(f) < bhtt,
              "fused attention plans no [B, H, T, T] buffer (%lld elements), found one of %lld", (long long)bhtt,
              (long long)largest_buffer(f));
    }
    Compiled *m = gpt2_attention(true);
    if (m->ok)
        CHECK(largest_buffer(m) >= bhtt, "composed attention holds [B, H, T, T] (%lld elements), found at most %lld",
              (long long)bhtt, (long long)largest_buffer(m));
}

int main(void) {
    const char *models[] = {"mlp.nn", "linreg.nn"};
    for (size_t i = 0; i < NNC_COUNTOF(models); i++)
        for (int t = 0; t < 2; t++)
            for (int opt = 0; opt < 3; opt++) {
                test_autograd(models[i], (Opts){.target = (Device)t, .opt = opt});
                Compiled *c = compile_model(models[i], (Opts){.target = (Device)t, .opt = opt});
                char what[64];
                snprintf(what, sizeof what, "%s %s opt%d", models[i], t ? "cuda" : "cpu", opt);
                if (c->ok) check_plan(c, what);
            }
    Compiled *nf = compile_model("mlp.nn", (Opts){.no_fuse = true});
    if (nf->ok) check_plan(nf, "mlp.nn --no-fuse");
    test_fusion_mlp();
    test_fusion_barriers();
    test_attention();
    test_sgd_fold();
    test_bias_epilogue();
    test_no_i32_reuse();
    test_attention_layout();
    test_fusion_written_out();
    test_fold_rows();
    test_fold_ce_casts();
    test_fold_widening_casts();
    test_fold_attention_casts();
    test_repeat_gpt();
    test_repeat_forms();
    test_cuda();
    test_helper_plans();
    test_launch_cost();
    test_attention_memory();
    test_horizontal();
    printf("%d checks, %d failed\n", checks, failures);
    free_all_compiled();
    return failures ? 1 : 0;
}
