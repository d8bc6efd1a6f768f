"""Registers and stack frame of the paper's fused Retrace kernel (rl-triton's
``retrace_fused_kernel``) beside ours, compiled for sm_90 on the CPU: the paper's register-cliff
table (claim R-4: N = 512, A = 4, T = 1024-8192) and its spill fix (R-5: the commit before and
after ``b2fc9fb`` at T = 4096).

    python -m paper_repro.bench.sass_rl_triton --repo PATH [--out data/h200/sass_rl_triton.csv]

``PATH`` is a git clone of rl-triton (each revision's ``src/rl_triton`` is read from its history).
The counts belong to the installed Triton (recorded in each row): put the GPU's version first on
``PYTHONPATH`` for the GPU's compile. ``stack_words`` is the stack frame in 4-byte words, what
rl-triton's table calls spill words (``CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4``); occupancy is
theirs, from registers alone (whole blocks of ``registers x 32 x warps`` in 65536 registers,
of 64 warps an SM).
"""
from __future__ import annotations

import argparse
import csv
import importlib
import io
import subprocess
import sys
import tarfile
import tempfile

NUM_ENVS, NUM_ACTIONS = 512, 4
SEQ_LENS = (1024, 2048, 4096, 8192)
RELEASE = "v0.1.3"  # the paper's library
BEFORE_FIX, FIX = "b2fc9fb~1", "b2fc9fb"  # the shifted reload replaced by a scratch row
# rl-triton's launch table for the fused kernel (ops/retrace_fused.py, both revisions)
WARPS = {512: 4, 1024: 8, 2048: 16, 4096: 16, 8192: 32, 16384: 32}
COLUMNS = ["triton", "source", "num_envs", "seq_len", "BLOCK", "num_warps", "num_stages",
           "registers", "stack_bytes", "stack_words", "local_loads", "local_stores",
           "occupancy_pct"]


def occupancy_pct(registers: int, num_warps: int) -> float:
    blocks = 65536 // (registers * 32 * num_warps)
    return 100.0 * min(64, blocks * num_warps) / 64


def _kernel_at(repo: str, revision: str, where: str):
    """rl-triton's ``retrace_fused_kernel`` as of ``revision``, imported from its
    ``src/rl_triton`` unpacked under ``where``."""
    tar = subprocess.run(["git", "--git-dir", repo, "archive", revision, "src/rl_triton"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(where, filter="data")
    for name in [m for m in sys.modules if m == "rl_triton" or m.startswith("rl_triton.")]:
        del sys.modules[name]
    sys.path.insert(0, f"{where}/src")
    try:
        return importlib.import_module("rl_triton.kernels.retrace_fused").retrace_fused_kernel
    finally:
        sys.path.remove(f"{where}/src")


def _signature(kernel, T: int):
    """Signature, constexprs and 16-byte alignments of the fused kernel as rl-triton launches
    it on contiguous fp32 ``[512, T]`` and ``[512, T, 4]`` inputs, int64 actions."""
    import triton

    ints = {"seq_len", "num_actions", "stride_env", "stride_env_3d"}
    const = {"BLOCK_SIZE": triton.next_power_of_2(T),
             "ACTION_BLOCK": triton.next_power_of_2(NUM_ACTIONS)}
    sig = {}
    for name, p in zip(kernel.arg_names, kernel.params):
        if p.is_constexpr:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = "*i64" if name == "actions_ptr" else "*fp32"
        else:
            sig[name] = "i32" if name in ints else "fp32"
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
               if sig[name].startswith("*") or (sig[name] == "i32" and name != "num_actions")}
    return sig, const, aligned


def peer_row(kernel, source: str, T: int) -> dict:
    import triton

    from paper_repro.bench.sass import sm90_counts

    block = triton.next_power_of_2(T)
    warps, stages = WARPS.get(block, 16), 2 if block >= 2048 else 1
    c = sm90_counts(kernel, *_signature(kernel, T), {"num_warps": warps, "num_stages": stages})
    return _row(source, T, block, warps, stages, c)


def ours_row(T: int) -> dict:
    """Our Retrace at the tile it ships for ``[512, T]`` fp32 on the H200 (132 SMs), its four
    actions read as words as the call reads them."""
    import triton.language as tl

    from paper_repro.bench import sass as S
    from paper_repro.kernels import _launch as L
    from paper_repro.kernels.retrace import unrolled_actions

    config = L.choose_config(NUM_ENVS, T, False, 132, True, True, 4)
    prefetch = config.num_warps >= 4 and config.seg_len >= 4 * config.BLOCK_T
    tile = (config.BLOCK_B, config.BLOCK_T, config.num_warps, 0, prefetch, False)
    saved = dict(S.CONSTEXPRS)
    S.CONSTEXPRS.update(N_ACT=unrolled_actions(NUM_ACTIONS, config, T) or NUM_ACTIONS, PACK=2,
                        VAL=tl.float32, WORDS=2)
    try:
        c = S.counts(S.kernels()["retrace"], tile, config.flip)
    finally:
        S.CONSTEXPRS.clear()
        S.CONSTEXPRS.update(saved)
    return _row("ours", T, config.BLOCK_T, config.num_warps, 0, c)


def _row(source, T, block, warps, stages, c) -> dict:
    import triton

    return {"triton": triton.__version__, "source": source, "num_envs": NUM_ENVS, "seq_len": T,
            "BLOCK": block, "num_warps": warps, "num_stages": stages,
            "registers": c["registers"], "stack_bytes": c["stack_bytes"],
            "stack_words": c["stack_bytes"] // 4, "local_loads": c["local_loads"],
            "local_stores": c["local_stores"],
            "occupancy_pct": occupancy_pct(c["registers"], warps)}


def rows(repo: str):
    with tempfile.TemporaryDirectory() as d:
        for i, (revision, lengths) in enumerate(((RELEASE, SEQ_LENS), (BEFORE_FIX, (4096,)),
                                                 (FIX, (4096,)))):
            kernel = _kernel_at(repo, revision, f"{d}/{i}")
            for T in lengths:
                yield peer_row(kernel, f"rl-triton {revision}", T)
    for T in SEQ_LENS:
        yield ours_row(T)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", required=True, help="rl-triton's git directory")
    p.add_argument("--out", default="data/h200/sass_rl_triton.csv")
    args = p.parse_args(argv)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        for row in rows(args.repo):
            w.writerow(row)
            f.flush()


if __name__ == "__main__":
    main()
