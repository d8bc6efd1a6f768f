"""Shape suites mirroring the paper's tables and figures (PAPER.md 4.4, 4.6, 4.7, 5).

Each :class:`Suite` lists its cases (algorithm, shape, variant, dtype, layout), the
providers it times, the metrics it records and its repetition counts; ``quick`` selects a
small subset for smoke runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from paper_repro.bench.inputs import ALGORITHMS, TRUNCATION_ALGORITHMS

GRID = ((64, 512), (128, 1024), (256, 1024), (512, 2048), (512, 4096), (512, 128), (512, 512),
        (4096, 128), (4096, 512), (4096, 2048), (16384, 128), (16384, 512))
# the paper's production table has N in {4096, 8192, 16384, 32768, 38400}; the ends are kept
PRODUCTION = ((4096, 80), (32768, 128), (16384, 16))
# the truncation tables' shapes besides the headline: the paper's HEADLINE_CONFIGS
TRUNCATION_SHAPES = ((64, 512), (256, 1024), (512, 4096), (16384, 512))
PUFFER_PRODUCTION = tuple((n, t) for t in (128, 512, 1024, 2048, 4096)
                          for n in (128, 512, 2048, 8192))
PUFFER_MASSIVE = tuple((n, t) for t in (8, 16, 32, 64, 128) for n in (4096, 8192, 16384, 32768))
LONG = tuple((16, t) for t in (65536, 131072, 262144, 524288)) + ((64, 131072), (4, 1048576),
                                                                   (1, 4194304))
# short horizons with many envs: where PufferLib's one-thread-per-row kernel is strongest
SHORT = tuple((n, t) for n in (4096, 32768) for t in (8, 16, 32))
# retrace and eligibility traces share their engine paths with the five kept here
LONG_ALGORITHMS = ("gae", "vtrace", "lambda_returns", "discounted_returns", "prefix_sum")
RETRACE_T = tuple((512, t) for t in (1024, 2048, 4096, 8192))
# RLHF batches: sequences of 1024-32768 tokens (masked GAE against verl's loop)
MASKED = ((64, 1024), (256, 2048), (256, 8192), (32, 32768))
ROOFLINE = ((4096, 128), (32768, 32), (512, 4096), (64, 131072))
HEADLINE = (4096, 128)
COMPILED = ("doubling-compiled", "assoc-scan-compiled")
ROOFLINE_BANDWIDTH_GBPS = 4249.0  # H200 device-to-device copy, bytes read + written (GPU.md)


@dataclass(frozen=True)
class Spec:
    """One case of a suite (inputs are built from it by :func:`inputs.make_case`)."""

    algorithm: str
    num_envs: int
    seq_len: int
    variant: str = "plain"
    dtype: str = "fp32"
    layout: str = "NT"
    flags: str = "float"


@dataclass
class Suite:
    """A named set of cases, providers, metrics and repetition counts."""

    name: str
    description: str
    specs: tuple
    providers: tuple
    metrics: tuple = ("full_call", "device")
    quick_specs: tuple = ()
    trials: int = 5
    n_iter: int | None = None  # None: the paper's rule, paper_n_iter(N, T)
    trial_seconds: float = 0.5  # cap on one trial's duration (slow providers at big shapes)
    derived: tuple = field(default=())  # "overhead", "roofline"
    only: dict = field(default_factory=dict)  # provider -> the algorithms it runs here

    def cases(self, quick=False):
        return self.quick_specs if quick and self.quick_specs else self.specs

    def runs(self, provider, algorithm):
        return algorithm in self.only.get(provider, (algorithm,))


def _specs(shapes, algorithms=ALGORITHMS, variant="plain", **kw):
    return tuple(Spec(a, n, t, variant, **kw) for (n, t) in shapes for a in algorithms)


def _headline():
    plain = _specs([HEADLINE])
    trunc = _specs([HEADLINE], TRUNCATION_ALGORITHMS, "trunc")
    quick = _specs([(256, 128)], ("gae", "vtrace")) + _specs([(256, 128)], ("gae",), "trunc")
    return Suite("headline", "4096 x 128, all seven estimators, with and without truncations "
                 "(paper Table 3)", plain + trunc,
                 ("ours",) + COMPILED + ("loop-gpu", "numpy-cpu", "torchrl", "torchrl-loop",
                                         "pufferlib", "rl-triton"),
                 ("full_call", "device", "amortized", "launches"), quick)


def _roofline_specs(shapes):
    specs = []
    for n, t in shapes:
        for a in ALGORITHMS:
            specs += [Spec(a, n, t), Spec(a, n, t, layout="TN"),
                      Spec(a, n, t, dtype="bf16", flags="bool")]
    return tuple(specs)


SUITES = {s.name: s for s in [
    _headline(),
    Suite("grid", "the 12-shape main grid, all seven estimators, plain path (paper Tables 4, 6); "
          "loops for GAE and Retrace only (claims H-8, R-6)", _specs(GRID),
          ("ours", "doubling-compiled", "loop-gpu", "rl-triton"),
          quick_specs=_specs(((64, 512), (512, 128)), ("gae", "prefix_sum")),
          only={"loop-gpu": ("gae", "retrace")}),
    Suite("truncation", "truncations and bootstrap values at the paper's four headline configs "
          "(truncation tables; 4096 x 128 is in 'headline')",
          _specs(TRUNCATION_SHAPES, TRUNCATION_ALGORITHMS, "trunc"),
          ("ours", "doubling-compiled", "rl-triton"),
          quick_specs=_specs(((64, 512),), ("gae", "discounted_returns"), "trunc")),
    Suite("production", "production regime: (4096, 80), (32768, 128) and the boundary row "
          "(16384, 16); 4096 x 128 is in 'headline'",
          _specs(PRODUCTION), ("ours", "doubling-compiled", "rl-triton"),
          ("full_call", "device", "amortized"),
          quick_specs=_specs(((4096, 80), (16384, 16)), ("gae",))),
    Suite("pufferlib", "GAE against PufferLib's CUDA kernel on 40 shapes (paper Fig. 3)",
          _specs(PUFFER_PRODUCTION + PUFFER_MASSIVE, ("gae",)),
          ("ours", "pufferlib", "rl-triton"), ("full_call", "device", "amortized"),
          _specs(((128, 128), (4096, 8), (32768, 32)), ("gae",)), trials=11, n_iter=100,
          trial_seconds=0.25),
    Suite("short", "short horizons, many envs: GAE at 4096 and 32768 envs x T in 8, 16, 32 "
          "against PufferLib and both compiled scans", _specs(SHORT, ("gae",)),
          ("ours", "pufferlib", "rl-triton") + COMPILED, ("full_call", "device", "amortized"),
          _specs(((4096, 8),), ("gae",))),
    Suite("long", "few long sequences: N=16 x T in 65536 ... 524288, 64 x 131072, 4 x 1048576, "
          "1 x 4194304",
          _specs(LONG, LONG_ALGORITHMS),
          ("ours",) + COMPILED + ("rl-triton", "pufferlib", "torchrl"),
          quick_specs=_specs(((16, 8192), (4, 65536)), ("gae", "prefix_sum")),
          only={"assoc-scan-compiled": ("gae", "prefix_sum"), "torchrl": ("gae",)}),
    Suite("retrace_t", "Retrace across T at N=512 (the paper's register cliff, claims R-*); "
          "device_cold: inputs from DRAM",
          _specs(RETRACE_T, ("retrace",)), ("ours",) + COMPILED + ("rl-triton",),
          ("full_call", "device", "device_cold"),
          quick_specs=_specs(((64, 1024), (64, 4096)), ("retrace",))),
    Suite("launch", "launch overhead: full call minus device time, GAE on the 12-shape grid "
          "(paper Fig. 1)", _specs(GRID, ("gae",)), ("ours", "rl-triton") + COMPILED,
          ("full_call", "device", "launches"), _specs(((64, 512), (4096, 128)), ("gae",)),
          derived=("overhead",)),
    Suite("masked", "masked GAE (multi-turn RLHF, beyond the paper): RLHF batch shapes against "
          "verl's loop over t", _specs(MASKED, ("masked_gae",)), ("ours", "loop-gpu"),
          ("full_call", "device"), _specs(((16, 256),), ("masked_gae",))),
    Suite("puff", "PufferLib's whole advantage (GAE with V-trace's clipped importance weights, "
          "beyond the paper) against its own CUDA kernel on its study's 40 shapes",
          _specs(PUFFER_PRODUCTION + PUFFER_MASSIVE, ("puff_advantage",)),
          ("ours", "pufferlib"), ("full_call", "device"),
          _specs(((128, 128), (4096, 8)), ("puff_advantage",)), trials=11, n_iter=100,
          trial_seconds=0.25),
    Suite("roofline", "achieved fraction of copy bandwidth: every estimator, fp32 [N,T] and "
          "[T,N], bf16 with bool flags; device_cold: inputs from DRAM", _roofline_specs(ROOFLINE),
          ("ours", "rl-triton"), ("full_call", "device", "device_cold"),
          quick_specs=_roofline_specs(((4096, 128),))[:6], derived=("roofline",)),
]}
ALL = tuple(SUITES)
