# SPDX-License-Identifier: Apache-2.0
"""Kanel for PyTorch: a distributed optimizer over a Kanel job.

    import kanel.torch as kt
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = kt.DistributedOptimizer(opt, model.named_parameters())
    kt.broadcast_parameters(model.state_dict(), opt)
    ...
    loss.backward(); opt.step(); opt.zero_grad()

Every parameter is registered by name with its own storage (``p.data``)
and gradient (``p.grad``): the engine reads the gradients and writes the
parameters in place.  What ``step()`` does follows the job's protocol
(docs/python.md):

- BSP, ASP, SSP, CGP: the gradients are pushed and the servers apply the
  job's optimizer (``kanel launch --optimizer --lr --momentum``); the
  parameters come back updated.  The wrapped optimizer is not stepped
  (with ``--optimizer sum`` it is, on the averaged gradient).
- ESP, PSP: the wrapped optimizer is the inner optimizer: it steps the
  local model with its own state, and the engine pushes model deltas
  when the protocol says so and merges the global model that lands.
"""
import warnings

import torch

import kanel

_last = None  # the newest DistributedOptimizer, for broadcast_parameters


class DistributedOptimizer:
    """Wrap ``optimizer`` so that ``step()`` trains the job's model.

    ``named_parameters``: the model's ``named_parameters()``; every name
    is a tensor key, the same on every worker.  ``worker``: a
    ``kanel.Worker`` to use (None: one is made from the environment, and
    closed with this optimizer).  ``protocol``: the protocol this script
    expects; None takes the job's, a name that differs from the job's is
    a ValueError (the job's protocol is the coordinator's: ``kanel launch
    --sync``, or ``KANEL_SYNC``).
    """

    def __init__(self, optimizer, named_parameters, worker=None,
                 protocol=None, **worker_options):
        global _last
        self.optimizer = optimizer
        named = list(named_parameters)
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ValueError("kanel: parameter names repeat")
        ids = {id(p) for _, p in named}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in ids:
                    raise ValueError("kanel: the optimizer has a parameter "
                                     "that named_parameters does not name")
        self._own = worker is None
        self.worker = worker if worker is not None else \
            kanel.Worker(**worker_options)
        try:
            self.job = self.worker.job
            if protocol is not None and \
                    kanel.protocol_name(protocol) != self.job.protocol:
                raise ValueError(f"kanel: the script asks for {protocol}, "
                                 f"the job runs {self.job.protocol}")
            self._params = []
            for name, p in named:
                if not p.requires_grad:
                    continue
                if p.grad is None:
                    p.grad = torch.zeros_like(p.data)
                self.worker.register(name, p.data, p.grad)
                self._params.append((name, p, p.grad))
            self._check_optimizer()
        except BaseException:
            if self._own:
                self.worker.close()
            raise
        self._started = False
        _last = self

    def _check_optimizer(self):
        """Under a gradient protocol the servers run the job's optimizer:
        say so when the wrapped one would have done something else."""
        job = self.job
        if job.local_steps or job.optimizer == "sum":
            return
        for g in self.optimizer.param_groups:
            lr, mom = g.get("lr"), g.get("momentum", 0.0)
            want_mom = job.momentum if job.optimizer == "momentum" else 0.0
            if lr is not None and (abs(lr - job.lr) > 1e-6 * max(1, lr) or
                                   abs(mom - want_mom) > 1e-6):
                warnings.warn(
                    f"kanel: under {job.protocol} the servers apply the "
                    f"job's optimizer ({job.optimizer}, lr {job.lr:g}, "
                    f"momentum {want_mom:g}), not the wrapped "
                    f"{type(self.optimizer).__name__} (lr {lr:g}, "
                    f"momentum {mom:g})", stacklevel=3)
                return

    def start(self):
        """Join the servers; every parameter takes rank 0's values.
        Called by the first step() or broadcast_parameters()."""
        if not self._started:
            self.worker.start()
            self._started = True

    def _gradients_in_place(self):
        """Autograd writes into the registered gradient unless the
        program set ``p.grad`` to None or to a new tensor (``zero_grad(
        set_to_none=True)``): then that gradient is copied into the
        registered one (zeros for None), which becomes ``p.grad`` again,
        so that later steps are zero-copy."""
        for _, p, g in self._params:
            if p.grad is None:
                g.zero_()
                p.grad = g
            elif p.grad.data_ptr() != g.data_ptr():
                g.copy_(p.grad)
                p.grad = g

    def step(self, closure=None):
        """One step of training: returns kanel.STEP_LOCAL, STEP_PUSHED or
        STEP_SYNCED (what the protocol did with it)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.start()
        self._gradients_in_place()
        with torch.no_grad():
            if self.job.local_steps:
                self.optimizer.step()
                result = self.worker.step_done(applied=True)
            else:
                result = self.worker.step_done()
                if self.job.optimizer == "sum":
                    self.optimizer.step()
        self.last_loss = loss
        return result

    def zero_grad(self, set_to_none=False):
        """Zero the gradients in place (the registered buffers stay)."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def finish(self):
        """Under ESP and PSP, wait for a global model on its way and
        merge it; then the job stops counting this worker (call once
        after the last step)."""
        self.worker.finish()

    def global_state(self):
        """The last global model, name -> a new tensor: under ESP and PSP
        what the servers delivered last, without this worker's local
        steps since (what to evaluate); otherwise the parameters."""
        out = {}
        for name, p, _ in self._params:
            dst = torch.empty_like(p.data)
            self.worker.global_model(name, dst)
            out[name] = dst
        return out

    def close(self):
        """Leave the job (if this optimizer made the worker)."""
        if self._own and self.worker is not None:
            self.worker.close()
        self.worker = None

    def __getattr__(self, name):  # param_groups, state, state_dict, ...
        inner = self.__dict__.get("optimizer")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


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
