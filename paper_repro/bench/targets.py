"""The kernels' performance targets, judged from the recorded suites: bandwidth at large
shapes and for few long rows, short horizons against PufferLib, the headline latency, Retrace
across T, bf16 and time-major inputs.

:func:`targets_table` gives one row per target: what it asks, what the data say and whether it
is met. Everything is read from ``frame`` (``analysis.load``); a target whose suite is not
recorded says so instead of a verdict.
"""
from __future__ import annotations

import pandas as pd

from paper_repro.bench import analysis as A
from paper_repro.bench.roofline import floor_ms, min_bytes_for, percent_of_roofline

OURS = "ours"
LONG_ROWS = ((64, 131072), (16, 524288), (4, 1048576), (1, 4194304))
LARGE_BYTES = 32e6
NOT_RECORDED = "not recorded"
FROM_DRAM = ", inputs from DRAM"


def _ours(frame, suite, metric="device", **where):
    t = A.timings(frame, suite, metric)
    if OURS not in t:
        return pd.Series(dtype=float)
    return A.select(t[OURS], **where).dropna() if where else t[OURS].dropna()


def _row(target, measured, met):
    return {"target": target, "measured": measured,
            "met": NOT_RECORDED if met is None else ("yes" if met else "no")}


def _pct_of_copy(ms, algorithm, n, t, dtype="fp32", flags="float"):
    return percent_of_roofline(min_bytes_for(algorithm, n, t, "plain", dtype, flags), ms)


def copy_at(copies, n_bytes, cold=False):
    """The percent of copy bandwidth a plain copy reached at the size nearest ``n_bytes``
    (``copy_sizes.csv``: warm, or ``cold`` from DRAM) and that size in MB; None without it."""
    if copies is None or not len(copies):
        return None
    row = copies.iloc[(copies.mbytes - n_bytes / 1e6).abs().argmin()]
    return float(row.pct_ceiling_cold if cold else row.pct_ceiling), float(row.mbytes)


def bandwidth_large(frame, cold=False, copies=None):
    """The worst and best fp32 batch-major cell of >= 32 MB; with ``copies`` (``copy_sizes``),
    what a plain copy of the worst cell's size reached, for scale."""
    name = "≥ 80 % of copy bandwidth at ≥ 32 MB" + (FROM_DRAM if cold else "")
    pct = _ours(frame, "roofline", "pct_roofline_cold" if cold else "pct_roofline",
                variant="plain", dtype="fp32", layout="NT")
    big = [(k, v) for k, v in pct.items() if min_bytes_for(k[0], k[1], k[2]) >= LARGE_BYTES]
    if not big:
        return _row(name, NOT_RECORDED, None)
    worst = min(big, key=lambda kv: kv[1])
    best = max(big, key=lambda kv: kv[1])
    text = (f"{worst[1]:.0f} % ({A.label(worst[0][0])} {worst[0][1]}x{worst[0][2]}) to "
            f"{best[1]:.0f} % ({A.label(best[0][0])} {best[0][1]}x{best[0][2]})")
    scale = copy_at(copies, min_bytes_for(*worst[0]), cold)
    if scale is not None:
        text += f"; a plain copy of {scale[1]:g} MB{' from DRAM' if cold else ''}: {scale[0]:.0f} %"
    return _row(name, text, worst[1] >= 80)


def long_rows(frame):
    dev = _ours(frame, "long", variant="plain", dtype="fp32", layout="NT")
    pct = {k: _pct_of_copy(v, *k) for k, v in dev.items() if (k[1], k[2]) in LONG_ROWS}
    if not pct:
        return _row("few long rows ≥ 70 % of copy bandwidth", NOT_RECORDED, None)
    return _row("few long rows ≥ 70 % of copy bandwidth",
                f"{min(pct.values()):.0f}-{max(pct.values()):.0f} % over {len(pct)} cells",
                min(pct.values()) >= 70)


def short_horizons(frame):
    rows = []
    for metric in ("device", "full_call"):
        t = A.select(A.timings(frame, "short", metric), algorithm="gae", variant="plain",
                     dtype="fp32", layout="NT")
        peers = [c for c in ("pufferlib", "assoc-scan-compiled") if c in t]
        name = f"T ≤ 32, many envs: faster than PufferLib and the compiled scan ({metric})"
        if OURS not in t or not peers:
            rows.append(_row(name, NOT_RECORDED, None))
            continue
        ratio = t[peers].min(axis=1) / t[OURS]
        rows.append(_row(name, f"best peer / ours {ratio.min():.2f}-{ratio.max():.2f}x at "
                               f"{len(ratio)} shapes", bool((ratio > 1).all())))
    return rows


def headline(frame):
    dev = _ours(frame, "headline", num_envs=4096, seq_len=128, variant="plain", dtype="fp32",
                layout="NT")
    full = _ours(frame, "headline", "full_call", num_envs=4096, seq_len=128, variant="plain",
                 dtype="fp32", layout="NT")
    if not len(dev):
        return [_row("4096x128 ≤ 3 µs (Retrace ≤ 8)", NOT_RECORDED, None),
                _row("4096x128 full call ≤ 18 µs", NOT_RECORDED, None)]
    us = 1e3 * dev
    limit = pd.Series({a: 8.0 if a == "retrace" else 3.0 for a in us.index})
    text = ", ".join(f"{A.label(a)} {v:.1f}" for a, v in us.items()) + " µs"
    # A limit below the estimator's own traffic at the copy bandwidth cannot be met.
    floors = {a: 1e3 * floor_ms(min_bytes_for(a, 4096, 128)) for a in us.index}
    below = [f"{A.label(a)} {floors[a]:.1f}" for a in us.index if floors[a] > limit[a]]
    if below:
        text += f" (copy floor above the limit: {', '.join(below)} µs)"
    return [_row("4096x128 ≤ 3 µs (Retrace ≤ 8)", text, bool((us <= limit).all())),
            _row("4096x128 full call ≤ 18 µs", f"{1e3 * full.min():.0f}-{1e3 * full.max():.0f} µs",
                 bool((1e3 * full <= 18).all()))]


def _ours_measured_at(frame, suite, metric):
    """When each cell of ``suite`` last timed ours (NaT where rows carry no timestamp)."""
    rows = frame[(frame.suite == suite) & (frame.implementation == OURS)
                 & (frame.metric == metric)]
    stamps = rows.get("timestamp", pd.Series(index=rows.index, dtype=object))
    when = pd.to_datetime(stamps, utc=True, errors="coerce", format="ISO8601")
    return when.groupby([rows[c] for c in A.CELL]).max()


def _newest_ratios(frame, peer, metric="device"):
    """``peer`` / ours ``metric`` per cell, each cell once: from the suite that timed ours
    there last (suites re-run later supersede the earlier runs of the same cell)."""
    parts = []
    for suite in frame.suite.unique():
        r = A.ratio(frame, suite, (peer, metric), (OURS, metric))
        if len(r):
            when = _ours_measured_at(frame, suite, metric).reindex(r.index)
            parts.append(pd.DataFrame({"ratio": r.values, "when": when.values}, index=r.index))
    if not parts:
        return pd.Series(dtype=float)
    both = pd.concat(parts).sort_values("when", kind="stable", na_position="first")
    return both[~both.index.duplicated(keep="last")].ratio


def peers_full_call(frame):
    """Our full call against PufferLib's over its 40-shape study and rl-triton's in every
    suite that measured both (same run, same cell; each cell from its newest run)."""
    name = "full call faster than PufferLib's (its study's shapes) and rl-triton's (every suite)"
    puffer = A.ratio(frame, "pufferlib", ("pufferlib", "full_call"), ("ours", "full_call"))
    rl = _newest_ratios(frame, "rl-triton", "full_call")
    if not len(puffer) or not len(rl):
        return _row(name, NOT_RECORDED, None)
    return _row(name, f"PufferLib / ours {A.fmt_range(puffer)} at {len(puffer)} shapes; "
                      f"rl-triton / ours {A.fmt_range(rl)} at {len(rl)} cells",
                bool((puffer > 1).all() and (rl > 1).all()))


GPU_PEERS = ("pufferlib", "rl-triton", "assoc-scan-compiled", "doubling-compiled", "torchrl")


def peers_device(frame):
    """Our device time against each GPU peer's, every suite that timed both (same run, same
    cell), each cell from its newest run: per peer, the range of peer / ours and how many
    cells fall below one."""
    name = "device time faster than every GPU peer's (every suite)"
    parts, met = [], True
    for peer in GPU_PEERS:
        r = _newest_ratios(frame, peer)
        if not len(r):
            continue
        behind = int((r <= 1).sum())
        met &= behind == 0
        parts.append(f"{peer} / ours {A.fmt_range(r)} ({behind} of {len(r)} cells ≤ 1)")
    if not parts:
        return _row(name, NOT_RECORDED, None)
    return _row(name, "; ".join(parts), met)


def retrace_cliff(frame, cold=False):
    name = "Retrace: bandwidth at T = 8192 within 10 % of T = 1024" + (FROM_DRAM if cold else "")
    dev = _ours(frame, "retrace_t", "device_cold" if cold else "device", algorithm="retrace",
                variant="plain", dtype="fp32", layout="NT")
    steps = {k[1]: v / k[1] for k, v in dev.items()}
    if 1024 not in steps or 8192 not in steps:
        return _row(name, NOT_RECORDED, None)
    share = steps[1024] / steps[8192]
    return _row(name, f"{100 * share:.0f} % of T = 1024's", share >= 0.9)


def _ratio_target(frame, name, other, limit, large_only=False, cold=False):
    """Our device time with ``other`` (dtype, layout) over fp32 batch-major, every roofline
    cell (or those of >= 32 MB); met when no ratio exceeds ``limit``."""
    name += FROM_DRAM if cold else ""
    dev = _ours(frame, "roofline", "device_cold" if cold else "device", variant="plain")
    ratio = (A.select(dev, **other) / A.select(dev, dtype="fp32", layout="NT")).dropna()
    if large_only:
        ratio = ratio[[min_bytes_for(a, n, t) >= LARGE_BYTES for a, n, t in ratio.index]]
    if not len(ratio):
        return _row(name, NOT_RECORDED, None)
    return _row(name, f"{ratio.min():.2f}-{ratio.max():.2f}x over {len(ratio)} cells",
                bool((ratio <= limit).all()))


def targets_table(frame, copies=None):
    """One row per performance target: target, measured, met (yes / no / not recorded). The
    targets judged on shapes that may stay in L2 across timed repeats are judged again with
    every call's inputs read from DRAM (``device_cold``), in the row after. ``copies``: the
    recorded ``copy_sizes.csv``, whose plain copies put the bandwidth rows to scale."""
    rows = [bandwidth_large(frame, copies=copies), bandwidth_large(frame, True, copies),
            long_rows(frame),
            *short_horizons(frame), *headline(frame), peers_full_call(frame), peers_device(frame),
            retrace_cliff(frame), retrace_cliff(frame, cold=True)]
    for cold in (False, True):
        rows.append(_ratio_target(frame, "bf16 ≤ 0.6x the fp32 time at large shapes",
                                  dict(dtype="bf16", layout="NT"), 0.6, large_only=True,
                                  cold=cold))
    for cold in (False, True):
        rows.append(_ratio_target(frame, "time-major within 10 % of batch-major",
                                  dict(dtype="fp32", layout="TN"), 1.1, cold=cold))
    return pd.DataFrame(rows, columns=["target", "measured", "met"])


def recorded_copies(gpu, data_dir=None):
    """``data/<gpu>/copy_sizes.csv`` (plain copies by size), or None where it is not recorded."""
    from pathlib import Path

    from paper_repro.paths import DATA

    path = Path(data_dir or DATA) / str(gpu) / "copy_sizes.csv"
    return pd.read_csv(path) if gpu and path.exists() else None


def _cell(value) -> str:
    return str(value).replace("|", "\\|")  # a bare pipe would end the Markdown cell


def targets_markdown(frame, source="", copies=None) -> str:
    """The targets table as a Markdown document (``figures/targets.md``); ``source`` names the
    data it was judged from, ``copies`` as in :func:`targets_table`."""
    table = targets_table(frame, copies)
    lines = ["# Performance targets (generated by notebooks/launch_overhead.ipynb"
             + (f" from {source}" if source else "") + ")", "",
             f"{(table.met == 'yes').sum()} of {len(table)} met. Each target is judged by "
             "`paper_repro/bench/targets.py` from the recorded suites; the rows marked "
             "\"inputs from DRAM\" judge it again with every call's inputs read from DRAM.", "",
             "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {_cell(r.target)} | {_cell(r.measured)} | {r.met} |" for r in table.itertuples()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Print the targets table of the recorded data (``--gpu``: which data/<gpu> folder;
    ``--markdown PATH``: also write it as Markdown)."""
    import argparse

    p = argparse.ArgumentParser(description="Judge the performance targets from data/<gpu>.")
    p.add_argument("--gpu", default=None, help="data/<gpu> folder (default: the recorded one)")
    p.add_argument("--markdown", default=None, help="also write the table as Markdown here")
    args = p.parse_args(argv)
    frame = A.load(gpu=args.gpu)
    copies = recorded_copies(A.choose_gpu(gpu=args.gpu))
    with pd.option_context("display.max_colwidth", None, "display.width", 200):
        print(targets_table(frame, copies).to_string(index=False))
    if args.markdown:
        from pathlib import Path

        Path(args.markdown).write_text(targets_markdown(frame, copies=copies))


if __name__ == "__main__":
    main()
