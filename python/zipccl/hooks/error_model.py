"""EDGC's compression quantification model: the rank-r approximation error of
an m x n matrix of i.i.d. entries from the Marchenko-Pastur law, and the rank
update of EDGC's Eq. 15.

By Eckart-Young, ||M - M_r||_F^2 is the sum of the smallest min(m, n) - r
eigenvalues of M M^T. For i.i.d. entries of variance sigma^2 (m <= n,
lambda = m/n) the eigenvalues of M M^T / n follow
p(x) = sqrt((b - x)(x - a)) / (2 pi sigma^2 lambda x) on [a, b] =
sigma^2 (1 -+ sqrt(lambda))^2. The tail energy is then
g(r; m, n) = m n sigma^2 * int_a^{x_r} x p(x) dx with F(x_r) = 1 - r/m,
computed by quadrature (the paper samples it by Monte Carlo; the integral is
that estimate's expectation, and deterministic).
"""

from __future__ import annotations

import functools
import math

import numpy as np

# Quadrature points. The substitution x = a + (b - a)(1 - cos t)/2 removes the
# square-root edges, so the midpoint rule converges fast; 20000 points give
# about 1e-12 of the distribution's mass and mean.
_POINTS = 20_000


@functools.lru_cache(maxsize=64)
def _mp_table(lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(F, M) on a grid of x for unit variance and ratio lam <= 1: the CDF and
    the partial first moment int_a^x t p(t) dt, both rising from 0 to 1."""
    a, b = (1 - math.sqrt(lam)) ** 2, (1 + math.sqrt(lam)) ** 2
    t = (np.arange(_POINTS) + 0.5) * math.pi / _POINTS
    x = a + (b - a) * (1 - np.cos(t)) / 2
    f = ((b - a) / 2) ** 2 * np.sin(t) ** 2 / (2 * math.pi * lam * x)  # p(x) dx/dt
    cdf = np.concatenate([[0.0], np.cumsum(f)])
    moment = np.concatenate([[0.0], np.cumsum(x * f)])
    return cdf / cdf[-1], moment / moment[-1]


def _shape(m: int, n: int) -> tuple[int, int, float]:
    if m < 1 or n < 1:
        raise ValueError(f"matrix shape must be positive, got {m} x {n}")
    short, long = min(m, n), max(m, n)
    return short, long, short / long


def mp_tail_energy(r: float, m: int, n: int, sigma2: float = 1.0) -> float:
    """g(r; m, n): the expected squared Frobenius error of the best rank-r
    approximation of an m x n matrix of i.i.d. entries of variance sigma2.
    r is continuous in [0, min(m, n)]."""
    short, long, lam = _shape(m, n)
    if not 0 <= r <= short:
        raise ValueError(f"rank {r} outside [0, {short}] for a {m} x {n} matrix")
    cdf, moment = _mp_table(lam)
    return short * long * sigma2 * float(np.interp(1 - r / short, cdf, moment))


def mp_rank_for_error(error: float, m: int, n: int, sigma2: float = 1.0) -> float:
    """g^-1: the (continuous) rank whose expected error is `error`; 0 for an
    error at or above the whole energy, min(m, n) for an error of 0."""
    short, long, lam = _shape(m, n)
    cdf, moment = _mp_table(lam)
    u = min(max(error / (short * long * sigma2), 0.0), 1.0)
    return short * (1 - float(np.interp(u, moment, cdf)))


def rank_after_entropy_change(r: float, m: int, n: int, entropy_drop: float) -> float:
    """EDGC's Eq. 15: the rank that keeps rank r's absolute error when the
    gradients' entropy falls by entropy_drop = H - H' nats,
    r' = g^-1(e^(2 (H - H')) g(r; m, n)). For Gaussian entries
    sigma'/sigma = e^(H' - H), so the error at fixed rank scales by
    e^(2 (H' - H)). A drop lowers the rank, a rise raises it; no change keeps
    it. Continuous: callers round."""
    # exp's argument capped: beyond e^700 the answer is rank 0 either way
    return mp_rank_for_error(math.exp(min(2 * entropy_drop, 700.0)) * mp_tail_energy(r, m, n), m, n)
