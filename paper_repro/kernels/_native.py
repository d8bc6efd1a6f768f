"""A launch plan's repeat in C++ (``_native.cpp``): outputs, pointers and the driver's launch.

The Python repeat (``_plan.Plan``) spends most of a small call's host time between the call and
the launch: allocating through ``torch.empty_like``, reading each address, Triton's launcher
parsing its arguments. The native plan does that work in one C++ call on the compiled kernel's
parameter block, packed once from its Triton signature. An op's site (``site``, ``add``,
``serve``; ``_plan.repeat``) also finds the plan for a call, checking what the Python lookup
checks.

The module is compiled with the system C++ compiler against torch's headers on first use, in a
background thread (calls go through Python until it is loaded), and cached under
``$PAPER_REPRO_CACHE`` (default ``~/.cache/paper_repro``) by a hash of the source, torch and
Python. ``PAPER_REPRO_NATIVE=0`` turns it off; it is used only with a CUDA GPU and where the
direct launch is (``_direct.ENABLED``), since both rely on Triton's compiled-kernel internals.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import struct
import subprocess
import sysconfig
import tempfile
import threading
from pathlib import Path

import torch

from paper_repro.kernels import _direct as D

SOURCE = Path(__file__).with_name("_native.cpp")
NAME = "paper_repro_native"
ENABLED = D.ENABLED and os.environ.get("PAPER_REPRO_NATIVE", "1") != "0" and \
    torch.cuda.is_available()
# Triton's parameter types (the launcher's C types) as struct formats; floats are packed as
# Triton packs them (bf16: the float32's high half).
_FORMATS = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B",
            "u16": "H", "u32": "I", "u64": "Q", "fp16": "e", "bf16": "f", "fp32": "f", "f32": "f",
            "fp64": "d"}


class _State:
    module = None
    error: str | None = None
    thread: threading.Thread | None = None
    lock = threading.Lock()


def cache_dir() -> Path:
    root = os.environ.get("PAPER_REPRO_CACHE") or Path.home() / ".cache" / "paper_repro"
    return Path(root) / "native"


def _compile_command(output: Path) -> list:
    torch_dir = Path(torch.__file__).parent
    include = [torch_dir / "include", torch_dir / "include" / "torch" / "csrc" / "api" / "include",
               sysconfig.get_paths()["include"]]
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    lib = torch_dir / "lib"
    return [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-w",
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *[f"-I{p}" for p in include], str(SOURCE),
            f"-L{lib}", f"-Wl,-rpath,{lib}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
            "-o", str(output)]


def library_path() -> Path:
    """Where this source, torch and Python's build lives (it may not exist yet)."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(f"{torch.__version__}|{sysconfig.get_config_var('SOABI')}".encode())
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return cache_dir() / digest.hexdigest()[:16] / f"{NAME}{suffix}"


def build() -> Path:
    """Compile the module unless this version is already built; its path. Raises
    ``RuntimeError`` with the compiler's message when the build fails."""
    path = library_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        staged = Path(tmp) / path.name
        done = subprocess.run(_compile_command(staged), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building {NAME} failed:\n{done.stderr[-4000:]}")
        os.replace(staged, path)  # atomic: concurrent builds leave one whole file
    return path


def load(path: Path | None = None):
    """Import the built module (building it first where needed)."""
    path = build() if path is None else path
    spec = importlib.util.spec_from_file_location(NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_in_background() -> None:
    try:
        _State.module = load()
    except Exception as error:  # noqa: BLE001 -- any failure leaves the Python path in place
        _State.error = f"{type(error).__name__}: {error}"


def module(wait: bool = False):
    """The loaded module, or None while it builds, where it failed (``status()`` says why) or
    where the native path is off. The first call starts the build; ``wait`` joins it."""
    if _State.module is not None or not ENABLED:
        return _State.module
    with _State.lock:
        if _State.thread is None:
            _State.thread = threading.Thread(target=_build_in_background, name=NAME, daemon=True)
            _State.thread.start()
    if wait:
        _State.thread.join()
    return _State.module


def status() -> str:
    if not ENABLED:
        return "off (PAPER_REPRO_NATIVE=0, or the direct launch is off)"
    if _State.module is not None:
        return f"loaded from {_State.module.__file__}"
    if _State.error is not None:
        return f"failed: {_State.error}"
    return "building" if _State.thread is not None else "not started"


def parameter_block(signature: list, values: tuple) -> tuple[bytes, list]:
    """The kernel's parameters as its launcher passes them: every value whose Triton type is
    not ``constexpr``, then the global and profile scratch pointers (null), each at an 8-byte
    aligned offset. ``(bytes, offsets)``, an offset a value and two for the scratch (None for a
    ``constexpr``); pointers (``*`` types) are packed as the ints given. Raises ``ValueError``
    on a type the native path does not pack (tuples, descriptors)."""
    if len(signature) != len(values):
        raise ValueError(f"{len(signature)} parameter types for {len(values)} values")
    block, offsets = bytearray(), []
    for kind, value in (*zip(signature, values), ("*", 0), ("*", 0)):
        if kind == "constexpr":
            offsets.append(None)
            continue
        if not isinstance(kind, str) or kind not in _FORMATS and not kind.startswith("*"):
            raise ValueError(f"no native packing for parameter type {kind!r}")
        offsets.append(len(block))
        if kind.startswith("*"):
            block += struct.pack("Q", value)
        elif kind == "bf16":
            block += struct.pack("H", struct.unpack("I", struct.pack("f", value))[0] >> 16)
        else:
            block += struct.pack(_FORMATS[kind], value)
        block += bytes(-len(block) % 8)
    return bytes(block), offsets


def make_plan(compiled, grid: tuple, values: tuple, sources: tuple, n_args: int, like: int,
              dtype, n_outputs: int, device: int, shifts: tuple | None = None):
    """A native plan for ``compiled`` (a Triton ``CompiledKernel``) launched on ``grid`` with
    ``values`` (every parameter in order, the first ``len(sources)`` being pointers, as ints, to
    tensor ``sources[k]`` of ``(*args, *outputs)``, ``shifts[k]`` bytes on: default none);
    outputs ``empty_like(args[like], dtype)``, or with ``n_outputs`` 0 none: the kernel writes
    into its arguments and a call returns ``args[like]``. None where the module is not loaded
    or the kernel needs what the native launch lacks."""
    native = module()
    if native is None:
        return None
    meta = compiled.metadata
    if getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_cooperative_grid", False) or \
            getattr(meta, "launch_pdl", False) or getattr(meta, "global_scratch_size", 0) or \
            getattr(meta, "profile_scratch_size", 0) or getattr(meta, "tensordesc_meta", None):
        return None
    try:
        block, offsets = parameter_block(list(compiled.src.signature.values()), values)
    except (AttributeError, ValueError):
        return None
    pointers = offsets[:len(sources)]
    if None in pointers or compiled.function is None:
        return None
    kept = [o for o in offsets if o is not None]
    aligned = [int(v & 15 == 0) for v in values[:len(sources)]]
    return native.make(compiled.function, tuple(grid), meta.num_warps, meta.shared, device,
                       n_args, like, dtype, n_outputs, block, kept,
                       [kept.index(o) for o in pointers], sources, aligned,
                       [0] * len(sources) if shifts is None else list(shifts))
