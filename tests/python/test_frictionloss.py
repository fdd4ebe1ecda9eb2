"""Dry friction on dofs (MuJoCo's frictionloss) as hard boxed rows of the LCP: a joint stays put
under a smaller torque and accelerates at (tau - frictionloss) / I under a larger one, and the
gradients through the rows match central differences in both regimes."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import chained_vjp

# a rod on a hinge about z (no gravity torque) and a block on a slide, each with friction loss
# and a motor; inertias follow from the geoms
WHEEL = """<mujoco><option timestep="0.002" gravity="0 0 -9.81"><flag contact="disable"/></option>
<worldbody>
  <body><joint name="hinge" type="hinge" axis="0 0 1" frictionloss="0.3"/>
    <geom type="capsule" fromto="-0.2 0 0 0.2 0 0" size="0.03" mass="2"/></body>
  <body pos="1 0 0"><joint name="slide" type="slide" axis="1 0 0" frictionloss="1.5"/>
    <geom type="box" size="0.1 0.1 0.1" mass="3"/></body>
</worldbody><actuator>
  <motor joint="hinge" ctrlrange="-10 10"/><motor joint="slide" ctrlrange="-10 10"/>
</actuator></mujoco>"""


@pytest.fixture(scope="module")
def wheel():
    mj = mujoco.MjModel.from_xml_string(WHEEL)
    # MuJoCo's diagonal inertia at qpos0; the dofs do not couple and neither inertia depends on q
    return mj, phalanx.from_mujoco(mj), mj.dof_M0.copy()


def test_conversion_keeps_the_friction_loss(wheel):
    mj, model, _ = wheel
    np.testing.assert_array_equal(model.dof_frictionloss, mj.dof_frictionloss)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sticks_below_and_slides_above_the_friction_loss(wheel, dtype):
    mj, model, inertia = wheel
    loss = model.dof_frictionloss
    T = 200
    rtol = 1e-9 if dtype == np.float64 else 1e-4
    for scale in (0.6, 0.99, 1.5, 3.0):
        tau = scale * loss  # both signs below: the friction opposes the motion either way
        for sign in (1, -1):
            ctrl = np.repeat((sign * tau)[None, None], T, axis=1)
            qs, vs, status = phalanx.rollout(model, np.zeros((1, 2)), np.zeros((1, 2)), ctrl,
                                             dtype=dtype)
            assert not status.any()
            expect_acc = np.where(tau > loss, sign * (tau - loss) / inertia, 0.0)
            expect_v = expect_acc * model.timestep * np.arange(1, T + 1)[:, None]
            np.testing.assert_allclose(vs[0], expect_v, rtol=rtol, atol=rtol * 1e-3)


def test_friction_loss_opposes_an_initial_velocity_until_it_stops(wheel):
    # coasting, the impulse -loss dt per step takes v0 I / loss seconds to stop the dof, and then
    # it stays stopped
    mj, model, inertia = wheel
    v0 = np.array([[0.8, -0.5]])
    T = 1500
    qs, vs, _ = phalanx.rollout(model, np.zeros((1, 2)), v0, np.zeros((1, T, 2)),
                                dtype=np.float64)
    dt = model.timestep
    decel = model.dof_frictionloss / inertia
    t = dt * np.arange(1, T + 1)[:, None]
    expect = np.sign(v0) * np.maximum(np.abs(v0) - decel * t, 0.0)
    np.testing.assert_allclose(vs[0], expect, atol=1e-12)


@pytest.mark.parametrize("regime", ["stuck", "sliding"])
def test_gradients_through_the_rows_match_central_differences(wheel, rng, regime):
    # stuck: the rows hold the dofs (interior impulses), so the controls do not move them; sliding:
    # the rows are at their bounds, and the controls act as without friction
    mj, model, _ = wheel
    T = 40
    scale = 0.5 if regime == "stuck" else 2.0
    ctrl = scale * model.dof_frictionloss * rng.uniform(0.8, 1.0, (1, T, 2))
    qpos = rng.uniform(-0.3, 0.3, (1, 2))
    qvel = np.zeros((1, 2)) if regime == "stuck" else np.array([[0.5, 0.5]])
    gctrl = check_gradients(model, qpos, qvel, ctrl, rng)
    if regime == "stuck":
        np.testing.assert_allclose(gctrl, 0.0, atol=1e-12)


def check_gradients(model, qpos, qvel, ctrl, rng) -> np.ndarray:
    """chained_vjp's gradients of a random linear loss of the final state against central
    differences along random directions; returns the control gradient"""
    wq, wv = rng.standard_normal((1, model.nq)), rng.standard_normal((1, model.nv))
    g = chained_vjp(model, qpos, qvel, ctrl, wq, wv)

    def loss(q, v, u):
        qs, vs, _ = phalanx.rollout(model, q, v, u)
        return float((wq * qs[:, -1]).sum() + (wv * vs[:, -1]).sum())

    h = 1e-7
    for x, name in [(qpos, "qpos"), (qvel, "qvel"), (ctrl, "ctrl")]:
        d = rng.standard_normal(x.shape)
        key = {"qpos": "q", "qvel": "v", "ctrl": "u"}[name]

        def f(y, key=key):
            return loss(**{"q": qpos, "v": qvel, "u": ctrl, key: y})

        fd = (f(x + h * d) - f(x - h * d)) / (2 * h)
        assert float((g[name] * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-8), name
    return g["ctrl"]


# friction loss on a fixed tendon: L = 2 hinge - 0.5 slide; its row resists the motion along the
# tendon's coefficients and leaves the orthogonal combination free
TENDON = WHEEL.replace(' frictionloss="0.3"', "").replace(' frictionloss="1.5"', "").replace(
    "</worldbody>", """</worldbody><tendon><fixed name="t" frictionloss="0.8">
  <joint joint="hinge" coef="2"/><joint joint="slide" coef="-0.5"/></fixed></tendon>""")


def test_tendon_friction_loss_holds_and_slips_along_the_tendon():
    mj = mujoco.MjModel.from_xml_string(TENDON)
    model = phalanx.from_mujoco(mj)
    np.testing.assert_array_equal(model.tendon_frictionloss, [0.8])
    inertia = mj.dof_M0.copy()
    c = np.array([2.0, -0.5])
    # a generalized force tau: the tendon's row takes the impulse f (|f| <= loss dt) that stops
    # the motion along c when it can; the motion starts from rest, so after one step
    # qvel = dt M^-1 (tau + c f / dt), with c . qvel = 0 if |c M^-1 tau| <= loss |c M^-1 c|
    minv = 1 / inertia
    for tau in (np.array([0.3, 0.2]), np.array([1.5, -1.0]), np.array([-4.0, 2.0])):
        force_along = c @ (minv * tau) / (c @ (minv * c))  # the friction force that would stick
        friction = -np.clip(force_along, -0.8, 0.8)
        expect_acc = minv * (tau + c * friction)
        T = 100
        ctrl = np.repeat(tau[None, None], T, axis=1)
        qs, vs, status = phalanx.rollout(model, np.zeros((1, 2)), np.zeros((1, 2)), ctrl)
        assert not status.any()
        np.testing.assert_allclose(vs[0, -1], expect_acc * T * model.timestep, rtol=1e-9,
                                   atol=1e-12)
        stuck = abs(force_along) <= 0.8
        assert (abs(c @ vs[0, -1]) < 1e-12) == stuck


@pytest.mark.parametrize("regime", ["stuck", "sliding"])
def test_gradients_through_a_tendon_friction_row(rng, regime):
    model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(TENDON))
    T = 40
    tau = np.array([0.3, 0.2]) if regime == "stuck" else np.array([-4.0, 2.0])
    ctrl = tau * rng.uniform(0.9, 1.0, (1, T, 2))
    qvel = np.zeros((1, 2)) if regime == "stuck" else np.array([[-0.5, 0.2]])
    gctrl = check_gradients(model, rng.uniform(-0.3, 0.3, (1, 2)), qvel, ctrl, rng)
    if regime == "stuck":
        # the stuck row absorbs a generalized force along the tendon's coefficients c (its impulse
        # changes, the motion does not), while other forces move the state
        c = np.array([2.0, -0.5])
        np.testing.assert_allclose(gctrl @ c, 0.0, atol=1e-12)
        assert np.abs(gctrl).max() > 1e-4
