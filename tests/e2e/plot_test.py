#!/usr/bin/env python3
"""`nnc plot RUN.jsonl... -o curves.html|.svg`: the charts are well-formed SVG (parsed here as
XML), hold one curve per quantity and file with the points of the --metrics file, keep a spike
of a long series, and bad input is named by file, line and column.

  plot_test.py NNC          last line: "N passed, M failed"
"""

import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "models")
SVG = "{http://www.w3.org/2000/svg}"
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   - " if ok else "FAIL - ") + what, flush=True)
    passed, failed = passed + bool(ok), failed + (not ok)
    return ok


def nnc(*args):
    p = subprocess.run([NNC] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def charts(svg_root):
    """{title: [(legend, [(x, y), ...]), ...]} of one <svg> holding charts."""
    out, title, legends = {}, None, []
    for el in svg_root.iter():
        if el.tag == SVG + "text" and el.get("font-weight") == "bold":
            title = el.text
            out[title] = []
        elif el.tag == SVG + "polyline":
            pts = [tuple(map(float, p.split(","))) for p in el.get("points").split()]
            out[title].append([None, pts])
        elif el.tag == SVG + "text" and el.get("text-anchor") == "end" and el.get("fill"):
            legends.append((title, el.text))
    for t, text in legends:   # legends follow their polylines, in order
        for entry in out[t]:
            if entry[0] is None:
                entry[0] = text
                break
    return out


def main():
    global NNC
    NNC = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        rc, out = nnc(os.path.join(HERE, "progress.nn"), "--quiet", "--metrics", "a.jsonl")
        check(rc == 0, "a run with --metrics (%s)" % out.strip())
        rc, out = nnc("plot", "a.jsonl", "-o", "a.svg")
        if check(rc == 0 and out == "", "nnc plot -o a.svg (%s)" % out.strip()):
            c = charts(ET.parse("a.svg").getroot())
            check(sorted(c) == ["loss", "mse"], "charts: %s" % sorted(c))
            names = [n for n, _ in c.get("loss", [])]
            check(names == ["loss (per step)", "loss (per epoch)", "test_loss (per epoch)"], "loss curves: %s" % names)
            pts = dict((n, p) for n, p in c.get("loss", []))
            check(len(pts.get("loss (per step)", [])) == 600, "600 points for 600 steps")
            check(len(pts.get("test_loss (per epoch)", [])) == 2, "2 points for 2 epochs")
            xs = [x for x, _ in pts.get("loss (per step)", [])]
            check(xs == sorted(xs) and xs[0] == 70 and xs[-1] == 740, "the steps span the frame from left to right")
        rc, out = nnc("plot", "a.jsonl", "-o", "a.html")
        if check(rc == 0, "nnc plot -o a.html"):
            html = open("a.html").read()
            check(html.startswith("<!DOCTYPE html>") and "<script" not in html and "http:" not in html.replace(
                "http://www.w3.org/2000/svg", ""), "a self-contained page: no script, nothing fetched")
            svgs = re.findall(r"<svg.*?</svg>", html, re.S)
            check(len(svgs) == 2 and all(ET.fromstring(s) is not None for s in svgs), "two well-formed SVG charts")
        # a long series is drawn as each pixel column's min and max: 20000 steps, one spike
        with open("long.jsonl", "w") as f:
            for s in range(1, 20001):
                f.write('{"type":"step","epoch":1,"step":%d,"loss":%s}\n' % (s, "9.5" if s == 12345 else
                                                                                  "NaN" if s == 7 else "1.0"))
        rc, out = nnc("plot", "long.jsonl", "-o", "long.svg")
        if check(rc == 0, "20000 steps plotted (%s)" % out.strip()):
            pts = charts(ET.parse("long.svg").getroot())["loss"][0][1]
            top = min(y for _, y in pts)
            check(len(pts) <= 2 * 670 + 2, "%d points for 20000 steps (at most two a pixel column)" % len(pts))
            check(top == 34.0 and sum(1 for _, y in pts if y == top) == 1, "the spike survives: it is the top")
        # several files: one colour each, their names (escaped) in the legends
        os.rename("a.jsonl", "a&b.jsonl")
        rc, out = nnc(os.path.join(MODELS, "linreg.nn"), "--quiet", "--epochs", "50", "--metrics", "lin.jsonl")
        rc, out = nnc("plot", "a&b.jsonl", "lin.jsonl", "-o", "two.svg")
        if check(rc == 0, "two files plotted (%s)" % out.strip()):
            c = charts(ET.parse("two.svg").getroot())
            names = [n for n, _ in c.get("loss", [])]
            check("a&b.jsonl: loss (per step)" in names and "lin.jsonl: loss (per epoch)" in names,
                  "legends name the files: %s" % names)
        # errors: named by file, line and column; nothing written
        with open("bad.jsonl", "w") as f:
            f.write('{"type":"step","step":1,"loss":1}\n\n{"type" "step"}\n')
        for args, want in [
            (["bad.jsonl", "-o", "x.svg"], "nnc plot: error: bad.jsonl:3:9: expected ':' after a key"),
            (["missing.jsonl", "-o", "x.svg"], "missing.jsonl: cannot read: No such file or directory"),
            (["long.jsonl", "-o", "x.png"], "-o x.png: writes .html (a page) or .svg (an image)"),
            (["long.jsonl"], "no output: -o CURVES.html"),
            ([], "no metrics file"),
            (["long.jsonl", "-o", "nodir/x.svg"], "nodir/x.svg: cannot write: No such file or directory"),
        ]:
            rc, out = nnc("plot", *args)
            check(rc != 0 and want in out and not os.path.exists("x.svg"),
                  "plot %s: %s" % (" ".join(args), out.strip()))
        open("empty.jsonl", "w").close()
        rc, out = nnc("plot", "empty.jsonl", "-o", "x.svg")
        check(rc == 1 and "empty.jsonl: no records" in out, "an empty file: %s" % out.strip())
        with open("nested.jsonl", "w") as f:
            f.write('{"type":"step","step":1,"loss":[1]}\n')
        rc, out = nnc("plot", "nested.jsonl", "-o", "x.svg")
        check(rc == 1 and "nested.jsonl:1:32: a nested object or array" in out, "nested JSON: %s" % out.strip())
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
