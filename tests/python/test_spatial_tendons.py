"""Spatial tendons (paths through sites, with pulleys): lengths, spring-dampers and actuators
against MuJoCo, limits as one-sided rows (a ball on a string), friction loss along the path
against its analytic motion, and gradients (state, controls, tendon stiffness, damping and spring
lengths, through the limit rows too) against central differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import chained_vjp, rollout_gradient_pair

# an arm (hinge, then ball) and a free box; "cable" runs from the world through the arm to the
# box, "pulley" has two branches, the second counting half
ARM = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <site name="anchor" pos="0 0 1.5"/><site name="anchor2" pos="0.3 0.2 1.6"/>
  <body pos="0 0 1"><joint name="a" type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/><site name="s1" pos="0.15 0 0.05"/>
    <body pos="0.3 0 0"><joint name="b" type="ball"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <site name="s2" pos="0.2 0.03 0"/><site name="s3" pos="0.3 0 -0.02"/></body></body>
  <body pos="0.5 0.3 0.5"><freejoint/><geom type="box" size="0.05 0.06 0.07"/>
    <site name="s4" pos="0.05 0 0.07"/><site name="s5" pos="-0.05 0.02 0.07"/></body>
</worldbody><tendon>
  <spatial name="cable" stiffness="40" damping="0.7" springlength="1.3 1.5">
    <site site="anchor"/><site site="s1"/><site site="s2"/><site site="s4"/></spatial>
  <spatial name="pulley" stiffness="15" damping="0.2" limited="true" range="0 1.9">
    <site site="anchor2"/><site site="s3"/><pulley divisor="2"/>
    <site site="anchor2"/><site site="s5"/></spatial>
</tendon><actuator>
  <motor name="pull" tendon="cable" gear="2" ctrlrange="-1 1"/>
  <position name="servo" tendon="pulley" kp="5" kv="0.5" ctrlrange="0 2"/>
</actuator></mujoco>"""


@pytest.fixture
def arm():
    mj = mujoco.MjModel.from_xml_string(ARM)
    return mj, phalanx.from_mujoco(mj)


def random_states(mj, rng, E):
    qpos = np.tile(mj.qpos0, (E, 1)) + rng.uniform(-0.4, 0.4, (E, mj.nq))
    return qpos, rng.uniform(-2, 2, (E, mj.nv)), rng.uniform(-1.2, 2.2, (E, mj.nu))


def test_the_path_converts_as_mujoco_compiled_it(arm):
    mj, model = arm
    assert model.ntendon == 2
    np.testing.assert_array_equal(model.tendon_type, [1, 1])
    np.testing.assert_array_equal(model.wrap_type, mj.wrap_type)
    np.testing.assert_array_equal(model.wrap_objid, mj.wrap_objid)
    np.testing.assert_array_equal(model.wrap_prm, mj.wrap_prm)
    np.testing.assert_allclose(model.tendon_length0, mj.tendon_length0, rtol=0, atol=0)


def test_lengths_and_accelerations_match_mujoco(arm, rng):
    # without constraint rows (MuJoCo's limits disabled for the reference): the spring on both
    # sides of its dead band and inside it, dampers, a motor and a servo on the tendons; the
    # accelerations carry the tendons' rows J (qfrc = J^T f)
    mj, model = arm
    mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
    model.limit = False
    qpos, qvel, ctrl = random_states(mj, rng, 64)
    data = mujoco.MjData(mj)
    ref, lengths = [], []
    for q, v, u in zip(qpos, qvel, ctrl):
        data.qpos[:], data.qvel[:], data.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, data)
        ref.append(data.qacc.copy())
        lengths.append(data.ten_length.copy())
    lengths, ref = np.array(lengths), np.array(ref)
    lo, hi = mj.tendon_lengthspring[0]
    assert (lengths[:, 0] < lo).any() and (lengths[:, 0] > hi).any()
    assert ((lengths[:, 0] > lo) & (lengths[:, 0] < hi)).any()
    np.testing.assert_allclose(phalanx.kinematics(model, qpos)["ten_length"], lengths, rtol=0,
                               atol=1e-14)
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl)
    np.testing.assert_allclose(qacc, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


STRING = """<mujoco><option timestep="0.002"/><worldbody>
  <site name="hook" pos="0 0 1"/>
  <body name="ball" pos="0.25 0 1"><freejoint/><geom type="sphere" size="0.03" mass="0.1"/>
    <site name="knot"/></body>
</worldbody><tendon>
  <spatial name="string" limited="true" range="0 0.3"><site site="hook"/><site site="knot"/>
  </spatial></tendon></mujoco>"""


def test_a_string_limit_holds_a_falling_ball():
    # the ball falls from 0.25 m beside the hook: the string goes taut at 0.3 m and it swings on
    # it; the limit row keeps the length within the slop of 0.3 (an impact crosses it for one
    # step), where without the limit the ball falls away
    model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(STRING))
    T = 1000
    q0 = np.array([[0.25, 0, 1, 1, 0, 0, 0]])
    qs, vs, status = phalanx.rollout(model, q0, np.zeros((1, 6)), np.zeros((1, T, 0)))
    assert not status.any()
    length = np.linalg.norm(qs[0, :, :3] - [0, 0, 1], axis=1)
    assert length.max() < 0.3 + 5e-3
    assert (length > 0.3 - 2e-3).sum() > T // 2  # taut most of the time
    # it swings about the hook: energy is kept but for the impact, so it rises again
    assert qs[0, -400:, 2].max() > 0.8
    model.limit = False
    qf, _, _ = phalanx.rollout(model, q0, np.zeros((1, 6)), np.zeros((1, T, 0)))
    assert np.linalg.norm(qf[0, -1, :3] - [0, 0, 1]) > 1.0


SLIDER = """<mujoco><option timestep="0.001" gravity="0 0 0"><flag contact="disable"/></option>
  <worldbody><site name="post" pos="2 0 0"/>
  <body name="cart"><joint name="x" type="slide" axis="1 0 0"/>
    <geom type="box" size="0.1 0.1 0.1" mass="2"/><site name="hook" pos="0.1 0 0"/></body>
  </worldbody><tendon><spatial name="rope" frictionloss="3"><site site="post"/>
    <site site="hook"/></spatial></tendon>
  <actuator><motor name="pull" tendon="rope" gear="-1"/></actuator></mujoco>"""


@pytest.mark.parametrize("force", [2.0, 7.0])
def test_friction_loss_along_a_rope(force):
    # the rope runs along the slide, so its row is -1 on it: a pull below the friction loss
    # leaves the cart at rest, a larger one accelerates it at (force - loss) / mass
    model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(SLIDER))
    T = 500
    ctrl = np.full((1, T, 1), force)
    qs, vs, status = phalanx.rollout(model, np.zeros((1, 1)), np.zeros((1, 1)), ctrl)
    assert not status.any()
    if force < 3:
        assert np.abs(qs).max() < 1e-12
    else:
        t = model.timestep * np.arange(1, T + 1)
        np.testing.assert_allclose(vs[0, :, 0], (force - 3) / 2 * t, rtol=1e-9, atol=1e-12)


PARAMS = ["tendon_stiffness", "tendon_damping", "tendon_lengthspring", "actuator_gear"]


@pytest.mark.parametrize("limit", [False, True])
@pytest.mark.parametrize("name", ["qpos", "qvel", "ctrl"] + PARAMS)
def test_gradients_match_central_differences(rng, name, limit):
    # 30 steps in double without gravity; with `limit`, the cable starts just below a lower
    # limit (within the slop, no push-out) and its motor pulls it shorter, so that the row stays
    # active throughout (no kinks for the differences)
    xml = ARM.replace('timestep="0.002"', 'timestep="0.002" gravity="0 0 0"')
    mj = mujoco.MjModel.from_xml_string(xml)
    model = phalanx.from_mujoco(mj)
    T = 30
    qpos, qvel, _ = random_states(mj, rng, 1)
    qvel *= 0.2
    ctrl = rng.uniform(-0.5, 0.5, (1, T, model.nu))
    if limit:
        lo = phalanx.kinematics(model, qpos)["ten_length"][0, 0] + 5e-4
        model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(
            xml.replace('name="cable"', f'name="cable" limited="true" range="{lo:.12f} 10"')))
        qvel[:] = 0
        ctrl[..., 0] = -0.9  # the motor pulls the cable shorter, against the limit
    model.limit = limit
    ad, fd = rollout_gradient_pair(model, qpos, qvel, ctrl, name, rng, PARAMS)
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), name
    if limit:
        qs, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
        assert (phalanx.kinematics(model, qs[0])["ten_length"][:, 0] < lo).all()


def test_taped_gradients_and_jacobians_agree_with_the_step_adjoint(arm, rng):
    # the taped rollout's backward pass and the one-step Jacobians (lane passes on the CPU) run
    # the same tendon adjoints as step_vjp
    mj, model = arm
    qpos, qvel, _ = random_states(mj, rng, 3)
    ctrl = rng.uniform(-0.5, 0.5, (3, 8, model.nu))
    wq, wv = rng.standard_normal((3, model.nq)), rng.standard_normal((3, model.nv))
    ref = chained_vjp(model, qpos, qvel, ctrl, wq, wv)
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    adj_q = np.zeros((3, 8, model.nq))
    adj_v = np.zeros((3, 8, model.nv))
    adj_q[:, -1], adj_v[:, -1] = wq, wv
    g = tape.backward(adj_q, adj_v)
    for key in ("qpos", "qvel", "ctrl"):
        np.testing.assert_allclose(g[key], ref[key], rtol=1e-12, atol=1e-12)
    u0 = np.ascontiguousarray(ctrl[:, 0])
    jac = phalanx.step_jacobians(model, qpos, qvel, u0)
    vjp = phalanx.step_vjp(model, qpos, qvel, u0, wq, wv)
    for key, wrt in (("qpos", "dqpos"), ("qvel", "dqvel"), ("ctrl", "dctrl")):
        jt = np.einsum("ei,eij->ej", wq, jac["dqpos_" + wrt]) + np.einsum(
            "ei,eij->ej", wv, jac["dqvel_" + wrt])
        np.testing.assert_allclose(jt, vjp[key], rtol=1e-10, atol=1e-10)
