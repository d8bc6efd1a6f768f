"""Benchmark harness: gate every implementation against the float64 reference, then time it.

Run on the GPU machine from the repository root (results go to ``data/<gpu-slug>/``,
e.g. ``data/h200/<suite>.csv`` plus ``provenance.json``)::

    python -m paper_repro.bench --list                 # suites, providers, availability
    python -m paper_repro.bench headline               # 4096 x 128, 7 estimators, +trunc
    python -m paper_repro.bench grid                   # 12 shapes x 7 estimators, plain
    python -m paper_repro.bench truncation             # 12 shapes x 5 estimators, trunc
    python -m paper_repro.bench production             # T in {80,128} x N up to 38400
    python -m paper_repro.bench pufferlib              # GAE vs PufferLib, 40 shapes
    python -m paper_repro.bench long                   # N=16 x T up to 524288, 64x131072, 4x1M
    python -m paper_repro.bench retrace_t              # Retrace at N=512, T = 1024 ... 8192
    python -m paper_repro.bench launch                 # full call - device time, GAE, 12 shapes
    python -m paper_repro.bench roofline               # % of copy bandwidth, fp32/bf16, NT/TN
    python -m paper_repro.bench all                    # every suite, in the order above
    python -m paper_repro.bench headline --quick       # a small subset of any suite

Two runs of about nine minutes each cover everything (times measured on the H200 with a
cold compile cache; each compiled baseline compiles once per shape)::

    python -m paper_repro.bench headline grid truncation launch retrace_t
    python -m paper_repro.bench production pufferlib long roofline

Options: ``--providers ours rl-triton ...`` restricts the implementations, ``--out DIR``
redirects the CSVs, ``--device cpu`` runs on the CPU (wall-clock timing),
``--no-progress`` hides the tqdm bar. Peers need their sources under ``.ext/`` (git
ignored; carry it to the GPU machine): ``.ext/pufferlib/{pufferlib.cpp,pufferlib.cu}``
from the PufferLib 3.0.0 sdist (or ``$PAPER_REPRO_PUFFERLIB_SRC``; compiled with nvcc on
first use) and ``.ext/rl-triton/src`` from rl-triton v0.1.3 (or
``$PAPER_REPRO_RL_TRITON_SRC``). A missing peer is recorded as ``unavailable``.

Modules: :mod:`~paper_repro.bench.inputs` (the paper's random inputs),
:mod:`~paper_repro.bench.providers` (implementations), :mod:`~paper_repro.bench.gate`
(correctness gate), :mod:`~paper_repro.bench.timing` (timers),
:mod:`~paper_repro.bench.suites` (shape grids), :mod:`~paper_repro.bench.runner`,
:mod:`~paper_repro.bench.results` (CSV schema, upsert, provenance),
:mod:`~paper_repro.bench.roofline`, :mod:`~paper_repro.bench.provenance_summary`.
"""
