"""phalanx.control: MPPI and CEM on the batched rollouts, against numpy re-implementations of
one iteration, their determinism and errors, and the cart-pole swing-up of
examples/cartpole_mppi.py on a small budget.

Measured on the development machine (2 shared cores): the swing-up test (5 s simulated, 500
planning iterations of 256 samples x 80 steps, about 16 ms each) takes about 8-10 s; the pole
is upright after about 1.2 s and stays within 0.15 rad for the final seconds (seeds 0-3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import phalanx
import phalanx.control as control
import phalanx.costs as costs
from phalanx import _phalanx

from conftest import load_example

CARTPOLE = Path(__file__).resolve().parents[2] / "examples" / "models" / "cartpole.xml"
HANGING = np.array([[0.0, np.pi]])


@pytest.fixture(scope="module")
def cartpole():
    return phalanx.load_model(CARTPOLE)


def swing_cost(model):
    return costs.Quadratic(model, qpos_weight=[0.5, 5.0], qvel_weight=[0.05, 0.02],
                                 ctrl_weight=0.05, angle_coords=[1], terminal_weight=10.0,
                                 dt=model.timestep)


def numpy_costs(model, cost, qpos, qvel, ctrl):
    """ctrl (N, K, H, nu) rolled out from each problem's state -> (N, K)"""
    N, K, H, nu = ctrl.shape
    qs, vs, _ = phalanx.rollout(model, np.repeat(qpos, K, 0), np.repeat(qvel, K, 0),
                                ctrl.reshape(N * K, H, nu))
    return cost(qs, vs, ctrl.reshape(N * K, H, nu)).reshape(N, K)


def test_quadratic_cost_matches_a_loop_and_wraps_angles(cartpole):
    rng = np.random.default_rng(3)
    M, T = 4, 6
    qs, vs, u = rng.normal(size=(M, T, 2)), rng.normal(size=(M, T, 2)), rng.normal(size=(M, T, 1))
    cost = costs.Quadratic(cartpole, qpos_target=[0.1, 0.0], qpos_weight=[1.0, 3.0],
                                 qvel_weight=[0.5, 0.25], ctrl_weight=0.2, ctrl_target=0.3,
                                 terminal_weight=7.0, angle_coords=[1], dt=0.01)
    ref = np.zeros(M)
    for m in range(M):
        def state(q, v):
            return (1.0 * (q[0] - 0.1) ** 2 + 3.0 * 2 * (1 - np.cos(q[1]))
                    + 0.5 * v[0] ** 2 + 0.25 * v[1] ** 2)
        for t in range(T):
            ref[m] += 0.01 * (state(qs[m, t], vs[m, t]) + 0.2 * (u[m, t, 0] - 0.3) ** 2)
        ref[m] += 7.0 * state(qs[m, -1], vs[m, -1])
    np.testing.assert_allclose(cost(qs, vs, u), ref, rtol=1e-12)
    shifted = qs.copy()
    shifted[..., 1] += 2 * np.pi  # a full turn costs nothing on an angle coordinate
    np.testing.assert_allclose(cost(shifted, vs, u), ref, rtol=1e-9)
    # composition: weights and sums
    extra = costs.CallableCost(lambda q, v, c: np.abs(c).sum(axis=(1, 2)))
    np.testing.assert_allclose((2.0 * cost + extra)(qs, vs, u),
                               2 * ref + np.abs(u).sum(axis=(1, 2)), rtol=1e-12)


def test_mppi_iteration_equals_numpy(cartpole):
    """weights and update of one iteration, from the same Philox noise, for N = 2 problems"""
    N, K, H, sigma, beta, lam, seed = 2, 8, 5, 0.8, 0.6, 0.7, 11
    cost = swing_cost(cartpole)
    rng = np.random.default_rng(0)
    u0 = rng.uniform(-0.9, 0.9, (N, H, 1))  # near the limits, so that samples are clipped
    qpos = np.array([[0.0, np.pi], [0.3, 0.2]])
    qvel = np.array([[0.0, 0.0], [-0.5, 1.0]])
    planner = control.MPPI(cartpole, H, K, sigma, lam, noise_smoothing=beta, seed=seed,
                           cost=cost, num_problems=N, initial_plan=u0)
    for it in range(2):  # the second iteration uses stream 1
        eps = _phalanx.planner_noise(seed, 0, N * K, it, H, np.array([sigma]), beta)
        eps = eps.reshape(N, K, H, 1)
        eps[:, 0] = 0  # include_nominal
        ctrl = np.clip(u0[:, None] + eps, -1, 1)
        assert np.any(np.abs(u0[:, None] + eps) > 1)  # clipping happens
        eps = ctrl - u0[:, None]
        c = numpy_costs(cartpole, cost, qpos, qvel, ctrl)
        w = np.exp(-(c - c.min(axis=1, keepdims=True)) / lam)
        w /= w.sum(axis=1, keepdims=True)
        u1 = np.clip(u0 + np.einsum("nk,nkhu->nhu", w, eps), -1, 1)
        plan = planner.plan(qpos, qvel, full=True)
        np.testing.assert_allclose(planner.last_costs, c, rtol=1e-12)
        np.testing.assert_allclose(planner.last_weights, w, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(planner.last_nominal_cost, c[:, 0], rtol=1e-12)
        np.testing.assert_allclose(plan, u1, rtol=1e-12, atol=1e-14)
        u0 = u1
    assert planner.iteration == 2
    # plan() returns the first row; shift() moves the plan one step and repeats the last row
    first = planner.plan(qpos, qvel, iterations=1)
    full = planner.controls
    np.testing.assert_array_equal(first, full[:, 0])
    planner.shift()
    np.testing.assert_array_equal(planner.controls[:, :-1], full[:, 1:])
    np.testing.assert_array_equal(planner.controls[:, -1], full[:, -1])


def test_held_rows_roll_out_hold_steps_each(cartpole):
    """with hold=k a plan row is applied for k physics steps: the samples' costs equal rollouts
    of the rows repeated k times, in the kernel (built-in terms) and in Python (a callable cost
    sees the repeated controls), the update acts on the H rows with the rows' noise, and a
    gradient step (the adjoint summed over a row's steps) lowers the cost of the held plan"""
    N, K, H, hold, lam = 2, 6, 4, 3, 0.7
    cost = swing_cost(cartpole)
    qpos = np.array([[0.0, np.pi], [0.3, 0.2]])
    qvel = np.array([[0.0, 0.0], [-0.5, 1.0]])
    u0 = np.random.default_rng(1).uniform(-0.5, 0.5, (N, H, 1))
    seen = []

    def python_cost(qs, vs, ctrl):
        seen.append((qs.shape, ctrl))
        return cost(qs, vs, ctrl)

    for c in (cost, python_cost):
        p = control.MPPI(cartpole, H, K, 0.8, lam, cost=c, num_problems=N, initial_plan=u0,
                         hold=hold, seed=3)
        plan = p.plan(qpos, qvel, full=True)
        eps, ctrl = p.last_samples
        assert ctrl.shape == (N, K, H, 1)
        held = np.repeat(ctrl, hold, axis=2)
        ref = numpy_costs(cartpole, cost, qpos, qvel, held)
        np.testing.assert_allclose(p.last_costs, ref, rtol=1e-12)
        # a different hold gives different costs: the rows really are held
        assert np.abs(numpy_costs(cartpole, cost, qpos, qvel, ctrl) - ref).max() > 1e-3
        w = np.exp(-(ref - ref.min(axis=1, keepdims=True)) / lam)
        w /= w.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(plan, np.clip(u0 + np.einsum("nk,nkhu->nhu", w, eps), -1, 1),
                                   rtol=1e-12, atol=1e-14)
    shape, controls = seen[0]
    assert shape == (N * K, H * hold, 2)
    np.testing.assert_array_equal(controls, held.reshape(N * K, H * hold, 1))

    def held_cost(plans):
        qs, vs, _ = phalanx.rollout(cartpole, qpos, qvel, np.repeat(plans, hold, axis=1))
        return cost(qs, vs, np.repeat(plans, hold, axis=1))

    g = control.MPPI(cartpole, H, K, 0.3, lam, cost=cost, num_problems=N, initial_plan=u0,
                     hold=hold)
    before = held_cost(g.controls)
    after = g.refine(qpos, qvel, steps=2)
    np.testing.assert_allclose(after, held_cost(g.controls), rtol=1e-12)
    assert np.all(after < before)
    with pytest.raises(ValueError, match="hold must be a positive integer"):
        control.MPPI(cartpole, H, K, 0.3, lam, cost=cost, hold=0)


def test_ctrlrange_narrows_the_plans_and_samples(cartpole):
    """ctrlrange= replaces the actuators' range for planning: every sample is clip(u + eps) to
    it (and eps the clipped perturbation), the update equals numpy's with that clipping"""
    N, K, H, lam, lo, hi = 1, 16, 6, 0.5, -0.3, 0.5
    cost = swing_cost(cartpole)
    p = control.MPPI(cartpole, H, K, 1.0, lam, cost=cost, ctrlrange=(lo, hi), seed=2)
    plan = p.plan(HANGING, np.zeros((1, 2)), full=True)
    eps, ctrl = p.last_samples
    assert ctrl.min() == lo and ctrl.max() == hi  # sigma 1 reaches both bounds
    np.testing.assert_array_equal(ctrl, eps)  # from the zero plan
    c = numpy_costs(cartpole, cost, HANGING, np.zeros((1, 2)), ctrl)
    w = np.exp(-(c - c.min()) / lam)
    w /= w.sum()
    np.testing.assert_allclose(plan, np.clip(np.einsum("nk,nkhu->nhu", w, eps), lo, hi),
                               rtol=1e-12, atol=1e-15)
    for bad in ((0.5, 0.5), (1.0, -1.0), np.zeros((2, 2)), (np.nan, 1.0)):
        with pytest.raises(ValueError, match=r"ctrlrange must be \(lo, hi\) or \(nu, 2\)"):
            control.MPPI(cartpole, H, K, 1.0, lam, cost=cost, ctrlrange=bad)


def test_same_seed_same_plans_other_seed_differs(cartpole):
    def run(seed):
        p = control.MPPI(cartpole, 20, 32, 0.5, 0.5, noise_smoothing=0.5, seed=seed,
                         cost=swing_cost(cartpole))
        return np.stack([p.plan(HANGING, np.zeros((1, 2)), iterations=3, full=True),
                         (p.shift(), p.plan(HANGING, np.zeros((1, 2)), full=True))[1]])

    a, b, c = run(5), run(5), run(6)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3
    # reset() repeats from the start
    p = control.MPPI(cartpole, 20, 32, 0.5, 0.5, noise_smoothing=0.5, seed=5,
                     cost=swing_cost(cartpole))
    first = p.plan(HANGING, np.zeros((1, 2)), iterations=3, full=True)
    p.reset()
    np.testing.assert_array_equal(p.plan(HANGING, np.zeros((1, 2)), iterations=3, full=True),
                                  first)
    np.testing.assert_array_equal(first, a[0])


def test_nan_costs_and_wrong_shapes_raise(cartpole):
    def nan_in_problem_1(qs, vs, ctrl):
        c = np.ones(qs.shape[0])
        c[8 + 3] = np.nan  # problem 1 (K = 8), sample 3
        return c

    p = control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=nan_in_problem_1, num_problems=2)
    states = np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"MPPI: the cost is NaN for problem\(s\) \[1\] "
                                         r"\(e.g. problem 1, samples \[3\]\)"):
        p.plan(states, states)
    cem = control.CEM(cartpole, 5, 8, 2, 0.5, cost=nan_in_problem_1, num_problems=2)
    with pytest.raises(ValueError, match=r"CEM: the cost is NaN for problem\(s\) \[1\]"):
        cem.plan(states, states)
    p = control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=lambda q, v, c: np.full(q.shape[0], np.inf))
    with pytest.raises(ValueError, match="has a finite cost"):
        p.plan(HANGING, np.zeros((1, 2)))
    # the cost's shape
    p = control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=lambda q, v, c: np.ones((q.shape[0], 2)))
    with pytest.raises(ValueError, match=r"must return a real array of shape \(M,\) = \(8,\)"):
        p.plan(HANGING, np.zeros((1, 2)))
    # states
    p = control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=swing_cost(cartpole), num_problems=2)
    with pytest.raises(ValueError, match=r"qpos must have shape \(N, nq\) = \(2, 2\), "
                                         r"got \(2,\)"):
        p.plan(np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match=r"qvel must have shape \(N, nv\) = \(2, 2\)"):
        p.plan(np.zeros((2, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"qpos of problem\(s\) \[1\] is not finite"):
        p.plan(np.array([[0.0, 0.0], [np.nan, 0.0]]), np.zeros((2, 2)))
    # 1-D states are accepted for one problem
    p1 = control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=swing_cost(cartpole))
    assert p1.plan(np.zeros(2), np.zeros(2)).shape == (1,)
    # constructor arguments
    with pytest.raises(ValueError, match=r"sigma must be a scalar or have shape \(nu,\) = \(1,\)"):
        control.MPPI(cartpole, 5, 8, [0.5, 0.5], 1.0, cost=swing_cost(cartpole))
    with pytest.raises(ValueError, match=r"initial_plan must have shape \(H, nu\) = \(5, 1\)"):
        control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=swing_cost(cartpole),
                     initial_plan=np.zeros((4, 1)))
    with pytest.raises(ValueError, match="temperature must be positive"):
        control.MPPI(cartpole, 5, 8, 0.5, 0.0, cost=swing_cost(cartpole))
    with pytest.raises(ValueError, match="horizon must be a positive integer"):
        control.MPPI(cartpole, 0, 8, 0.5, 1.0, cost=swing_cost(cartpole))
    with pytest.raises(ValueError, match=r"noise_smoothing must be in \[0, 1\)"):
        control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=swing_cost(cartpole), noise_smoothing=1.0)
    with pytest.raises(ValueError, match=r"num_elites must be in \[1, num_samples\] = \[1, 8\]"):
        control.CEM(cartpole, 5, 8, 9, 0.5, cost=swing_cost(cartpole))
    with pytest.raises(TypeError, match="cost must be"):
        control.MPPI(cartpole, 5, 8, 0.5, 1.0, cost=3.0)
    with pytest.raises(ValueError, match=r"qs must have shape \(M, T, nq\) = \(M, T, 2\)"):
        swing_cost(cartpole)(np.zeros((3, 4, 5)), np.zeros((3, 4, 2)), np.zeros((3, 4, 1)))
    with pytest.raises(ValueError, match=r"angle_coords must index qpos"):
        costs.Quadratic(cartpole, angle_coords=[2])


def test_cem_refit_equals_numpy(cartpole):
    N, K, n, H, sigma, alpha, smin, seed = 2, 10, 3, 4, 0.6, 0.25, 0.1, 4
    cost = swing_cost(cartpole)
    qpos = np.array([[0.0, np.pi], [0.1, 0.3]])
    qvel = np.zeros((2, 2))
    cem = control.CEM(cartpole, H, K, n, sigma, smoothing=alpha, sigma_min=smin, seed=seed,
                      cost=cost, num_problems=N, iterations=1)
    mean, std = np.zeros((N, H, 1)), np.full((N, H, 1), sigma)
    for it in range(3):
        unit = _phalanx.planner_noise(seed, 0, N * K, it, H, np.ones(1), 0.0).reshape(N, K, H, 1)
        unit[:, 0] = 0
        ctrl = np.clip(mean[:, None] + std[:, None] * unit, -1, 1)
        c = numpy_costs(cartpole, cost, qpos, qvel, ctrl)
        elites = np.argsort(c, axis=1, kind="stable")[:, :n]
        chosen = np.stack([ctrl[p, elites[p]] for p in range(N)])
        mean = alpha * mean + (1 - alpha) * chosen.mean(axis=1)
        std = np.maximum(alpha * std + (1 - alpha) * chosen.std(axis=1), smin)
        plan = cem.plan(qpos, qvel, full=True)
        np.testing.assert_array_equal(cem.last_elites, elites)
        np.testing.assert_allclose(plan, mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(cem.std, std, rtol=1e-12, atol=1e-14)
    assert cem.std.min() >= smin
    cem.shift()  # the mean moves, the spread goes back to sigma
    np.testing.assert_allclose(cem.controls[:, :-1], mean[:, 1:], rtol=1e-12)
    np.testing.assert_array_equal(cem.std, np.full((N, H, 1), sigma))


def test_mppi_swings_the_cartpole_up_and_holds_it():
    example = load_example("cartpole_mppi")
    r = example.swing_up(5.0, horizon=80, samples=256, sigma=0.3, temperature=1.0, seed=0,
                         log=None)
    t, angle = r["t"], np.abs(r["angle"])
    assert r["time_to_upright"] is not None and r["time_to_upright"] < 3.0  # measured ~1.2 s
    assert angle[t > t[-1] - 1.0].max() < 0.3  # the final second: measured < 0.15 rad
    assert np.all(np.abs(r["ctrl"]) <= 1.0)
    assert r["max_abs_x"] < 1.25  # within the rail (joint limit 1.2 m)


def test_example_writes_its_plot(tmp_path, monkeypatch):
    example = load_example("cartpole_mppi")
    r = dict(t=np.arange(5) * 0.01, angle=np.zeros(5), x=np.zeros(5), ctrl=np.zeros(5))
    pytest.importorskip("matplotlib")
    example.plot(r, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cem_improves_the_swing_up_plan(cartpole):
    cost = swing_cost(cartpole)
    cem = control.CEM(cartpole, 100, 128, 12, 0.6, smoothing=0.1, sigma_min=0.05,
                      iterations=6, noise_smoothing=0.5, seed=1, cost=cost)
    zero = np.zeros((1, 2))

    def plan_cost(u):
        qs, vs, _ = phalanx.rollout(cartpole, HANGING, zero, u)
        return cost(qs, vs, u)[0]

    before = plan_cost(cem.controls)
    cem.plan(HANGING, zero)
    after = plan_cost(cem.controls)
    assert after < 0.5 * before, (before, after)  # measured: 220 -> 81


def test_gradient_refinement_lowers_the_plan_cost(cartpole):
    """refine() takes steps along the rollout adjoint's gradient: each accepted step lowers the
    plan's cost (the value it returns is the cost of the plan it keeps), and after a few steps
    the cost is clearly below the start; a cost without a gradient is an error"""
    cost = swing_cost(cartpole)
    qpos, qvel = HANGING, np.zeros((1, 2))
    p = control.MPPI(cartpole, 40, 16, 0.3, 1.0, cost=cost, initial_plan=np.full((40, 1), 0.2))

    def plan_cost():
        qs, vs, _ = phalanx.rollout(cartpole, qpos, qvel, p.controls)
        return cost(qs, vs, p.controls)[0]

    start = plan_cost()
    values = [start]
    for _ in range(6):
        values.append(p.refine(qpos, qvel)[0])
        assert values[-1] == pytest.approx(plan_cost(), rel=1e-12)
    assert all(b <= a for a, b in zip(values, values[1:]))
    assert values[-1] < 0.9 * start
    # inside plan(): the refined plan's cost is reported
    q = control.MPPI(cartpole, 40, 16, 0.3, 1.0, cost=cost, gradient_steps=2, seed=1)
    q.plan(qpos, qvel)
    assert q.last_refined_cost[0] <= q.last_nominal_cost[0]
    with pytest.raises(NotImplementedError, match="has no gradient"):
        control.MPPI(cartpole, 10, 4, 0.3, 1.0, gradient_steps=1,
                     cost=costs.CallableCost(lambda a, b, c: c.sum(axis=(1, 2)))).plan(qpos, qvel)
    with pytest.raises(ValueError, match="gradient_steps must be an integer >= 0"):
        control.MPPI(cartpole, 10, 4, 0.3, 1.0, cost=cost, gradient_steps=-1)
