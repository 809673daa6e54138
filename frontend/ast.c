/* ast.c - constructors for the syntax tree, called one per grammar action (parser.y). */
#include <string.h>

#include "ast.h"

static Expr *ast_expr(ParseCtx *c, ExprKind k, SrcLoc l) {
    Expr *e = arena_alloc(c->arena, sizeof *e);
    e->k = k;
    e->loc = l;
    e->depth = 1;
    return e;
}

/* Records that `e` contains `sub`; the first expression to pass the bound is reported (the
 * ones around it are deeper still, but one message per chain is enough). */
static void ast_nest(ParseCtx *c, Expr *e, const Expr *sub) {
    if (!sub || sub->depth + 1 <= e->depth) return;
    e->depth = sub->depth + 1;
    if (e->depth == NN_MAX_EXPR_DEPTH + 1)
        diag_error(c->diag, e->loc, "expression nested more than %d deep (split it into named steps)",
                   NN_MAX_EXPR_DEPTH);
}

Expr *ast_num(ParseCtx *c, SrcLoc l, double v) {
    Expr *e = ast_expr(c, E_NUM, l);
    e->num = v;
    return e;
}

Expr *ast_str(ParseCtx *c, SrcLoc l, const char *s) {
    Expr *e = ast_expr(c, E_STR, l);
    e->str = s;
    return e;
}

Expr *ast_ident(ParseCtx *c, SrcLoc l, const char *s) {
    Expr *e = ast_expr(c, E_IDENT, l);
    e->str = s;
    return e;
}

Expr *ast_bin(ParseCtx *c, SrcLoc l, int op, Expr *a, Expr *b) {
    Expr *e = ast_expr(c, E_BIN, l);
    e->op = op;
    e->a = a;
    e->b = b;
    ast_nest(c, e, a);
    ast_nest(c, e, b);
    return e;
}

Expr *ast_neg(ParseCtx *c, SrcLoc l, Expr *a) {
    Expr *e = ast_expr(c, E_NEG, l);
    e->a = a;
    ast_nest(c, e, a);
    return e;
}

Expr *ast_call(ParseCtx *c, SrcLoc l, Expr *f, Arg *args) {
    Expr *e = ast_expr(c, E_CALL, l);
    e->a = f;
    e->args = args;
    ast_nest(c, e, f);
    for (Arg *x = args; x; x = x->next) ast_nest(c, e, x->e);
    return e;
}

Expr *ast_member(ParseCtx *c, SrcLoc l, Expr *a, const char *name) {
    Expr *e = ast_expr(c, E_MEMBER, l);
    e->a = a;
    e->str = name;
    ast_nest(c, e, a);
    return e;
}

Expr *ast_tuple(ParseCtx *c, SrcLoc l, Arg *items) {
    Expr *e = ast_expr(c, E_TUPLE, l);
    e->args = items;
    for (Arg *x = items; x; x = x->next) ast_nest(c, e, x->e);
    return e;
}

Expr *ast_index(ParseCtx *c, SrcLoc l, Expr *a, Expr *index) {
    Expr *e = ast_expr(c, E_INDEX, l);
    e->a = a;
    e->b = index;
    ast_nest(c, e, a);
    ast_nest(c, e, index);
    return e;
}

Expr *ast_subscript(ParseCtx *c, SrcLoc l, Expr *a, Arg *items) {
    if (!items->next && items->e->k != E_SLICE && items->e->k != E_ELLIPSIS) return ast_index(c, l, a, items->e);
    Expr *e = ast_expr(c, E_SUBSCRIPT, l);
    e->a = a;
    e->args = items;
    ast_nest(c, e, a);
    for (Arg *x = items; x; x = x->next) ast_nest(c, e, x->e);
    return e;
}

Expr *ast_slice(ParseCtx *c, SrcLoc l, Expr *start, Expr *stop, Expr *step) {
    Expr *e = ast_expr(c, E_SLICE, l);
    e->a = start;
    e->b = stop;
    e->args = step ? ast_arg(c, NULL, step) : NULL;
    if (start) ast_nest(c, e, start);
    if (stop) ast_nest(c, e, stop);
    if (step) ast_nest(c, e, step);
    return e;
}

Expr *ast_ellipsis(ParseCtx *c, SrcLoc l) { return ast_expr(c, E_ELLIPSIS, l); }

/* `in` is not a keyword (an input may be called `in`), so the grammar reads any identifier
 * there and this says when it was not `in`. */
static void ast_expect_in(ParseCtx *c, const char *in, SrcLoc in_loc) {
    if (strcmp(in, "in")) diag_error(c->diag, in_loc, "syntax error: unexpected identifier '%s', expecting 'in'", in);
}

Expr *ast_comp(ParseCtx *c, SrcLoc l, Expr *item, Name *var, const char *in, SrcLoc in_loc, Expr *iter) {
    ast_expect_in(c, in, in_loc);
    Expr *e = ast_expr(c, E_COMP, l);
    e->a = item;
    e->b = iter;
    e->str = var->s;
    ast_nest(c, e, item);
    ast_nest(c, e, iter);
    return e;
}

Arg *ast_arg(ParseCtx *c, const char *kw, Expr *e) {
    Arg *a = arena_alloc(c->arena, sizeof *a);
    a->kw = kw;
    a->e = e;
    return a;
}

/* Lists are built left to right by left-recursive rules; the head keeps the tail so that a
 * long list costs linear time, not quadratic. */
Arg *ast_args_append(Arg *list, Arg *a) {
    if (!list) {
        a->tail = a;
        return a;
    }
    (list->tail ? list->tail : list)->next = a;
    list->tail = a;
    return list;
}

/* a in front of list (a list whose head knows its tail) */
Arg *ast_args_prepend(Arg *a, Arg *list) {
    a->next = list;
    a->tail = list ? (list->tail ? list->tail : list) : a;
    return a;
}

Name *ast_name(ParseCtx *c, SrcLoc l, const char *s) {
    Name *n = arena_alloc(c->arena, sizeof *n);
    n->s = s;
    n->loc = l;
    return n;
}

Name *ast_names_append(Name *list, Name *n) {
    if (!list) {
        n->tail = n;
        return n;
    }
    (list->tail ? list->tail : list)->next = n;
    list->tail = n;
    return list;
}

TypeAst *ast_type(ParseCtx *c, SrcLoc l, const char *dtype, Arg *dims, int scalar) {
    TypeAst *t = arena_alloc(c->arena, sizeof *t);
    t->dtype = dtype;
    t->loc = l;
    t->dims = dims;
    t->scalar = scalar;
    return t;
}

Stmt *ast_stmt(ParseCtx *c, StmtKind k, SrcLoc l, const char *name, TypeAst *t, Expr *e) {
    Stmt *s = arena_alloc(c->arena, sizeof *s);
    s->k = k;
    s->loc = l;
    s->name = name;
    s->type = t;
    s->e = e;
    return s;
}

Stmt *ast_def(ParseCtx *c, StmtKind k, SrcLoc l, const char *name, Name *params, Stmt *body) {
    /* forward(self, x) and block Linear(self, n_in, n_out), as a module's methods are written:
     * self is the instance (elab.c binds it), not an argument */
    if ((k == S_FORWARD || k == S_BLOCK) && params && !strcmp(params->s, "self")) params = params->next;
    Stmt *s = ast_stmt(c, k, l, name, NULL, NULL);
    s->params = params;
    s->body = body;
    return s;
}

Stmt *ast_setting(ParseCtx *c, SrcLoc l, const char *key, const char *name2, SrcLoc l2, Expr *e) {
    Stmt *s = ast_stmt(c, S_SETTING, l, key, NULL, e);
    s->name2 = name2;
    s->loc2 = l2;
    return s;
}

Stmt *ast_setting_pair(ParseCtx *c, SrcLoc l, const char *key, const char *name2, SrcLoc l2, const char *name3,
                       SrcLoc l3, Expr *e) {
    Stmt *s = ast_setting(c, l, key, name2, l2, e);
    s->name3 = name3;
    s->loc3 = l3;
    return s;
}

Stmt *ast_unpack(ParseCtx *c, SrcLoc l, Name *first, Name *rest, Expr *e) {
    Stmt *s = ast_stmt(c, S_UNPACK, l, NULL, NULL, e);
    first->next = rest;
    first->tail = rest->tail ? rest->tail : rest;
    s->params = first;
    return s;
}

Stmt *ast_for(ParseCtx *c, SrcLoc l, Name *var, const char *in, SrcLoc in_loc, Expr *iter, Stmt *body) {
    ast_expect_in(c, in, in_loc);
    Stmt *s = ast_def(c, S_FOR, l, var->s, var, body);
    s->e = iter;
    return s;
}

Stmt *ast_stmts_append(Stmt *list, Stmt *s) {
    if (!s) return list;
    if (!list) {
        s->tail = s;
        return s;
    }
    (list->tail ? list->tail : list)->next = s;
    list->tail = s;
    return list;
}
