# SPDX-License-Identifier: Apache-2.0
"""Kanel from Python: a worker of a Kanel job (docs/python.md).

    import kanel
    with kanel.Worker() as w:               # the launcher's environment
        w.register("weights", params, grads)  # NumPy arrays, torch tensors
        w.start()                             # rank 0's values everywhere
        for step in range(steps):
            compute_gradients(params, grads)
            w.step_done()                     # what the job's protocol says

Every call mirrors a ``kn_worker_*`` function of ``kanel.h``; a negative
errno becomes :class:`Error`.  Registered buffers are the program's own
memory: the engine reads gradients from them and writes parameters into
them, no copy per step.  The worker keeps a reference to every buffer it
registered until it is closed.
"""
import ctypes
import errno as _errno
import os
import signal
import subprocess
import time
from dataclasses import dataclass, make_dataclass

from . import _lib

__all__ = ["Error", "Worker", "Job", "Imbalance", "STEP_LOCAL",
           "STEP_PUSHED", "STEP_SYNCED", "PROTOCOLS", "PARAMS", "Param"]

# kanel.h's enum kn_step_result
STEP_LOCAL, STEP_PUSHED, STEP_SYNCED = 0, 1, 2
# kanel.h's enum kn_sync, by name, as the library lists them
# (kn_sync_name_at): every name --sync takes, to the protocol's own
# ("psp" is another name of "predicted")
_SYNC_NAMES = dict(_lib.protocols())
PROTOCOLS = tuple(dict.fromkeys(_SYNC_NAMES.values()))
_OPTIMIZERS = ("sgd", "momentum", "adam")


class Error(OSError):
    """A Kanel call failed: ``errno``, ``strerror`` and the engine's
    last logged line (``engine_message``), which says why."""

    def __init__(self, code, call, message=None):
        if message is None:
            message = _lib.last_message()
        self.engine_message = message
        self.call = call
        text = f"{call}: {os.strerror(code)}"
        if message:
            text += f" ({message})"
        super().__init__(code, text)


def _check(ret, call):
    if ret < 0:
        raise Error(-ret, call)
    return ret


def protocol_name(name):
    """The canonical name of a protocol: ``psp`` is ``predicted``."""
    n = _SYNC_NAMES.get(name.strip().lower())
    if n is None:
        others = [a for a, p in _SYNC_NAMES.items() if a != p]
        raise ValueError(f"kanel: unknown protocol {name!r}: one of "
                         + ", ".join(PROTOCOLS) + " (or "
                         + ", ".join(others) + ")")
    return n


@dataclass(frozen=True)
class Param:
    """A protocol parameter, as the library's table has it
    (``kn_sync_param_at``): its option and variable, its type (int,
    float, or str for one of ``choices``), default, range and help."""
    name: str
    option: str
    variable: str
    type: type
    default: object
    min: float
    max: float
    min_closed: bool
    choices: tuple
    help: str

    def value(self, number):
        """The parameter's value from its number in ``kn_job_info``."""
        if self.type is str:
            return self.choices[int(number)]
        return self.type(number)


_PARAM_TYPES = {1: int, 2: float, 3: str}  # enum kn_sync_param_type


def _param(name, option, variable, kind, default, *rest):
    t = _PARAM_TYPES[kind]
    return Param(name, option, variable, t, t(default), *rest)


# The protocols' parameters, in the library's order; a new one appears
# here, and as a field of Job, with no edit.
PARAMS = tuple(_param(*row) for row in _lib.sync_params())

Job = make_dataclass(
    "Job",
    [("protocol", str),
     ("optimizer", str),  # "sgd", "momentum", "adam", or "sum"
     ("local_steps", bool),  # ESP, PSP: the optimizer runs on the workers
     ("lr", float), ("momentum", float), ("workers", int),
     ("servers", int)] + [(p.name, p.type) for p in PARAMS],
    frozen=True)
Job.__module__ = __name__
Job.__doc__ = """What the job runs (``kn_worker_job``): its protocol,
optimizer, rates and counts, and one field per protocol parameter
(PARAMS), each named as the parameter."""


# ---- buffers: the program's own memory, checked -------------------------

_NUMPY_DTYPES = {"float32": 0, "float16": 1}
_BUFFER_FORMATS = {"f": 0, "e": 1}
_DTYPE_NAMES = {0: "fp32", 1: "fp16", 2: "bf16"}


class _Buffer:
    """A registered buffer: its address, its element type and count, the
    object it belongs to (kept alive while registered), and a check that
    it still is where it was registered."""

    def __init__(self, obj, what):
        self.obj = obj
        self.what = what
        mod = type(obj).__module__
        if mod.startswith("torch"):
            self._torch(obj)
        elif mod.startswith("numpy"):
            self._numpy(obj)
        else:
            self._buffer(obj)

    def _torch(self, t):
        import torch
        dtypes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"kanel: {self.what}: a {type(t).__name__} is "
                            "not a tensor")
        if t.device.type != "cpu":
            raise ValueError(f"kanel: {self.what}: a tensor on "
                             f"{t.device} (only CPU memory is registered)")
        if t.dtype not in dtypes:
            raise TypeError(f"kanel: {self.what}: dtype {t.dtype}; "
                            "float32, float16 or bfloat16 only")
        if not t.is_contiguous():
            raise ValueError(f"kanel: {self.what}: not contiguous "
                             "(register t.contiguous() and keep it)")
        self.dtype = dtypes[t.dtype]
        self.count = t.numel()
        self.addr = t.data_ptr()
        self.where = lambda: self.obj.data_ptr()

    def _numpy(self, a):
        import numpy
        if not isinstance(a, numpy.ndarray):
            raise TypeError(f"kanel: {self.what}: a {type(a).__name__} is "
                            "not an array")
        if a.dtype.name not in _NUMPY_DTYPES:
            raise TypeError(f"kanel: {self.what}: dtype {a.dtype}; float32 "
                            "or float16 only (bfloat16 through torch)")
        if not a.flags["C_CONTIGUOUS"]:
            raise ValueError(f"kanel: {self.what}: not C-contiguous "
                             "(numpy.ascontiguousarray, and keep it)")
        if not a.flags["WRITEABLE"]:
            raise ValueError(f"kanel: {self.what}: read-only array")
        self.dtype = _NUMPY_DTYPES[a.dtype.name]
        self.count = a.size
        self.addr = a.ctypes.data
        self.where = lambda: self.obj.ctypes.data

    def _buffer(self, obj):
        try:
            view = memoryview(obj)
        except TypeError:
            raise TypeError(f"kanel: {self.what}: a {type(obj).__name__} "
                            "is neither a tensor, an array nor a buffer"
                            ) from None
        fmt = view.format.lstrip("@=<")
        if fmt not in _BUFFER_FORMATS:
            raise TypeError(f"kanel: {self.what}: buffer format "
                            f"{view.format!r}; 'f' (float32) or 'e' "
                            "(float16) only")
        if view.readonly:
            raise ValueError(f"kanel: {self.what}: read-only buffer")
        if not view.c_contiguous:
            raise ValueError(f"kanel: {self.what}: not contiguous")
        # The ctypes object holds an export of the buffer: an
        # array.array or bytearray cannot be resized away under us.
        self._export = (ctypes.c_char * view.nbytes).from_buffer(view)
        self.dtype = _BUFFER_FORMATS[fmt]
        self.count = view.nbytes // view.itemsize
        self.addr = ctypes.addressof(self._export)
        self.where = lambda: self.addr

    def check(self):
        """Raise ValueError if the memory moved since registration."""
        if self.where() != self.addr:
            raise ValueError(f"kanel: {self.what}: its memory moved since "
                             "it was registered (a tensor's .data or an "
                             "array was replaced or resized)")


# ---- the launchers' environment ---------------------------------------

def _torchrun_env():
    """Map torchrun's variables to Kanel's, where Kanel's are not set.

    Kanel's own variables win, then Slurm's and Open MPI's (read by the
    engine itself), then torchrun's: ``RANK`` becomes ``KANEL_RANK`` and
    ``WORLD_SIZE`` ``KANEL_WORKERS``; the coordinator listens at
    ``MASTER_ADDR`` on ``MASTER_PORT + 1`` (torchrun's own store has
    ``MASTER_PORT``).  Returns True when torchrun's variables were used.
    """
    env = os.environ
    need = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    if env.get("KANEL_COORDINATOR") or not all(k in env for k in need):
        return False
    if "SLURM_PROCID" in env or "OMPI_COMM_WORLD_RANK" in env:
        return False
    env["KANEL_COORDINATOR"] = (f"{env['MASTER_ADDR']}:"
                                f"{int(env['MASTER_PORT']) + 1}")
    env.setdefault("KANEL_RANK", env["RANK"])
    env.setdefault("KANEL_WORKERS", env["WORLD_SIZE"])
    return True


def _launched():
    """Whether a launcher set this process up as a worker: Kanel's own
    variables, or Slurm's, Open MPI's or torchrun's (already mapped)."""
    env = os.environ
    return bool(env.get("KANEL_COORDINATOR") or "SLURM_PROCID" in env
                or "OMPI_COMM_WORLD_RANK" in env)


def _kanel_command():
    exe = os.environ.get("KANEL_EXE")
    if exe:
        return exe
    try:
        from . import _build_info
        path = os.path.join(_build_info.BINDIR, "kanel")
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    return "kanel"


def _start_roles():
    """Under torchrun, rank 0 starts the coordinator and the servers
    (``KANEL_SERVERS``, default 1) as its children, with the job's
    options from the ``KANEL_*`` variables; they end with the job."""
    if not (os.environ.get("KANEL_SECRET")
            or os.environ.get("KANEL_SECRET_FILE")):
        raise ValueError("kanel: under torchrun every worker needs the job "
                         "secret: set KANEL_SECRET_FILE (or KANEL_SECRET) "
                         "in the environment torchrun passes on")
    exe = _kanel_command()
    servers = int(os.environ.get("KANEL_SERVERS", "1"))
    # a script started by torchrun trains with its own optimizer unless
    # the job names one for the servers
    os.environ.setdefault("KANEL_OPTIMIZER", "sum")
    # the coordinator listens on KANEL_COORDINATOR, set from torchrun's
    procs = [subprocess.Popen([exe, "coordinator"])]
    for r in range(servers):
        procs.append(subprocess.Popen([exe, "server", "--rank", str(r)]))
    return procs


# ---- the worker --------------------------------------------------------

class Worker:
    """A worker of a Kanel job (``kn_worker_create`` ...
    ``kn_worker_destroy``).

    Every argument left out comes from the environment, as for the C API:
    ``KANEL_COORDINATOR``, ``KANEL_TRANSPORT``, ``KANEL_SECRET_FILE`` /
    ``KANEL_SECRET``, ``KANEL_RANK`` or the launcher's rank (kanel
    launch, Slurm, Open MPI, torchrun).  Blocks until the coordinator has
    accepted the worker (``timeout_ms``, 0: ``KANEL_STARTUP_TIMEOUT`` or
    30 s).  ``own_optimizer``: the program steps the model with an
    optimizer of its own (kanel.torch sets it), so that a job of the
    default ``--optimizer auto`` runs ``sum``, the workers' optimizer.
    One thread at a time may use a worker.
    """

    def __init__(self, coordinator=None, transport=None, secret_file=None,
                 rank=None, timeout_ms=0, own_optimizer=False):
        self._w = None
        self._buffers = {}
        self._roles = []
        if coordinator is None and _torchrun_env() and \
                os.environ.get("RANK") == "0":
            self._roles = _start_roles()
        opt = _lib.WorkerOptions(
            coordinator.encode() if coordinator else None,
            transport.encode() if transport else None,
            os.fsencode(secret_file) if secret_file else None,
            -1 if rank is None else int(rank), int(timeout_ms),
            1 if own_optimizer else 0)
        handle = _lib.W()
        if coordinator is None and not _launched():
            raise RuntimeError(
                "kanel: this process was not started as a worker of a job "
                "(no KANEL_COORDINATOR, nor torchrun's, Slurm's or Open "
                "MPI's variables).  Start it with a launcher, e.g.\n"
                "  kanel launch --workers 2 -- "
                "python3 script.py\n"
                "  torchrun --nproc_per_node 2 script.py   "
                "(with KANEL_SECRET_FILE set)\n"
                "or pass Worker(coordinator=HOST:PORT) (docs/python.md, "
                "\"Launching\")")
        try:
            _check(_lib.kn_worker_create(ctypes.byref(opt),
                                         ctypes.byref(handle)),
                   "kn_worker_create")
        except BaseException:
            self._stop_roles()
            raise
        self._w = handle

    # -- lifetime
    def close(self):
        """Leave the job and free the worker (``kn_worker_destroy``);
        the registered buffers are released.  Safe to call twice."""
        if self._w is not None:
            _lib.kn_worker_destroy(self._w)
            self._w = None
        self._buffers.clear()
        self._stop_roles()

    def _stop_roles(self):
        for p in self._roles:  # the job is over for rank 0: they end
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
                p.wait()
        self._roles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_w", None) is not None:
            self.close()

    def _handle(self):
        if self._w is None:
            raise ValueError("kanel: the worker is closed")
        return self._w

    # -- registration
    def register(self, key, params, grads):
        """Register tensor ``key``: ``params`` holds its parameters (rank
        0's are the initial model), ``grads`` is where the program
        computes its gradients.  Both are NumPy arrays, CPU torch tensors
        or writable buffers of the same dtype (fp32, fp16; bf16 through
        torch) and element count, C-contiguous; the worker keeps them
        alive and they must not move while registered."""
        p = _Buffer(params, f"{key!r} params")
        g = _Buffer(grads, f"{key!r} grads")
        if p.dtype != g.dtype:
            raise TypeError(f"kanel: {key!r}: params are "
                            f"{_DTYPE_NAMES[p.dtype]}, grads "
                            f"{_DTYPE_NAMES[g.dtype]}")
        if p.count != g.count:
            raise ValueError(f"kanel: {key!r}: {p.count} params, "
                             f"{g.count} grads")
        if p.count == 0:
            raise ValueError(f"kanel: {key!r}: an empty tensor")
        _check(_lib.kn_worker_register(self._handle(), key.encode(),
                                       p.dtype, p.count, p.addr, g.addr),
               "kn_worker_register")
        self._buffers[key] = [p, g]

    def set_inbox(self, key, inbox):
        """Deliver ``key``'s pulls into ``inbox`` instead of its
        parameters (``kn_worker_set_inbox``)."""
        b = _Buffer(inbox, f"{key!r} inbox")
        if key in self._buffers and b.count != self._buffers[key][0].count:
            raise ValueError(f"kanel: {key!r}: the inbox has {b.count} "
                             "elements, the tensor "
                             f"{self._buffers[key][0].count}")
        _check(_lib.kn_worker_set_inbox(self._handle(), key.encode(),
                                        b.addr), "kn_worker_set_inbox")
        self._buffers[key].append(b)

    def set_priority(self, key, priority):
        """Write ``key``'s pushes before those of higher ``priority``
        (``kn_worker_set_priority``; by default the registration
        index)."""
        _check(_lib.kn_worker_set_priority(self._handle(), key.encode(),
                                           int(priority)),
               "kn_worker_set_priority")

    def start(self):
        """Join the servers and receive the initial model (rank 0's)
        into every parameter buffer (``kn_worker_start``)."""
        self._check_buffers()
        _check(_lib.kn_worker_start(self._handle()), "kn_worker_start")

    def _check_buffers(self):
        for bufs in self._buffers.values():
            for b in bufs:
                b.check()

    # -- operations
    def _op(self, fn, name, key):
        self._check_buffers()
        h = ctypes.c_uint64()
        _check(fn(self._handle(), key.encode() if key else None,
                  ctypes.byref(h)), name)
        return h.value

    def push(self, key=None):
        """Send the gradients of ``key`` (None: every tensor); a handle."""
        return self._op(_lib.kn_worker_push, "kn_worker_push", key)

    def pull(self, key=None):
        """Fetch the parameters answering every push so far; a handle."""
        return self._op(_lib.kn_worker_pull, "kn_worker_pull", key)

    def pushpull(self, key=None):
        """Push, then pull: one step of training; a handle."""
        return self._op(_lib.kn_worker_pushpull, "kn_worker_pushpull", key)

    def test(self, handle):
        """True if ``handle`` is done; raises Error if it failed."""
        return _check(_lib.kn_worker_test(self._handle(), handle),
                      "kn_worker_test") == 1

    def wait(self, handle, timeout_ms=None):
        """Wait for ``handle``: up to ``timeout_ms`` (None: until it is
        done or fails).  Waits in slices of 100 ms without the GIL, so
        that Ctrl-C raises KeyboardInterrupt within 100 ms."""
        w = self._handle()
        deadline = None if timeout_ms is None else \
            time.monotonic() + timeout_ms / 1000
        while True:
            left = 100 if deadline is None else \
                max(0, min(100, int((deadline - time.monotonic()) * 1000)))
            ret = _lib.kn_worker_wait(w, handle, left)
            if ret != -_errno.ETIMEDOUT:
                _check(ret, "kn_worker_wait")
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise Error(_errno.ETIMEDOUT, "kn_worker_wait", "")

    def step(self, key=None):
        """pushpull and wait: one blocking step (``kn_worker_step``)."""
        self._check_buffers()
        _check(_lib.kn_worker_step(self._handle(),
                                   key.encode() if key else None),
               "kn_worker_step")

    def step_done(self, seconds=-1.0, applied=False):
        """One step of training is done; the engine does what the job's
        protocol asks (``kn_worker_step_done``): STEP_LOCAL, STEP_PUSHED
        or STEP_SYNCED.  ``seconds`` is the step's compute time (below
        0: measured since the previous call); ``applied``: under ESP and
        PSP, the program has updated the parameters itself."""
        self._check_buffers()
        res = ctypes.c_uint()
        _check(_lib.kn_worker_step_done(self._handle(), float(seconds),
                                        1 if applied else 0,
                                        ctypes.byref(res)),
               "kn_worker_step_done")
        return res.value

    def finish(self):
        """After the last step: under ESP and PSP, wait for a model on its
        way and merge it; then the job stops counting this worker, so
        that no other worker waits for it (kn_worker_finish)."""
        _check(_lib.kn_worker_finish(self._handle()), "kn_worker_finish")

    def global_model(self, key, dst):
        """Copy the last global model of ``key`` into ``dst`` (an array,
        tensor or buffer of the tensor's dtype and size)."""
        b = _Buffer(dst, f"{key!r} destination")
        reg = self._buffers.get(key)
        if reg is None:
            raise KeyError(key)
        if b.dtype != reg[0].dtype or b.count != reg[0].count:
            raise ValueError(f"kanel: {key!r}: the destination is not "
                             f"{reg[0].count} {_DTYPE_NAMES[reg[0].dtype]}")
        _check(_lib.kn_worker_global_model(self._handle(), key.encode(),
                                           b.addr),
               "kn_worker_global_model")

    # -- what the worker and the job are
    @property
    def rank(self):
        return _lib.kn_worker_rank(self._handle())

    @property
    def size(self):
        return _lib.kn_worker_size(self._handle())

    @property
    def clock(self):
        return _lib.kn_worker_clock(self._handle())

    @property
    def job(self):
        """The job's protocol, optimizer and parameters, as a Job."""
        info = _lib.JobInfo()
        _check(_lib.kn_worker_job(self._handle(), ctypes.byref(info)),
               "kn_worker_job")
        return Job(
            protocol=info.protocol_name.decode(),
            optimizer="sum" if info.summation else
            _OPTIMIZERS[info.optimizer],
            local_steps=bool(info.local_steps), lr=info.lr,
            momentum=info.momentum, workers=info.workers,
            servers=info.servers,
            **{p.name: p.value(info.params[i])
               for i, p in enumerate(PARAMS)})


# ---- injected imbalance ----------------------------------------------

class Imbalance:
    """An imbalance model of ``kanel train`` (docs/imbalance.md): a
    program that injects delay sleeps ``base * factor(rank, t)`` per
    step, ``t`` being the seconds since the job started."""

    def __init__(self, spec, seed=1, workers=1):
        err = ctypes.create_string_buffer(256)
        m = ctypes.c_void_p()
        ret = _lib.kn_imbalance_parse(spec.encode(), seed, workers, err,
                                      len(err), ctypes.byref(m))
        if ret == -_errno.EINVAL:
            raise ValueError(f"kanel: imbalance {spec!r}: "
                             + err.value.decode())
        _check(ret, "kn_imbalance_parse")
        self._m = m

    def factor(self, worker, t):
        return _lib.kn_imbalance_factor(self._m, worker, t)

    def __str__(self):
        buf = ctypes.create_string_buffer(128)
        _check(_lib.kn_imbalance_format(self._m, buf, len(buf)),
               "kn_imbalance_format")
        return buf.value.decode()

    def __del__(self):
        if getattr(self, "_m", None):
            _lib.kn_imbalance_destroy(self._m)
            self._m = None
