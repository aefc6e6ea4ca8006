# SPDX-License-Identifier: Apache-2.0
"""Kanel for PyTorch: the script's own optimizer over a Kanel job.

Two ways in, as with Horovod and DDP (docs/python.md):

    import kanel.torch as kt
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt = kt.DistributedOptimizer(opt, model.named_parameters())
    ...
    loss.backward(); opt.step(); opt.zero_grad()

or, a DDP script with one line changed:

    model = kt.DistributedDataParallel(model)   # was DDP(model)

Every parameter is registered by name with its own storage (``p.data``)
and gradient (``p.grad``): the engine reads and writes them in place.
What a step means follows the job (docs/python.md, "What a step is"):

- ``--optimizer sum`` (the default of every start this package makes):
  the script's optimizer trains the model.  Under BSP the servers sum the
  gradients and the mean lands in ``p.grad`` before the optimizer steps,
  so every worker's optimizer state stays identical; under ASP, SSP and
  CGP the optimizer steps on the worker and the worker pushes the delta
  it made, which the servers add to the model as a share of a round;
  ESP and PSP take the script's optimizer as their inner optimizer.
- a servers' optimizer (``--optimizer sgd|momentum|adam``), under BSP,
  ASP, SSP and CGP: the gradients go to the servers, which run the job's
  optimizer; the wrapped optimizer is not stepped (a warning says so).

Gradients are pushed from backward hooks as soon as autograd has
accumulated them, so the exchange overlaps the rest of backward.

Parameters on a CUDA device are staged through pinned host memory, one
buffer pair per bucket registered once: a bucket's gradients are copied
to the host on a copy stream as backward makes them, pushed once the
copy is seen complete, and what comes back is copied to the device on
the same stream, which the optimizer's step waits for.
"""
import contextlib
import time
import warnings

import torch

import kanel

_last = None  # the newest DistributedOptimizer, for broadcast_parameters

# where the optimizer runs, by job (see _mode)
MEAN, DELTA, SERVER = "mean", "delta", "server"


def _mode(job):
    """MEAN: gradients are averaged, the script's optimizer steps;
    DELTA: the script's optimizer steps, its deltas are exchanged;
    SERVER: the servers' optimizer steps."""
    if job.local_steps:
        return DELTA
    return MEAN if job.optimizer == "sum" else SERVER


def _accumulator(p):
    """The autograd node that accumulates ``p``'s gradient: its hooks run
    once ``p.grad`` holds this backward's gradient (torch 1.13 has no
    post-accumulate hook on the tensor itself)."""
    with torch.enable_grad():
        return p.expand_as(p).grad_fn.next_functions[0][0]


def _check_device(name, device):
    """A parameter's device, checked: CPU, or CUDA where torch has it."""
    if device.type == "cpu":
        return
    if device.type != "cuda":
        raise ValueError(f"kanel: parameter {name!r} is on {device}: "
                         "kanel.torch takes CPU and CUDA tensors")
    if not torch.cuda.is_available():
        raise ValueError(f"kanel: parameter {name!r} is on {device}, but "
                         "this torch sees no CUDA device")


class _Staging:
    """Host copies of the model for the engine, when the parameters are
    on a CUDA device (or staging is forced on CPU ones, so that the same
    path runs without a GPU).

    Each bucket gets two host buffers, its parameters and its gradients,
    pinned where CUDA is, and each tensor of the bucket is a view into
    them, registered with the engine in place of the device tensor.
    Copies run on a copy stream after the compute stream's work so far;
    a copy to the host ends with an event whose completion the caller
    observes before the engine reads the buffer, and a copy to the
    device is waited for by the compute stream, so the optimizer's step
    (or the next forward) runs after it.  The copy stream is in order,
    so the engine never writes a host buffer that a copy still reads.
    Without CUDA a copy is complete when it returns."""

    ALIGN = 64

    def __init__(self, params, buckets, device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.data = [None] * len(params)
        self.grad = [None] * len(params)
        self.buffers = []
        for b in buckets:
            offsets, total = [], 0
            for i in b:
                p = params[i][1]
                offsets.append(total)
                total += -(-p.numel() * p.element_size() // self.ALIGN) \
                    * self.ALIGN
            pair = [torch.empty(total, dtype=torch.uint8,
                                pin_memory=self.cuda) for _ in range(2)]
            self.buffers.append(pair)
            for i, off in zip(b, offsets):
                p = params[i][1]
                end = off + p.numel() * p.element_size()
                self.data[i] = pair[0][off:end].view(p.dtype).view(p.shape)
                self.grad[i] = pair[1][off:end].view(p.dtype).view(p.shape)
        # seconds spent copying, by direction; CUDA copies are timed by
        # events, read when timings() asks
        self.seconds = {"d2h": 0.0, "h2d": 0.0}
        self._timed = []

    def copy(self, pairs, direction):
        """``dst.copy_(src)`` for each pair, after the compute stream's
        work so far; returns what done() and wait() take (None: done)."""
        if not self.cuda:
            t0 = time.perf_counter()
            for dst, src in pairs:
                dst.copy_(src)
            self.seconds[direction] += time.perf_counter() - t0
            return None
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            start.record()
            for dst, src in pairs:
                dst.copy_(src, non_blocking=True)
            end.record()
        for dst, src in pairs:  # in use by the copy stream until it ends
            (src if direction == "d2h" else dst).record_stream(self.stream)
        self._timed.append((direction, start, end))
        if direction == "h2d":
            torch.cuda.current_stream(self.device).wait_event(end)
        return end

    @staticmethod
    def done(token):
        return token is None or token.query()

    @staticmethod
    def wait(token):
        if token is not None:
            token.synchronize()

    def timings(self):
        if self.cuda:
            self.stream.synchronize()
            for direction, start, end in self._timed:
                self.seconds[direction] += start.elapsed_time(end) / 1000
            self._timed = []
        return dict(self.seconds)


class _Exchange:
    """The registered parameters of one worker and the gradient exchange
    that backward hooks start: shared by DistributedOptimizer and
    DistributedDataParallel.  ``staging``: None stages parameters that
    are on a CUDA device through host memory (_Staging), True stages CPU
    ones too, False refuses CUDA ones."""

    def __init__(self, named_parameters, worker, protocol, overlap,
                 bucket_cap_mb, worker_options, staging=None):
        named = list(named_parameters)
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ValueError("kanel: parameter names repeat")
        named = [(n, p) for n, p in named if p.requires_grad]
        for n, p in named:
            _check_device(n, p.device)
        devices = {p.device for _, p in named}
        cuda = any(d.type == "cuda" for d in devices)
        if cuda and staging is False:
            raise ValueError("kanel: CUDA parameters go through host "
                             "memory: staging=False takes CPU ones only")
        if len(devices) > 1 and (cuda or staging):
            raise ValueError("kanel: the parameters are on "
                             f"{', '.join(sorted(map(str, devices)))}: "
                             "staging takes one device")
        self._params = [(n, p, None) for n, p in named]  # for the buckets
        self._buckets = self._make_buckets(bucket_cap_mb)
        self.stage = None
        if (cuda or staging) and devices:
            self.stage = _Staging(self._params, self._buckets,
                                  devices.pop())
        self._own = worker is None
        self.worker = worker if worker is not None else \
            kanel.Worker(**dict(worker_options, own_optimizer=True))
        try:
            self.job = self.worker.job
            if protocol is not None and \
                    kanel.protocol_name(protocol) != self.job.protocol:
                raise ValueError(f"kanel: the script asks for {protocol}, "
                                 f"the job runs {self.job.protocol}")
            self.mode = _mode(self.job)
            self._params = []
            for i, (name, p) in enumerate(named):
                if self.stage is not None:
                    with torch.no_grad():
                        self.stage.data[i].copy_(p.data)
                    data, g = self.stage.data[i], self.stage.grad[i]
                else:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p.data)
                    data, g = p.data, p.grad
                self.worker.register(name, data, g)
                self._params.append((name, p, g))
        except BaseException:
            if self._own:
                self.worker.close()
            raise
        # Overlap: a gradient protocol's push can start while backward
        # goes on.  Not under DELTA (the push is the optimizer's delta,
        # made after backward) nor CGP and PSP (their planners hear each
        # step's time through step_done).
        self.overlap = bool(overlap) and self.mode != DELTA and \
            self.job.protocol in ("bsp", "asp", "ssp")
        self.started = False
        self.synced = False   # this step's exchange is done
        self.armed = True     # False under no_sync()
        self.pushed = set()   # names pushed during this backward
        self.trace = None     # a list to log ("push", name) into (tests)
        self.seconds = 0.0    # waiting for the exchange (timings())
        self._hooks = []
        self._left = [len(b) for b in self._buckets]
        self._copying = []    # staged: (bucket, token) not yet pushed
        self._copied = set()  # staged: buckets copied to the host
        if self.overlap:
            for i, (name, p, g) in enumerate(self._params):
                acc = _accumulator(p)
                h = acc.register_hook(self._ready_hook(i, p, g))
                self._hooks.append((acc, h))

    def _make_buckets(self, cap_mb):
        """DDP's buckets: the parameters in reverse registration order
        (backward's), cut where a bucket reaches ``cap_mb`` MiB (the
        first at 1 MiB, so that the exchange starts early); each bucket
        is pushed once all of its gradients are ready.  Returns lists of
        indices into _params; _bucket_of maps an index to its bucket."""
        buckets, cur, size = [], [], 0
        cap = min(1.0, cap_mb) * 2**20
        for i in reversed(range(len(self._params))):
            t = self._params[i][1]
            cur.append(i)
            size += t.numel() * t.element_size()
            if size >= cap:
                buckets.append(cur)
                cur, size, cap = [], 0, cap_mb * 2**20
        if cur:
            buckets.append(cur)
        self._bucket_of = {i: b for b, idx in enumerate(buckets)
                           for i in idx}
        return buckets

    def _ready_hook(self, i, p, g):
        def ready(*_):
            if not self.started or not self.armed or self.synced:
                return
            if self.stage is None and p.grad is not None and \
                    p.grad.data_ptr() != g.data_ptr():
                # a fresh p.grad (zero_grad(set_to_none=True)): into ours
                g.copy_(p.grad)
                p.grad = g
            b = self._bucket_of[i]
            self._left[b] -= 1
            if self._left[b] == 0:
                if self.stage is None:
                    for j in self._buckets[b]:
                        self._push(self._params[j][0])
                else:
                    self._to_host(b)
                    self._push_copied(block=False)
        return ready

    def _push(self, name):
        self.worker.push(name)
        self.pushed.add(name)
        if self.trace is not None:
            self.trace.append(("push", name))

    def _to_host(self, b):
        """Staged: start copying bucket ``b``'s gradients to the host."""
        pairs = []
        for j in self._buckets[b]:
            _, p, g = self._params[j]
            if p.grad is None:
                p.grad = torch.zeros_like(p.data)
            pairs.append((g, p.grad))
        self._copying.append((b, self.stage.copy(pairs, "d2h")))
        self._copied.add(b)

    def _push_copied(self, block):
        """Staged: push the buckets whose copy to the host is seen
        complete, in the order they were copied; ``block``: all of them,
        waiting for each copy."""
        while self._copying:
            b, token = self._copying[0]
            if block:
                self.stage.wait(token)
            elif not self.stage.done(token):
                return
            self._copying.pop(0)
            if self.trace is not None:
                self.trace.append(("copied", b))
            for j in self._buckets[b]:
                self._push(self._params[j][0])

    def _from_host(self, what):
        """Staged: copy the host's ``what`` ("grad": the mean gradients,
        "data": the parameters) to the device, before the compute
        stream's next work."""
        pairs = []
        for i, (_, p, _) in enumerate(self._params):
            if what == "grad":
                if p.grad is None:
                    p.grad = torch.zeros_like(p.data)
                pairs.append((p.grad, self.stage.grad[i]))
            else:
                pairs.append((p.data, self.stage.data[i]))
        self.stage.copy(pairs, "h2d")

    def _timed(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    @contextlib.contextmanager
    def no_sync(self):
        """The hooks push nothing inside (gradient accumulation)."""
        old, self.armed = self.armed, False
        try:
            yield
        finally:
            self.armed = old

    def start(self):
        if not self.started:
            self.worker.start()
            self.started = True
            if self.stage is not None:  # rank 0's model, to the device
                with torch.no_grad():
                    self._from_host("data")

    def gradients_in_place(self):
        """Autograd writes into the registered gradient unless the
        program set ``p.grad`` to None or to a new tensor (``zero_grad(
        set_to_none=True)``): then that gradient is copied into the
        registered one (zeros for None), which becomes ``p.grad`` again,
        so that later steps are zero-copy.  (Staged: the copies to the
        host read whatever ``p.grad`` is.)"""
        if self.stage is not None:
            return
        for name, p, g in self._params:
            if name in self.pushed:
                continue
            if p.grad is None:
                g.zero_()
                p.grad = g
            elif p.grad.data_ptr() != g.data_ptr():
                g.copy_(p.grad)
                p.grad = g

    def exchange(self):
        """This step's gradient exchange (MEAN, SERVER): under MEAN the
        mean gradient is in ``p.grad`` after it, under SERVER the updated
        parameters are in ``p.data``.  Returns what step_done returns."""
        if self.synced:
            return kanel.STEP_SYNCED
        self.start()
        self.gradients_in_place()
        with torch.no_grad():
            if self.stage is not None:  # what no hook copied
                for b in range(len(self._buckets)):
                    if b not in self._copied:
                        self._to_host(b)
            if self.overlap:
                if self.stage is not None:
                    self._timed(self._push_copied, block=True)
                for b in self._buckets:  # what no hook pushed
                    for j in b:
                        if self._params[j][0] not in self.pushed:
                            self._push(self._params[j][0])
                self._timed(self.worker.wait, self.worker.pull())
                result = kanel.STEP_SYNCED
            else:
                if self.stage is not None:
                    for _, token in self._copying:
                        self.stage.wait(token)
                    self._copying = []
                result = self._timed(self.worker.step_done)
            if self.stage is not None:
                self._from_host("grad" if self.mode == MEAN else "data")
        self.pushed.clear()
        self._copied.clear()
        self._left = [len(b) for b in self._buckets]
        self.synced = True
        return result

    def local_step_done(self):
        """DELTA: the script's optimizer has stepped the model; the
        engine pushes the delta when the protocol says so (staged: from
        the host's copy, and the model it leaves there goes back to the
        device)."""
        self.start()
        with torch.no_grad():
            if self.stage is not None:
                self.stage.wait(self.stage.copy(
                    [(self.stage.data[i], p.data)
                     for i, (_, p, _) in enumerate(self._params)], "d2h"))
            result = self._timed(self.worker.step_done, applied=True)
            if self.stage is not None:
                self._from_host("data")
        return result

    def finish(self):
        """The worker's end: under ESP and PSP the engine merges a model
        still on its way into the parameters (staged: the host's copy,
        which then goes to the device)."""
        self.start()
        self.worker.finish()
        if self.stage is not None and self.mode == DELTA:
            with torch.no_grad():
                self._from_host("data")

    def timings(self):
        """Seconds so far: waiting for the exchange ("exchange") and,
        staged, copying to the host ("d2h") and back ("h2d")."""
        out = {"exchange": self.seconds, "d2h": 0.0, "h2d": 0.0}
        if self.stage is not None:
            out.update(self.stage.timings())
        return out

    def global_state(self):
        out = {}
        for i, (name, p, _) in enumerate(self._params):
            if self.stage is not None and not self.job.local_steps:
                # the parameters themselves: on the device (the host's
                # copy is the engine's, up to date only where it wrote)
                out[name] = p.data.clone()
                continue
            dst = torch.empty_like(p.data if self.stage is None
                                   else self.stage.data[i])
            self.worker.global_model(name, dst)
            out[name] = dst.to(p.device)
        return out

    def close(self):
        for _, h in self._hooks:
            h.remove()
        self._hooks = []
        if self._own and self.worker is not None:
            self.worker.close()
        self.worker = None


class DistributedOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer`` so that ``step()`` trains the job's model.

    It is a ``torch.optim.Optimizer`` whose ``param_groups``, ``state``
    and ``defaults`` are the wrapped one's own objects, so that a
    learning-rate scheduler (which checks the type) made on the wrapper
    changes the rate the wrapped optimizer steps with.

    ``named_parameters``: the model's ``named_parameters()``; every name
    is a tensor key, the same on every worker.  ``worker``: a
    ``kanel.Worker`` to use (None: one is made from the environment, and
    closed with this optimizer).  ``protocol``: the protocol this script
    expects; None takes the job's, a name that differs from the job's is
    a ValueError.  ``overlap``: push gradients from backward hooks as
    soon as their bucket is ready (BSP, ASP, SSP; default True);
    ``bucket_cap_mb``: the buckets' size, as DDP's (25 MiB; the first
    1 MiB; 0: every parameter its own bucket).  ``staging``: None (the
    default) stages parameters on a CUDA device through pinned host
    memory; True stages CPU parameters the same way (what the tests
    run where there is no GPU); False refuses CUDA parameters.
    """

    def __init__(self, optimizer, named_parameters, worker=None,
                 protocol=None, overlap=True, bucket_cap_mb=25,
                 staging=None, **worker_options):
        global _last
        named = list(named_parameters)
        ids = {id(p) for _, p in named}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in ids:
                    raise ValueError("kanel: the optimizer has a parameter "
                                     "that named_parameters does not name")
        # not Optimizer.__init__: the wrapped optimizer's groups and state
        # are this one's, the very same objects
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.defaults = optimizer.defaults
        self._x = _Exchange(named, worker, protocol, overlap,
                            bucket_cap_mb, worker_options, staging)
        self.worker, self.job = self._x.worker, self._x.job
        self._told_lr = False
        if self._x.mode == SERVER:
            self._warn_server()
        _last = self

    @property
    def _params(self):
        return self._x._params

    @property
    def mode(self):
        """Where the optimizer runs: "mean", "delta" or "server"."""
        return self._x.mode

    def _warn_server(self):
        job = self.job
        mom = job.momentum if job.optimizer == "momentum" else 0.0
        warnings.warn(
            f"kanel: the job runs the servers' optimizer ({job.optimizer}, "
            f"lr {job.lr:g}, momentum {mom:g}) under {job.protocol}: the "
            f"wrapped {type(self.optimizer).__name__} does not step, and "
            "its learning rate, schedule, weight decay and clipping do not "
            "reach the update; start the job with --optimizer sum "
            "(KANEL_OPTIMIZER=sum) to train with the script's optimizer",
            stacklevel=3)

    def _check_lr(self):
        """Under SERVER, a learning rate a scheduler changed is not the
        servers': said once."""
        if self._told_lr:
            return
        for g in self.optimizer.param_groups:
            lr = g.get("lr")
            if lr is not None and abs(lr - self.job.lr) > 1e-6 * max(1, lr):
                warnings.warn(
                    f"kanel: the script's learning rate is {lr:g}, the "
                    f"servers apply {self.job.lr:g} (--optimizer "
                    f"{self.job.optimizer})", stacklevel=3)
                self._told_lr = True
                return

    def start(self):
        """Join the servers; every parameter takes rank 0's values.
        Called by the first step() or broadcast_parameters()."""
        self._x.start()

    def synchronize(self):
        """Finish this step's gradient exchange now: under BSP with the
        script's optimizer the mean gradient is then in ``p.grad``, for
        ``clip_grad_norm_`` or anything else that reads it; ``step()``
        does not exchange again.  Under the other jobs, nothing (their
        exchange follows the optimizer's step)."""
        if self._x.mode != DELTA:
            self._x.exchange()

    def step(self, closure=None):
        """One step of training: returns kanel.STEP_LOCAL, STEP_PUSHED or
        STEP_SYNCED (what the protocol did with it)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        x = self._x
        if x.mode == DELTA:
            x.gradients_in_place()
            self.optimizer.step()
            result = x.local_step_done()
        else:
            result = x.exchange()
            if x.mode == MEAN:
                self.optimizer.step()
            else:
                self._check_lr()
                # the servers stepped: a scheduler made on the wrapped
                # optimizer sees a step was taken
                self.optimizer._step_count = \
                    getattr(self.optimizer, "_step_count", 0) + 1
        x.synced = False
        self.last_loss = loss
        return result

    def zero_grad(self, set_to_none=False):
        """Zero the gradients in place (the registered buffers stay)."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state

    def add_param_group(self, param_group):
        raise ValueError("kanel: parameters are registered with the job "
                         "when DistributedOptimizer is made: add the "
                         "group to the wrapped optimizer before")

    def no_sync(self):
        """Backward passes inside accumulate gradients without pushing
        them (gradient accumulation, as DDP's no_sync)."""
        return self._x.no_sync()

    def finish(self):
        """Under ESP and PSP, wait for a global model on its way and
        merge it; then the job stops counting this worker (call once
        after the last step)."""
        self._x.finish()

    def global_state(self):
        """The last global model, name -> a new tensor on the
        parameter's device: under ESP and PSP what the servers delivered
        last, without this worker's local steps since (what to
        evaluate); otherwise the parameters."""
        return self._x.global_state()

    def timings(self):
        """Seconds so far in this worker: waiting for the exchange
        ("exchange"), and with staging copying gradients or parameters
        to the host ("d2h") and back ("h2d"); CUDA copies are timed on
        their stream, so they overlap compute and the exchange."""
        return self._x.timings()

    def close(self):
        """Leave the job (if this optimizer made the worker)."""
        self._x.close()
        self.worker = None

    def __getattr__(self, name):  # the wrapped optimizer's own attributes
        inner = self.__dict__.get("optimizer")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


class DistributedDataParallel(torch.nn.Module):
    """``torch.nn.parallel.DistributedDataParallel`` on a Kanel job: wrap
    the model, keep the script's optimizer, ``backward()`` and
    ``optimizer.step()`` as they are.

    What a DDP script relies on holds: every worker starts from rank 0's
    parameters; after ``loss.backward()`` returns, ``p.grad`` holds the
    mean gradient over the workers (BSP), so clipping and the optimizer
    see what they see under DDP; gradients are exchanged from backward
    hooks while backward runs; ``no_sync()`` accumulates without
    exchanging; ``module`` is the wrapped model.  Under ASP, SSP, CGP,
    ESP and PSP the optimizer steps the worker's own model and the
    exchange of its delta happens at the next training ``forward()`` (or
    ``finish()``), when the optimizer's step is known to be done.

    The job must run the script's optimizer (``--optimizer sum``, the
    default of the package's own starts) or a local-step protocol; the
    servers' optimizer would step the model a second time.  Buffers
    (BatchNorm's statistics) are not exchanged: each worker keeps its
    own, as DDP with ``broadcast_buffers=False``.

    A module on a CUDA device (``device_ids=[i]`` as DDP takes it, or
    None) is staged through pinned host memory; ``staging`` is
    DistributedOptimizer's.
    """

    def __init__(self, module, device_ids=None, output_device=None,
                 bucket_cap_mb=25, worker=None, protocol=None,
                 staging=None, **worker_options):
        super().__init__()
        if device_ids:
            want = {torch.device(d) if not isinstance(d, int)
                    else torch.device("cuda", d) for d in device_ids}
            have = {p.device for p in module.parameters()}
            if len(want) != 1 or have != want:
                raise ValueError(
                    "kanel: device_ids names "
                    f"{', '.join(sorted(map(str, want)))}, the module's "
                    f"parameters are on {', '.join(sorted(map(str, have)))}"
                    ": move the module to its one device first, as DDP "
                    "asks")
        self.module = module
        x = _Exchange(module.named_parameters(), worker, protocol, True,
                      bucket_cap_mb, worker_options, staging)
        if x.mode == SERVER:
            x.close()
            raise ValueError(
                f"kanel: the job runs the servers' optimizer "
                f"({x.job.optimizer}) under {x.job.protocol}: "
                "DistributedDataParallel keeps the script's optimizer; "
                "start the job with --optimizer sum (KANEL_OPTIMIZER=sum)")
        object.__setattr__(self, "_x", x)  # not a submodule
        self.worker, self.job = x.worker, x.job
        self._stepped = False  # a backward since the last exchange
        self._hook = None
        x.start()  # rank 0's parameters everywhere, as DDP's broadcast
        if x.mode == MEAN:
            for _, p, _ in x._params:
                _accumulator(p).register_hook(self._queue_exchange)

    def _queue_exchange(self, *_):
        """The first gradient of a backward queues the end of the
        exchange at the end of backward, as DDP's reducer does."""
        x = self._x
        if x.armed and not self._stepped:
            self._stepped = True
            torch.autograd.Variable._execution_engine.queue_callback(
                self._end_of_backward)

    def _end_of_backward(self):
        self._x.exchange()
        self._x.synced = False
        self._stepped = False

    def forward(self, *args, **kwargs):
        x = self._x
        if x.mode == DELTA and self.training and torch.is_grad_enabled():
            if self._stepped:
                x.local_step_done()
            self._stepped = True
        return self.module(*args, **kwargs)

    def no_sync(self):
        """Accumulate gradients over several backward passes without
        exchanging them; the first backward outside exchanges."""
        return self._x.no_sync()

    def finish(self):
        """After the last step: push the last delta (ASP, SSP, CGP, ESP,
        PSP), merge a model on its way, and stop being counted."""
        x = self._x
        if x.mode == DELTA and self._stepped:
            x.local_step_done()
            self._stepped = False
        x.finish()

    def global_state(self):
        return self._x.global_state()

    def timings(self):
        """As DistributedOptimizer.timings()."""
        return self._x.timings()

    def close(self):
        self._x.close()
        self.worker = None


def broadcast_parameters(state, optimizer=None):
    """Make every worker start from rank 0's values: joins the servers,
    which hand every worker rank 0's registered parameters.  ``state``:
    the model's ``state_dict()`` or ``named_parameters()``; entries that
    are not registered parameters (buffers such as BatchNorm's running
    statistics) are not exchanged, and a warning names them.  Every
    worker calls it, as with Horovod's."""
    opt = optimizer if optimizer is not None else _last
    if opt is None:
        raise ValueError("kanel: make a DistributedOptimizer first")
    items = state.items() if hasattr(state, "items") else state
    mine = {p.data.data_ptr() for _, p, _ in opt._params}
    left = [k for k, t in items
            if torch.is_tensor(t) and t.is_floating_point()
            and t.data_ptr() not in mine]
    if left:
        warnings.warn("kanel: not broadcast (not registered parameters): "
                      + ", ".join(left), stacklevel=2)
    opt.start()
