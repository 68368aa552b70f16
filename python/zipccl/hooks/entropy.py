"""EDGC's gradient data sampler: differential entropy of a sample of gradient
elements from a fixed-width histogram.

The bin width is fixed (in the gradients' units), not the bin count: with a
fixed count over [min, max] the histogram scales with the data and the
estimate no longer moves with sigma, which is the signal EDGC's rank model
reads (H = 0.5 ln(2 pi e sigma^2) for a Gaussian).
"""

from __future__ import annotations

import math

import torch

# default_bin_width's resolution: bins per standard deviation. At 32 the
# discretisation bias of a Gaussian's estimate is ~delta^2/(24 sigma^2), about
# 4e-5 nats, and a million samples fill ~300 bins.
BINS_PER_SIGMA = 32

# Bin indices are clamped to +-2^52 so that outliers (or a width far below
# the data's scale) cannot overflow int64; such bins just merge at the ends.
_MAX_BIN = float(2**52)


def histogram_entropy(x: torch.Tensor, bin_width: float) -> float:
    """Differential entropy (nats) of x's elements: -sum p_i ln p_i + ln(bin_width)
    over bins [k*bin_width, (k+1)*bin_width). Non-finite elements are ignored;
    NaN when none is finite."""
    if not bin_width > 0:
        raise ValueError(f"bin_width must be positive, got {bin_width}")
    x = x.detach().reshape(-1).float()
    # EDGC runs this on every step it measures, so the all-finite case makes
    # no temporary it does not need: a NaN or an infinity shows in the
    # extremes, and only then is x masked.
    if x.numel() and not all(math.isfinite(v) for v in map(float, torch.aminmax(x))):
        x = x[torch.isfinite(x)]
    n = x.numel()
    if n == 0:
        return math.nan
    bins = torch.floor(x / bin_width).clamp_(-_MAX_BIN, _MAX_BIN)
    lo_f, hi_f = torch.aminmax(bins)
    idx = bins.to(torch.int64)
    lo = int(lo_f)
    span = int(hi_f) - lo + 1
    # bincount when the occupied range is dense enough, else a sort
    counts = torch.bincount(idx.sub_(lo)) if span <= 4 * n + 1024 else torch.unique(idx, return_counts=True)[1]
    p = counts[counts > 0].double() / n
    return float(-(p * p.log()).sum()) + math.log(bin_width)


def sample_elements(x: torch.Tensor, fraction: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """A uniform random sample (with replacement) of round(fraction * numel)
    of x's elements, at least one; all of them, flattened, when fraction >= 1.
    The generator must live on x's device."""
    flat = x.detach().reshape(-1)
    if fraction >= 1:
        return flat
    if not fraction > 0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    k = max(1, round(fraction * flat.numel()))
    # index_select, not flat[idx]: the same elements in a quarter of the time
    return flat.index_select(0, torch.randint(flat.numel(), (k,), generator=generator, device=flat.device))


def sampled_entropy(x: torch.Tensor, bin_width: float, fraction: float,
                    generator: torch.Generator | None = None) -> float:
    """histogram_entropy of a random fraction of x's elements (EDGC's beta)."""
    return histogram_entropy(sample_elements(x, fraction, generator), bin_width)


def default_bin_width(x: torch.Tensor) -> float | None:
    """std(x) / BINS_PER_SIGMA for x's finite elements: the width a state fixes
    at its first measurement of a bucket and keeps from then on. None when x
    has fewer than two finite elements or no spread."""
    x = x.detach().reshape(-1).float()
    x = x[torch.isfinite(x)]
    if x.numel() < 2:
        return None
    std = float(x.std())
    return std / BINS_PER_SIGMA if std > 0 and math.isfinite(std) else None
