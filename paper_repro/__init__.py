from paper_repro.kernels.affine_scan import affine_scan
from paper_repro.kernels.gae import compute_gae
