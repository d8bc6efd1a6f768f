"""Launch plans: the host work of a repeated call, done once per tensor metadata and scalars.

A public call is keyed by its op, the CPU backend, each argument's type and each scalar's value
and type (``True == 1.0`` and they hash alike); the plans under a key are checked, most recent
first, against the tensors' shape, strides, dtype, device, requires_grad and dispatch keys by
torch's C++ tensor guard (where this torch lacks it, that metadata joins the key instead). The
first call with new metadata runs the checks, views its tensors as ``[B, T]`` rows and picks
tiles; if it then launched Triton on its arguments' own memory (no copies), the launch becomes
a plan. A repeat allocates the outputs and launches on its own arguments. Data pointers are not
keyed: the direct launch keys their alignment. Calls that validate, force tiles, prefetch or
Retrace's words, compile or need gradients neither use nor record plans.

Once a plan has gone native (``_native.py``), later calls with its metadata and scalars are
served by :func:`repeat` in one C++ call: the op's site checks what the key and the guard check,
then launches; the Python lookup runs only where the site has no plan for the call.
"""
from __future__ import annotations

import contextlib
import functools
import operator
import threading

import torch

from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N

MAX_PLANS = 1024  # keys: one per op, argument types and scalars
MAX_VARIANTS = 8  # plans under one key: shapes, strides, dtypes and devices, newest first
_PLANS: dict = {}
SITE_CAPACITY = 16  # native plans an op's site holds: newest or last served first
_SITES: dict = {}  # op -> partial(serve, site) of the compiled module


def _tensor_guard_factory():
    """``make(tensors) -> guard`` whose ``guard.check(*others)`` holds iff each other tensor
    has the type, shape, strides, dtype, device, requires_grad and dispatch keys of its
    counterpart (torch's dynamo guard, in C++); None where this torch lacks it or it fails
    a self-test."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        def make(tensors):
            return TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                dynamic_dims_strides=[list(t.stride()) for t in tensors])

        x = torch.zeros(2, 3)
        guard = make((x,))
        others = (x.t(), x.double(), x[:1], x.clone().requires_grad_(),
                  x.as_subclass(type("Tagged", (torch.Tensor,), {})))
        if guard.check(x.clone()) and not any(guard.check(y) for y in others):
            return make
    except Exception:  # noqa: BLE001 -- any failure: key the metadata instead
        pass
    return None


_MAKE_GUARD = _tensor_guard_factory()


class _Recording(threading.local):
    key = None  # the key of the public call whose launch is being recorded on this thread


_RECORDING = _Recording()


class Plan:
    """Outputs ``empty_like(args[like], dtype)`` (``dtype`` None: that of ``args[like]``), then
    ``launch`` on the pointers it picks from ``(*args, *outputs)``. ``grad``: an argument
    requires grad (recorded under no_grad), so grad mode needs the registered op. Once a
    repeat has launched directly, later repeats run as a native plan where one can be made
    (``_native.py``)."""

    __slots__ = ("launch", "like", "dtype", "n_outputs", "sources", "pick", "grad", "present",
                 "spread", "matches", "native", "site")

    def __init__(self, launch, like: int, dtype: torch.dtype | None, n_outputs: int,
                 sources: tuple, grad: bool, matches=lambda args: True, site=None):
        self.launch, self.like, self.dtype, self.n_outputs = launch, like, dtype, n_outputs
        self.matches = matches  # args -> whether their metadata is that of the recorded call
        self.sources, self.pick, self.grad = sources, operator.itemgetter(*sources), grad
        # Each distinct tensor's address is read once (absent arguments repeat an output's).
        distinct = sorted(set(sources))
        self.present = operator.itemgetter(*distinct)
        self.spread = operator.itemgetter(*[distinct.index(s) for s in sources])
        self.native = None if N.ENABLED else False  # (run, plan); False: never native
        self.site = site  # (op, scalars, words) to serve from the op's site once native

    def __call__(self, args: tuple):
        native = self.native
        if native and not D._hooks_set():
            device = D.current_device()
            result = native[0](native[1], args, device, D._raw_stream(device))
            if result is not None:
                return result
        like, dtype = args[self.like], self.dtype
        # without dtype=, empty_like skips its keyword parsing
        out = torch.empty_like(like) if dtype is None else torch.empty_like(like, dtype=dtype)
        outs = (out,) if self.n_outputs == 1 else \
            (out, *[torch.empty_like(out) for _ in range(self.n_outputs - 1)])
        tensors = (*args, *outs)
        pointers = self.spread([t.data_ptr() for t in self.present(tensors)])
        if not self.launch.launch_pointers(pointers):
            self.launch(self.pick(tensors))
        elif native is None and N.module() is not None:
            self.native = self._native(pointers, len(args))
            if self.native and self.site is not None:
                op, scalars, words = self.site
                enlist(op, args, scalars, self.grad, words, self, self.native[1])
        return out if self.n_outputs == 1 else outs

    def _native(self, pointers: tuple, n_args: int):
        """``(run, native plan)`` of the direct launch just made on ``pointers``, or False."""
        launched = self.launch.launch_values(pointers)
        if launched is None:
            return False
        compiled, grid, values = launched
        plan = N.make_plan(compiled, grid, values, L.with_unread_scratch(self.sources), n_args,
                           self.like, self.dtype, self.n_outputs, D.current_device())
        return False if plan is None else (N.module().run, plan)


def enlist(op: str, args: tuple, scalars: tuple, grad: bool, words: tuple, owner,
           native_plan) -> None:
    """Serve later calls of ``op`` with ``args``' metadata and ``scalars`` (exact types) from
    ``native_plan`` through the op's site (``repeat``); ``grad``: only outside grad mode;
    ``words``: argument indices that must be 8-byte aligned; ``owner`` is kept alive with it."""
    native = N.module()
    site = _SITES.get(op)
    if site is None:
        site = _SITES[op] = functools.partial(native.serve, native.site(SITE_CAPACITY))
    # what serve() reads on every call, as this module sees it now
    native.configure(L.FORCED_SLOTS,
                     D._knobs.runtime if D._knobs else None, D.current_device, D._raw_stream)
    native.add(site.args[0], args, scalars, grad, words, owner, native_plan)


def repeat(op: str, args: tuple, scalars: tuple, validate=False):
    """The outputs of the native plan recorded for this call of ``op`` (found and launched in
    C++ by the op's site), or None: then :func:`lookup`."""
    if validate or torch.compiler.is_compiling() or not N.ENABLED:
        return None
    site = _SITES.get(op)
    return None if site is None else site(args, scalars)


def planned(op: str, args: tuple, scalars: tuple, validate=False):
    """``(outputs, key)`` of a public call: the outputs of the plan recorded for it (native or
    Python; None where there is none), and the key to record one under (None: never)."""
    out = repeat(op, args, scalars, validate)
    if out is not None:
        return out, None
    plan, key = lookup(op, args, scalars, validate)
    return (None, key) if plan is None else (plan(args), key)


def clear() -> None:
    """Forget every plan, Python and native."""
    _PLANS.clear()
    _SITES.clear()


def _metadata(t):
    # a torch.func transform's tensor shows its per-sample metadata: keyed apart from plain ones
    return None if t is None else (type(t), t.shape, t.stride(), t.dtype, t.device,
                                   t.requires_grad, L.functorch_wrapped(t))


def lookup(op: str, tensors: tuple, scalars: tuple, validate=False):
    """``(plan, key)`` of a public call: the plan recorded for this call's metadata (None if
    there is none or the call needs the registered op), and the key to record one under (None:
    never use a plan)."""
    if validate or L.VALIDATE_ENV or L.forced() or torch.compiler.is_compiling():
        return None, None
    try:
        described = map(type, tensors) if _MAKE_GUARD else map(_metadata, tensors)
        key = (op, L._CPU_BACKEND[0], *described, *scalars, *map(type, scalars))
        plans = _PLANS.get(key)
    except (AttributeError, TypeError, RuntimeError):  # not plain tensors: the checks say why
        return None, None
    found = (key, tensors, op, scalars)
    if plans is None:  # a miss: only plain tensors' calls may record (the checks say why)
        return None, found if all(t is None or isinstance(t, torch.Tensor)
                                  for t in tensors) else None
    plan = plans[0]
    if not plan.matches(tensors):
        plan = next((p for p in plans[1:] if p.matches(tensors)), None)
        if plan is None:
            return None, found
        with contextlib.suppress(ValueError):  # another thread may have moved it first
            plans.remove(plan)
            plans.insert(0, plan)  # a loop over a few shapes finds each at the front
    if plan.grad and torch.is_grad_enabled():
        return None, found  # L.needs_dispatch, with requires_grad as recorded
    return plan, found


def _matcher(tensors: tuple):
    """``args -> bool``: whether ``args`` have the metadata of ``tensors``, Nones included
    (types are keyed: only the present tensors are checked)."""
    if _MAKE_GUARD is None:
        return lambda args: True  # the key holds the metadata
    where = [i for i, t in enumerate(tensors) if t is not None]
    guard = _MAKE_GUARD([tensors[i] for i in where])
    if len(where) == 1:
        i = where[0]
        return lambda args: guard.check(args[i])
    pick = operator.itemgetter(*where)
    return lambda args: guard.check(*pick(args))


def _remember(found, plan_of) -> None:
    """Keep ``plan_of(matches)`` for the call ``found`` by :func:`lookup`, newest first."""
    key, tensors = found[:2]
    plans = _PLANS.get(key)
    if plans is None:
        if len(_PLANS) >= MAX_PLANS:  # one entry per op and scalars: bound it for sweeps
            _PLANS.clear()
        plans = _PLANS[key] = []
    plans.insert(0, plan_of(_matcher(tensors)))
    del plans[MAX_VARIANTS:]


def recorded(key, forward, *args):
    """``forward(*args)``; the launch it makes through ``launch`` becomes the plan for ``key``
    (the key rides on the thread: ``forward`` is also the registered op's body, whose
    signature is the op's schema)."""
    if key is None:
        return forward(*args)
    _RECORDING.key = key
    try:
        return forward(*args)
    finally:
        _RECORDING.key = None


def launch(job, pointers: tuple, args: tuple, outputs: tuple, order: tuple | None = None,
           words: tuple = (), word_bytes: int = 8):
    """``job(pointers)``, kept as the plan of the call being recorded if it read and wrote the
    arguments' own memory. ``pointers`` are inputs in kernel order (``args[i]``, ``i`` from
    ``order``, default ``args``' order, as views; absent ones replaced by the first output),
    then the ``[B, T]`` rows of ``outputs`` (``L.Output``). ``words``: indices of ``args`` the
    kernel reads as 64-bit words, so that a repeat must find them ``word_bytes``-aligned too
    (16 where it reads them in pairs; a native plan checks every address's 16-byte alignment
    itself)."""
    job(pointers)
    found = _RECORDING.key
    if found is None:
        return
    _RECORDING.key = None
    n, inputs = len(args), len(pointers) - len(outputs)
    order = range(inputs) if order is None else order
    if any(a is not None and type(a) is not torch.Tensor for a in args):
        return  # subclasses may override the view ops a plan skips
    if any(not o.is_view or o.rows.data_ptr() != o.tensor.data_ptr() for o in outputs):
        return
    for i, p in zip(order, pointers):
        if args[i] is not None and p.data_ptr() != args[i].data_ptr():
            return  # a copy: the plan would read the argument with the copy's strides
    like = next(i for i, a in enumerate(args) if a is outputs[0].like)
    dtype = outputs[0].tensor.dtype
    sources = (*[n if args[i] is None else i for i in order], *range(n, n + len(outputs)))
    grad = any(a is not None and a.requires_grad for a in args)
    words = tuple(i for i in words if args[i] is not None)
    site = (found[2], found[3], words)
    _remember(found, lambda matches: Plan(job, like, None if dtype == args[like].dtype else
                                          dtype, len(outputs), sources, grad,
                                          _aligned(matches, words, word_bytes), site))


def _aligned(matches, words: tuple, word_bytes: int = 8):
    """``matches``, and the arguments at ``words`` ``word_bytes``-aligned."""
    if not words:
        return matches
    return lambda a: matches(a) and not any(a[i].data_ptr() % word_bytes for i in words)

