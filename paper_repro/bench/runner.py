"""Run a suite: build each case once, gate every provider against the reference, time it.

A provider that fails the gate (wrong or non-finite output) or raises is recorded with
status ``failed``/``error`` and is never timed. Rows are upserted after every case, so an
interrupted run keeps what it measured.
"""
from __future__ import annotations

import datetime as _dt
import gc

import torch

from paper_repro.bench import gate, timing
from paper_repro.bench.inputs import make_case, to_device
from paper_repro.bench.providers import PROVIDERS, unavailable
from paper_repro.bench.results import provenance, record_provenance, upsert
from paper_repro.bench.roofline import achieved_gbps, floor_ms, min_bytes, percent_of_roofline

_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp64": torch.float64}


def _row(base, metric, value=float("nan"), unit="", status="ok", note="", t=None):
    row = dict(base, metric=metric, value=value, unit=unit, status=status, note=note)
    if t is not None:
        row.update(method=t.method, n_trials=t.n_trials, n_iter=t.n_iter)
    return row


class Runner:
    """Executes one suite on one device and writes ``<out_dir>/<suite>.csv``."""

    def __init__(self, suite, out_dir, device=None, quick=False, providers=None,
                 progress=True, command=None):
        self.suite, self.out_dir, self.quick = suite, out_dir, quick
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.providers = tuple(providers or suite.providers)
        unknown = [p for p in self.providers if p not in PROVIDERS]
        if unknown:
            raise ValueError(f"unknown providers {unknown}; known: {sorted(PROVIDERS)}")
        self.progress, self.command = progress, command
        self.on_gpu = self.device == "cuda"
        self.trials = 3 if quick else suite.trials
        self.trial_seconds = 0.15 if quick else 0.5

    @property
    def path(self):
        return self.out_dir / f"{self.suite.name}.csv"

    def run(self):
        """Run every case of the suite; returns the rows written."""
        from tqdm.auto import tqdm

        specs = self.suite.cases(self.quick)
        written = []
        bar = tqdm(total=len(specs) * len(self.providers), desc=self.suite.name,
                   disable=not self.progress, unit="cell")
        for spec in specs:
            case = make_case(spec.algorithm, spec.num_envs, spec.seq_len, spec.variant,
                             spec.dtype, spec.layout, spec.flags, device=self.device)
            expected = None
            rows = []
            for name in self.providers:
                bar.set_postfix_str(f"{spec.algorithm} {spec.num_envs}x{spec.seq_len} "
                                    f"{spec.variant} {name}")
                cell_rows, expected = self.run_cell(case, name, expected)
                rows += cell_rows
                bar.update()
            written += rows
            upsert(self.path, rows)
            del case, expected
            self._release()
        bar.close()
        record_provenance(self.out_dir, self.suite.name,
                          dict(provenance(self.command), quick=self.quick,
                               providers=list(self.providers)))
        return written

    def _release(self):
        gc.collect()
        if self.on_gpu:
            torch.cuda.empty_cache()

    def _base(self, case, name):
        return dict(suite=self.suite.name, algorithm=case.algorithm, implementation=name,
                    num_envs=case.num_envs, seq_len=case.seq_len, variant=case.variant,
                    dtype=case.dtype, layout=case.layout, device=self._device_name(),
                    timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def _device_name(self):
        return torch.cuda.get_device_name(0) if self.on_gpu else "cpu"

    def run_cell(self, case, name, expected):
        """Gate and time provider ``name`` on ``case``; returns (rows, reference cache)."""
        provider = PROVIDERS[name]
        base = self._base(case, name)
        if provider.unsupported(case):
            return [], expected
        reason = unavailable(name)
        if reason is None and provider.input_device == "cuda" and not self.on_gpu:
            reason = "needs a CUDA device"
        if reason:
            return [_row(base, "gate", status="unavailable", note=reason)], expected
        reason = provider.over_budget(case)
        if reason:
            return [_row(base, "gate", status="skipped", note=reason)], expected
        local = to_device(case, "cpu") if provider.input_device == "cpu" else case
        try:
            prepared = provider.build(local)
            outputs = prepared.outputs(prepared.call())
            if prepared.compare_case is not None:
                check_against = gate.expected_outputs(prepared.compare_case)
                outputs = tuple(o[:, :prepared.compare_cols] for o in outputs)
            else:
                expected = expected or gate.expected_outputs(case)
                check_against = expected
            result = gate.compare(check_against, outputs, _DTYPE[case.dtype],
                                  prepared.tolerance)
        except Exception as exc:  # a crash is a result too: record it, never time it
            self._release()
            return [_row(base, "gate", status="error", note=f"{type(exc).__name__}: {exc}"[:300])
                    ], expected
        del outputs
        note = "; ".join(x for x in (result.message, prepared.note) if x)
        rows = [_row(base, "max_abs_err", result.max_abs_err, "abs",
                     "ok" if result.ok else "failed", note),
                _row(base, "max_rel_err", result.max_rel_err, "rel",
                     "ok" if result.ok else "failed", note)]
        if result.ok:
            try:
                rows += self._time(case, provider, prepared, base)
            except Exception as exc:
                rows.append(_row(base, "timing", status="error",
                                 note=f"{type(exc).__name__}: {exc}"[:300]))
        del prepared
        self._release()
        return rows, expected

    def _time(self, case, provider, prepared, base):
        call, metrics = prepared.call, self.suite.metrics
        if provider.clock == "cpu" or not self.on_gpu:
            sync_device = "cuda" if self.on_gpu and provider.input_device != "cpu" else "cpu"
            seconds = 0.1 if self.quick else 0.5
            t = timing.wall_ms(call, sync_device, min_seconds=seconds)
            return [_row(base, "wall", t.ms, "ms", t=t)]
        n_iter = self.suite.n_iter or timing.paper_n_iter(case.num_envs, case.seq_len)
        if self.quick:
            n_iter = min(n_iter, 20)
        rows, measured = [], {}
        if "full_call" in metrics:
            t = timing.full_call_ms(call, n_iter, self.trials, trial_seconds=self.trial_seconds)
            measured["full_call"] = t.ms
            rows.append(_row(base, "full_call", t.ms, "ms", t=t))
        if "device" in metrics:
            t = timing.device_ms(call, trials=self.trials, trial_seconds=self.trial_seconds)
            measured["device"] = t.ms
            rows.append(_row(base, "device", t.ms, "ms", t=t))
        if "amortized" in metrics:
            t = timing.amortized_ms(call, trials=self.trials, trial_seconds=self.trial_seconds)
            rows.append(_row(base, "amortized", t.ms, "ms", t=t))
        if "launches" in metrics:
            t = timing.profile_kernels(call, reps=10)
            rows.append(_row(base, "launches", t.launches, "count", t=t))
            rows.append(_row(base, "device_profiler", t.ms, "ms", t=t))
        rows += self._derived(case, base, measured)
        return rows

    def _derived(self, case, base, measured):
        rows = []
        if "overhead" in self.suite.derived and {"full_call", "device"} <= measured.keys():
            rows.append(_row(base, "overhead", measured["full_call"] - measured["device"], "ms",
                             note="full_call - device"))
        if "roofline" in self.suite.derived and "device" in measured:
            n_bytes = min_bytes(case)
            ms = measured["device"]
            rows += [_row(base, "bytes", n_bytes, "B"),
                     _row(base, "floor", floor_ms(n_bytes), "ms", note="bytes / 4249 GB/s"),
                     _row(base, "bandwidth", achieved_gbps(n_bytes, ms), "GB/s"),
                     _row(base, "pct_roofline", percent_of_roofline(n_bytes, ms), "%",
                          note="floor / device time")]
            if "full_call" in measured:
                rows.append(_row(base, "pct_roofline_full_call",
                                 percent_of_roofline(n_bytes, measured["full_call"]), "%"))
        return rows
