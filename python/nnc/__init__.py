"""nnc from Python: compile a .nn model, train it step by step on NumPy arrays (or torch tensors),
or fit it as the `nnc` command does, and move its parameters in and out by their .nn names.

    import nnc
    m = nnc.compile("models/mlp.nn")             # or nnc.compile(source_text), target="cuda", precision="bf16"
    loss = m.train_step(x=x, y=y)                # one optimizer step on a batch: a float
    out = m.eval(x=x, y=y)                       # {"loss": ..., "accuracy": ..., ...}, no gradients
    history = m.fit(epochs=3)                    # the train section, as `nnc models/mlp.nn --epochs 3`
    m.save("ckpt.safetensors")                   # as --save: `nnc --load`/`--resume` and PyTorch read it
    m.load_state_dict(nnc.load("ckpt.safetensors"))

Inputs are anything with the array interface or DLPack (NumPy arrays, torch CPU tensors): one of
the model's dtype (float32, int32 labels) and C-contiguous is passed to the compiled step without
a copy; anything else is converted (integer labels must fit in int32).  The model's memory is
the C library's (libnnc.so, include/nnc.h): parameters and outputs are returned as copies.
"""

import json
import os
import struct
import tempfile
from ctypes import POINTER, c_double, c_float, c_int32, c_ubyte, c_void_p, cast, create_string_buffer

import numpy as np

from . import _lib
from ._lib import ENTRY_ACCUM, ENTRY_EVAL, ENTRY_GRAD, ENTRY_TRAIN, SYNC_TO_DEVICE, SYNC_TO_HOST, TYPE_I32, lib

__all__ = ["compile", "load", "Model", "Error", "__version__"]
__version__ = lib.nnc_version().decode()

_TARGETS = {"cpu": 0, "cuda": 1}
_PRECISIONS = {None: 0, "f32": 1, "bf16": 2, "f16": 3}


class Error(Exception):
    """A model that does not compile (the message holds the file:line:col diagnostics), an input
    of the wrong shape or type, a step the model refused, a training run that failed."""


def compile(model, *, target="cpu", precision=None, batch=None, epochs=None, lr=None, seed=None, f64=False,
            fuse=True, cache=True, name=None):
    """Compiles a model: a path to a .nn file, or the model's text itself (a string with a newline).

    target: "cpu" or "cuda".  precision: None (the file's), "f32", "bf16" or "f16" (as --precision).
    batch, epochs, lr, seed: replace the train section's (as the flags of the same names).
    f64: compute in double precision (gradient checks).  fuse: fuse elementwise ops.  cache: use
    the compiled-kernel cache, as the command does.  name: the file name diagnostics show for a
    model given as text (default "model.nn"; it also names the model).
    The model is initialised from its seed, as `nnc` starts.
    """
    if isinstance(model, str) and "\n" in model:
        text, file = model, name or "model.nn"
    else:
        file = os.fspath(model)
        with open(file, "rb") as f:
            data = f.read()
        if b"\0" in data:
            raise Error("%s: contains a NUL byte at offset %d: not a model file" % (file, data.index(b"\0")))
        text = data.decode("utf-8", errors="strict")
    if target not in _TARGETS:
        raise Error("target: expected 'cpu' or 'cuda', got %r" % (target,))
    if precision not in _PRECISIONS:
        raise Error("precision: expected 'f32', 'bf16' or 'f16', got %r" % (precision,))
    o = lib.nnc_default_options()
    o.target, o.precision, o.f64, o.fuse, o.use_cache = _TARGETS[target], _PRECISIONS[precision], bool(f64), bool(
        fuse), bool(cache)
    if batch is not None:
        o.batch = _positive("batch", batch)
    if epochs is not None:
        o.epochs = _positive("epochs", epochs)
    if lr is not None:
        o.has_lr, o.lr = 1, float(lr)
    if seed is not None:
        if not 0 <= int(seed) < 2 ** 64:
            raise Error("seed: expected an integer from 0 to 2**64 - 1, got %r" % (seed,))
        o.has_seed, o.seed = 1, int(seed)
    err = create_string_buffer(16384)
    handle = lib.nnc_compile(file.encode(), text.encode(), o, err, len(err))
    if not handle:
        raise Error(err.value.decode(errors="replace").rstrip("\n"))
    return Model(handle, file)


def _positive(what, v):
    if int(v) != v or not 0 < int(v) < 2 ** 31:
        raise Error("%s: expected an integer from 1 to 2**31 - 1, got %r" % (what, v))
    return int(v)


def _dims(info, batch):
    return tuple(-int(info.dims[i]) * batch if info.dims[i] < 0 else int(info.dims[i]) for i in range(info.rank))


def _infos(ptr, n):
    return [ptr[i] for i in range(n)]


def _as_array(value, what):
    """A NumPy view of `value` where one can be had without a copy (the array interface, DLPack)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__array_interface__"):
        return np.asarray(value)
    if hasattr(value, "__dlpack__"):
        if hasattr(value, "__dlpack_device__") and int(value.__dlpack_device__()[0]) != 1:   # kDLCPU
            raise Error("%s: the tensor is not in host memory (DLPack device %s): pass it as x.cpu()"
                        % (what, value.__dlpack_device__()))
        try:
            return np.from_dlpack(value)
        except (RuntimeError, TypeError, BufferError) as e:
            raise Error("%s: %s" % (what, e)) from None
    return np.asarray(value)


def _convert(arr, want, what):
    """arr as dtype `want`, C-contiguous: itself when it already is, else a checked copy."""
    if arr.dtype == want and arr.flags.c_contiguous and arr.flags.aligned:
        return arr
    if arr.dtype.kind not in "biuf":
        raise Error("%s: expected numbers, got an array of dtype %s" % (what, arr.dtype))
    if want == np.int32 and arr.size:
        if arr.dtype.kind == "f" and not np.array_equal(arr, np.floor(arr)):
            raise Error("%s: expected integer labels, got a %s array holding a fraction" % (what, arr.dtype))
        lo, hi = arr.min(), arr.max()
        if lo < -2 ** 31 or hi >= 2 ** 31:
            raise Error("%s: label %s does not fit in int32" % (what, lo if lo < -2 ** 31 else hi))
    return np.ascontiguousarray(arr, dtype=want)


def _safetensors_read(path):
    """{name: array}, and the metadata, of a safetensors file (what nnc --save and PyTorch write)."""
    dtypes = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "F16": "<f2", "U8": "u1", "I8": "i1",
              "I16": "<i2", "BOOL": "?"}
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise Error("%s: %d bytes: too short for a safetensors file" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise Error("%s: header of %d bytes at offset 8 runs past the end of the file (%d bytes)"
                    % (path, n, len(data)))
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise Error("%s: the header (offset 8, %d bytes) is not JSON: %s" % (path, n, e)) from None
    meta = header.pop("__metadata__", {}) or {}
    out, body = StateDict(), memoryview(data)[8 + n:]
    for name, t in header.items():
        begin, end = t["data_offsets"]
        if not 0 <= begin <= end <= len(body):
            raise Error("%s: tensor '%s': data_offsets [%d, %d] outside the data (%d bytes)" % (path, name, begin, end,
                                                                                                len(body)))
        if t["dtype"] == "BF16":   # bf16 is the top half of an f32
            raw = np.frombuffer(body[begin:end], dtype="<u2").astype(np.uint32) << 16
            a = raw.view(np.float32)
        elif t["dtype"] in dtypes:
            a = np.frombuffer(body[begin:end], dtype=dtypes[t["dtype"]]).copy()
        else:
            raise Error("%s: tensor '%s': dtype %s is not supported" % (path, name, t["dtype"]))
        if a.size != int(np.prod(t["shape"], dtype=np.int64)):
            raise Error("%s: tensor '%s': %d values for shape %s" % (path, name, a.size, t["shape"]))
        out[name] = a.reshape(t["shape"])
    out.metadata = dict(meta)
    return out


class StateDict(dict):
    """A dict of arrays by .nn name; `metadata` holds a checkpoint's (nnc_step, the hyperparameters)."""
    metadata = {}


def load(path):
    """A checkpoint's tensors by name (parameters as "fc1.weight", optimizer state as
    "optimizer.fc1.weight.exp_avg"), for Model.load_state_dict; `.metadata` holds the rest."""
    return _safetensors_read(os.fspath(path))


class Model:
    """A compiled model and its memory: parameters, optimizer state and step."""

    def __init__(self, handle, file):
        self._h = c_void_p(handle)
        self.file = file
        self._abi = lib.nnc_abi(self._h).contents
        if self._abi.abi_version != _lib.ABI_VERSION:
            raise Error("libnnc.so speaks model ABI %d, this module %d: reinstall it" % (self._abi.abi_version,
                                                                                         _lib.ABI_VERSION))
        self._m = lib.nnc_model(self._h)
        a = self._abi
        self.name = a.name.decode()
        self.batch_max = int(a.batch_max)
        self._real = np.float64 if a.real_bytes == 8 else np.float32
        self._inputs = _infos(a.inputs, a.ninputs)
        self._params = _infos(a.params, a.nparams)
        self._states = _infos(a.states, a.nstates)
        self.inputs = [i.name.decode() for i in self._inputs]
        self.seed = int(lib.nnc_seed(self._h))

    def __repr__(self):
        return "<nnc.Model %s from %s: inputs %s, %d parameters, batch up to %d>" % (
            self.name, self.file, ", ".join(self.inputs), len(self._params), self.batch_max)

    def close(self):
        """Frees the model (also when it is garbage-collected)."""
        h, self._h = getattr(self, "_h", None), None
        if h and lib is not None:   # at interpreter exit the module's globals may be gone
            lib.nnc_free(h)

    def __del__(self):
        self.close()

    def _check_open(self):
        if not self._h:
            raise Error("the model was closed")

    def input_shape(self, name, batch=1):
        """Input `name`'s shape at a batch size (the batch axis and those merged with it scale)."""
        for info in self._inputs:
            if info.name.decode() == name:
                return _dims(info, _positive("batch", batch))
        raise Error("input_shape: the model has no input '%s' (its inputs: %s)" % (name, ", ".join(self.inputs)))

    @property
    def step(self):
        """Optimizer steps taken (train_step and fit advance it)."""
        self._check_open()
        return int(self._abi.get_step(self._m))

    def set_lr(self, lr):
        """The learning rate of the steps from now on, as torch's param_group["lr"] = lr; for a
        model whose train section has an lr_schedule (another has its rate compiled in)."""
        self._check_open()
        if self._abi.set_lr(self._m, float(lr)) != 0:
            raise Error(self._abi.error(self._m).decode(errors="replace"))

    @property
    def source(self):
        """The generated C (or CUDA) source."""
        self._check_open()
        return lib.nnc_source(self._h).decode()

    # ---- running the entries ----

    def _bind(self, args, kwargs):
        """The inputs as arrays the step reads in place: (pointer array, arrays to keep alive, batch)."""
        if len(args) > len(self.inputs):
            raise Error("%d positional inputs for a model with %d (%s)" % (len(args), len(self.inputs),
                                                                            ", ".join(self.inputs)))
        given = dict(zip(self.inputs, args))
        for k, v in kwargs.items():
            if k not in self.inputs:
                raise Error("no input named '%s' (this model's inputs: %s)" % (k, ", ".join(self.inputs)))
            if k in given:
                raise Error("input '%s' given twice" % k)
            given[k] = v
        arrays, batch, batch_from = {}, None, None
        for info in self._inputs:
            name = info.name.decode()
            if name not in given:
                continue
            what = "input '%s'" % name
            a = _as_array(given[name], what)
            dims = [int(info.dims[i]) for i in range(info.rank)]
            axis = dims.index(-1) if -1 in dims else None
            b = None if axis is None else (a.shape[axis] if a.ndim == info.rank else a.shape[0] if a.ndim else None)
            if b is not None and batch is not None and b != batch:
                raise Error("input '%s' has %d rows, input '%s' %d: one batch has one size" % (name, b, batch_from,
                                                                                            batch))
            if b is not None:
                batch, batch_from = b, name
            want = _dims(info, b if b is not None else 1)
            if a.shape != want:   # [B, 28, 28] images feed f32[B, 784], as the train section's data does
                if axis != 0 or a.ndim == 0 or a.size != int(np.prod(want, dtype=np.int64)):
                    raise Error("input '%s': expected shape %s, got %s" % (name, _shape_str(info, "B"),
                                                                            list(a.shape)))
                a = a.reshape(want)
            arrays[name] = _convert(a, np.int32 if info.dtype == TYPE_I32 else self._real, what)
        if batch is None:
            batch = 1
        if not 1 <= batch <= self.batch_max:
            raise Error("a batch of %d rows: this model takes 1 to %d (the train section's batch, or "
                        "nnc.compile(..., batch=N))" % (batch, self.batch_max))
        ptrs = (c_void_p * max(1, len(self._inputs)))()
        for i, info in enumerate(self._inputs):
            a = arrays.get(info.name.decode())
            ptrs[i] = a.ctypes.data if a is not None else None
        return ptrs, arrays, batch

    def _run(self, entry, args, kwargs):
        self._check_open()
        ptrs, keep, batch = self._bind(args, kwargs)
        rc = self._abi.run(self._m, entry, ptrs, batch)
        del keep   # the step has returned: it holds no pointer into them
        if rc != 0:
            raise Error(self._abi.error(self._m).decode(errors="replace"))
        return batch

    def _output(self, entry, k, batch):
        info = self._abi.outputs[entry][k]
        p = self._abi.output(self._m, entry, k)
        if not p:
            return None
        ctype, dtype = (c_int32, np.int32) if info.dtype == TYPE_I32 else (
            (c_double, np.float64) if self._real == np.float64 else (c_float, np.float32))
        shape = _dims(info, batch)
        n = int(np.prod(shape, dtype=np.int64))
        a = np.ctypeslib.as_array(cast(p, POINTER(ctype)), shape=(max(n, 1),))[:n].reshape(shape).astype(dtype)
        return float(a) if info.rank == 0 and info.dtype != TYPE_I32 else (int(a) if info.rank == 0 else a)

    def _outputs(self, entry, batch):
        return {self._abi.outputs[entry][k].name.decode(): self._output(entry, k, batch)
                for k in range(self._abi.noutputs[entry])}

    def train_step(self, *args, **inputs):
        """One training step (forward, backward, optimizer update) on a batch; returns the loss.
        Inputs by name (x=..., y=...) or in the model's order."""
        batch = self._run(ENTRY_TRAIN, args, inputs)
        return self._output(ENTRY_TRAIN, 0, batch)

    def accumulate(self, *args, **inputs):
        """With `accumulate = k` in the train section: one micro-batch's forward and backward, its
        gradients (of loss / k) added to the group's, no update; train_step on the group's last
        micro-batch then steps with the sum, as a torch loop of (loss / k).backward() per
        micro-batch and one opt.step().  Returns the micro-batch's loss."""
        batch = self._run(ENTRY_ACCUM, args, inputs)
        return self._output(ENTRY_ACCUM, 0, batch)

    def eval(self, *args, **inputs):
        """The forward pass with no gradients (dropout off, batch norm's running statistics), as
        `no_grad` evaluation: {"loss": float, metric: float, output: array, ...} for this batch.
        `accuracy` is the count of correct rows in the batch, as the op defines it."""
        batch = self._run(ENTRY_EVAL, args, inputs)
        return self._outputs(ENTRY_EVAL, batch)

    def grad(self, *args, **inputs):
        """The loss and every parameter's gradient on a batch, without an update:
        {"loss": float, "grad.fc1.weight": array, ...}."""
        batch = self._run(ENTRY_GRAD, args, inputs)
        return self._outputs(ENTRY_GRAD, batch)

    # ---- training as the command does ----

    def fit(self, epochs=None, *, metrics=None, tensorboard=None, save=None, log_every=None, quiet=False,
            progress=None):
        """Runs the train section (its data, batches, shuffling, test set, schedule) as
        `nnc MODEL.nn` does, from the model as it stands; prints its epoch lines (and, on a
        terminal, the progress line).  epochs, metrics, tensorboard, save, log_every and quiet
        are the flags of the same names; progress: None (on a terminal), True or False.
        Returns the epoch records of --metrics: [{"epoch": 1, "step": 938, "loss": ...}, ...].
        A failed run raises Error (the reason is printed on stderr, as the command prints it);
        Ctrl-C stops at the end of the step (at an epoch's last step, after the epoch's records),
        saving to `save`, and raises KeyboardInterrupt."""
        self._check_open()
        o = lib.nnc_default_fit_options()
        if epochs is not None:
            o.epochs = _positive("epochs", epochs)
        if log_every is not None:
            o.log_every = _positive("log_every", log_every)
        o.quiet = bool(quiet)
        o.progress = -1 if progress is None else int(bool(progress))
        with tempfile.TemporaryDirectory(prefix="nnc-fit-") as tmp:
            path = os.fspath(metrics) if metrics is not None else os.path.join(tmp, "metrics.jsonl")
            o.metrics = path.encode()
            o.tensorboard = os.fspath(tensorboard).encode() if tensorboard is not None else None
            o.save = os.fspath(save).encode() if save is not None else None
            rc = lib.nnc_fit(self._h, o)
            history = []
            if os.path.exists(path):
                with open(path) as f:
                    history = [r for r in map(json.loads, f) if r.get("type") == "epoch"]
        if rc in (130, 143):
            raise KeyboardInterrupt("nnc: training stopped by a signal at step %d" % self.step)
        if rc != 0:
            raise Error("fit: training failed (the reason is printed above, on standard error)")
        return history

    # ---- parameters ----

    def _tensor(self, info, p):
        dtype = np.int32 if info.dtype == TYPE_I32 else self._real
        shape = _dims(info, 1)
        n = int(np.prod(shape, dtype=np.int64))
        size = n * np.dtype(dtype).itemsize
        raw = np.ctypeslib.as_array(cast(p, POINTER(c_ubyte)), shape=(max(1, size),))[:size]
        return raw, np.dtype(dtype), shape

    def state_dict(self, optimizer=False):
        """{name: array}: every parameter and buffer by its .nn name ("fc1.weight"), as PyTorch's
        module.state_dict(); optimizer=True adds the optimizer's state as a checkpoint names it
        ("optimizer.fc1.weight.exp_avg").  Copies."""
        self._check_open()
        self._abi.sync(self._m, SYNC_TO_HOST)
        out = StateDict()
        groups = [("", self._params, self._abi.param)] + ([("optimizer.", self._states, self._abi.state)]
                                                          if optimizer else [])
        for prefix, infos, get in groups:
            for i, info in enumerate(infos):
                if info.role == _lib.ROLE_GRAD_SUM:   # a group's gradient sum: checkpoints keep none
                    continue
                raw, dtype, shape = self._tensor(info, get(self._m, i))
                out[prefix + info.name.decode()] = raw.view(dtype).reshape(shape).copy()
        out.metadata = {"nnc_step": str(self.step)}
        return out

    def load_state_dict(self, state, strict=True):
        """Copies tensors in by name: parameters and buffers, and "optimizer.<name>" state (a
        checkpoint's; its step is taken from nnc.load's metadata then).  strict: every parameter
        must be given and no other name.  Shapes must match; values are converted to the
        model's dtype.  Returns (missing, unexpected) names."""
        self._check_open()
        targets = {info.name.decode(): (info, self._abi.param, i) for i, info in enumerate(self._params)}
        targets.update({"optimizer." + info.name.decode(): (info, self._abi.state, i)
                        for i, info in enumerate(self._states) if info.role != _lib.ROLE_GRAD_SUM})
        unexpected = [k for k in state if k not in targets]
        missing = [info.name.decode() for info in self._params if info.name.decode() not in state]
        if strict and (unexpected or missing):
            raise Error("load_state_dict: %s" % "; ".join(
                (["missing: " + ", ".join(missing)] if missing else []) +
                (["unexpected: " + ", ".join(unexpected)] if unexpected else [])))
        values = {}
        for k, v in state.items():
            if k not in targets:
                continue
            info = targets[k][0]
            a = _as_array(v, "load_state_dict: '%s'" % k)
            if a.shape != _dims(info, 1):
                raise Error("load_state_dict: '%s' has shape %s, the model's is %s" % (k, list(a.shape),
                                                                                     list(_dims(info, 1))))
            values[k] = _convert(a, np.int32 if info.dtype == TYPE_I32 else self._real, "load_state_dict: '%s'" % k)
        self._abi.sync(self._m, SYNC_TO_HOST)   # the tensors not given keep their values
        for k, a in values.items():
            info, get, i = targets[k]
            raw, dtype, shape = self._tensor(info, get(self._m, i))
            raw[:] = a.reshape(-1).view(np.uint8)
        step = getattr(state, "metadata", {}).get("nnc_step")
        if step is not None and any(k.startswith("optimizer.") for k in values):
            self._abi.set_step(self._m, int(step))
        self._abi.sync(self._m, SYNC_TO_DEVICE)
        return missing, unexpected

    def save(self, path):
        """Writes a checkpoint as `nnc --save` does: parameters, optimizer state, step, position
        and hyperparameters (safetensors; `nnc --load`/`--resume`, nnc.load and PyTorch read it)."""
        self._check_open()
        err = create_string_buffer(4096)
        if lib.nnc_save(self._h, os.fspath(path).encode(), err, len(err)) != 0:
            raise Error(err.value.decode(errors="replace"))


def _shape_str(info, batch):
    def dim(d):
        return str(d) if d >= 0 else batch if d == -1 else "%s*%d" % (batch, -d)
    return "[" + ", ".join(dim(int(info.dims[i])) for i in range(info.rank)) + "]"
