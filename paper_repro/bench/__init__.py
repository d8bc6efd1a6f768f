"""Benchmark harness: gate every implementation against the float64 reference, then time it.

Run on the GPU machine from the repository root (results go to ``data/<gpu-slug>/``,
e.g. ``data/h200/<suite>.csv`` plus ``provenance.json``)::

    python -m paper_repro.bench --list                 # suites, providers, availability
    python -m paper_repro.bench headline               # 4096 x 128, 7 estimators, +trunc
    python -m paper_repro.bench grid                   # 12 shapes x 7 estimators, plain
    python -m paper_repro.bench truncation             # 4 shapes x 5 estimators, trunc
    python -m paper_repro.bench production             # (4096,80), (32768,128), (16384,16)
    python -m paper_repro.bench pufferlib              # GAE vs PufferLib, 40 shapes
    python -m paper_repro.bench long                   # N=16 x T to 524288, 64x131072, 4x1M
    python -m paper_repro.bench retrace_t              # Retrace at N=512, T = 1024 ... 8192
    python -m paper_repro.bench launch                 # full call - device time, GAE, 12 shapes
    python -m paper_repro.bench roofline               # % of copy bandwidth, fp32/bf16, NT/TN
    python -m paper_repro.bench masked                 # masked GAE (RLHF shapes) vs verl's loop
    python -m paper_repro.bench puff                   # PufferLib's whole advantage vs its kernel
    python -m paper_repro.bench all                    # every suite, in the order above
    python -m paper_repro.bench headline --quick       # a small subset of any suite

Time (estimated from quick runs on the H200, where each fresh ``torch.compile`` of a
baseline costs ~2-5 s per shape): headline ~4-5 min, grid ~6-7, truncation ~1.5,
production ~1.5, launch ~1.5, retrace_t ~0.5, pufferlib ~2.5, long ~3.5, roofline ~2;
about 22 minutes in all. Three runs, each stopping itself before a 10-minute limit and
continued by rerunning the same command with ``--resume``::

    python -m paper_repro.bench headline grid --budget-minutes 9 --resume
    python -m paper_repro.bench truncation production launch retrace_t pufferlib \\
        --budget-minutes 9 --resume
    python -m paper_repro.bench long roofline --budget-minutes 9 --resume

Exit status 3 means the budget stopped a suite early: rerun the same command. Without
``--resume`` a rerun re-measures every cell and replaces its rows. ``--gpus N`` splits the
suites over N GPUs, one process each, and merges their rows (``make bench`` uses every GPU):
on two H200s ``all`` takes about 12 minutes.

Options: ``--providers ours rl-triton ...`` restricts the implementations, ``--out DIR``
redirects the CSVs, ``--device cpu`` runs on the CPU (wall-clock timing),
``--no-progress`` hides the tqdm bar. Peers need their sources under ``.ext/`` (git
ignored; carry it to the GPU machine): ``.ext/pufferlib/{pufferlib.cpp,pufferlib.cu}``
from the PufferLib 3.0.0 sdist (or ``$PAPER_REPRO_PUFFERLIB_SRC``; compiled with nvcc on
first use) and ``.ext/rl-triton/src`` from rl-triton v0.1.3 (or
``$PAPER_REPRO_RL_TRITON_SRC``). TorchRL is not installed on the GPU image: carry the
wheels ``torchrl==0.14.1 tensordict==0.14.3 hoptorch pyvers orjson importlib_metadata``
(cp312, manylinux) in ``.whl/`` and install them with ``pip install --no-index --no-deps
--target /tmp/site .whl/*.whl`` plus ``PYTHONPATH=/tmp/site:$PWD``. A missing peer is
recorded as ``unavailable``, never silently dropped.

Modules: :mod:`~paper_repro.bench.inputs` (the paper's random inputs),
:mod:`~paper_repro.bench.providers` (implementations), :mod:`~paper_repro.bench.gate`
(correctness gate), :mod:`~paper_repro.bench.timing` (timers),
:mod:`~paper_repro.bench.suites` (shape grids), :mod:`~paper_repro.bench.runner`,
:mod:`~paper_repro.bench.results` (CSV schema, upsert, provenance),
:mod:`~paper_repro.bench.roofline`, :mod:`~paper_repro.bench.lanes` (several GPUs),
:mod:`~paper_repro.bench.provenance_summary`. Kernel probes behind the tile heuristic:
:mod:`~paper_repro.bench.tile_probe` (candidate tiles per estimator),
:mod:`~paper_repro.bench.long_probe` (look-back against two passes for few long rows),
:mod:`~paper_repro.bench.shipped_times` (A/B of source trees), :mod:`~paper_repro.bench.sass`
(what the kernels compile to, no GPU needed), :mod:`~paper_repro.bench.lookback_window`,
:mod:`~paper_repro.bench.host_path`.
"""
