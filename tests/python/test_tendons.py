"""Fixed tendons (linear combinations of hinge and slide coordinates): springs with MuJoCo's dead
band, dampers and actuators on tendons against MuJoCo, tendon limits as one-sided rows, and
gradients (state, controls, tendon stiffness, damping and spring lengths) against central
differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import rollout_gradient_pair

ARM = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <body pos="0 0 1"><joint name="a" type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
    <body pos="0.3 0 0"><joint name="b" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <body pos="0.3 0 0"><joint name="c" type="slide" axis="1 0 0"/>
        <geom type="box" size="0.05 0.05 0.05"/></body></body></body>
</worldbody><tendon>
  <fixed name="spring" stiffness="8" damping="0.3" springlength="-0.1 0.2">
    <joint joint="a" coef="1"/><joint joint="b" coef="-0.5"/></fixed>
  <fixed name="drive"><joint joint="b" coef="0.7"/><joint joint="c" coef="2"/></fixed>
  <fixed name="stop" limited="true" range="-0.4 0.4">
    <joint joint="a" coef="0.5"/><joint joint="c" coef="1"/></fixed>
</tendon><actuator>
  <motor name="pull" tendon="drive" gear="2" ctrlrange="-1 1"/>
  <position name="servo" tendon="spring" kp="5" kv="0.5" ctrlrange="-1 1"/>
  <motor name="press" tendon="stop" gear="10" ctrlrange="-5 5"/>
</actuator></mujoco>"""


@pytest.fixture
def arm():
    mj = mujoco.MjModel.from_xml_string(ARM)
    return mj, phalanx.from_mujoco(mj)


def tendon_length(model, qpos, t):
    adr, num = model.tendon_adr[t], model.tendon_num[t]
    joints = model.wrap_objid[adr:adr + num]
    return qpos[..., model.jnt_qposadr[joints]] @ model.wrap_prm[adr:adr + num]


def test_lengths_and_accelerations_match_mujoco(arm, rng):
    # without constraint rows (MuJoCo's limits disabled for the reference), spring forces on both
    # sides of the dead band and inside it, the damper and the actuators through the tendons
    mj, model = arm
    mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
    E = 64
    qpos = rng.uniform(-0.6, 0.6, (E, model.nq))
    qvel = rng.uniform(-2, 2, (E, model.nv))
    ctrl = rng.uniform(-1.2, 1.2, (E, model.nu))
    data = mujoco.MjData(mj)
    ref, lengths, bands = [], [], set()
    for q, v, u in zip(qpos, qvel, ctrl):
        data.qpos[:], data.qvel[:], data.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, data)
        ref.append(data.qacc.copy())
        lengths.append(data.ten_length.copy())
        lo, hi = mj.tendon_lengthspring[0]
        bands.add(int(np.sign(data.ten_length[0] - hi) if data.ten_length[0] > hi else
                      -1 if data.ten_length[0] < lo else 0))
    assert bands == {-1, 0, 1}
    for t in range(model.ntendon):
        np.testing.assert_allclose(tendon_length(model, qpos, t), np.array(lengths)[:, t],
                                   rtol=0, atol=1e-14)
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl)
    ref = np.array(ref)
    np.testing.assert_allclose(qacc, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


def test_a_tendon_limit_stops_the_joints_it_spans(arm):
    # the motor pulls the "drive" tendon, which moves the slide through which "stop" is limited,
    # and the arm swings under gravity: the limit rows keep stop's length within its range, but
    # for the one step of travel at an impact (the row acts once the bound is crossed) and the
    # Baumgarte slop at rest, while without limits the same motion carries it far beyond
    mj, model = arm
    T = 1500
    ctrl = np.zeros((1, T, model.nu))
    ctrl[..., 0] = 1.0
    qs, vs, status = phalanx.rollout(model, np.zeros((1, 3)), np.zeros((1, 3)), ctrl)
    assert not status.any()
    stop = tendon_length(model, qs[0], 2)
    lo, hi = model.tendon_range[2]
    assert stop.max() > hi - 0.01 and stop.min() < lo + 0.01  # it reached both limits
    assert stop.max() < hi + 5e-3 and stop.min() > lo - 5e-3
    assert abs(stop[-1] - lo) < 2e-3  # resting on the lower limit
    free = phalanx.from_mujoco(mj)
    free.limit = False
    qf, _, _ = phalanx.rollout(free, np.zeros((1, 3)), np.zeros((1, 3)), ctrl)
    free_stop = tendon_length(free, qf[0], 2)
    assert free_stop.max() > hi + 0.2 or free_stop.min() < lo - 0.2


PARAMS = ["tendon_stiffness", "tendon_damping", "tendon_lengthspring", "actuator_gear"]


@pytest.mark.parametrize("limit", [False, True])
@pytest.mark.parametrize("name", ["qpos", "qvel", "ctrl"] + PARAMS)
def test_gradients_match_central_differences(rng, name, limit):
    # 30 steps in double; with `limit`, the stop tendon starts just beyond its upper limit (within
    # the slop, so no push-out) and is pressed into it without gravity, so that its row is active
    # throughout (no kinks for the differences)
    mj = mujoco.MjModel.from_xml_string(ARM.replace('timestep="0.002"',
                                                    'timestep="0.002" gravity="0 0 0"'))
    model = phalanx.from_mujoco(mj)
    model.limit = limit
    T = 30
    qpos = rng.uniform(-0.2, 0.2, (1, model.nq))
    qvel = rng.uniform(-0.3, 0.3, (1, model.nv))
    ctrl = rng.uniform(-0.5, 0.5, (1, T, model.nu))
    if limit:
        qpos[0, 2] = 0.4005 - 0.5 * qpos[0, 0]  # stop = 0.5 a + c, within the slop beyond 0.4
        qvel[0] = 0
        ctrl[..., 2] = 4.0  # presses the stop tendon into its upper limit
    ad, fd = rollout_gradient_pair(model, qpos, qvel, ctrl, name, rng, PARAMS)
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), name
    if limit:
        qs, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
        assert (tendon_length(model, qs[0], 2) > 0.4).all()  # the row held throughout
