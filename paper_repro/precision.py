"""Mixed-precision study (docs/precision.md): how far each estimator's bf16, fp16 and fp32
results (fp32 accumulation inside the kernels) are from float64, for T up to 10^6.

    python -m paper_repro.precision --out data/h200            # CUDA: Triton kernels
    python -m paper_repro.precision --out data/cpu --quick     # CPU: the torch path

Per (inputs, estimator output, dtype, T) two references: the package's float64 path on the
same rounded inputs (``*_vs_rounded``: the error the computation adds) and on the unrounded
inputs (``*_vs_unrounded``: the error a user sees). For T <= LOOP_MAX_T the float64 path is
also compared with the sequential loops of ``baselines.reference`` (dtype ``float64``,
``*_vs_loop``; ``ref_max_abs`` is the scale). Writes ``precision.csv`` (tidy: estimator, dtype,
seq_len, inputs, metric, value, device) and ``precision.json`` (provenance) to ``--out``.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

import paper_repro as P
from paper_repro.baselines import reference
from paper_repro.kernels import _launch as L

GAMMA, LAMBDA, ELIG_LAMBDA = 0.99, 0.95, 0.9
TERMINATION_RATE = TRUNCATION_RATE = 0.05
NUM_ROWS, NUM_ACTIONS, SEED = 4, 4, 0
LOOP_MAX_T = 4096
INPUTS = ("episodic", "continuing")  # 5 % + 5 % episode ends, or none (longest horizon)
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Unit roundoff (half an ulp at 1) of each storage dtype.
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24}
COLUMNS = ("estimator", "dtype", "seq_len", "inputs", "metric", "value", "device")


def seq_lens(max_T: int = 1_000_000, quick: bool = False) -> list[int]:
    """Powers of 4 from 16 (of 16 with ``quick``) below ``max_T``, then ``max_T`` itself."""
    step = 16 if quick else 4
    grid, T = [], 16
    while max_T > T:
        grid.append(T)
        T *= step
    return grid + [max_T]


# ----------------------------------------------------------------------------- inputs

def make_inputs(N: int, T: int, inputs: str = "episodic", seed: int = SEED) -> dict:
    """Float64 CPU inputs for every estimator, ``[N, T]`` (``[N, T, A]`` for actions).

    Rewards, values, next values, q-values and bootstrap values are N(0, 1); behaviour
    probabilities U(0.1, 0.9); target policies softmax(N(0, 1)) over ``NUM_ACTIONS``.
    ``episodic``: 5 % of steps terminate, 5 % truncate (bootstrapping from ``boot``);
    ``continuing``: no flags. ``window`` [N] is V(s_T), placed at ``boot[:, T-1]`` by ``prefix``.
    """
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {INPUTS}, got {inputs!r}")
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)

    term, trunc = rand(N, T) < TERMINATION_RATE, rand(N, T) < TRUNCATION_RATE
    trunc &= ~term
    if inputs == "continuing":
        term, trunc = torch.zeros_like(term), torch.zeros_like(trunc)
    pi = torch.softmax(randn(N, T, NUM_ACTIONS), -1)
    act = torch.randint(0, NUM_ACTIONS, (N, T), generator=g)
    mu = 0.1 + 0.8 * rand(N, T)
    return dict(r=randn(N, T), v=randn(N, T), n=randn(N, T), q=randn(N, T),
                nq=randn(N, T, NUM_ACTIONS), pi=pi, mu=mu, act=act,
                lpt=pi.gather(-1, act[..., None])[..., 0].log(), lpb=mu.log(),
                boot=randn(N, T) * trunc, window=randn(N), seed=randn(N),
                term=term, trunc=trunc, done=term | trunc)


def prefix(x: dict, T: int, device) -> dict:
    """The first T steps of ``make_inputs`` output, contiguous, with V(s_T) at ``boot[:, T-1]``."""
    out = {k: v if v.dim() == 1 else v[:, :T].clone() for k, v in x.items()}
    out["boot"][:, -1] = x["window"]
    return {k: v.to(device) for k, v in out.items()}


def cast(x: dict, dtype: torch.dtype) -> dict:
    """Floating inputs rounded to ``dtype``; flags and actions unchanged."""
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in x.items()}


# ----------------------------------------------------------------------------- estimators

def _gae(m, x):
    return (m.compute_gae(x["r"], x["v"], x["term"], x["trunc"], GAMMA, LAMBDA, x["boot"]),)


def _vtrace(m, x):
    return m.compute_vtrace(x["lpt"], x["lpb"], x["v"], x["r"], x["term"], x["trunc"], GAMMA,
                            1.0, 1.0, x["boot"])


def _retrace(m, x):
    return m.compute_retrace(x["pi"], x["mu"], x["q"], x["nq"], x["act"], x["r"], x["term"],
                             x["trunc"], GAMMA, LAMBDA, 1.0, 1.0)


def _lambda(m, x):
    return (m.compute_lambda_returns(x["r"], x["n"], x["term"], x["trunc"], GAMMA, LAMBDA,
                                     x["boot"]),)


def _discounted(m, x):
    return (m.compute_discounted_returns(x["r"], x["term"], x["trunc"], GAMMA, x["boot"]),)


def _elig(m, x):
    return (m.compute_eligibility_traces(x["r"], x["done"], GAMMA, ELIG_LAMBDA, x["seed"]),)


def _prefix_sum(m, x):
    return (m.compute_episodic_prefix_sum(x["r"], x["done"], x["seed"]),)


# name -> (call, output names, per-step decay bounding the horizon 1 / (1 - decay))
ESTIMATORS = {
    "gae": (_gae, ("gae",), GAMMA * LAMBDA),
    "vtrace": (_vtrace, ("vtrace_targets", "vtrace_advantages"), GAMMA),
    "retrace": (_retrace, ("retrace_targets", "retrace_advantages"), GAMMA * LAMBDA),
    "lambda_returns": (_lambda, ("lambda_returns",), GAMMA * LAMBDA),
    "discounted_returns": (_discounted, ("discounted_returns",), GAMMA),
    "eligibility_traces": (_elig, ("eligibility_traces",), GAMMA * ELIG_LAMBDA),
    "prefix_sum": (_prefix_sum, ("prefix_sum",), 1.0),
}
OUTPUTS = {out: name for name, (_, outs, _) in ESTIMATORS.items() for out in outs}


def horizon(output: str, T: int) -> float:
    """Effective horizon ``min(T, 1 / (1 - decay))`` of an output's recurrence."""
    decay = ESTIMATORS[OUTPUTS[output]][2]
    return float(T) if decay >= 1.0 else min(float(T), 1.0 / (1.0 - decay))


def run(module, name: str, x: dict) -> dict:
    """{output name: tensor} of estimator ``name`` called through ``module``."""
    call, outs, _ = ESTIMATORS[name]
    return dict(zip(outs, call(module, x)))


# ----------------------------------------------------------------------------- errors and bounds

def errors(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """max |out - ref|, that divided by max |ref|, and the RMS of out - ref."""
    err = (out.double() - ref.double()).abs()
    scale = ref.double().abs().max().item()
    worst = err.max().item()
    return {"max_abs": worst, "max_rel": worst / scale if scale > 0 else worst,
            "rms": err.square().mean().sqrt().item()}


# Documented bound on max_rel: a * u(dtype) + B_ACC * u(fp32) * horizon. Against rounded
# inputs a = 2 (one ulp of output rounding: the Triton interpreter truncates to bf16, GPUs and
# torch round to nearest, half that); against unrounded inputs the rounded inputs add up to
# ~3 u (V-trace's log-probabilities), so a = 6. B_ACC: fp32 accumulation, >= 6x the data.
BOUNDS = {"rounded": 2.0, "unrounded": 6.0}
B_ACC = 4.0


def bound(dtype: str, against: str, output: str, T: int) -> float:
    """Documented bound on ``max_rel`` of ``output`` in ``dtype`` against a float64 reference
    (``against``: "rounded" or "unrounded" inputs) at sequence length T."""
    a = 0.0 if (dtype, against) == ("float32", "rounded") else BOUNDS[against]
    return a * UNIT_ROUNDOFF[dtype] + B_ACC * UNIT_ROUNDOFF["float32"] * horizon(output, T)


def within_bound(out, ref, dtype: str, against: str, output: str, T: int) -> tuple[bool, float]:
    """(max_rel <= bound, max_rel) for one output against its float64 reference."""
    rel = errors(out, ref)["max_rel"]
    return rel <= bound(dtype, against, output, T), rel


# ----------------------------------------------------------------------------- the study

def study(grid, device, inputs=INPUTS, N: int = NUM_ROWS, log=print) -> list[dict]:
    """Tidy rows of every metric over ``grid`` x ``inputs`` x estimators x dtypes."""
    dev = device_label(device)
    rows = []

    def emit(output, dtype, T, kind, metric, value):
        rows.append(dict(estimator=output, dtype=dtype, seq_len=T, inputs=kind, metric=metric,
                         value=f"{value:.6e}", device=dev))

    for kind in inputs:
        full = make_inputs(N, max(grid), kind)
        for T in grid:
            t0 = time.perf_counter()
            x64 = prefix(full, T, device)
            for name in ESTIMATORS:
                exact = run(P, name, x64)
                for output, ref in exact.items():
                    emit(output, "float64", T, kind, "ref_max_abs", ref.abs().max().item())
                if T <= LOOP_MAX_T:
                    loop = run(reference, name, {k: v.cpu() for k, v in x64.items()})
                    for output, ref in loop.items():
                        for stat, value in errors(exact[output].cpu(), ref).items():
                            emit(output, "float64", T, kind, f"{stat}_vs_loop", value)
                for dtype_name, dtype in DTYPES.items():
                    low = cast(x64, dtype)
                    got = run(P, name, low)
                    rounded = run(P, name, cast(low, torch.float64))
                    for output, out in got.items():
                        for against, ref in (("rounded", rounded[output]),
                                             ("unrounded", exact[output])):
                            for stat, value in errors(out, ref).items():
                                emit(output, dtype_name, T, kind, f"{stat}_vs_{against}", value)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            log(f"{kind:>10} T={T:>8}: {time.perf_counter() - t0:.2f} s")
    return rows


def device_label(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def provenance(device: torch.device, grid, argv, elapsed: float) -> dict:
    import triton

    cpu_path = "triton interpreter" if L.use_triton(torch.empty(0)) else "torch"
    return {
        "device": device_label(device),
        "device_type": device.type,
        "cpu_path": cpu_path if device.type == "cpu" else None,
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", "paper_repro.precision", *argv]),
        "git_commit": os.environ.get("PAPER_REPRO_GIT_COMMIT") or _git_commit(),
        "seq_lens": list(grid), "rows": NUM_ROWS, "inputs": list(INPUTS),
        "gamma": GAMMA, "lambda": LAMBDA, "eligibility_lambda": ELIG_LAMBDA,
        "termination_rate": TERMINATION_RATE, "truncation_rate": TRUNCATION_RATE,
        "num_actions": NUM_ACTIONS, "seed": SEED, "loop_max_T": LOOP_MAX_T,
        "elapsed_s": round(elapsed, 1),
    }


def write(out_dir: Path, rows: list[dict], meta: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "precision.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    (out_dir / "precision.json").write_text(json.dumps(meta, indent=2) + "\n")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m paper_repro.precision", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for precision.csv/.json")
    p.add_argument("--quick", action="store_true", help="every other grid point")
    p.add_argument("--max-T", type=int, default=1_000_000, help="longest sequence")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    args = p.parse_args(argv)
    if args.max_T < 16:
        p.error("--max-T must be at least 16")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    grid = seq_lens(args.max_T, args.quick)
    t0 = time.perf_counter()
    rows = study(grid, device)
    elapsed = time.perf_counter() - t0
    write(args.out, rows, provenance(device, grid, argv, elapsed))
    print(f"{len(rows)} rows -> {args.out / 'precision.csv'} ({math.ceil(elapsed)} s)")


if __name__ == "__main__":
    main()
