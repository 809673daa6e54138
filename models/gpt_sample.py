#!/usr/bin/env python3
"""gpt_sample.py - text from models/gpt.nn, drawn as nanoGPT's sample.py draws it: the model's
next-token distribution over the last block_size tokens, divided by a temperature, cut to the
top k, sampled, appended, again.

    nnc models/gpt.nn --save gpt.st                 # train (models/gpt_prepare.py first)
    python3 models/gpt_sample.py --load gpt.st --start "The " --max-new-tokens 300

Needs the nnc Python module (`pip install .` in the checkout: README, "From Python").  The model
runs through its eval entry (no gradients, dropout off) at batch 1: its window holds the context
at positions 0 .. n-1 and zeros after them, and the logits at n-1 are the next token's: causal
attention keeps the later positions from reaching it, so this is what nanoGPT's
model(idx_cond)[:, -1, :] computes on the unpadded context (tests/python/test_gpt_sample.py
checks it against nanoGPT's model in PyTorch).  --seed makes the draw repeatable; --top-k 1 is
greedy decoding.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_prepare  # noqa: E402  (the vocabulary: ITOS, STOI)


def next_logits(m, context, block_size):
    """The logits (float64) of the token after `context`, from its last block_size tokens."""
    ctx = list(context)[-block_size:]
    if not ctx:
        raise ValueError("the context is empty: --start needs at least one character")
    idx = np.zeros((1, block_size), np.int32)
    idx[0, :len(ctx)] = ctx
    out = m.eval(idx=idx, targets=np.zeros((1, block_size), np.int32))
    if "logits" not in out:
        raise ValueError("the model has no output 'logits' (gpt.nn declares `output logits`)")
    return np.asarray(out["logits"][0, len(ctx) - 1], dtype=np.float64)


def sample_next(logits, temperature, top_k, rng):
    """One token from logits / temperature, kept to the top_k largest (0: all), as nanoGPT."""
    z = logits / temperature
    if top_k:
        kth = np.sort(z)[-min(top_k, z.size)]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    return int(rng.choice(z.size, p=p))


def generate(m, start, max_new_tokens, temperature=1.0, top_k=0, rng=None, block_size=None):
    """start + max_new_tokens sampled tokens (a list of ids)."""
    rng = rng if rng is not None else np.random.default_rng()
    block_size = block_size or m.input_shape("idx")[1]
    toks = list(start)
    for _ in range(max_new_tokens):
        toks.append(sample_next(next_logits(m, toks, block_size), temperature, top_k, rng))
    return toks


def encode(text):
    ids, odd = gpt_prepare.encode(text)
    if odd:
        print("note: %d character%s outside the vocabulary became '?'" % (odd, "" if odd == 1 else "s"),
              file=sys.stderr)
    return list(ids)


def decode(ids):
    return "".join(gpt_prepare.ITOS[i] for i in ids)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "gpt.nn"), help="the .nn file (default: gpt.nn here)")
    ap.add_argument("--load", help="a checkpoint nnc --save wrote (default: the model's initial weights)")
    ap.add_argument("--start", default="\n", help="the text to continue (default: a newline)")
    ap.add_argument("--num-samples", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=500)
    ap.add_argument("--temperature", type=float, default=0.8, help="below 1 sharper, above 1 more random")
    ap.add_argument("--top-k", type=int, default=200, help="keep the k likeliest tokens (0: all; 1: greedy)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--target", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args(argv)
    if not a.temperature > 0:
        ap.error("--temperature must be above 0 (--top-k 1 draws greedily)")
    if a.top_k < 0 or a.max_new_tokens < 0 or a.num_samples < 1:
        ap.error("--top-k and --max-new-tokens must be 0 or more, --num-samples 1 or more")
    try:
        import nnc
    except ImportError:
        sys.exit("gpt_sample.py: needs the nnc Python module: `pip install .` in the nnc checkout "
                 "(README, \"From Python\")")
    try:
        m = nnc.compile(a.model, target=a.target, batch=1)
        if a.load:
            state = nnc.load(a.load)
            m.load_state_dict({k: v for k, v in state.items() if not k.startswith("optimizer.")})
    except (nnc.Error, OSError) as e:
        sys.exit("gpt_sample.py: %s" % e)
    if "idx" not in m.inputs or "targets" not in m.inputs:
        sys.exit("gpt_sample.py: %s has inputs %s; expected gpt.nn's idx and targets" % (a.model, ", ".join(m.inputs)))
    start = encode(a.start)
    if not start:
        ap.error("--start is empty")
    block_size = m.input_shape("idx")[1]
    rng = np.random.default_rng(a.seed)
    for _ in range(a.num_samples):
        try:
            out = generate(m, start, a.max_new_tokens, a.temperature, a.top_k, rng, block_size)
        except (nnc.Error, ValueError) as e:
            sys.exit("gpt_sample.py: %s" % e)
        sys.stdout.write(decode(out) + ("\n---------------\n" if a.num_samples > 1 else "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
