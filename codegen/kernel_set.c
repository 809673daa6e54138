/* kernel_set.c - one kernel for every launch that renders the same text (both targets).
 *
 * While a launch is rendered, the dialect writes each buffer it addresses, and each integer the
 * launch gives its kernel (a dropout stream's key), as a parameter (kernel_arg: off0 on CUDA,
 * o[0] on the CPU) and its name as KERNEL_NAME_MARK; the walker's locals named after nodes
 * (t<node>, l<node>..., s<node>, h<node>) are then renumbered in order of first appearance.  Launches
 * whose texts are then equal (a transformer's layers, one update on parameters of one shape, the
 * forward in train_step, grad and eval) share one kernel, which the target compiles once and
 * which lists them in its head comment. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernel.h"

int kernel_arg(const Kernel *k, char base, int64_t v) {
    KernelArgs *a = k->args;
    if (!a) return -1;
    for (int j = 0; j < a->n; j++)
        if (a->base[j] == base && a->val[j] == v) return j;
    if (a->n == KERNEL_ARGS_MAX) return -1;
    a->base[a->n] = base;
    a->val[a->n] = v;
    return a->n++;
}

typedef struct {
    Str comment; /* the first launch's head comment (kernel_render's) */
    Str text; /* the rest, with the markers */
    Str also; /* the other launches that run it: "train_step 18, 25; grad 3" */
    int entry, launch;
    int uses; /* launches that run it */
    int also_entry; /* the entry of the last launch in `also` */
    uint64_t hash;
} Unique;

struct KernelSet {
    const Program *p;
    Arena arena; /* the launches' uses */
    KernelUse *use[ENTRY_COUNT]; /* per launch of each entry; kernel -1 until added */
    Unique *u;
    int nu, cap_u;
    int *table; /* 1 + index into u, 0: empty */
    size_t cap;
    int *map, *touched; /* canon_locals' */
    const char *code_start; /* where a kernel's text starts after its comment */
};

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static bool is_ident_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* in's identifiers t<N>, l<N>, s<N>, h<N> (N a node, optionally followed by `_...`) renamed to
 * t<j>, l<j>, s<j>, h<j>, j counting each letter's names in order of first appearance: a bijection,
 * so the text means what it meant.  map[4 * nnodes] holds -1 and is left so; touched has as
 * many places.  False (out unfinished) where some N is not a node. */
static bool canon_locals(const char *in, size_t len, int nnodes, int *map, int *touched, Str *out) {
    static const char letters[] = "tlsh"; /* h<node>: a half value's bits (kernel.c body) */
    int next[4] = {0, 0, 0, 0}, nt = 0;
    bool ok = true;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        if (!is_ident_char(in[i])) {
            while (j < len && !is_ident_char(in[j])) j++;
            str_printf(out, "%.*s", (int)(j - i), in + i);
            i = j;
            continue;
        }
        while (j < len && is_ident_char(in[j])) j++; /* [i, j): an identifier or a number */
        const char *l = strchr(letters, in[i]);
        size_t d = i + 1;
        while (d < j && in[d] >= '0' && in[d] <= '9') d++;
        if (!l || d == i + 1 || (d < j && in[d] != '_')) {
            str_printf(out, "%.*s", (int)(j - i), in + i);
            i = j;
            continue;
        }
        long node = strtol(in + i + 1, NULL, 10);
        int w = (int)(l - letters);
        if (node < 0 || node >= nnodes || d - i > 10) {
            ok = false;
            break;
        }
        int *slot = &map[w * nnodes + node];
        if (*slot < 0) {
            *slot = next[w]++;
            touched[nt++] = w * nnodes + (int)node;
        }
        str_printf(out, "%c%d%.*s", in[i], *slot, (int)(j - d), in + d);
        i = j;
    }
    for (int t = 0; t < nt; t++) map[touched[t]] = -1;
    return ok;
}

KernelSet *kernel_set_new(const Program *p, const char *code_start) {
    KernelSet *ks = xcalloc(1, sizeof *ks);
    ks->p = p;
    ks->code_start = code_start;
    int total = 0;
    for (int e = 0; e < ENTRY_COUNT; e++) total += p->entry[e].nlaunch;
    ks->cap = 16;
    while (ks->cap < (size_t)total * 2) ks->cap *= 2;
    ks->table = xcalloc(ks->cap, sizeof *ks->table);
    ks->cap_u = total + 1;
    ks->u = xcalloc((size_t)ks->cap_u, sizeof *ks->u);
    size_t nm = (size_t)p->g->n * 4 + 1;
    for (int e = 0; e < ENTRY_COUNT; e++) {
        ks->use[e] = arena_alloc(&ks->arena, (size_t)(p->entry[e].nlaunch + 1) * sizeof(KernelUse));
        for (int i = 0; i < p->entry[e].nlaunch; i++) ks->use[e][i].kernel = -1;
    }
    ks->map = xcalloc(nm, sizeof *ks->map);
    ks->touched = xcalloc(nm, sizeof *ks->touched);
    for (size_t i = 0; i < nm; i++) ks->map[i] = -1;
    return ks;
}

/* The launch's use of kernel j: its values, kept in the set's arena. */
static int record_use(KernelSet *ks, int entry, int index, int j, const KernelArgs *args) {
    KernelUse *u = &ks->use[entry][index];
    int64_t *val = arena_alloc(&ks->arena, (size_t)(args->n + 1) * sizeof *val);
    char *base = arena_alloc(&ks->arena, (size_t)args->n + 1);
    memcpy(val, args->val, (size_t)args->n * sizeof *val);
    memcpy(base, args->base, (size_t)args->n);
    *u = (KernelUse){j, args->n, val, base};
    return j;
}

int kernel_set_add(KernelSet *ks, const Kernel *k0, const Launch *L, int index) {
    Kernel k = *k0;
    Str one = {0}, canon = {0};
    KernelArgs a = {0}, *args = &a;
    k.args = args;
    k.s = &one;
    kernel_render(&k, L, index);
    const char *code = strstr(one.buf, ks->code_start);
    code = code && code > one.buf ? code + 1 : one.buf; /* code_start begins with its newline */
    size_t clen = one.len - (size_t)(code - one.buf);
    if (!canon_locals(code, clen, ks->p->g->n, ks->map, ks->touched, &canon)) {
        canon.len = 0;
        str_printf(&canon, "%.*s", (int)clen, code);
    }
    uint64_t h = fnv1a(canon.buf, canon.len);
    size_t slot = h & (ks->cap - 1);
    for (; ks->table[slot]; slot = (slot + 1) & (ks->cap - 1)) {
        Unique *v = &ks->u[ks->table[slot] - 1];
        if (v->hash == h && v->text.len == canon.len && !memcmp(v->text.buf, canon.buf, canon.len)) {
            int e = k.e->kind;
            if (v->also_entry == e) str_printf(&v->also, ", %d", index);
            else str_printf(&v->also, "%s%s %d", v->also.len ? "; " : "", k.e->name, index);
            v->also_entry = e;
            v->uses++;
            str_free(&canon);
            str_free(&one);
            return record_use(ks, e, index, ks->table[slot] - 1, args);
        }
    }
    int j = ks->nu++;
    assert(j < ks->cap_u);
    ks->table[slot] = j + 1;
    Unique *v = &ks->u[j];
    *v = (Unique){.text = canon, .entry = k.e->kind, .launch = index, .uses = 1, .hash = h, .also_entry = -1};
    str_printf(&v->comment, "%.*s", (int)(code - one.buf), one.buf);
    str_free(&one);
    return record_use(ks, k.e->kind, index, j, args);
}

int kernel_set_count(const KernelSet *ks) { return ks->nu; }

int kernel_set_uses(const KernelSet *ks, int j) { return ks->u[j].uses; }

void kernel_set_first(const KernelSet *ks, int j, int *entry, int *launch) {
    *entry = ks->u[j].entry;
    *launch = ks->u[j].launch;
}

const KernelUse *kernel_set_use(const KernelSet *ks, int entry, int launch) {
    const KernelUse *u = &ks->use[entry][launch];
    return u->kernel >= 0 ? u : NULL;
}

/* s with every `mark` replaced by `with`, appended to out. */
static void put_replacing(Str *out, const char *s, const char *mark, const char *with) {
    size_t n = strlen(mark);
    for (const char *at; (at = strstr(s, mark)); s = at + n) str_printf(out, "%.*s%s", (int)(at - s), s, with);
    str_puts(out, s);
}

void kernel_set_emit(const KernelSet *ks, int j, Str *s, const char *name, const char *args) {
    const Unique *v = &ks->u[j];
    /* the head comment, with the launches that share the kernel before its end */
    const char *end = v->also.len ? strstr(v->comment.buf, " */\n") : NULL;
    if (end) {
        str_printf(s, "%.*s *   also runs as launch%s", (int)(end - v->comment.buf), v->comment.buf,
                   strpbrk(v->also.buf, ",;") ? "es" : "");
        size_t col = 28; /* the list, wrapped at 100 columns */
        for (const char *w = v->also.buf; *w;) {
            size_t n = strcspn(w, " ");
            if (col + 1 + n > 100) {
                str_puts(s, "\n *     ");
                col = 8;
            } else str_putc(s, ' ');
            str_printf(s, "%.*s", (int)n, w);
            col += 1 + n;
            w += n + (w[n] == ' ');
        }
        str_printf(s, "\n%s", end);
    } else if (v->comment.buf) str_puts(s, v->comment.buf);
    kernel_set_emit_code(ks, j, s, name, args);
}

void kernel_set_emit_code(const KernelSet *ks, int j, Str *s, const char *name, const char *args) {
    Str named = {0};
    put_replacing(&named, ks->u[j].text.buf, KERNEL_NAME_MARK, name);
    put_replacing(s, named.buf, KERNEL_ARGS_MARK, args);
    str_free(&named);
}

void kernel_set_free(KernelSet *ks) {
    if (!ks) return;
    for (int j = 0; j < ks->nu; j++) {
        str_free(&ks->u[j].comment);
        str_free(&ks->u[j].text);
        str_free(&ks->u[j].also);
    }
    free(ks->u);
    free(ks->table);
    free(ks->map);
    free(ks->touched);
    arena_free(&ks->arena);
    free(ks);
}
