/* plot.c - `nnc plot RUN.jsonl... -o curves.html`: the curves of --metrics files, for those
 * without TensorBoard.  The page is self-contained (inline SVG, no script, no network): one
 * chart per quantity against the step, the loss with its per-step values, its epoch means and
 * the test loss together, and every other number a run reports (accuracy, lr, loss_scale,
 * grad_norm, ...) in a chart of its own; several files are drawn over each other, one colour
 * each.  `-o FILE.svg` writes the same charts as one SVG image.
 *
 * The metrics file is JSON lines of flat objects (train.c writes them); this reads exactly that
 * much JSON (strings, numbers, NaN/Infinity as Python writes them, true/false/null), and names
 * the file, line and column of anything else.  A step series longer than the chart is wide is
 * drawn as each pixel column's minimum and maximum, so a spike never disappears. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/util.h"
#include "plot.h"

enum { CHART_W = 760, CHART_H = 280, LEFT = 70, RIGHT = 20, TOP = 34, BOTTOM = 40 };

typedef struct {
    double *x, *y;
    int n, cap;
} Series;

/* One line of one chart: a quantity of one file, per step or per epoch. */
typedef struct {
    char *key; /* "loss", "test_loss", "accuracy" */
    int file;
    bool epoch; /* from the epoch records (drawn with markers) */
    Series s;
} Line;

typedef struct {
    Line *lines;
    int n, cap;
    const char **files;
    int nfiles;
} Plot;

static void series_add(Series *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->x = xrealloc(s->x, (size_t)s->cap * sizeof *s->x);
        s->y = xrealloc(s->y, (size_t)s->cap * sizeof *s->y);
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

static Line *line_for(Plot *p, const char *key, int file, bool epoch) {
    for (int i = 0; i < p->n; i++)
        if (p->lines[i].file == file && p->lines[i].epoch == epoch && !strcmp(p->lines[i].key, key))
            return &p->lines[i];
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        p->lines = xrealloc(p->lines, (size_t)p->cap * sizeof *p->lines);
    }
    Line *l = &p->lines[p->n++];
    *l = (Line){.key = xstrdup(key), .file = file, .epoch = epoch};
    return l;
}

/* ---- reading: one flat JSON object per line ---- */

typedef struct {
    const char *file;
    int line;
    const char *start, *at;
    char *err;
    size_t errlen;
} Reader;

static bool fail(Reader *r, const char *what) {
    snprintf(r->err, r->errlen, "%s:%d:%d: %s", r->file, r->line, (int)(r->at - r->start) + 1, what);
    return false;
}

static void skip_ws(Reader *r) {
    while (*r->at == ' ' || *r->at == '\t' || *r->at == '\r') r->at++;
}

/* A string without escapes beyond \" and \\ (train.c writes names as the model spells them). */
static bool read_string(Reader *r, char *out, size_t n) {
    if (*r->at != '"') return fail(r, "expected a string");
    size_t k = 0;
    for (r->at++; *r->at != '"'; r->at++) {
        if (!*r->at || *r->at == '\n') return fail(r, "unterminated string");
        if (*r->at == '\\' && r->at[1]) r->at++;
        if (k + 1 < n) out[k++] = *r->at;
    }
    r->at++;
    out[k] = 0;
    return true;
}

typedef struct {
    char key[64][128];
    double num[64];
    bool is_num[64];
    int n;
    char type[128];
} Record;

static bool read_value(Reader *r, Record *rec) {
    int i = rec->n;
    if (*r->at == '"') {
        char s[128];
        if (!read_string(r, s, sizeof s)) return false;
        if (!strcmp(rec->key[i], "type")) snprintf(rec->type, sizeof rec->type, "%s", s);
        return true;
    }
    if (*r->at == '{' || *r->at == '[') return fail(r, "a nested object or array (a metrics file has none)");
    for (const char *w = "true\0false\0null\0"; *w; w += strlen(w) + 1)
        if (!strncmp(r->at, w, strlen(w))) {
            r->at += strlen(w);
            return true;
        }
    char *end;
    double v = strtod(r->at, &end); /* NaN, Infinity and -Infinity, as Python's json writes them, too */
    if (end == r->at) return fail(r, "expected a value");
    r->at = end;
    rec->num[i] = v;
    rec->is_num[i] = true;
    return true;
}

static bool read_record(Reader *r, Record *rec) {
    memset(rec, 0, sizeof *rec);
    skip_ws(r);
    if (*r->at != '{') return fail(r, "expected '{' (one JSON object per line, as --metrics writes)");
    r->at++;
    skip_ws(r);
    while (*r->at != '}') {
        if (rec->n == 64) return fail(r, "more than 64 fields");
        if (!read_string(r, rec->key[rec->n], sizeof rec->key[rec->n])) return false;
        skip_ws(r);
        if (*r->at++ != ':') return r->at--, fail(r, "expected ':' after a key");
        skip_ws(r);
        if (!read_value(r, rec)) return false;
        rec->n++;
        skip_ws(r);
        if (*r->at == ',') {
            r->at++;
            skip_ws(r);
        } else if (*r->at != '}') return fail(r, "expected ',' or '}'");
    }
    r->at++;
    skip_ws(r);
    return *r->at == 0 || *r->at == '\n' ? true : fail(r, "text after the object");
}

static const double *field(const Record *rec, const char *key) {
    for (int i = 0; i < rec->n; i++)
        if (rec->is_num[i] && !strcmp(rec->key[i], key)) return &rec->num[i];
    return NULL;
}

/* Step and epoch records become points at their step; what is not a curve is left out. */
static bool add_record(Plot *p, int file, Reader *r, const Record *rec) {
    bool epoch = !strcmp(rec->type, "epoch");
    if (!epoch && strcmp(rec->type, "step")) return true; /* "eval" records have no step */
    const double *step = field(rec, "step");
    if (!step) return fail(r, "a step or epoch record without a \"step\"");
    for (int i = 0; i < rec->n; i++) {
        const char *k = rec->key[i];
        if (!rec->is_num[i] || !strcmp(k, "step") || !strcmp(k, "epoch") || !strcmp(k, "seconds")) continue;
        series_add(&line_for(p, k, file, epoch)->s, *step, rec->num[i]);
    }
    return true;
}

static bool read_metrics(Plot *p, int file, char *err, size_t errlen) {
    size_t len;
    char *text = read_file(p->files[file], &len);
    if (!text) {
        snprintf(err, errlen, "%s: cannot read: %s", p->files[file], strerror(errno));
        return false;
    }
    Reader r = {.file = p->files[file], .err = err, .errlen = errlen};
    int records = 0;
    bool ok = true;
    for (char *s = text; ok && *s;) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = 0;
        r.line++;
        r.start = r.at = s;
        Record rec;
        if (s[strspn(s, " \t\r")]) { /* blank lines are skipped */
            ok = read_record(&r, &rec) && add_record(p, file, &r, &rec);
            records++;
        }
        s = nl ? nl + 1 : s + strlen(s);
    }
    free(text);
    if (ok && !records) snprintf(err, errlen, "%s: no records (an empty metrics file)", p->files[file]);
    return ok && records;
}

/* ---- drawing ---- */

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* 1, 2 or 5 times a power of ten: about n ticks over [lo, hi]. */
static double tick_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* The charts: "loss" holds loss and test_loss, every other key its own. */
static const char *chart_of(const char *key) { return !strcmp(key, "test_loss") ? "loss" : key; }

static void chart_range(const Plot *p, const char *chart, double r[4]) {
    r[0] = r[2] = INFINITY;
    r[1] = r[3] = -INFINITY;
    for (int i = 0; i < p->n; i++) {
        const Line *l = &p->lines[i];
        if (strcmp(chart_of(l->key), chart)) continue;
        for (int k = 0; k < l->s.n; k++) {
            if (!isfinite(l->s.y[k])) continue;
            r[0] = fmin(r[0], l->s.x[k]), r[1] = fmax(r[1], l->s.x[k]);
            r[2] = fmin(r[2], l->s.y[k]), r[3] = fmax(r[3], l->s.y[k]);
        }
    }
    for (int a = 0; a < 4; a += 2) {
        if (!isfinite(r[a])) r[a] = 0, r[a + 1] = 1;
        if (r[a + 1] - r[a] <= fabs(r[a]) * 1e-9) { /* one value: a band around it */
            double d = r[a] ? fabs(r[a]) * 0.1 : 1;
            r[a] -= d, r[a + 1] += d;
        }
    }
}

typedef struct {
    FILE *f;
    double r[4]; /* x lo, hi, y lo, hi */
    int y0; /* the chart's top in the image */
    int top; /* the frame's top below it: the title and the legend above */
} Frame;

static double px(const Frame *fr, double x) {
    return LEFT + (x - fr->r[0]) / (fr->r[1] - fr->r[0]) * (CHART_W - LEFT - RIGHT);
}
static double py(const Frame *fr, double y) {
    return fr->y0 + fr->top + (fr->r[3] - y) / (fr->r[3] - fr->r[2]) * (CHART_H - TOP - BOTTOM);
}

static void draw_axes(const Frame *fr, const char *title) {
    FILE *f = fr->f;
    int x0 = LEFT, x1 = CHART_W - RIGHT, top = fr->y0 + fr->top, bot = top + CHART_H - TOP - BOTTOM;
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", x0, fr->y0 + 20, title);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", x0, top, x1 - x0,
            bot - top);
    for (int a = 0; a < 2; a++) {
        double lo = fr->r[2 * a], hi = fr->r[2 * a + 1], st = tick_step(lo, hi, 5);
        for (double t = ceil(lo / st) * st; t <= hi + st * 1e-9; t += st) {
            double v = fabs(t) < st * 1e-9 ? 0 : t;
            if (a == 0)
                fprintf(f,
                        "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
                        "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n",
                        px(fr, v), top, px(fr, v), bot, px(fr, v), bot + 15, v);
            else
                fprintf(f,
                        "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>"
                        "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>\n",
                        x0, py(fr, v), x1, py(fr, v), x0 - 5, py(fr, v) + 4, v);
        }
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">step</text>\n", (x0 + x1) / 2,
            bot + 32);
}

/* A polyline through the finite points; a long one as each pixel column's min and max. */
static void draw_line(const Frame *fr, const Line *l, const char *color) {
    FILE *f = fr->f;
    const Series *s = &l->s;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"", color, l->epoch ? "2" : "1");
    bool thin = s->n > 2 * (CHART_W - LEFT - RIGHT);
    for (int k = 0; k < s->n;) {
        int col = (int)px(fr, s->x[k]), j = k;
        double lo = INFINITY, hi = -INFINITY, first = s->y[k];
        for (; j < s->n && (thin ? (int)px(fr, s->x[j]) == col : j == k); j++)
            if (isfinite(s->y[j])) lo = fmin(lo, s->y[j]), hi = fmax(hi, s->y[j]);
        if (isfinite(lo)) { /* min then max, or max then min: as the column begins */
            double a = isfinite(first) && first > (lo + hi) / 2 ? hi : lo, b = a == hi ? lo : hi;
            fprintf(f, "%.1f,%.1f ", px(fr, s->x[k]), py(fr, a));
            if (b != a) fprintf(f, "%.1f,%.1f ", px(fr, s->x[j - 1]), py(fr, b));
        }
        k = j;
    }
    fputs("\"/>\n", f);
    for (int k = 0; l->epoch && k < s->n; k++)
        if (isfinite(s->y[k]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(fr, s->x[k]), py(fr, s->y[k]),
                    color);
}

/* Characters that would end an attribute or an element are written as references. */
static void put_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

static int chart_lines(const Plot *p, const char *chart) {
    int n = 0;
    for (int i = 0; i < p->n; i++) n += !strcmp(chart_of(p->lines[i].key), chart);
    return n;
}

/* A chart's height: its legend (one line per curve, right-aligned above the frame) may push
 * the frame down. */
static int chart_top(const Plot *p, const char *chart) {
    int t = 10 + 13 * chart_lines(p, chart);
    return t > TOP ? t : TOP;
}

static int chart_height(const Plot *p, const char *chart) { return CHART_H - TOP + chart_top(p, chart); }

static void draw_chart(const Plot *p, const char *chart, FILE *f, int y0) {
    Frame fr = {.f = f, .y0 = y0, .top = chart_top(p, chart)};
    chart_range(p, chart, fr.r);
    char title[160];
    snprintf(title, sizeof title, "%s", chart);
    draw_axes(&fr, title);
    int legend = 0;
    for (int i = 0; i < p->n; i++) {
        const Line *l = &p->lines[i];
        if (strcmp(chart_of(l->key), chart)) continue;
        /* one colour per file and line kind: step values, epoch means, test values */
        int kind = !strcmp(l->key, "test_loss") ? 2 : l->epoch, c = (l->file * 3 + kind) % 8;
        draw_line(&fr, l, palette[c]);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"%s\" text-anchor=\"end\">", CHART_W - RIGHT,
                y0 + 14 + 13 * legend++, palette[c]);
        if (p->nfiles > 1) {
            put_escaped(f, p->files[l->file]);
            fputs(": ", f);
        }
        put_escaped(f, l->key);
        fprintf(f, " (%s)</text>\n", l->epoch ? "per epoch" : "per step");
    }
}

/* The charts in order of first appearance, the loss first. */
static int chart_list(const Plot *p, const char **out, int max) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < p->n && n < max; i++) {
            const char *c = chart_of(p->lines[i].key);
            bool dup = false;
            for (int k = 0; k < n; k++) dup |= !strcmp(out[k], c);
            if (!dup && (pass == 0) == !strcmp(c, "loss")) out[n++] = c;
        }
    return n;
}

static void write_plot(const Plot *p, FILE *f, bool html) {
    const char *charts[64];
    int n = chart_list(p, charts, 64), total = 0;
    for (int i = 0; i < n; i++) total += chart_height(p, charts[i]);
    if (html) {
        fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>nnc: ", f);
        for (int i = 0; i < p->nfiles; i++) {
            if (i) fputs(", ", f);
            put_escaped(f, p->files[i]);
        }
        fputs("</title></head>\n<body style=\"font-family: sans-serif\">\n", f);
    }
    if (!html)
        fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n",
                CHART_W, total);
    for (int i = 0, y = 0; i < n; y += chart_height(p, charts[i++])) {
        if (html)
            fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">\n", CHART_W,
                    chart_height(p, charts[i]));
        draw_chart(p, charts[i], f, html ? 0 : y);
        if (html) fputs("</svg><br>\n", f);
    }
    fputs(html ? "</body></html>\n" : "</svg>\n", f);
}

static void plot_free(Plot *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->lines[i].key);
        free(p->lines[i].s.x);
        free(p->lines[i].s.y);
    }
    free(p->lines);
}

static const char plot_usage[] = "usage: nnc plot RUN.jsonl [MORE.jsonl...] -o CURVES.html|CURVES.svg\n";

static int usage_error(const char *msg) {
    fprintf(stderr, "nnc plot: error: %s\n%s", msg, plot_usage);
    return 2;
}

int plot_main(int argc, char **argv) {
    const char *out = NULL, *files[16];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(plot_usage, stdout);
            puts("Draws the curves of nnc --metrics files (one colour per file) as a page or an image.");
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1])
            return usage_error(!strcmp(argv[i], "-o") ? "-o needs a file" : "unknown option");
        else if (nfiles == 16) return usage_error("at most 16 metrics files");
        else files[nfiles++] = argv[i];
    }
    if (!nfiles) return usage_error("no metrics file (write one with nnc MODEL.nn --metrics RUN.jsonl)");
    if (!out) return usage_error("no output: -o CURVES.html (a page) or -o CURVES.svg (an image)");
    const char *ext = strrchr(out, '.');
    bool html = ext && (!strcmp(ext, ".html") || !strcmp(ext, ".htm"));
    if (!html && !(ext && !strcmp(ext, ".svg"))) {
        fprintf(stderr,
                "nnc plot: error: -o %s: writes .html (a page) or .svg (an image); PNG would need an image "
                "library, and any browser shows either\n",
                out);
        return 1;
    }
    Plot p = {.files = files, .nfiles = nfiles};
    char err[1024];
    for (int i = 0; i < nfiles; i++)
        if (!read_metrics(&p, i, err, sizeof err)) {
            fprintf(stderr, "nnc plot: error: %s\n", err);
            plot_free(&p);
            return 1;
        }
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "nnc plot: error: %s: cannot write: %s\n", out, strerror(errno));
        plot_free(&p);
        return 1;
    }
    write_plot(&p, f, html);
    bool ok = !ferror(f);
    ok &= fclose(f) == 0;
    plot_free(&p);
    if (!ok) {
        fprintf(stderr, "nnc plot: error: %s: cannot write: %s\n", out, strerror(errno ? errno : EIO));
        return 1;
    }
    return 0;
}
