"""MuJoCo's general actuators without activation state (motor, position, velocity, damper and
general with affine gain and bias; joint and jointinparent transmissions; ctrl and force
ranges): forces and trajectories against MuJoCo, gradients against central differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import chained_vjp, parameter_difference

ARM = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <body pos="0 0 1"><joint name="h1" type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
    <body pos="0.3 0 0"><joint name="h2" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <body pos="0.3 0 0"><joint name="s1" type="slide" axis="1 0 0"/>
        <geom type="box" size="0.05 0.05 0.05"/>
        <body pos="0.1 0 0"><joint name="h3" type="hinge" axis="0 0 1"/>
          <geom type="sphere" size="0.05" pos="0.1 0 0"/></body></body></body></body>
</worldbody><actuator>
  <position name="servo" joint="h1" kp="30" kv="2" ctrlrange="-1 1"/>
  <velocity name="vel" joint="h2" kv="3" ctrlrange="-2 2"/>
  <damper name="damp" joint="h3" kv="0.5" ctrlrange="0 1"/>
  <general name="affine" joint="s1" gear="1.5" gaintype="affine" gainprm="2 0.5 -0.3"
    biastype="affine" biasprm="0.1 -1 -0.2" ctrlrange="-1 1" ctrllimited="true"/>
  <motor name="clipped" joint="h2" gear="2" forcerange="-0.5 0.5" ctrlrange="-1 1"/>
  <position name="inparent" jointinparent="h3" kp="5" forcerange="-1 1"/>
</actuator></mujoco>"""


@pytest.fixture(scope="module")
def arm():
    mj = mujoco.MjModel.from_xml_string(ARM)
    return mj, phalanx.from_mujoco(mj)


def mujoco_forward(mj, qpos, qvel, ctrl):
    data = mujoco.MjData(mj)
    qacc, force = [], []
    for q, v, u in zip(qpos, qvel, ctrl):
        data.qpos[:], data.qvel[:], data.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, data)
        qacc.append(data.qacc.copy())
        force.append(data.actuator_force.copy())
    return np.array(qacc), np.array(force)


def test_conversion_keeps_the_gain_and_bias_model(arm):
    mj, model = arm
    np.testing.assert_array_equal(model.actuator_gaintype, mj.actuator_gaintype)
    np.testing.assert_array_equal(model.actuator_biastype, mj.actuator_biastype)
    np.testing.assert_array_equal(model.actuator_gainprm, mj.actuator_gainprm[:, :9])
    np.testing.assert_array_equal(model.actuator_biasprm, mj.actuator_biasprm[:, :9])
    np.testing.assert_array_equal(model.actuator_forcelimited, mj.actuator_forcelimited)
    np.testing.assert_array_equal(model.actuator_forcerange, mj.actuator_forcerange)
    # <position kp=30 kv=2>: gain kp, bias (0, -kp, -kv)
    np.testing.assert_array_equal(model.actuator_biasprm[0, :3], [0, -30, -2])


def test_accelerations_match_mujoco_with_clamped_controls_and_forces(arm, rng):
    # controls beyond ctrlrange and forces beyond forcerange included: the clamps are MuJoCo's
    mj, model = arm
    E = 64
    qpos = rng.uniform(-1, 1, (E, model.nq))
    qvel = rng.uniform(-3, 3, (E, model.nv))
    ctrl = rng.uniform(-2.5, 2.5, (E, model.nu))
    ref_qacc, ref_force = mujoco_forward(mj, qpos, qvel, ctrl)
    clipped = model.actuator_forcelimited.astype(bool)
    lo, hi = model.actuator_forcerange[clipped].T
    assert ((ref_force[:, clipped] <= lo) | (ref_force[:, clipped] >= hi)).any()
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl)
    np.testing.assert_allclose(qacc, ref_qacc, rtol=1e-10, atol=1e-10 * np.abs(ref_qacc).max())


def test_trajectories_match_mujoco(arm, rng):
    # 500 Euler steps of random controls from random states: the servo pulls the arm around
    mj, model = arm
    E, T = 4, 500
    qpos = rng.uniform(-0.5, 0.5, (E, model.nq))
    qvel = rng.uniform(-1, 1, (E, model.nv))
    ctrl = rng.uniform(-1.2, 1.2, (E, T, model.nu))
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    assert not status.any()
    data = mujoco.MjData(mj)
    worst = 0.0
    for e in range(E):
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        for t in range(T):
            data.ctrl[:] = ctrl[e, t]
            mujoco.mj_step(mj, data)
            worst = max(worst, np.abs(qs[e, t] - data.qpos).max(), np.abs(vs[e, t] - data.qvel).max())
    assert worst < 1e-9


PARAMS = ["actuator_gear", "actuator_gainprm", "actuator_biasprm"]


@pytest.mark.parametrize("name", ["qpos", "qvel"] + PARAMS)
def test_gradients_match_central_differences(arm, rng, name):
    # through the servo's and the affine actuator's state-dependent forces, with controls and
    # forces inside their ranges (no clamp kinks); double precision, 30 steps
    mj, model = arm
    model = phalanx.from_mujoco(mj)  # parameters are set below
    qpos = rng.uniform(-0.3, 0.3, (1, model.nq))
    qvel = rng.uniform(-0.5, 0.5, (1, model.nv))
    ctrl = rng.uniform(0.1, 0.4, (1, 30, model.nu))
    wq, wv = rng.standard_normal((1, model.nq)), rng.standard_normal((1, model.nv))
    grads = chained_vjp(model, qpos, qvel, ctrl, wq, wv, PARAMS)

    def loss(**kw):
        args = {"qpos": qpos, "qvel": qvel}
        args.update({k: v for k, v in kw.items() if k in args})
        qs, vs, _ = phalanx.rollout(model, args["qpos"], args["qvel"], ctrl)
        return float((wq * qs[:, -1]).sum() + (wv * vs[:, -1]).sum())

    if name in ("qpos", "qvel"):
        x0 = qpos if name == "qpos" else qvel
        d = rng.standard_normal(x0.shape)
        h = 1e-6
        fd = (loss(**{name: x0 + h * d}) - loss(**{name: x0 - h * d})) / (2 * h)
    else:
        p0 = np.asarray(getattr(model, name))
        d = rng.uniform(0.5, 1.5, p0.shape) * np.where(p0 == 0, 0.1, p0)
        fd = parameter_difference(model, name, loss, d, h=1e-5)
    ad = float((grads[name] * d).sum())
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), name
