"""The planners' per-problem arithmetic (include/phalanx/planner.h) against numpy: MPPI's
weights over any cost range, CEM's elites against a stable argsort, and the sampling noise."""

from __future__ import annotations

import numpy as np
import pytest

from phalanx import _phalanx


def reference_weights(cost, lam):
    """softmin by log-sum-exp in extended precision (the minimum subtracted first, exactly, so
    that large offsets lose no digits)"""
    c = np.asarray(cost, dtype=np.longdouble)
    z = -(c - c[np.isfinite(c)].min()) / np.longdouble(lam)
    finite = np.isfinite(z)
    zmax = z[finite].max()
    lse = zmax + np.log(np.exp(z[finite] - zmax).sum())
    w = np.zeros_like(z)
    w[finite] = np.exp(z[finite] - lse)
    return w.astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mppi_weights_match_a_log_sum_exp_reference(rng, dtype):
    K = 256
    big = float(np.finfo(dtype).max) / 2  # 9e307 or 1.7e38: no overflow in the cast
    cases = [
        (rng.uniform(0, 10, K), 1.0),
        (1e12 + rng.uniform(0, 5, K), 0.5),           # large offset: exp(-c / lam) underflows
        (rng.uniform(0, 1e6, K), 1e-3),                # a huge range for the temperature
        (np.r_[0.0, 1e3, 1e6, big, rng.uniform(0, 1, K - 4)], 1e-2),
        (rng.uniform(-5, 5, K), 1e6),                  # hot: almost uniform
        (np.r_[np.inf, rng.uniform(0, 1, K - 1)], 0.1),  # an infinite cost gets weight 0
    ]
    costs = np.stack([c for c, _ in cases]).astype(dtype)
    for p, (_, lam) in enumerate(cases):
        w, ok = _phalanx.mppi_weights(costs[p:p + 1], lam)
        assert ok[0]
        ref = reference_weights(costs[p], lam)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(w[0], ref, rtol=tol, atol=tol * ref.max())
        assert w[0].sum() == pytest.approx(1.0, rel=10 * tol)
        assert w[0][np.argmin(costs[p])] == w[0].max()  # the best sample weighs most
    w, _ = _phalanx.mppi_weights(costs[5:6], 0.1)
    assert w[0, 0] == 0.0


def test_mppi_weights_reject_nan_costs_and_bad_temperatures():
    costs = np.array([[0.0, 1.0, np.nan], [0.0, 1.0, 2.0], [np.inf, np.inf, np.inf]])
    w, ok = _phalanx.mppi_weights(costs, 1.0)
    np.testing.assert_array_equal(ok, [False, True, False])  # only the bad problems
    assert np.isnan(w[0]).all() and np.isnan(w[2]).all()
    np.testing.assert_allclose(w[1], reference_weights(costs[1], 1.0), rtol=1e-13)
    for lam in (0.0, -1.0, np.inf, np.nan):
        assert not _phalanx.mppi_weights(costs[1:2], lam)[1][0]


def test_elites_equal_a_stable_argsort(rng):
    # ties (rounded costs), NaN (ranked last) and n from 1 to K
    costs = np.round(rng.uniform(0, 5, (6, 40)), 0)
    costs[2, [3, 17]] = np.nan
    for n in (1, 7, 40):
        idx = _phalanx.smallest_indices(costs, n)
        np.testing.assert_array_equal(idx, np.argsort(costs, axis=1, kind="stable")[:, :n])
    with pytest.raises(ValueError, match=r"number of elites must be in \[1, K\] = \[1, 40\]"):
        _phalanx.smallest_indices(costs, 41)
    with pytest.raises(ValueError, match=r"costs must have shape \(N, K\)"):
        _phalanx.smallest_indices(costs[0], 3)


def test_planner_noise_has_the_stated_statistics():
    sigma = np.array([0.5, 2.0])
    S, H, beta = 4000, 12, 0.8
    eps = _phalanx.planner_noise(7, 0, S, 3, H, sigma, beta)
    assert eps.shape == (S, H, 2)
    # marginal standard deviation sigma at every t (standard error ~ sigma / sqrt(2 S) = 1.1 %)
    np.testing.assert_allclose(eps.std(axis=0), np.broadcast_to(sigma, (H, 2)), rtol=0.05)
    np.testing.assert_allclose(eps.mean(axis=0) / sigma, 0, atol=0.07)
    # lag-1 correlation beta (first-order filter), per actuator
    for i in range(2):
        r = np.corrcoef(eps[:, :-1, i].ravel(), eps[:, 1:, i].ravel())[0, 1]
        assert r == pytest.approx(beta, abs=0.02)
    # counter-based: the same samples whatever the batch they are drawn in, other streams differ
    part = _phalanx.planner_noise(7, 1000, 5, 3, H, sigma, beta)
    np.testing.assert_array_equal(part, eps[1000:1005])
    other = _phalanx.planner_noise(7, 1000, 5, 4, H, sigma, beta)
    assert np.abs(other - part).min() > 0
    # float32 draws the same noise: the normals are float draws for either dtype; the filter
    # then rounds in each dtype (measured worst 1e-6 of values up to ~8)
    e32 = _phalanx.planner_noise(7, 0, 500, 3, H, sigma.astype(np.float32), beta)
    np.testing.assert_allclose(e32, eps[:500], rtol=1e-5, atol=1e-6)
    white32 = _phalanx.planner_noise(7, 0, 500, 3, H, np.ones(2, np.float32), 0.0)
    white64 = _phalanx.planner_noise(7, 0, 500, 3, H, np.ones(2), 0.0)
    np.testing.assert_array_equal(white32, white64)


def test_update_and_refit_bindings(rng):
    # mppi_update and cem_refit of planner.h on host arrays against numpy, and their shape checks
    N, K, H, nu = 2, 6, 3, 2
    u = rng.uniform(-0.5, 0.5, (N, H, nu))
    eps = rng.standard_normal((N, K, H, nu))
    w, _ = _phalanx.mppi_weights(rng.uniform(0, 3, (N, K)), 0.7)
    lo, hi = np.array([-1.0, 0.0]), np.array([1.0, 0.0])  # actuator 1 unlimited
    expect = u + np.einsum("nk,nkhu->nhu", w, eps)
    expect[..., 0] = np.clip(expect[..., 0], -1, 1)
    got = u.copy()
    _phalanx.mppi_update(got, w, eps, lo, hi)
    np.testing.assert_allclose(got, expect, rtol=1e-14, atol=1e-15)
    elites = np.array([[4, 1], [0, 5]], dtype=np.int32)
    sigma = np.full((N, H, nu), 0.2)
    mean, std = u.copy(), sigma.copy()
    _phalanx.cem_refit(mean, std, eps, elites, 0.3, 0.05)
    chosen = np.stack([eps[p, elites[p]] for p in range(N)])
    np.testing.assert_allclose(mean, 0.3 * u + 0.7 * chosen.mean(axis=1), rtol=1e-14)
    np.testing.assert_allclose(std, np.maximum(0.3 * sigma + 0.7 * chosen.std(axis=1), 0.05),
                               rtol=1e-14)
    with pytest.raises(ValueError, match="eps has the wrong shape"):
        _phalanx.mppi_update(got, w, np.ascontiguousarray(eps[:, :, :2]), lo, hi)
    with pytest.raises(ValueError, match="elite index is outside"):
        _phalanx.cem_refit(mean, std, eps, elites + K, 0.3, 0.05)
