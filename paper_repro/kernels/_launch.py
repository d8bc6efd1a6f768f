"""Host-side plumbing shared by every op: argument checks, layouts, tiles (``_tiles``), dispatch.

Layout rule: time may be any axis with any number of batch axes; each op views its inputs as
``[B, T]`` through ``movedim`` + ``reshape`` (no copy for batch-major, time-major or stacked
batch axes) and the kernels address them by strides.
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
import struct
from dataclasses import dataclass

import torch

# The tile heuristic lives in _tiles; callers reach it through this module too.
from paper_repro.kernels._tiles import (  # noqa: F401
    ScanConfig,
    TileTraits,
    _batch_major_config,
    _interleaved,
    _pow2,
    _split_time,
    _time_major_config,
    choose_config,
    fit_segments,
    run_length,
    triton_cdiv,
    wide_rows16,
    wide_walks16,
)

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
# Read once: an environment lookup costs about as much as a launch's whole argument check.
VALIDATE_ENV = os.environ.get("PAPER_REPRO_VALIDATE", "0") == "1"
_CPU_BACKEND = ["triton" if INTERPRETED else "torch"]
_FORCED_CONFIG: list = [None]
_FORCED_PREFETCH: list = [None]
_FORCED_WORDS: list = [None]
_FORCED_ALIGNMENT: list = [None]
_FORCED_WORD_LOADS: list = [None]
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@contextlib.contextmanager
def _setting(slot: list, value):
    old, slot[0] = slot[0], value
    try:
        yield
    finally:
        slot[0] = old


def cpu_backend(name: str):
    """Run CPU tensors through ``"triton"`` (interpreter) or ``"torch"`` inside the block."""
    if name == "triton" and not INTERPRETED:
        raise RuntimeError("the triton CPU backend needs TRITON_INTERPRET=1 before import")
    return _setting(_CPU_BACKEND, name)


def force_config(config: ScanConfig | None):
    """Use one tile configuration for every launch inside the block (tests, tuning)."""
    return _setting(_FORCED_CONFIG, config)


def force_prefetch(flag: bool | None):
    """Force the kernels' PREFETCH switch inside the block (tests, tuning); None: the rule."""
    return _setting(_FORCED_PREFETCH, flag)


def force_alignment(flag: bool | None):
    """Inside the block, the kernels are told the layout's alignment (True, the rule; None) or
    never (False): the A/B of ``alignment`` (``bench.align_probe``)."""
    return _setting(_FORCED_ALIGNMENT, flag)


def force_words(flag: bool | None):
    """Inside the block, Retrace reads its per-action inputs as 64-bit words wherever their
    layout allows (True) or never (False), and (False) time-major tiles load narrow values
    (1-byte flags, bf16 beside fp32 outputs) as Triton vectorises them, not four envs a load;
    None: the rules (``retrace.action_reads``, ``four_loads``)."""
    return _setting(_FORCED_WORDS, flag)


def force_word_loads(mode: int | None):
    """Inside the block, Retrace's batch-major words are read by ``tl.load`` as before inline
    assembly (0, its one-tile rows per action), a word a load (1) or a pair where aligned (2);
    None: the rule (``retrace.word_loads``)."""
    return _setting(_FORCED_WORD_LOADS, mode)


FORCED_SLOTS = (_FORCED_CONFIG, _FORCED_PREFETCH, _FORCED_WORDS, _FORCED_ALIGNMENT,
                _FORCED_WORD_LOADS)


def forced() -> bool:
    """Whether a ``force_*`` block is in effect: kept launches and plans must not serve it."""
    return any(slot[0] is not None for slot in FORCED_SLOTS)


def prefetch(config: ScanConfig, allowed: bool = True) -> bool:
    """Load the next tile before scanning this one: where a program walks several tiles with
    few warps (latency-bound); at 16 warps the extra registers cost more (8192x4096: +5 %).
    ``allowed``: the kernel's own rule (False: never), which ``force_prefetch`` overrides."""
    forced = _FORCED_PREFETCH[0]
    if forced is not None:
        return forced
    return allowed and config.num_warps <= 4 and config.seg_len >= 2 * config.BLOCK_T


def use_triton(x: torch.Tensor) -> bool:
    if functorch_wrapped(x):
        return False  # a torch.func transform's tensor has no memory of its own to launch on
    return x.is_cuda or (_CPU_BACKEND[0] == "triton" and x.device.type == "cpu")


def functorch_wrapped(x: torch.Tensor) -> bool:
    """Whether a torch.func transform (grad, vjp, vmap, ...) wraps ``x``."""
    return torch._C._functorch.is_functorch_wrapped_tensor(x)


def needs_dispatch(*tensors) -> bool:
    """Go through the registered op when compiling, when a gradient may be needed or under a
    torch.func transform (its batching rule and autograd)."""
    if torch.compiler.is_compiling():
        return True
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (grad and t.requires_grad or functorch_wrapped(t)):
            return True
    return False


def validation_requested(validate: bool) -> bool:
    """``validate=True``, or ``PAPER_REPRO_VALIDATE=1`` in the environment at import."""
    return validate or VALIDATE_ENV


# ----------------------------------------------------------------------------- checks

def check_tensor(name, x, *, like=None, floating=True, flag=False, optional=False, shape=None):
    """Type, dtype, device and shape checks that never read tensor values. ``shape`` may be a
    callable, evaluated only when ``x`` is given."""
    if x is None:
        if optional:
            return
        raise TypeError(f"{name} must be a torch.Tensor, got None")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if flag:
        if x.is_complex():
            raise TypeError(f"{name} must be bool, integer or floating, got {x.dtype}")
    elif floating and x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {x.dtype}")
    if like is not None:
        if x.device != like.device:
            raise ValueError(f"{name} is on {x.device} but the inputs are on {like.device}")
        want = like.shape if shape is None else shape() if callable(shape) else shape
        if x.shape != want:
            raise ValueError(f"{name} must have shape {tuple(want)}, got {tuple(x.shape)}")


def check_scalar(name, value, *, low=None):
    if type(value) is float and math.isfinite(value) and low is None:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = ("; per-step discounts go in the flags: flag = 1 - discount_t / gamma (README, "
                "per-step discounts)") if name == "gamma" else ""
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}{hint}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def time_axis(x: torch.Tensor, time_dim: int, name: str = "time_dim") -> int:
    if not isinstance(time_dim, int) or isinstance(time_dim, bool):
        raise TypeError(f"{name} must be an int, got {type(time_dim).__name__}")
    if x.dim() == 0:
        raise ValueError("inputs must have a time axis; got a 0-d tensor")
    if not -x.dim() <= time_dim < x.dim():
        raise ValueError(f"{name}={time_dim} is out of range for a {x.dim()}-d input")
    return time_dim % x.dim()


def check_binary(name, x):
    if x is not None and x.dtype != torch.bool and bool(((x != 0) & (x != 1)).any()):
        raise ValueError(f"{name} must hold only 0 and 1 (validate=True)")


def check_exclusive(terminateds, truncateds):
    if truncateds is not None and bool(((terminateds != 0) & (truncateds != 0)).any()):
        raise ValueError("terminateds and truncateds are both set at the same step (validate=True)")


# ----------------------------------------------------------------------------- layouts

def to_rows(x: torch.Tensor, axis: int) -> torch.Tensor:
    """View a tensor with time on ``axis`` as ``[B, T]`` (copies only if no view exists)."""
    if axis == 1 and x.dim() == 2:
        return x
    x = x.movedim(axis, -1)
    return x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x


def action_rows(x: torch.Tensor, axis: int) -> torch.Tensor:
    """``[..., T, ..., A]`` with time on ``axis`` (of the per-step shape) as ``[B, T, A]``."""
    x = x.movedim(axis, -2)
    return x.reshape(-1, x.shape[-2], x.shape[-1])


def vector_rows(x: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """A per-row tensor (batch shape) as a contiguous ``[B]`` vector (kernels read it densely)."""
    return None if x is None else x.reshape(n).contiguous()


def common_strides(tensors):
    """Bring every ``[B, T]`` tensor to one pair of strides; returns (tensors, strides)."""
    first = tensors[0].stride()
    if all(t.stride() == first for t in tensors):
        return tensors, first
    tensors = [t.contiguous() for t in tensors]
    return tensors, tensors[0].stride()


def is_time_major(stride) -> bool:
    return stride[0] == 1 and stride[1] != 1


# Triton types ints below 2**31 as int32: element offsets at or past this need 64 bits
OFFSET_LIMIT = 1 << 31
WIDE_OFFSETS = 1  # the kernels' ALIGN for a layout whose steps lie that far apart


def wide_offsets(T: int, time_strides) -> bool:
    """Whether step ``T - 1`` lies ``OFFSET_LIMIT`` elements or more from step 0 along any of
    ``time_strides`` (time-major rows of 2**31 elements and more; rows' own offsets are 64-bit
    in the kernels already)."""
    return (T - 1) * max((abs(s) for s in time_strides), default=0) >= OFFSET_LIMIT


def alignment(B: int, T: int, layout: tuple, time_strides: tuple = ()) -> int:
    """The kernels' ``ALIGN`` for ``layout = (stride_b, stride_t, out_stride_b, out_stride_t)``:
    the largest power of two up to 16 that divides the contiguous axis's extent and the other
    strides of inputs and output, positive batch-major (T), negative time-major (B); 0 where
    that is 1 or where Triton already sees multiples of 16 (no new compiles for those shapes);
    ``WIDE_OFFSETS`` where the steps' offsets need 64 bits (``wide_offsets`` of the layout's
    step strides and ``time_strides``, the kernel's others)."""
    stride_b, stride_t, out_b, out_t = layout
    if wide_offsets(T, (stride_t, out_t, *time_strides)):
        return WIDE_OFFSETS
    if _FORCED_ALIGNMENT[0] is False:
        return 0
    if stride_t == 1 and out_t == 1:
        values, sign = (T, stride_b, out_b), 1
    elif stride_b == 1 and out_b == 1:
        values, sign = (B, stride_t, out_t), -1
    else:
        return 0
    align = 16
    while align > 1 and any(v % align for v in values):
        align //= 2
    return 0 if align in (1, 16) else sign * align


def empty_rows(B: int, T: int, dtype, device, time_major: bool) -> torch.Tensor:
    if time_major:
        return torch.empty((T, B), dtype=dtype, device=device).t()
    return torch.empty((B, T), dtype=dtype, device=device)


def from_rows(out: torch.Tensor, like: torch.Tensor, axis: int) -> torch.Tensor:
    moved = like.movedim(axis, -1).shape
    return out.reshape(moved).movedim(-1, axis)


def acc_dtype(dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def result_dtype(*tensors) -> torch.dtype:
    """The promoted floating dtype of the given tensors (None and non-floating ones skipped)."""
    out = None
    for t in tensors:
        if t is not None:
            d = t.dtype
            if d is not out and d in FLOAT_DTYPES:
                out = d if out is None else torch.promote_types(out, d)
    return out


@functools.lru_cache(maxsize=256)
def split_scalar(value: float):
    """(hi, lo) float32 pair whose sum carries a float64 scalar into a float64 kernel."""
    hi = struct.unpack("f", struct.pack("f", value))[0]
    return hi, value - hi


# ----------------------------------------------------------------------------- tiles

@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return _num_sms(device.index if device.index is not None else torch.cuda.current_device())


def config_for(B: int, T: int, stride, device, wide: bool = False,
               retrace: bool = False, itemsize: int = 4,
               traits: TileTraits | None = None, inputs=()) -> ScanConfig:
    """The tile of a ``[B, T]`` launch whose output has ``itemsize`` bytes a value; ``inputs``:
    the per-step tensors it loads, flags included, whose narrow ones may lay out a time-major
    tile (``narrow_loads``)."""
    forced = _FORCED_CONFIG[0]
    if forced is not None:
        return forced
    time_major = is_time_major(stride)
    return choose_config(B, T, time_major, num_sms(device), wide, retrace, itemsize,
                         traits or TileTraits(), narrow_loads(itemsize, inputs, time_major))


def narrow_loads(itemsize: int, inputs, time_major: bool) -> bool:
    """Whether a time-major tile of fp32 outputs loads values narrower than 4 bytes (bool or
    uint8 flags, bf16 values) as Triton vectorises them: ``choose_config`` then lays it out as a
    16-bit tile. In the fp32 tiles' interleaved runs such loads compiled for sm_90 to 1.5-5.7x
    the instructions and spilled (GAE 512x4096 with bool flags: 883 local loads;
    data/h200/sass_mixed.csv). Loads four envs a load (``four_loads``) are left out of
    ``inputs`` (``tile_of``). Batch-major tiles keep the output's (16-bit loads: at most 1.1x
    the instructions)."""
    return time_major and itemsize == 4 and any(
        x is not None and x.element_size() < 4 for x in inputs)


@dataclass
class Rows:
    """Per-step inputs viewed as ``[B, T]`` with one pair of strides; None stays None."""

    B: int
    T: int
    stride: tuple
    tensors: dict

    @property
    def time_major(self) -> bool:
        return is_time_major(self.stride)

    def __getitem__(self, name):
        return self.tensors[name]

    def empty(self, dtype, device) -> torch.Tensor:
        return empty_rows(self.B, self.T, dtype, device, self.time_major)


def rows_of(axis: int, **named) -> Rows:
    """Every given tensor as ``[B, T]``; all share one pair of strides (copies if they differ)."""
    stride, same = None, True
    for name, x in named.items():
        if x is not None:
            x = named[name] = to_rows(x, axis)
            if stride is None:
                stride, (B, T) = x.stride(), x.shape
            elif same and x.stride() != stride:
                same = False
    if not same:
        present = [k for k, x in named.items() if x is not None]
        values, stride = common_strides([named[k] for k in present])
        named.update(zip(present, values))
    if max(B, T) >= OFFSET_LIMIT:  # the kernels count rows and steps in int32
        what, n = ("steps", T) if T >= OFFSET_LIMIT else ("rows", B)
        raise ValueError(f"{next(iter(named))} has {n} {what}; at most 2**31 - 1 are supported")
    return Rows(B, T, stride, named)


FLAGS = ("terminateds", "truncateds")


def four_loads(rows: Rows, itemsize: int, names: tuple = FLAGS, values: bool = True) -> int:
    """The kernels' ``FOURS_BELOW`` for time-major rows whose B and step stride are multiples of
    four: loads (and stores) of values narrower than that many bits go four envs at a time
    (``affine_scan.four_runs``). With ``values`` (the kernel loads its values so; else its
    flags alone): 32 where fp32 outputs load anything narrower than 4 bytes, and for 16-bit
    outputs, whose rows then take the fp32 tile (``tile_of``). Else 16 where only 1-byte flags
    ``names`` are narrower than the outputs (fp32 or 16-bit); 0: Triton's own loads."""
    if (_FORCED_WORDS[0] is False or not rows.time_major or itemsize not in (2, 4)
            or rows.B % 4 or rows.stride[1] % 4):
        return 0
    present = {k: x for k, x in rows.tensors.items() if x is not None}
    flags = [present[k] for k in names if k in present]
    narrow = [x for k, x in present.items() if x.element_size() < 4
              and (k not in names or x.element_size() > 1)]
    if values and (itemsize == 2 or narrow):
        return 32
    return 16 if flags and all(f.element_size() == 1 for f in flags) else 0


def tile_of(rows: Rows, device, itemsize: int, traits: TileTraits | None = None,
            wide: bool = False, retrace: bool = False, names: tuple = FLAGS, extra: tuple = (),
            values: bool = True) -> tuple:
    """``(config, FOURS_BELOW)``: the tile of a launch of ``rows`` whose flags are ``names``
    (``extra``: other tensors it loads, not in ``rows``), and which of its loads go four envs a
    load (``four_loads``). Those leave an fp32 tile the layout fp32 inputs give it; the others
    lay it out as a 16-bit one (``narrow_loads``). On an H200 (``data/h200/fours_ab.csv``) bool
    flags so took 0.87-1.15x the time of float ones, 0.31-0.74x that of sixteen a load in the
    16-bit tile. 16-bit rows take the fp32 tile four envs at a time (H100,
    ``data/h100/bf16_fours_ab.csv``: 0.48-1.00x the 16-bit tile's time, bool flags
    0.11-0.87x), 32 envs wide where it would hold 16 (``wide_rows16``, ``wide_walks16``)."""
    fours = four_loads(rows, itemsize, names, values)
    inputs = [] if fours == 32 else tile_inputs(rows, fours == 16, names)
    # 16-bit outputs stored four envs a store too: the fp32 tile, in the fp32 layout
    config = config_for(rows.B, rows.T, rows.stride, device, wide=wide, retrace=retrace,
                        itemsize=4 if fours == 32 else itemsize,
                        traits=traits or TileTraits(), inputs=[*inputs, *extra])
    if fours == 32 and itemsize == 2 and _FORCED_CONFIG[0] is None:
        sms = num_sms(device)
        config = wide_rows16(config, rows.B, rows.T, sms)
        config = wide_walks16(config, rows.B, rows.T, sms, traits or TileTraits())
    return config, fours


def tile_inputs(rows: Rows, fours: bool, names: tuple = FLAGS) -> list:
    """The per-step tensors whose loads lay out the tile (``narrow_loads``): flags ``names``
    loaded four envs a load leave it alone."""
    return [x for k, x in rows.tensors.items() if not (fours and k in names)]


def batch_shape(x: torch.Tensor, axis: int):
    return x.movedim(axis, -1).shape[:-1]


def layout_ints(rows: Rows, out: torch.Tensor) -> tuple:
    """``stride_b, stride_t, out_stride_b, out_stride_t`` for a ``[B, T]`` output."""
    return (*rows.stride, *out.stride())


@functools.lru_cache(maxsize=256)
def scalar_pairs(*values: float) -> tuple:
    """Each scalar as its float32 (hi, lo) pair, flattened: the kernels' ``x, x_lo`` params."""
    return tuple(part for v in values for part in split_scalar(v))


def pointers(placeholder: torch.Tensor, *tensors) -> tuple:
    """Kernel pointers in parameter order; an absent optional tensor becomes ``placeholder``
    (never read: its ``HAS_*`` flag is off)."""
    return tuple([placeholder if t is None else t for t in tensors])


def with_unread_scratch(items: tuple) -> tuple:
    """``items`` (pointers, or where they come from) and the two a one-pass launch never reads,
    ``agg_ptr`` and ``status_ptr``: the last item again."""
    return (*items, items[-1], items[-1])


class Output:
    """An output laid out like the input ``like`` (``empty_like``, as the fake kernels promise),
    with the ``[B, T]`` view the kernels write; layouts without such a view go through rows."""

    def __init__(self, like: torch.Tensor, axis: int, dtype, rows: Rows):
        self.tensor = torch.empty_like(like, dtype=dtype)
        view = to_rows(self.tensor, axis)
        self.is_view = view is self.tensor or view.untyped_storage().data_ptr() == \
            self.tensor.untyped_storage().data_ptr()
        self.rows = view if self.is_view else rows.empty(dtype, like.device)
        self.like, self._axis = like, axis

    def set(self, value: torch.Tensor) -> torch.Tensor:
        """Store a ``[B, T]`` result computed elsewhere (the torch path)."""
        self.rows.copy_(value)
        return self.result()

    def result(self) -> torch.Tensor:
        if not self.is_view:
            self.tensor.copy_(from_rows(self.rows, self.like, self._axis))
        return self.tensor
