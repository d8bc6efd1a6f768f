"""Run a suite: build each case once, gate every provider against the reference, time it.

A provider that fails the gate (wrong or non-finite output) or raises is recorded with
status ``failed``/``error`` and is never timed; after timing its output is checked once
more (in-place outputs poisoned first), so a call that stops working while being timed
is caught too. Rows are upserted after every case, so an interrupted run keeps what it
measured; ``resume=True`` skips cells already in the CSV, and ``budget_s`` stops before
a new case once the time is spent. Kernel launches per call come from ``torch.profiler``
in a second pass after all timing, because CUPTI slows later launches in the process.
"""
from __future__ import annotations

import datetime as _dt
import gc
import time

import torch

from paper_repro.bench import gate, timing
from paper_repro.bench.inputs import make_case, to_device
from paper_repro.bench.providers import PROVIDERS, unavailable
from paper_repro.bench.results import (
    provenance,
    read_results,
    record_provenance,
    upsert,
)
from paper_repro.bench.roofline import achieved_gbps, floor_ms, min_bytes, percent_of_roofline

_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp64": torch.float64}
_CELL = ["algorithm", "implementation", "num_envs", "seq_len", "variant", "dtype", "layout"]


def _row(base, metric, value=float("nan"), unit="", status="ok", note="", t=None):
    row = dict(base, metric=metric, value=value, unit=unit, status=status, note=note)
    if t is not None:
        row.update(method=t.method, n_trials=t.n_trials, n_iter=t.n_iter)
    return row


def _error(exc):
    return f"{type(exc).__name__}: {exc}"[:300]


class Runner:
    """Executes one suite on one device and writes ``<out_dir>/<suite>.csv``."""

    def __init__(self, suite, out_dir, device=None, quick=False, providers=None,
                 progress=True, command=None, resume=False, budget_s=None):
        self.suite, self.out_dir, self.quick = suite, out_dir, quick
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.providers = tuple(providers or suite.providers)
        unknown = [p for p in self.providers if p not in PROVIDERS]
        if unknown:
            raise ValueError(f"unknown providers {unknown}; known: {sorted(PROVIDERS)}")
        self.progress, self.command = progress, command
        self.resume, self.budget_s = resume, budget_s
        self.on_gpu = self.device == "cuda"
        self.trials = 3 if quick else suite.trials
        self.trial_seconds = 0.15 if quick else suite.trial_seconds
        self.finished = True
        self._full_call_pending = {}  # provider -> (call, n_iter, base row, measured)

    @property
    def path(self):
        return self.out_dir / f"{self.suite.name}.csv"

    def _done_cells(self, metric):
        if not self.resume:
            return set()
        frame = read_results(self.path)
        frame = frame[frame.metric.isin(metric)]
        return {tuple(str(v) for v in row) for row in frame[_CELL].itertuples(index=False)}

    def _cells(self, spec):
        return [p for p in self.providers if self.suite.runs(p, spec.algorithm)]

    def _make(self, spec):
        return make_case(spec.algorithm, spec.num_envs, spec.seq_len, spec.variant,
                         spec.dtype, spec.layout, spec.flags, device=self.device)

    def run(self):
        """Gate and time every cell (then count launches); returns the rows written."""
        from tqdm.auto import tqdm

        start = time.perf_counter()
        specs = self.suite.cases(self.quick)
        done = self._done_cells(("max_abs_err", "gate"))
        todo = [(s, [p for p in self._cells(s) if self._key(s, p) not in done]) for s in specs]
        todo = [(s, ps) for s, ps in todo if ps]
        written = []
        bar = tqdm(total=sum(len(ps) for _, ps in todo), desc=self.suite.name,
                   disable=not self.progress, unit="cell")
        for spec, names in todo:
            if self.budget_s and time.perf_counter() - start > self.budget_s:
                self.finished = False
                break
            case, expected, rows = self._make(spec), None, []
            self._full_call_pending = {}
            for name in names:
                bar.set_postfix_str(f"{spec.algorithm} {spec.num_envs}x{spec.seq_len} "
                                    f"{spec.variant} {name}")
                cell_rows, expected = self.run_cell(case, name, expected)
                rows += cell_rows
                bar.update()
            rows += self._full_calls(case)
            written += rows
            upsert(self.path, rows)
            del case, expected
            self._release()
        bar.close()
        if "launches" in self.suite.metrics and self.on_gpu and self.finished:
            written += self.count_launches(specs)
        record_provenance(self.out_dir, self.suite.name,
                          dict(provenance(self.command), quick=self.quick,
                               providers=list(self.providers), complete=self.finished))
        return written

    @staticmethod
    def _key(spec, name):
        return tuple(str(v) for v in (spec.algorithm, name, spec.num_envs, spec.seq_len,
                                      spec.variant, spec.dtype, spec.layout))

    def _release(self):
        gc.collect()
        if self.on_gpu:
            torch.cuda.empty_cache()

    def _base(self, case, name):
        return dict(suite=self.suite.name, algorithm=case.algorithm, implementation=name,
                    num_envs=case.num_envs, seq_len=case.seq_len, variant=case.variant,
                    dtype=case.dtype, layout=case.layout,
                    device=torch.cuda.get_device_name(0) if self.on_gpu else "cpu",
                    timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def _blocked(self, case, provider):
        """A status row when the provider cannot or should not run ``case``, else None."""
        if provider.unsupported(case):
            return "unsupported", None
        reason = unavailable(provider.name)
        if reason is None and provider.input_device == "cuda" and not self.on_gpu:
            reason = "needs a CUDA device"
        if reason:
            return "unavailable", reason
        reason = provider.over_budget(case)
        return ("skipped", reason) if reason else (None, None)

    def _check(self, case, prepared, expected):
        """Run the prepared call once and gate it; returns (GateResult, reference cache)."""
        outputs = prepared.outputs(prepared.call())
        if prepared.compare_case is not None:
            against = gate.expected_outputs(prepared.compare_case)
            outputs = tuple(o[:, :prepared.compare_cols] for o in outputs)
        else:
            expected = expected or gate.expected_outputs(case)
            against = expected
        return gate.compare(against, outputs, _DTYPE[case.dtype], prepared.tolerance), expected

    def run_cell(self, case, name, expected):
        """Gate and time provider ``name`` on ``case``; returns (rows, reference cache)."""
        provider = PROVIDERS[name]
        base = self._base(case, name)
        status, reason = self._blocked(case, provider)
        if status == "unsupported":
            return [], expected
        if status:
            return [_row(base, "gate", status=status, note=reason)], expected
        local = to_device(case, "cpu") if provider.input_device == "cpu" else case
        try:
            prepared = provider.build(local)
            result, expected = self._check(local, prepared, expected)
        except Exception as exc:  # a crash is a result too: record it, never time it
            return [_row(base, "gate", status="error", note=_error(exc))], expected
        note = "; ".join(x for x in (result.message, prepared.note) if x)
        state = "ok" if result.ok else "failed"
        rows = [_row(base, "max_abs_err", result.max_abs_err, "abs", state, note),
                _row(base, "max_rel_err", result.max_rel_err, "rel", state, note)]
        if not result.ok:
            return rows, expected
        try:
            timed = self._time(case, provider, prepared, base)
            if prepared.reset is not None:
                prepared.reset()
            after, expected = self._check(local, prepared, expected)
            if not after.ok:
                for row in timed:
                    row.update(status="failed", note=f"wrong after timing: {after.message}")
            rows += timed
        except Exception as exc:
            rows.append(_row(base, "timing", status="error", note=_error(exc)))
        return rows, expected

    def _time(self, case, provider, prepared, base):
        call, metrics = prepared.call, self.suite.metrics
        if provider.clock == "cpu" or not self.on_gpu:
            sync_device = "cuda" if self.on_gpu and provider.input_device != "cpu" else "cpu"
            t = timing.wall_ms(call, sync_device, min_seconds=0.1 if self.quick else 0.3)
            return [_row(base, "wall", t.ms, "ms", t=t)]
        n_iter = self.suite.n_iter or timing.paper_n_iter(case.num_envs, case.seq_len)
        if self.quick:
            n_iter = min(n_iter, 20)
        rows, measured = [], {}
        if "device" in metrics:
            t = timing.device_ms(call, trials=self.trials, trial_seconds=self.trial_seconds,
                                 graph=provider.graph_capture)
            measured["device"] = t.ms
            rows.append(_row(base, "device", t.ms, "ms", t=t))
        if "device_cold" in metrics:
            turns = timing.cold_turns(call, case, lambda copy: provider.build(copy).call)
            t = timing.device_cold_ms(turns, trials=self.trials, trial_seconds=self.trial_seconds,
                                      graph=provider.graph_capture)
            measured["device_cold"] = t.ms
            rows.append(_row(base, "device_cold", t.ms, "ms", t=t,
                             note=f"{t.n_iter} calls over copies of the inputs"))
        if "amortized" in metrics:
            t = timing.amortized_ms(call, trials=self.trials, trial_seconds=self.trial_seconds)
            rows.append(_row(base, "amortized", t.ms, "ms", t=t))
        if "full_call" in metrics:  # timed with the cell's other providers, in turn
            self._full_call_pending[base["implementation"]] = (call, n_iter, base, measured)
            return rows
        return rows + self._derived(case, base, measured)

    def _full_calls(self, case):
        """The full-call rows (and those derived from them) of the case's providers that passed
        the gate, their trials interleaved (``timing.full_call_interleaved``); a provider that
        fails there is timed alone, or recorded as an error."""
        pending, self._full_call_pending = self._full_call_pending, {}
        if not pending:
            return []
        n_iter = max(n for _, n, _, _ in pending.values())
        calls = {name: call for name, (call, _, _, _) in pending.items()}
        try:
            timed = timing.full_call_interleaved(calls, n_iter, self.trials,
                                                 trial_seconds=self.trial_seconds)
        except Exception:  # noqa: BLE001 -- one provider's failure: time the others alone
            timed = {}
        rows = []
        for name, (call, _, base, measured) in pending.items():
            try:
                t = timed.get(name) or timing.full_call_ms(call, n_iter, self.trials,
                                                           trial_seconds=self.trial_seconds)
            except Exception as exc:
                rows.append(_row(base, "timing", status="error", note=_error(exc)))
                continue
            measured["full_call"] = t.ms
            rows.append(_row(base, "full_call", t.ms, "ms", t=t))
            rows += self._derived(case, base, measured)
        return rows

    def _derived(self, case, base, measured):
        rows = []
        if "overhead" in self.suite.derived and {"full_call", "device"} <= measured.keys():
            rows.append(_row(base, "overhead", measured["full_call"] - measured["device"], "ms",
                             note="full_call - device"))
        if "roofline" in self.suite.derived and "device" in measured:
            n_bytes, ms = min_bytes(case), measured["device"]
            rows += [_row(base, "bytes", n_bytes, "B"),
                     _row(base, "floor", floor_ms(n_bytes), "ms", note="bytes / 4249 GB/s"),
                     _row(base, "bandwidth", achieved_gbps(n_bytes, ms), "GB/s"),
                     _row(base, "pct_roofline", percent_of_roofline(n_bytes, ms), "%",
                          note="floor / device time")]
            if "device_cold" in measured:
                cold = measured["device_cold"]
                rows += [_row(base, "bandwidth_cold", achieved_gbps(n_bytes, cold), "GB/s"),
                         _row(base, "pct_roofline_cold", percent_of_roofline(n_bytes, cold), "%",
                              note="floor / device time, inputs from DRAM")]
            if "full_call" in measured:
                rows.append(_row(base, "pct_roofline_full_call",
                                 percent_of_roofline(n_bytes, measured["full_call"]), "%"))
        return rows

    def count_launches(self, specs):
        """Second pass: kernel launches per call and profiler device time of gated cells."""
        frame = read_results(self.path)
        gated = frame[(frame.metric == "max_abs_err") & (frame.status == "ok")]
        ok = {tuple(str(v) for v in r) for r in gated[_CELL].itertuples(index=False)}
        done = self._done_cells(("launches",))
        rows = []
        for spec in specs:
            names = [p for p in self._cells(spec) if PROVIDERS[p].clock == "gpu"
                     and self._key(spec, p) in ok and self._key(spec, p) not in done]
            if not names:
                continue
            case, case_rows = self._make(spec), []
            for name in names:
                base = self._base(case, name)
                try:
                    t = timing.profile_kernels(PROVIDERS[name].build(case).call, reps=10)
                except Exception as exc:
                    case_rows.append(_row(base, "launches", status="error", note=_error(exc)))
                    continue
                case_rows += [_row(base, "launches", t.launches, "count", t=t),
                              _row(base, "device_profiler", t.ms, "ms", t=t)]
            upsert(self.path, case_rows)
            rows += case_rows
            del case
            self._release()
        return rows
