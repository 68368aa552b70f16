"""DDP communication hooks: EDGC, entropy-driven low-rank gradient
compression (PowerSGD with a rank chosen from the gradients' entropy).

    import zipccl.hooks
    state = zipccl.hooks.EDGCState(group, r_min=16, r_max=64, window=1000, total_iterations=100_000)
    ddp.register_comm_hook(state, zipccl.hooks.edgc_hook)

Modules: entropy (the sampled fixed-width-histogram estimator), error_model
(the Marchenko-Pastur error g(r; m, n) and Eq. 15), controller (the window
rules, stage alignment, and max_rank, r_max from a link model), powersgd
(the low-rank exchange of one bucket), costs (the hook's timings of its
compression and of its steps), edgc (the state and the hook). The hook
works with any torch.distributed backend.
"""

from __future__ import annotations

from .controller import RankController, WindowRecord, allreduce_seconds, exchange_seconds, max_rank
from .edgc import EDGCState, edgc_hook
from .entropy import default_bin_width, histogram_entropy, sample_elements, sampled_entropy
from .error_model import mp_rank_for_error, mp_tail_energy, rank_after_entropy_change
from .powersgd import orthonormalize

__all__ = ["EDGCState", "RankController", "WindowRecord", "allreduce_seconds", "default_bin_width", "edgc_hook",
           "exchange_seconds", "histogram_entropy", "max_rank", "mp_rank_for_error", "mp_tail_energy", "orthonormalize",
           "rank_after_entropy_change", "sample_elements", "sampled_entropy"]
