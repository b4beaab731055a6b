"""The robust aggregation rules and the attacks, receiver by receiver and neighbour by neighbour in
plain Python over numpy rows: what each paper writes, with nothing shared with the vectorized code.
``w`` is a dense (m, m) receiver-by-sender matrix (the realized W of the step: a lost message has
W_ij = 0); ``x`` the (m, P) models; node i's neighbours are the j != i with W_ij > 0."""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm


def neighbours(w: np.ndarray, i: int) -> list[int]:
    return [j for j in range(w.shape[0]) if j != i and w[i, j] > 0]


def clipped_gossip(x: np.ndarray, w: np.ndarray, tau: float | None) -> np.ndarray:
    """He et al. 2022, Algorithm 1: x_i + sum_j W_ij clip(x_j - x_i, tau); tau None: the second
    largest distance among i's neighbours (the largest when there is one), as in the authors' code."""
    out = x.copy()
    for i in range(x.shape[0]):
        nb = neighbours(w, i)
        dists = sorted(float(np.linalg.norm(x[j] - x[i])) for j in nb)
        radius = tau if tau is not None else (dists[-2] if len(dists) > 1 else dists[-1] if dists else 0.0)
        total = np.zeros_like(x[i])
        for j in nb:
            v = x[j] - x[i]
            norm_v = float(np.linalg.norm(v))
            scale = min(1.0, radius / norm_v) if norm_v > 0 else 1.0
            total += w[i, j] * scale * v
        out[i] = x[i] + total
    return out


def trimmed_mean(x: np.ndarray, w: np.ndarray, b: int) -> np.ndarray:
    """BRIDGE-T: per coordinate, drop the b largest and b smallest neighbour values, average the
    rest with one's own; d_i <= 2b neighbours: keep one's own."""
    out = x.copy()
    for i in range(x.shape[0]):
        nb = neighbours(w, i)
        if len(nb) <= 2 * b:
            continue
        values = np.sort(np.stack([x[j] for j in nb]), axis=0)        # per coordinate (numpy's sort)
        kept = values[b:len(nb) - b]
        out[i] = (x[i] + kept.sum(0)) / (len(kept) + 1)
    return out


def median(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """BRIDGE-M: per coordinate, the median of one's own and the neighbours' values."""
    out = x.copy()
    for i in range(x.shape[0]):
        out[i] = np.median(np.stack([x[j] for j in [i, *neighbours(w, i)]]), axis=0)   # numpy's median
    return out


def balance(x: np.ndarray, w: np.ndarray, t: int, rounds: int, gamma: float, kappa: float,
            alpha: float) -> np.ndarray:
    """Fang et al. 2024, Algorithm 1: accept j iff ||x_j - x_i|| <= gamma exp(-kappa t / T) ||x_i||;
    x_i <- alpha x_i + (1 - alpha) mean(accepted), unchanged when none is accepted."""
    out = x.copy()
    threshold = gamma * math.exp(-kappa * t / rounds)
    for i in range(x.shape[0]):
        accepted = [x[j] for j in neighbours(w, i)
                    if np.linalg.norm(x[j] - x[i]) <= threshold * np.linalg.norm(x[i])]
        if accepted:
            out[i] = alpha * x[i] + (1 - alpha) * np.mean(accepted, axis=0)
    return out


def alie_z(n: int, f: int) -> float:
    """Baruch et al. 2019's z_max as the ClippedGossip authors' code computes it."""
    s = math.floor(n / 2 + 1) - f
    return float(norm.ppf((n - f - s) / (n - f)))


def omniscient_message(attack: str, x: np.ndarray, w: np.ndarray, i: int, byzantine: set[int], n: int,
                       f: int, epsilon: float, z: float | None = None) -> np.ndarray:
    """What a Byzantine neighbour sends receiver i, written from each paper: ALIE mu - z sigma and
    IPM -epsilon mu over i's own and honest neighbours' models (sigma the unbiased std); dissensus
    x_i - epsilon sum_{j honest} W_ij (x_j - x_i) / sum_{b Byzantine} W_ib."""
    honest = [j for j in neighbours(w, i) if j not in byzantine]
    models = np.stack([x[i], *[x[j] for j in honest]])
    if attack == "alie":
        zz = alie_z(n, f) if z is None else z
        return models.mean(0) - zz * models.std(0, ddof=1)
    if attack == "ipm":
        return -epsilon * models.mean(0)
    if attack == "dissensus":
        pull = sum(w[i, j] * (x[j] - x[i]) for j in honest)
        mass = sum(w[i, b] for b in neighbours(w, i) if b in byzantine)
        return x[i] - epsilon * pull / mass
    raise ValueError(attack)
