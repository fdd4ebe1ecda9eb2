"""phalanx.costs: the built-in cost terms (include/phalanx/cost.h) against MuJoCo's kinematics
and centre of mass, their gradients against central differences in double, composition, the
errors, and the planner's in-kernel costs against the same costs evaluated from recorded
trajectories."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

import phalanx
import phalanx.control as control
import phalanx.costs as costs
from phalanx import losses

from conftest import HUMANOID

CARTPOLE = Path(__file__).resolve().parents[2] / "examples" / "models" / "cartpole.xml"


@pytest.fixture(scope="module")
def humanoid_pair():
    return phalanx.load_model(HUMANOID), mujoco.MjModel.from_xml_path(str(HUMANOID))


def random_trajectories(mj, E, T, seed):
    """humanoid states with random unit quaternions and joint angles, velocities, controls"""
    rng = np.random.default_rng(seed)
    qs = np.tile(mj.qpos0, (E, T, 1))
    qs[..., :3] += rng.normal(0, 0.1, (E, T, 3))
    qs[..., 7:] += rng.normal(0, 0.2, (E, T, mj.nq - 7))
    quat = rng.normal(size=(E, T, 4))
    qs[..., 3:7] = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    return qs, rng.normal(0, 0.5, (E, T, mj.nv)), rng.normal(0, 0.3, (E, T, mj.nu))


def every_term(model):
    """one cost with every kind of term, running and terminal weights differing"""
    return (costs.BodyHeight(model, "torso", 1.3, weight=1.0, terminal_weight=5.0)
            + costs.BodyUpright(model, "torso", weight=2.0, terminal_weight=1.0)
            + costs.BodyPosition(model, 5, [0.1, -0.2], axes="xy", weight=[0.2, 0.4])
            + costs.ComPosition(model, 0.1, axes=[0], weight=0.5, terminal_weight=0.2)
            + costs.ComVelocity(model, [0.3, 0.0], axes="yz", weight=[1.5, 0.7],
                                terminal_weight=[0.0, 3.0])
            + costs.Quadratic(model, qpos_target=0.2, qpos_weight=np.eye(model.nq)[8],
                              qvel_target=0.1, qvel_weight=0.3 * np.eye(model.nv)[5],
                              ctrl_target=0.2, ctrl_weight=0.6 * np.eye(model.nu)[3],
                              terminal_weight=1.0)
            + costs.Quadratic(model, qpos_target=0.5, qpos_weight=np.eye(model.nq)[9],
                              angle_coords=[9], terminal_weight=2.0))


def mujoco_cost(mj, qs, vs, us):
    """every_term's value from MuJoCo's xpos, xmat, subtree_com and subtree_linvel"""
    d = mujoco.MjData(mj)
    torso = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, "torso")
    E, T = qs.shape[:2]
    out = np.zeros(E)
    for e in range(E):
        for t in range(T):
            d.qpos[:], d.qvel[:] = qs[e, t], vs[e, t]
            mujoco.mj_forward(mj, d)
            mujoco.mj_subtreeVel(mj, d)
            com, comv, q, v, u = d.subtree_com[0], d.subtree_linvel[0], qs[e, t], vs[e, t], us[e, t]
            last = t == T - 1
            out[e] += ((1.0 + 5.0 * last) * (d.xpos[torso, 2] - 1.3) ** 2
                       + (2.0 + 1.0 * last) * (1 - d.xmat[torso][8])
                       + 0.2 * (d.xpos[5, 0] - 0.1) ** 2 + 0.4 * (d.xpos[5, 1] + 0.2) ** 2
                       + (0.5 + 0.2 * last) * (com[0] - 0.1) ** 2
                       + 1.5 * (comv[1] - 0.3) ** 2 + (0.7 + 3.0 * last) * comv[2] ** 2
                       + (1.0 + last) * (q[8] - 0.2) ** 2 + 0.3 * (1 + last) * (v[5] - 0.1) ** 2
                       + 0.6 * (u[3] - 0.2) ** 2
                       + (1.0 + 2.0 * last) * 2 * (1 - np.cos(q[9] - 0.5)))
    return out


def test_terms_equal_mujoco_kinematics(humanoid_pair):
    model, mj = humanoid_pair
    qs, vs, us = random_trajectories(mj, 3, 4, seed=0)
    cost = every_term(model)
    assert isinstance(cost, costs.Terms)  # sums of built-in terms stay one kernel call
    ref = mujoco_cost(mj, qs, vs, us)
    np.testing.assert_allclose(cost(qs, vs, us), ref, rtol=1e-12)
    # float32 rollouts agree to single precision
    f32 = cost(*(a.astype(np.float32) for a in (qs, vs, us)))
    assert f32.dtype == np.float32
    np.testing.assert_allclose(f32, ref, rtol=2e-5)


def test_term_gradients_match_central_differences(humanoid_pair):
    model, mj = humanoid_pair
    qs, vs, us = random_trajectories(mj, 2, 3, seed=1)
    cost = every_term(model)
    value, dq, dv, du = cost.value_and_grad(qs, vs, us)
    np.testing.assert_array_equal(value, cost(qs, vs, us))
    h = 1e-6
    worst = 0.0
    for arr, grad in [(qs, dq), (vs, dv), (us, du)]:
        for idx in np.ndindex(arr.shape):
            keep = arr[idx]
            arr[idx] = keep + h
            up = cost(qs, vs, us)[idx[0]]
            arr[idx] = keep - h
            down = cost(qs, vs, us)[idx[0]]
            arr[idx] = keep
            fd = (up - down) / (2 * h)
            worst = max(worst, abs(fd - grad[idx]) / (1 + abs(fd)))
    assert worst < 1e-7, worst


def test_composition_and_python_costs(humanoid_pair):
    model, mj = humanoid_pair
    qs, vs, us = random_trajectories(mj, 2, 3, seed=2)
    a = costs.BodyHeight(model, "torso", 1.2)
    b = costs.ComVelocity(model, 0.0, axes="xy")
    c = costs.CallableCost(lambda q, v, u: (u ** 2).sum(axis=(1, 2)),
                           grad_fn=lambda q, v, u: (0 * q, 0 * v, 2 * u))
    total = 2.0 * a + b + 0.5 * c
    np.testing.assert_allclose(total(qs, vs, us),
                               2 * a(qs, vs, us) + b(qs, vs, us) + 0.5 * (us ** 2).sum(axis=(1, 2)),
                               rtol=1e-13)
    value, dq, dv, du = total.value_and_grad(qs, vs, us)
    _, aq, av, au = a.value_and_grad(qs, vs, us)
    _, bq, bv, bu = b.value_and_grad(qs, vs, us)
    np.testing.assert_allclose(dq, 2 * aq + bq, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(du, us, rtol=1e-13)
    np.testing.assert_allclose((-1.0 * a)(qs, vs, us), -a(qs, vs, us), rtol=1e-15)  # negative
    np.testing.assert_allclose((0.5 * a)(qs, vs, us), 0.5 * a(qs, vs, us), rtol=1e-15)
    with pytest.raises(NotImplementedError, match="has no gradient"):
        costs.CallableCost(lambda q, v, u: u.sum(axis=(1, 2))).value_and_grad(qs, vs, us)


def test_bad_terms_raise(humanoid_pair):
    model, _ = humanoid_pair
    with pytest.raises(ValueError, match="no body"):
        costs.BodyHeight(model, "no_such_body", 1.0)
    with pytest.raises(ValueError, match=r"axes must be among 0, 1, 2"):
        costs.ComVelocity(model, 0.0, axes=[3])
    with pytest.raises(ValueError, match=r"weights finite and >= 0"):
        costs.BodyUpright(model, "torso", weight=-1.0)
    with pytest.raises(ValueError, match="targets must be finite"):
        costs.BodyHeight(model, "torso", np.nan)
    with pytest.raises(ValueError, match=r"target must be a scalar or have shape \(axes,\) = \(2,\)"):
        costs.ComPosition(model, [0.0, 0.0, 1.0], axes="xy")
    qs, vs, us = random_trajectories(mujoco.MjModel.from_xml_path(str(HUMANOID)), 1, 2, 0)
    with pytest.raises(ValueError, match=r"vs must have shape \(M, T, nv\) = \(M, T, 27\)"):
        costs.BodyHeight(model, "torso", 1.0)(qs, vs[..., :5], us)
    with pytest.raises(ValueError, match=r"cost term 0: body_pos index 99 out of range"):
        costs.Terms(model, [[4, 99, 2]], [[0.0, 1.0, 0.0]])(qs, vs, us)


def test_rollout_gradient_through_body_and_com_terms():
    """losses.value_and_grad with built-in terms equals central differences of the rollout"""
    model = phalanx.load_model(CARTPOLE)
    cost = (costs.BodyUpright(model, "pole", weight=0.3, terminal_weight=2.0)
            + costs.ComPosition(model, [0.2, 0.3], axes="xz", weight=0.1, terminal_weight=1.0)
            + costs.ComVelocity(model, 0.5, axes="x", weight=0.05))
    rng = np.random.default_rng(4)
    qpos, qvel = np.array([[0.1, 2.5]]), np.array([[0.0, 0.3]])
    ctrl = rng.uniform(-0.5, 0.5, (1, 25, 1))
    value, g = losses.value_and_grad(model, qpos, qvel, ctrl, cost)

    def f(q, v, u):
        qs, vs, _ = phalanx.rollout(model, q, v, u)
        return cost(qs, vs, u)[0]

    h = 1e-6
    for name, arr in [("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)]:
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            keep = arr[idx]
            arr[idx] = keep + h
            up = f(qpos, qvel, ctrl)
            arr[idx] = keep - h
            down = f(qpos, qvel, ctrl)
            arr[idx] = keep
            fd[idx] = (up - down) / (2 * h)
        np.testing.assert_allclose(g[name], fd, rtol=1e-6, atol=1e-8 * np.abs(fd).max())
    assert value[0] == pytest.approx(f(qpos, qvel, ctrl), rel=1e-14)


@pytest.mark.parametrize("planner", ["mppi", "cem"])
def test_in_kernel_costs_equal_costs_of_recorded_trajectories(planner):
    """the sampling kernel's accumulated costs, weights and plans are bit-identical to the same
    terms evaluated in Python on the recorded trajectories"""
    model = phalanx.load_model(CARTPOLE)
    cost = (costs.Quadratic(model, qpos_weight=[0.5, 5.0], qvel_weight=0.05, ctrl_weight=0.05,
                            angle_coords=[1], terminal_weight=10.0, dt=model.timestep)
            + costs.BodyUpright(model, "pole", weight=0.01) + costs.ComVelocity(model, 0.0,
                                                                                axes="x"))
    wrapped = costs.CallableCost(lambda q, v, u: cost(q, v, u))
    qpos = np.array([[0.0, np.pi], [0.2, 0.5], [-0.3, 3.0]])
    qvel = np.zeros((3, 2))

    def make(c):
        if planner == "mppi":
            return control.MPPI(model, 30, 16, 0.4, 0.5, noise_smoothing=0.3, seed=5, cost=c,
                                num_problems=3)
        return control.CEM(model, 30, 16, 4, 0.4, seed=5, cost=c, num_problems=3)

    fast, slow = make(cost), make(wrapped)
    for _ in range(3):
        np.testing.assert_array_equal(fast.plan(qpos, qvel, full=True),
                                      slow.plan(qpos, qvel, full=True))
        np.testing.assert_array_equal(fast.last_costs, slow.last_costs)
    eps, ctrl = fast.last_samples
    assert eps.shape == ctrl.shape == (3, 16, 30, 1)
    np.testing.assert_array_equal(eps[:, 0], 0)  # the nominal sample


def test_kinematics_equals_mujoco(humanoid_pair):
    """phalanx.kinematics: body frames, centre of mass and its velocity against MuJoCo's xpos,
    xquat, xmat, subtree_com[0] and subtree_linvel[0] (the quantities the cost terms and the
    standard tasks use)"""
    model, mj = humanoid_pair
    qs, vs, _ = random_trajectories(mj, 4, 1, seed=3)
    qpos, qvel = qs[:, 0], vs[:, 0]
    out = phalanx.kinematics(model, qpos, qvel)
    d = mujoco.MjData(mj)
    for e in range(len(qpos)):
        d.qpos[:], d.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_forward(mj, d)
        mujoco.mj_subtreeVel(mj, d)
        np.testing.assert_allclose(out["xpos"][e], d.xpos, atol=1e-12)
        np.testing.assert_allclose(out["xquat"][e], d.xquat, atol=1e-12)
        np.testing.assert_allclose(out["xmat"][e], d.xmat.reshape(-1, 3, 3), atol=1e-12)
        np.testing.assert_allclose(out["com"][e], d.subtree_com[0], atol=1e-12)
        np.testing.assert_allclose(out["com_vel"][e], d.subtree_linvel[0], atol=1e-12)
    assert "com_vel" not in phalanx.kinematics(model, qpos)
    with pytest.raises(ValueError, match=r"qvel must have shape \(E, nv\) = \(4, 27\)"):
        phalanx.kinematics(model, qpos, qvel[:, :3])


def test_one_quadratic_convention_for_costs_and_losses():
    """costs.Quadratic (in the kernels) and losses.StateCost + ControlCost (numpy) are the same
    function: squared errors without 1/2, the terminal weight added at the last step"""
    model = phalanx.load_model(CARTPOLE)
    rng = np.random.default_rng(7)
    E, T = 3, 5
    qs, vs, us = rng.normal(size=(E, T, 2)), rng.normal(size=(E, T, 2)), rng.normal(size=(E, T, 1))
    target, wq, wv, tw = np.array([0.3, -0.2]), np.array([0.5, 2.0]), np.array([0.1, 0.4]), 3.0
    kernel = costs.Quadratic(model, qpos_target=target, qpos_weight=wq, qvel_weight=wv,
                             ctrl_weight=0.7, terminal_weight=tw)
    numpy = (losses.StateCost(qpos_target=target, qpos_weight=wq, qvel_weight=wv,
                              terminal_qpos_weight=tw * wq, terminal_qvel_weight=tw * wv)
             + losses.ControlCost(weight=0.7))
    for a, b in zip(kernel.value_and_grad(qs, vs, us), numpy.value_and_grad(qs, vs, us)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
    # by hand: one environment, two steps, one coordinate
    x = np.array([[[1.0], [3.0]]])
    value, grad = costs.quadratic(x, 0.5, [2.0], [10.0])
    assert value[0] == 2.0 * 0.25 + 2.0 * 6.25 + 10.0 * 6.25
    np.testing.assert_array_equal(grad, [[[2 * 2.0 * 0.5], [2 * 12.0 * 2.5]]])
    # the gradient against central differences, with per-step targets
    tgt = rng.normal(size=(E, T, 2))
    value, grad = costs.quadratic(qs, tgt, wq, tw * wq)
    d, h = rng.normal(size=qs.shape), 1e-6
    fd = (costs.quadratic(qs + h * d, tgt, wq, tw * wq)[0]
          - costs.quadratic(qs - h * d, tgt, wq, tw * wq)[0]) / (2 * h)
    np.testing.assert_allclose((grad * d).sum(axis=(1, 2)), fd, rtol=1e-8)
