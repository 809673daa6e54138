#!/usr/bin/env python3
"""gpt_prepare.py - the text models/gpt.nn learns, as character tokens, made as nanoGPT's
data/shakespeare_char/prepare.py makes its own: the licence texts that Debian ships under
/usr/share/common-licenses (each file once: links are skipped; in name order), one token per
character, the first 90% for training and the rest for validation, written as raw uint16
tokens (train.bin, val.bin) with the vocabulary (vocab.json, nanoGPT's meta.pkl).

The vocabulary is fixed, so that gpt.nn's vocab_size (96) does not depend on which texts a
system has: a newline is 0 and the printable ASCII characters ' ' to '~' are 1 to 95.  A tab
becomes a space, a form feed (a page break) a newline, and any other character '?' (counted and
reported; the licence texts have none).

    gpt_prepare.py [--out DIR] [--max-chars N] [FILE...]

DIR defaults to gpt_data/ beside this script, where gpt.nn reads it; --max-chars keeps the first
N characters (the tests train on a slice).
"""
import argparse
import array
import json
import os
import sys

LICENCES = "/usr/share/common-licenses"
ITOS = ["\n"] + [chr(c) for c in range(32, 127)]
STOI = {ch: i for i, ch in enumerate(ITOS)}


def licence_files():
    names = sorted(os.listdir(LICENCES)) if os.path.isdir(LICENCES) else []
    paths = [os.path.join(LICENCES, n) for n in names]
    return [p for p in paths if os.path.isfile(p) and not os.path.islink(p)]


def encode(text):
    """Token ids, and how many characters outside the vocabulary became '?'."""
    out, odd = array.array("H"), 0
    for ch in text.replace("\t", " ").replace("\f", "\n").replace("\r\n", "\n"):
        i = STOI.get(ch)
        if i is None:
            odd += 1
            i = STOI["?"]
        out.append(i)
    return out, odd


def write_tokens(path, toks):
    if sys.byteorder != "little":   # nanoGPT's np.uint16 files are little-endian
        toks = array.array("H", toks)
        toks.byteswap()
    with open(path, "wb") as f:
        toks.tofile(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="texts to use (default: every file in %s)" % LICENCES)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_data"))
    ap.add_argument("--max-chars", type=int, default=0, help="keep the first N characters (0: all)")
    a = ap.parse_args()
    files = a.files or licence_files()
    if not files:
        sys.exit("gpt_prepare.py: no texts: %s has no files; name some" % LICENCES)
    text = ""
    for p in files:
        with open(p, encoding="utf-8", errors="replace") as f:
            text += f.read()
    if a.max_chars > 0:
        text = text[:a.max_chars]
    toks, odd = encode(text)
    n = len(toks) * 9 // 10
    if n < 2 or len(toks) - n < 2:
        sys.exit("gpt_prepare.py: %d characters are too few to split into training and validation" % len(toks))
    os.makedirs(a.out, exist_ok=True)
    write_tokens(os.path.join(a.out, "train.bin"), toks[:n])
    write_tokens(os.path.join(a.out, "val.bin"), toks[n:])
    with open(os.path.join(a.out, "vocab.json"), "w") as f:
        json.dump({"vocab_size": len(ITOS), "itos": ITOS, "files": files}, f, indent=1)
    print("%d files, %d characters (%d outside the vocabulary, written '?'): %d training tokens, %d validation, "
          "in %s" % (len(files), len(toks), odd, n, len(toks) - n, a.out))


if __name__ == "__main__":
    main()
