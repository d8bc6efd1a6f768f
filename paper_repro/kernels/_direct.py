"""Launch compiled Triton kernels through their own launcher, skipping Triton's per-call binder.

``kernel[grid](*args)`` binds, specializes and hashes every argument on every call: 18-41 us
of host time on the H200 hosts measured, 5-10x the device time of a 4096x128 scan
(data/h200/launch_probe.csv). The first call
at a given specialization goes through Triton (which compiles); later calls with the same
specialization key call the compiled kernel's launcher directly.

This relies on Triton internals (``CompiledKernel.run``'s argument order), so it is on by
default only for the Triton versions in ``TESTED_VERSIONS``; ``PAPER_REPRO_DIRECT_LAUNCH=1``
opts in elsewhere and ``=0`` opts out. Never under the interpreter, nor with Triton launch
hooks set (profilers).
"""
from __future__ import annotations

import os
from functools import reduce
from operator import or_

import torch
import triton

try:
    from triton import knobs as _knobs
except ImportError:  # older Triton: no direct launch
    _knobs = None

# Versions on which tests/test_direct_launch.py passed on the GPU with the current key (3.6:
# the H200's, every test of the file). Elsewhere PAPER_REPRO_DIRECT_LAUNCH=1 opts in.
TESTED_VERSIONS: set = {(3, 6)}
_CACHE: dict = {}
MAX_CACHED = 4096


def _triton_version() -> tuple:
    return tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())


def _enabled() -> bool:
    setting = os.environ.get("PAPER_REPRO_DIRECT_LAUNCH", "")
    if setting == "0" or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return False
    try:
        from triton.compiler.compiler import CompiledKernel
    except ImportError:
        return False
    if _knobs is None:
        return False
    if not all(hasattr(CompiledKernel, a) for a in ("run", "launch_metadata", "_init_handles")):
        return False
    return setting == "1" or _triton_version() in TESTED_VERSIONS


ENABLED = _enabled()


def specialization(values, n_tensors: int | None = None) -> tuple:
    """A key that is equal only where Triton would pick the same compiled kernel: a tensor's
    dtype and 16-byte alignment, a float's type, and every other value itself. Ints are keyed
    by value because constexpr tile sizes are ints too (Triton's own classes for dynamic ints,
    ``== 1`` and ``% 16 == 0``, would merge BLOCK_T=32 with BLOCK_T=64). ``n_tensors``: the
    values are that many tensors, then no tensor (faster, same key)."""
    if n_tensors is None:
        return tuple([(v.dtype, v.data_ptr() & 15 == 0) if isinstance(v, torch.Tensor)
                      else float if type(v) is float else v for v in values])
    return tuple([(t.dtype, t.data_ptr() & 15 == 0) for t in values[:n_tensors]]) + \
        tuple([float if type(v) is float else v for v in values[n_tensors:]])


def _raw_stream(device: int) -> int:
    return torch.cuda.current_stream(device).cuda_stream


def current_device() -> int:
    return torch.cuda.current_device()


if hasattr(torch._C, "_cuda_getCurrentRawStream"):
    _raw_stream = torch._C._cuda_getCurrentRawStream  # noqa: F811  (what Triton itself calls)
if hasattr(torch._C, "_cuda_getDevice"):
    current_device = torch._C._cuda_getDevice  # noqa: F811  (current_device() minus a frame)


def _hooks_set() -> bool:
    """Profilers (e.g. proton) set Triton's launch hooks: leave those launches to Triton.
    Triton 3.6 keeps them as hook chains (set = non-empty), older versions as None/callable."""
    runtime = _knobs.runtime
    return _active(runtime.launch_enter_hook) or _active(runtime.launch_exit_hook)


def _active(hook) -> bool:
    return hook is not None and bool(getattr(hook, "calls", True))


def _options(num_warps: int, maxnreg: int) -> dict:
    """Triton's launch options: ``maxnreg`` (registers a thread, a public compile option of
    the NVIDIA backend) only when set; the interpreter takes none."""
    if maxnreg and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return {"num_warps": num_warps, "maxnreg": maxnreg}
    return {"num_warps": num_warps}


def run(kernel, grid: tuple, num_warps: int, values: tuple, n_tensors: int | None = None,
        maxnreg: int = 0):
    """``kernel[grid](*values, num_warps=num_warps)``, directly when this specialization has
    been compiled before. ``values`` holds every kernel parameter, in order; when given, the
    first ``n_tensors`` are the only tensors; ``maxnreg`` caps the registers a thread (0: the
    compiler's choice). Returns the compiled launcher's cache entry (None when the direct
    launch is off)."""
    if not ENABLED or _hooks_set():
        kernel[grid](*values, **_options(num_warps, maxnreg))
        return None
    device = current_device()
    # id(): a JITFunction hashes its source digest on every call
    key = (id(kernel), device, num_warps, maxnreg, specialization(values, n_tensors))
    entry = _CACHE.get(key)
    if entry is None:
        if len(values) != len(kernel.arg_names):
            raise TypeError(f"{kernel.fn.__name__} takes {len(kernel.arg_names)} arguments, "
                            f"got {len(values)}")
        compiled = kernel[grid](*values, **_options(num_warps, maxnreg))
        compiled = compiled.result() if hasattr(compiled, "result") else compiled
        if len(_CACHE) >= MAX_CACHED:  # one entry per shape: bound it for shape sweeps
            _CACHE.clear()
        entry = _CACHE[key] = _entry(compiled)
        return entry
    _launch(entry, grid, device, values)
    return entry


def _entry(compiled) -> tuple:
    """``(launcher, leading arguments, compiled kernel)``. Triton's Python launcher only
    allocates scratch memory before calling its C launcher: kernels that need none call the C
    launcher itself."""
    launcher = compiled.run
    c_launcher = getattr(launcher, "launch", None)
    if callable(c_launcher) and getattr(launcher, "global_scratch_size", 1) == 0 and \
            getattr(launcher, "profile_scratch_size", 1) == 0:
        return c_launcher, (compiled.function, launcher.launch_cooperative_grid,
                            launcher.launch_pdl, None, None, compiled.packed_metadata,
                            None, None, None), compiled
    return launcher, (compiled.function, compiled.packed_metadata, None, None, None), compiled


def _launch(entry, grid: tuple, device: int, values: tuple):
    launcher, head, _ = entry
    launcher(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
             _raw_stream(device), *head, *values)


def _alignment_key(device: int, pointers: list) -> tuple:
    """The device, and whether each pointer is 16-byte aligned (one flag when all are)."""
    if not reduce(or_, pointers) & 15:
        return device, True
    return device, tuple([p & 15 == 0 for p in pointers])


def run_bound(cache: dict, kernel, grid: tuple, num_warps: int, values: tuple, n_tensors: int,
              maxnreg: int = 0):
    """``run`` for a caller whose non-tensor values and tensor dtypes never change (a launch
    plan's ``Launch``): ``cache`` keys the compiled launcher by device and the tensors' 16-byte
    alignment alone, skipping ``specialization``'s walk over every value. Repeats pass the
    tensors' addresses as ints, which the C launcher takes without asking the driver about
    each pointer."""
    if not ENABLED or _hooks_set():
        run(kernel, grid, num_warps, values, n_tensors, maxnreg)
        return
    device = current_device()
    pointers = [t.data_ptr() for t in values[:n_tensors]]
    key = _alignment_key(device, pointers)
    entry = cache.get(key)
    if entry is None:
        entry = run(kernel, grid, num_warps, values, n_tensors, maxnreg)
        if entry is not None:
            cache[key] = entry
        return
    _launch(entry, grid, device, (*pointers, *values[n_tensors:]))


def launch_pointers(cache: dict, grid: tuple, pointers: tuple, rest: tuple) -> bool:
    """A repeat of ``run_bound`` given the tensors' addresses (``pointers``, ints), the other
    values (``rest``) and a three-dimensional ``grid``. False, launching nothing, where
    ``cache`` holds no launcher for this device and alignment yet or the direct launch is off:
    then call ``run_bound``."""
    if not ENABLED or _hooks_set():
        return False
    device = current_device()
    entry = cache.get(_alignment_key(device, pointers))
    if entry is None:
        return False
    launcher, head, _ = entry
    launcher(*grid, _raw_stream(device), *head, *pointers, *rest)
    return True


def compiled_for(cache: dict, pointers: tuple):
    """The compiled kernel that ``launch_pointers`` would launch on ``pointers`` from the
    current device (None: none yet)."""
    entry = cache.get(_alignment_key(current_device(), pointers))
    return None if entry is None else entry[2]
