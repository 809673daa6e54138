"""ctypes bindings of include/nnc.h and include/nnc_abi.h (the C structs mirrored field by field).

libnnc.so is found next to this file (where `pip install .` puts it), or at $NNC_LIBRARY.
"""

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_long,
                    c_size_t, c_uint32, c_uint64, c_ulonglong, c_void_p)

ABI_VERSION = 5
ENTRY_TRAIN, ENTRY_GRAD, ENTRY_EVAL, ENTRY_ACCUM = 0, 1, 2, 3
TYPE_F32, TYPE_I32, TYPE_F64 = 0, 1, 2
SYNC_TO_DEVICE, SYNC_TO_HOST = 0, 1
ROLE_GRAD_SUM = 7   # nnc_tensor_info.role of a gradient sum (accumulate), which checkpoints leave out


class TensorInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int), ("dims", c_int64 * 4), ("role", c_int)]


class InputRule(Structure):
    """nnc_input_rule: what an i32 input's values must be (bound 0: any), from what reads them."""
    _fields_ = [("bound", c_int64), ("has_ignore", c_int), ("ignore", c_int32), ("reader", c_char_p), ("at", c_char_p)]


class ModelABI(Structure):
    """nnc_model_abi (include/nnc_abi.h, NNC_ABI_VERSION 5)."""
    _fields_ = [
        ("abi_version", c_uint32), ("name", c_char_p), ("real_bytes", c_int), ("batch_max", c_int64),
        ("ninputs", c_int), ("nparams", c_int), ("nstates", c_int),
        ("inputs", POINTER(TensorInfo)), ("params", POINTER(TensorInfo)), ("states", POINTER(TensorInfo)),
        ("noutputs", c_int * 4), ("outputs", POINTER(TensorInfo) * 4),
        ("param_bytes", c_size_t), ("state_bytes", c_size_t), ("act_bytes", c_size_t),
        ("create", CFUNCTYPE(c_void_p, c_void_p)), ("destroy", CFUNCTYPE(None, c_void_p)),
        ("init", CFUNCTYPE(None, c_void_p, c_uint64)),
        ("run", CFUNCTYPE(c_int, c_void_p, c_int, POINTER(c_void_p), c_int64)),
        ("param", CFUNCTYPE(c_void_p, c_void_p, c_int)), ("state", CFUNCTYPE(c_void_p, c_void_p, c_int)),
        ("output", CFUNCTYPE(c_void_p, c_void_p, c_int, c_int)),
        ("get_step", CFUNCTYPE(c_int64, c_void_p)), ("set_step", CFUNCTYPE(None, c_void_p, c_int64)),
        ("error", CFUNCTYPE(c_char_p, c_void_p)), ("sync", CFUNCTYPE(None, c_void_p, c_int)),
        ("collectives", c_int), ("set_comm", c_void_p), ("set_lr", CFUNCTYPE(c_int, c_void_p, c_double)),
        ("batch_name", c_char_p), ("input_rules", POINTER(InputRule)),
        ("input_buffer", CFUNCTYPE(c_void_p, c_void_p, c_int)),
        ("submit", CFUNCTYPE(c_int, c_void_p, c_int, POINTER(c_void_p), c_int64)),
        ("finish", CFUNCTYPE(c_int, c_void_p)),
        ("keep", CFUNCTYPE(c_int, c_void_p, c_int, c_void_p, c_int64, c_int, c_float, c_int)),
        ("submit_rows", CFUNCTYPE(c_int, c_void_p, c_int, POINTER(POINTER(c_int64)), c_int64)),
    ]


class Options(Structure):
    """nnc_options (include/nnc.h)."""
    _fields_ = [("target", c_int), ("fuse", c_int), ("f64", c_int), ("batch", c_int), ("strict_devices", c_int),
                ("use_cache", c_int), ("cc", c_char_p), ("precision", c_int), ("epochs", c_int), ("has_lr", c_int),
                ("lr", c_double), ("has_seed", c_int), ("seed", c_ulonglong)]


class FitOptions(Structure):
    """nnc_fit_options (include/nnc.h)."""
    _fields_ = [("epochs", c_int), ("quiet", c_int), ("progress", c_int), ("log_every", c_long),
                ("metrics", c_char_p), ("tensorboard", c_char_p), ("save", c_char_p)]


def _find():
    path = os.environ.get("NNC_LIBRARY") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "libnnc.so")
    if not os.path.exists(path):
        raise ImportError("nnc: %s not found: install the module with `pip install .` in the nnc checkout "
                          "(it builds libnnc.so), or set NNC_LIBRARY to a libnnc.so built with cmake" % path)
    return path


def _load():
    lib = ctypes.CDLL(_find())
    sig = {
        "nnc_default_options": (Options, []),
        "nnc_compile": (c_void_p, [c_char_p, c_char_p, POINTER(Options), c_char_p, c_size_t]),
        "nnc_abi": (POINTER(ModelABI), [c_void_p]),
        "nnc_model": (c_void_p, [c_void_p]),
        "nnc_source": (c_char_p, [c_void_p]),
        "nnc_free": (None, [c_void_p]),
        "nnc_seed": (c_ulonglong, [c_void_p]),
        "nnc_version": (c_char_p, []),
        "nnc_default_fit_options": (FitOptions, []),
        "nnc_fit": (c_int, [c_void_p, POINTER(FitOptions)]),
        "nnc_save": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


lib = _load()
