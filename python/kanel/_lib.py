# SPDX-License-Identifier: Apache-2.0
"""The C library behind the package: libkanel through ctypes.

Where the library is found, first match wins:

1. ``KANEL_LIBRARY``: the path of ``libkanel.so`` (the tests point it at
   the build tree's);
2. the library of the build this copy of the package comes from
   (``_build_info.LIBDIR``: the build tree's for ``BUILD/python``, the
   installed one after ``meson install``, the package's own folder after
   ``pip install``, where the wheel puts it);
3. the dynamic loader's own search (``libkanel.so.0``).

ctypes releases the GIL around every foreign call, so a worker blocked
in the engine never holds up the program's other Python threads.
"""
import ctypes
import os

try:
    from . import _build_info
except ImportError:  # the source tree itself
    _build_info = None


def _candidates():
    path = os.environ.get("KANEL_LIBRARY")
    if path:
        yield path
        return  # named explicitly: no fallback that would hide a typo
    if _build_info is not None:
        yield os.path.join(_build_info.LIBDIR, "libkanel.so.0")
    yield "libkanel.so.0"  # the dynamic loader's search


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("kanel: cannot load libkanel (set KANEL_LIBRARY to "
                      "its path): " + "; ".join(errors))


lib = _load()

c_int, c_uint, c_size_t, c_double = (ctypes.c_int, ctypes.c_uint,
                                     ctypes.c_size_t, ctypes.c_double)
c_char_p, c_void_p, c_uint64 = ctypes.c_char_p, ctypes.c_void_p, \
    ctypes.c_uint64
POINTER = ctypes.POINTER


class WorkerOptions(ctypes.Structure):
    _fields_ = [("coordinator", c_char_p), ("transport", c_char_p),
                ("secret_file", c_char_p), ("rank", c_int),
                ("timeout_ms", c_uint), ("own_optimizer", c_int)]


class JobInfo(ctypes.Structure):
    _fields_ = [("protocol", c_int), ("protocol_name", c_char_p),
                ("optimizer", c_int), ("summation", c_int),
                ("local_steps", c_int), ("lr", ctypes.c_float),
                ("momentum", ctypes.c_float), ("workers", c_uint),
                ("servers", c_uint), ("staleness", c_uint),
                ("max_skip", c_uint), ("gamma", ctypes.c_float),
                ("theta", ctypes.c_float), ("max_steps", c_uint),
                ("warmup", c_uint), ("alpha", ctypes.c_float),
                ("miss", ctypes.c_float), ("bound", ctypes.c_float),
                ("outer_lr", ctypes.c_float),
                ("outer_momentum", ctypes.c_float),
                ("params", c_double * 32)]  # KN_SYNC_PARAMS_MAX


class SyncParam(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("option", c_char_p),
                ("variable", c_char_p), ("type", c_int),
                ("default_value", c_char_p), ("min", c_double),
                ("max", c_double), ("min_closed", c_int),
                ("choices", POINTER(c_char_p)), ("help", c_char_p)]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


W = c_void_p  # struct kn_worker *
kn_worker_create = _fn("kn_worker_create", c_int, POINTER(WorkerOptions),
                       POINTER(W))
kn_worker_register = _fn("kn_worker_register", c_int, W, c_char_p, c_int,
                         c_size_t, c_void_p, c_void_p)
kn_worker_set_inbox = _fn("kn_worker_set_inbox", c_int, W, c_char_p,
                          c_void_p)
kn_worker_set_priority = _fn("kn_worker_set_priority", c_int, W, c_char_p,
                             c_int)
kn_worker_start = _fn("kn_worker_start", c_int, W)
kn_worker_push = _fn("kn_worker_push", c_int, W, c_char_p, POINTER(c_uint64))
kn_worker_pull = _fn("kn_worker_pull", c_int, W, c_char_p, POINTER(c_uint64))
kn_worker_pushpull = _fn("kn_worker_pushpull", c_int, W, c_char_p,
                         POINTER(c_uint64))
kn_worker_test = _fn("kn_worker_test", c_int, W, c_uint64)
kn_worker_wait = _fn("kn_worker_wait", c_int, W, c_uint64, c_int)
kn_worker_step = _fn("kn_worker_step", c_int, W, c_char_p)
kn_worker_job = _fn("kn_worker_job", c_int, W, POINTER(JobInfo))
kn_worker_step_done = _fn("kn_worker_step_done", c_int, W, c_double, c_uint,
                          POINTER(c_uint))
kn_worker_finish = _fn("kn_worker_finish", c_int, W)
kn_worker_global_model = _fn("kn_worker_global_model", c_int, W, c_char_p,
                             c_void_p)
kn_worker_clock = _fn("kn_worker_clock", c_uint64, W)
kn_worker_rank = _fn("kn_worker_rank", c_uint, W)
kn_worker_size = _fn("kn_worker_size", c_uint, W)
kn_worker_destroy = _fn("kn_worker_destroy", None, W)
kn_sync_name = _fn("kn_sync_name", c_char_p, c_int)
kn_sync_name_at = _fn("kn_sync_name_at", c_char_p, c_uint, POINTER(c_int))
kn_sync_param_at = _fn("kn_sync_param_at", c_int, c_uint, POINTER(SyncParam))
kn_last_message = _fn("kn_last_message", c_size_t, c_char_p, c_size_t)
kn_imbalance_parse = _fn("kn_imbalance_parse", c_int, c_char_p, c_uint64,
                         c_uint, c_char_p, c_size_t, POINTER(c_void_p))
kn_imbalance_format = _fn("kn_imbalance_format", c_int, c_void_p, c_char_p,
                          c_size_t)
kn_imbalance_factor = _fn("kn_imbalance_factor", c_double, c_void_p, c_uint,
                          c_double)
kn_imbalance_destroy = _fn("kn_imbalance_destroy", None, c_void_p)


def last_message():
    buf = ctypes.create_string_buffer(2048)
    n = kn_last_message(buf, len(buf))
    return buf.value[:n].decode("utf-8", "replace")


def protocols():
    """Every name the --sync option takes, as (name, canonical name), in
    the library's order (kn_sync_name_at)."""
    out, i, p = [], 0, c_int()
    while True:
        name = kn_sync_name_at(i, ctypes.byref(p))
        if name is None:
            return out
        out.append((name.decode(), kn_sync_name(p.value).decode()))
        i += 1


def sync_params():
    """The protocols' parameters (kn_sync_param_at), in its order."""
    out, i = [], 0
    while True:
        p = SyncParam()
        if kn_sync_param_at(i, ctypes.byref(p)) != 0:
            return out
        choices = []
        while p.choices and p.choices[len(choices)] is not None:
            choices.append(p.choices[len(choices)].decode())
        out.append((p.name.decode(), p.option.decode(),
                    p.variable.decode(), p.type, p.default_value.decode(),
                    p.min, p.max, bool(p.min_closed), tuple(choices),
                    p.help.decode()))
        i += 1
