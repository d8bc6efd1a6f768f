"""Fused Triton affine-scan kernels for RL credit assignment (reproduction of arXiv 2608.17641)."""
from paper_repro.kernels.affine_scan import affine_scan
from paper_repro.kernels.discounted_returns import compute_discounted_returns
from paper_repro.kernels.eligibility_traces import compute_eligibility_traces
from paper_repro.kernels.gae import compute_gae
from paper_repro.kernels.lambda_returns import compute_lambda_returns
from paper_repro.kernels.masked_gae import compute_masked_gae
from paper_repro.kernels.prefix_sum import compute_episodic_prefix_sum
from paper_repro.kernels.retrace import compute_retrace
from paper_repro.kernels.vtrace import compute_vtrace

__version__ = "0.1.0"
__all__ = [
    "affine_scan",
    "compute_gae",
    "compute_vtrace",
    "compute_retrace",
    "compute_lambda_returns",
    "compute_discounted_returns",
    "compute_eligibility_traces",
    "compute_episodic_prefix_sum",
    "compute_masked_gae",
]
