/* ast.h - the syntax tree the parser builds and the elaborator (elab.c) walks.
 *
 * The tree mirrors the text: expressions (Expr) and statements (Stmt), linked lists through
 * `next`, every node with the location of its first token.  Nothing is resolved here: names,
 * shapes and dtypes are the elaborator's business, so the parser's actions stay one-line calls. */
#ifndef NNC_AST_H
#define NNC_AST_H
#include "../ir/util.h"

typedef enum {
    E_NUM, /* num */
    E_STR, /* str */
    E_IDENT, /* str */
    E_BIN, /* a op b, op one of + - * / @ ^ (^ is **), or a comparison: < > l (<=) g (>=) e (==) n (!=) */
    E_NEG, /* -a */
    E_CALL, /* a(args) */
    E_MEMBER, /* a.str */
    E_TUPLE, /* (a, b, ...) or [a, b, ...]: args */
    E_INDEX, /* a[b]: an item of a list or tuple */
    E_COMP, /* [a for str in b]: a evaluated once per item of b, str bound to the item */
    E_SUBSCRIPT, /* a[i, j:k, ...]: a tensor's items (args: each an index, an E_SLICE or E_ELLIPSIS) */
    E_SLICE, /* start:stop:step inside [] (a, b and the step in args->e, each NULL where left out) */
    E_ELLIPSIS, /* ... inside [] */
} ExprKind;

/* Expressions nest at most this deep (a sum of 1,000 terms written a + b + ... nests 1,000
 * deep): the elaborator walks them recursively, so the bound keeps its stack use bounded and
 * a hostile file gets a located error instead of a stack overflow. */
#define NN_MAX_EXPR_DEPTH 1000

typedef struct Expr Expr;
typedef struct Arg {
    const char *kw;             /* keyword argument name, or NULL */
    Expr *e;
    struct Arg *next;
    struct Arg *tail;           /* on a list's head: its last element (appends are O(1)) */
} Arg;

struct Expr {
    ExprKind k;
    SrcLoc loc;
    int depth;                  /* 1 for a leaf; bounded by NN_MAX_EXPR_DEPTH */
    double num;
    const char *str;
    int op;
    Expr *a, *b;
    Arg *args;
};

typedef struct Name {
    const char *s;
    SrcLoc loc;
    struct Name *next;
    struct Name *tail;          /* on a list's head: its last element */
} Name;

typedef struct {
    const char *dtype;          /* "f32", "i32" (checked by the elaborator) */
    SrcLoc loc;
    Arg *dims;                  /* each an expression: a number, a block argument or the batch symbol */
    int scalar;                 /* written without brackets */
} TypeAst;

typedef enum {
    S_INPUT, /* input name: type */
    S_PARAM, /* param name: type = e */
    S_BUFFER, /* buffer name: type = e (persistent, saved, not trained) */
    S_LET, /* name = e */
    S_UNPACK, /* params = e: a, b, c = split(x, 4, 2), each name one item of a tuple */
    S_OUTPUT, /* output name [= e] */
    S_RETURN, /* return e */
    S_FORWARD, /* forward(params) { body } ; "= e" becomes a body of one return */
    S_BLOCK, /* block name(params) { body } */
    S_TRAIN, /* train { body of S_SETTING } */
    S_SETTING, /* key [name [, name]] [= e]: "batch = 64", "data x = idx(...)", "minimize loss" */
    S_FOR, /* for name in e { body }: body run once per item of e, name bound to it (Python's scope) */
    S_TIE, /* target = e with target a member (a.b.weight = c.weight): weight tying */
} StmtKind;

typedef struct Stmt {
    StmtKind k;
    SrcLoc loc;
    const char *name;           /* S_SETTING: the key */
    const char *name2;          /* S_SETTING: the optional second word */
    SrcLoc loc2;
    const char *name3; /* S_SETTING: a name after a comma ("data x, y = tokens(...)") */
    SrcLoc loc3;
    TypeAst *type;
    Expr *e;
    Expr *target; /* S_TIE: the member assigned (E_MEMBER) */
    Name *params;
    struct Stmt *body;
    struct Stmt *next;
    struct Stmt *tail;          /* on a list's head: its last element */
} Stmt;

typedef struct {
    Arena *arena;
    const char *file;
    Diag *diag;
    Stmt *program;
} ParseCtx;

Expr *ast_num(ParseCtx *c, SrcLoc l, double v);
Expr *ast_str(ParseCtx *c, SrcLoc l, const char *s);
Expr *ast_ident(ParseCtx *c, SrcLoc l, const char *s);
Expr *ast_bin(ParseCtx *c, SrcLoc l, int op, Expr *a, Expr *b);
Expr *ast_neg(ParseCtx *c, SrcLoc l, Expr *a);
Expr *ast_call(ParseCtx *c, SrcLoc l, Expr *f, Arg *args);
Expr *ast_member(ParseCtx *c, SrcLoc l, Expr *a, const char *name);
Expr *ast_tuple(ParseCtx *c, SrcLoc l, Arg *items);
Expr *ast_index(ParseCtx *c, SrcLoc l, Expr *a, Expr *index);
/* a[items]: one plain index is ast_index's (a list's item, or a tensor's); else E_SUBSCRIPT */
Expr *ast_subscript(ParseCtx *c, SrcLoc l, Expr *a, Arg *items);
Expr *ast_slice(ParseCtx *c, SrcLoc l, Expr *start, Expr *stop, Expr *step);
Expr *ast_ellipsis(ParseCtx *c, SrcLoc l);
Expr *ast_comp(ParseCtx *c, SrcLoc l, Expr *item, Name *var, const char *in, SrcLoc in_loc, Expr *iter);
Arg *ast_args_prepend(Arg *a, Arg *list);
Arg *ast_arg(ParseCtx *c, const char *kw, Expr *e);
Arg *ast_args_append(Arg *list, Arg *a);
Name *ast_name(ParseCtx *c, SrcLoc l, const char *s);
Name *ast_names_append(Name *list, Name *n);
TypeAst *ast_type(ParseCtx *c, SrcLoc l, const char *dtype, Arg *dims, int scalar);
Stmt *ast_stmt(ParseCtx *c, StmtKind k, SrcLoc l, const char *name, TypeAst *t, Expr *e);
Stmt *ast_def(ParseCtx *c, StmtKind k, SrcLoc l, const char *name, Name *params, Stmt *body);
Stmt *ast_setting(ParseCtx *c, SrcLoc l, const char *key, const char *name2, SrcLoc l2, Expr *e);
Stmt *ast_setting_pair(ParseCtx *c, SrcLoc l, const char *key, const char *name2, SrcLoc l2, const char *name3,
                       SrcLoc l3, Expr *e);
Stmt *ast_unpack(ParseCtx *c, SrcLoc l, Name *first, Name *rest, Expr *e); /* first, rest... = e */
Stmt *ast_for(ParseCtx *c, SrcLoc l, Name *var, const char *in, SrcLoc in_loc, Expr *iter, Stmt *body);
Stmt *ast_stmts_append(Stmt *list, Stmt *s);

/* Parse a whole model; returns NULL (with diagnostics printed) on a syntax error. */
Stmt *nn_parse(Arena *a, Diag *d, const char *file, const char *src);
#endif
