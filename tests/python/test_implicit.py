"""The implicitfast integrator (MuJoCo's): the model file's choice is kept, rollouts follow
mj_step with integrator="implicitfast", taped gradients match central differences, and stiff
dampers that explicit Euler cannot hold at the model's timestep stay stable."""

from __future__ import annotations

import numpy as np
import pytest

import phalanx
from phalanx.testing import assert_close, mujoco_rollout

import mujoco  # noqa: E402

# a branched chain with joint damping, a damped spatial tendon, a damped fixed tendon across
# the branches, position and velocity servos, and a free body on a damped servo cable
XML = """
<mujoco>
  <option timestep="0.002" integrator="implicitfast"><flag contact="disable"/></option>
  <worldbody>
    <site name="anchor" pos="1 0 2"/>
    <body pos="0 0 1">
      <joint name="h1" type="hinge" axis="0 1 0" damping="0.3"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <site name="s1" pos="0.15 0 0.05"/>
      <body pos="0.3 0 0">
        <joint name="h2" type="hinge" axis="0 1 0.3" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
        <site name="s2" pos="0.2 0 0.04"/>
      </body>
      <body pos="0 0.2 0">
        <joint name="sl" type="slide" axis="1 0 0" damping="0.2"/>
        <geom type="sphere" size="0.05"/>
      </body>
    </body>
    <body pos="1 0 1">
      <freejoint/>
      <geom type="box" size="0.2 0.1 0.05" pos="0.03 0.02 0" euler="10 20 30"/>
      <site name="top" pos="0 0 0.05"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="sp" damping="2"><site site="s1"/><site site="s2"/></spatial>
    <fixed name="fx" damping="0.5"><joint joint="h2" coef="1"/><joint joint="sl" coef="-0.5"/></fixed>
    <spatial name="cable"><site site="anchor"/><site site="top"/></spatial>
  </tendon>
  <actuator>
    <position joint="h1" kp="20" kv="3"/>
    <velocity joint="h2" kv="1.5"/>
    <position tendon="cable" kp="200" kv="40" ctrlrange="0.5 1.5"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def pair():
    mj = mujoco.MjModel.from_xml_string(XML)
    return mj, phalanx.from_mujoco(mj)


def random_start(mj, E, rng, speed=1.0):
    qpos = np.tile(mj.qpos0, (E, 1))
    qvel = speed * rng.standard_normal((E, mj.nv))
    lo, hi = mj.actuator_ctrlrange.T
    return qpos, qvel, lo, hi


def test_the_model_files_integrator_is_kept(pair):
    _, model = pair
    assert model.integrator == "implicitfast"
    assert not any("integrator" in entry for entry in model.ignored)
    euler = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(XML.replace("implicitfast", "Euler")))
    assert euler.integrator == "euler"
    implicit = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(XML.replace("implicitfast",
                                                                              "implicit")))
    assert implicit.integrator == "implicitfast"
    assert any('integrator="implicit"' in entry for entry in implicit.ignored)
    with pytest.raises(ValueError, match="integrator must be 'euler' or 'implicitfast'"):
        model.integrator = "rk4"


def test_rollout_follows_mujocos_implicitfast(pair, rng):
    # 300 steps under random controls from random velocities, against mj_step; the Euler step
    # on the same model departs from it
    mj, model = pair
    E, T = 3, 300
    qpos, qvel, lo, hi = random_start(mj, E, rng, speed=2.0)
    ctrl = rng.uniform(lo, hi, (E, T, mj.nu))
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    np.testing.assert_array_equal(status, 0)
    for e in range(E):
        q_ref, v_ref = mujoco_rollout(mj, qpos[e], qvel[e], ctrl[e])
        assert_close(qs[e : e + 1], q_ref[None], 1e-9, f"qpos, env {e}")
        assert_close(vs[e : e + 1], v_ref[None], 1e-9, f"qvel, env {e}")
    model.integrator = "euler"
    try:
        vs_euler = phalanx.rollout(model, qpos, qvel, ctrl)[1]
    finally:
        model.integrator = "implicitfast"
    assert np.abs(vs_euler - vs).max() > 1e-3


def test_taped_gradients_match_central_differences(pair, rng):
    # 60 steps: the gradient of a weighted final state in the controls, the start velocity and
    # the servos' bias parameters (kv among them) against central differences
    mj, model = pair
    E, T = 2, 60
    qpos, qvel, lo, hi = random_start(mj, E, rng)
    ctrl = rng.uniform(lo, hi, (E, T, mj.nu))
    wq, wv = rng.standard_normal((E, mj.nq)), rng.standard_normal((E, mj.nv))
    adj_q, adj_v = np.zeros((E, T, mj.nq)), np.zeros((E, T, mj.nv))
    adj_q[:, -1], adj_v[:, -1] = wq, wv

    def loss(qvel=qvel, ctrl=ctrl):
        qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl)
        return float((qs[:, -1] * wq).sum() + (vs[:, -1] * wv).sum())

    tape = phalanx.Tape(checkpoint_every=16)
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    g = tape.backward(adj_q, adj_v)
    h = 1e-6
    for name, x, grad in (("ctrl", ctrl, g["ctrl"]), ("qvel", qvel, g["qvel"])):
        d = rng.standard_normal(x.shape)
        fd = (loss(**{name: x + h * d}) - loss(**{name: x - h * d})) / (2 * h)
        assert float((grad * d).sum()) == pytest.approx(fd, rel=1e-6), name
    direction = rng.standard_normal((mj.nu, 9))
    fd = phalanx.testing.parameter_difference(model, "actuator_biasprm", loss, direction, h=1e-6)
    assert float((g["actuator_biasprm"].sum(0) * direction).sum()) == pytest.approx(fd, rel=1e-6)
    assert abs(fd) > 1e-6


def test_a_stiff_damper_is_stable_where_euler_diverges():
    # a 0.1 kg ball on a servo with kv = 300 N s/m at h = 2 ms: h kv / m = 6, beyond explicit
    # Euler's bound of 2 for the damper in the actuator's bias. MuJoCo's and Phalanx's
    # implicitfast settle it on the target; Phalanx's Euler step blows up as MuJoCo's does.
    xml = """<mujoco><option timestep="0.002" gravity="0 0 0" integrator="implicitfast"/>
      <worldbody><body><joint name="x" type="slide" axis="1 0 0"/>
      <geom type="sphere" size="0.05" mass="0.1"/></body></worldbody>
      <actuator><position joint="x" kp="3000" kv="300"/></actuator></mujoco>"""
    mj = mujoco.MjModel.from_xml_string(xml)
    model = phalanx.from_mujoco(mj)
    T = 1000  # the slow pole's time constant is kv / kp = 0.1 s
    ctrl = np.full((1, T, 1), 0.2)
    qs, vs, status = phalanx.rollout(model, np.zeros((1, 1)), np.zeros((1, 1)), ctrl)
    q_ref, _ = mujoco_rollout(mj, [0.0], [0.0], ctrl[0])
    assert_close(qs, q_ref[None], 1e-9, "qpos")
    assert qs[0, -1, 0] == pytest.approx(0.2, abs=1e-6)
    model.integrator = "euler"
    qs_euler = phalanx.rollout(model, np.zeros((1, 1)), np.zeros((1, 1)), ctrl)[0]
    assert not np.all(np.abs(qs_euler) < 1.0)
