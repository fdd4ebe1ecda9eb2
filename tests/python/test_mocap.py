"""Mocap bodies: children of the world whose poses are inputs (MuJoCo's mocap_pos and
mocap_quat), per environment through the model's parameters of those names. Kinematics and
dynamics against MuJoCo at random poses, a paddle moved between the Simulator's steps pushing a
box, a pendulum held by a connect constraint to a moving mocap body, gradients with respect to
the poses against central differences, and the checks of bad poses."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import taped_gradient_pair

# a mocap "hand" carrying a pendulum on a hinge, and a free ball held to a second mocap body by
# a connect constraint; contacts off (the constraint is hard here, soft in MuJoCo)
HANGING = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <body name="hand" mocap="true" pos="0.1 0 1" quat="0.9 0.1 0.3 0">
    <geom type="box" size="0.05 0.05 0.05"/>
    <body name="pendulum" pos="0 0 -0.1">
      <joint name="swing" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.05 0 -0.3" size="0.02"/></body></body>
  <body name="anchor" mocap="true" pos="0.6 0 1"><geom type="sphere" size="0.02"/></body>
  <body name="ball" pos="0.6 0 0.8"><freejoint/><geom type="sphere" size="0.05"/></body>
</worldbody>
<equality><connect body1="ball" body2="anchor" anchor="0 0 0.2"/></equality>
<actuator><motor joint="swing"/></actuator></mujoco>"""

# a paddle (mocap) on the floor behind a box
PADDLE = """<mujoco><option timestep="0.002"/><worldbody>
  <geom type="plane" size="2 2 0.1"/>
  <body name="paddle" mocap="true" pos="-0.2 0 0.05"><geom type="box" size="0.02 0.2 0.05"/>
  </body>
  <body name="box" pos="0 0 0.05"><freejoint/><geom type="box" size="0.05 0.05 0.05" mass="1"/>
  </body></worldbody></mujoco>"""


@pytest.fixture(scope="module")
def hanging():
    mj = mujoco.MjModel.from_xml_string(HANGING)
    return mj, phalanx.from_mujoco(mj)


def random_poses(rng, E, nmocap):
    """positions near the defaults' and quaternions of random norm (normalised when read)"""
    pos = rng.uniform(-0.3, 0.3, (E, nmocap, 3)) + [0.3, 0, 1]
    quat = rng.standard_normal((E, nmocap, 4)) * rng.uniform(0.5, 2, (E, nmocap, 1))
    return pos, quat


def test_mocap_bodies_convert_with_their_poses(hanging):
    mj, model = hanging
    d = mujoco.MjData(mj)
    assert model.nmocap == mj.nmocap == 2
    np.testing.assert_array_equal(model.body_mocapid, mj.body_mocapid)
    np.testing.assert_array_equal(model.mocap_pos, d.mocap_pos)
    np.testing.assert_array_equal(model.mocap_quat, d.mocap_quat)
    assert "mocap_pos" in phalanx.PARAMETERS and "mocap_quat" in phalanx.PARAMETERS


def test_kinematics_and_dynamics_match_mujoco_at_per_environment_poses(rng):
    # without the connect constraint (hard here, soft in MuJoCo) the dynamics are smooth: the
    # pendulum swings under gravity in the hand's tilted frame, the ball falls
    mj = mujoco.MjModel.from_xml_string(HANGING.split("<equality>")[0] +
                                        HANGING.split("</equality>")[1])
    model = phalanx.from_mujoco(mj)
    E = 16
    pos, quat = random_poses(rng, E, mj.nmocap)
    qpos = mj.qpos0 + rng.uniform(-0.5, 0.5, (E, mj.nq))
    qpos[:, 3:7] /= np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)
    qvel = rng.uniform(-1, 1, (E, mj.nv))
    ctrl = rng.uniform(-1, 1, (E, mj.nu))
    model.set_parameter("mocap_pos", pos)
    model.set_parameter("mocap_quat", quat)
    kin = phalanx.kinematics(model, qpos)
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl)
    d = mujoco.MjData(mj)
    for e in range(E):
        d.qpos[:], d.qvel[:], d.ctrl[:] = qpos[e], qvel[e], ctrl[e]
        d.mocap_pos[:], d.mocap_quat[:] = pos[e], quat[e]
        mujoco.mj_forward(mj, d)
        np.testing.assert_allclose(kin["xpos"][e], d.xpos, rtol=0, atol=1e-14)
        np.testing.assert_allclose(kin["xquat"][e], d.xquat, rtol=0, atol=1e-14)
        np.testing.assert_allclose(qacc[e], d.qacc, rtol=0, atol=1e-12 * np.abs(d.qacc).max())


def test_a_connect_constraint_follows_a_moving_mocap_body(hanging, rng):
    # the anchor moves along an arc at up to 0.625 m/s, then stops. The velocity-level row does
    # not see the anchor's motion (a mocap body has no velocity), so the attachment point lags
    # by at most the anchor's travel per step over the drift correction's rate (erp); after the
    # anchor stops, the drift correction closes the gap (to the swinging ball's few microns)
    mj, _ = hanging
    sim = phalanx.Simulator(phalanx.from_mujoco(mj), num_envs=2)
    model = sim.model
    ball, anchor = model.body_id("ball"), mj.body("anchor").mocapid[0]

    def gap():
        kin = phalanx.kinematics(model, sim.qpos)
        point = kin["xpos"][:, ball] + np.einsum(
            "eij,j->ei", quat_to_mat(kin["xquat"][:, ball]), [0, 0, 0.2])
        return np.linalg.norm(point - sim.mocap_pos[:, anchor], axis=1)

    lags = []
    for t in range(500):
        pos = sim.mocap_pos
        pos[:, anchor] = [0.6 + 0.1 * np.sin(t / 80), 0.1 * (1 - np.cos(t / 80)), 1.0]
        sim.mocap_pos = pos
        sim.step(rng.uniform(-1, 1, (2, mj.nu)))
        lags.append(gap())
    travel, erp = 0.1 / 80, 0.2  # the anchor's move per step; a fifth of a residual per step
    assert np.max(lags[100:]) < 1.1 * travel / erp
    assert np.max(lags[100:]) > 0.3 * travel / erp  # it does lag while moving
    sim.step(np.zeros((2, mj.nu)), nstep=200)
    assert not sim.status.any()
    assert gap().max() < 1e-5


def quat_to_mat(q):
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                     np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                     np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)],
                    -2)


def test_a_paddle_moved_between_steps_pushes_the_box():
    # the paddle advances 0.3 m over 0.6 s (1 mm per step), in contact with the box after
    # 0.13 m: the box moves ahead of it. As with MuJoCo, a mocap body has no velocity, so the
    # contact sees the paddle only through its penetration, which the drift correction (a fifth
    # per step beyond the 1 mm slop) keeps at about travel / erp + slop = 6 mm. A paddle left in
    # place leaves the box at rest.
    mj = mujoco.MjModel.from_xml_string(PADDLE)
    sim = phalanx.Simulator(phalanx.from_mujoco(mj), num_envs=2)
    box = sim.model.body_id("box")
    for t in range(300):
        pos = sim.mocap_pos
        pos[0, 0, 0] = -0.2 + 0.3 * (t + 1) / 300  # environment 1's paddle stays
        sim.mocap_pos = pos
        sim.step()
    assert not (sim.status & phalanx.STATUS_STOP_MASK).any()
    x = phalanx.kinematics(sim.model, sim.qpos)["xpos"][:, box, 0]
    paddle_front = sim.mocap_pos[:, 0, 0] + 0.02
    travel, erp, slop = 1e-3, 0.2, 1e-3
    assert paddle_front[0] - (x[0] - 0.05) < 1.2 * (travel / erp + slop)
    assert x[0] > 0.15  # pushed with the paddle
    assert abs(x[1]) < 1e-6  # at rest


@pytest.mark.parametrize("name", ["mocap_pos", "mocap_quat"])
def test_gradients_with_respect_to_the_poses_match_central_differences(hanging, rng, name):
    # through the pendulum hanging from the hand and the ball held to the anchor, 30 steps
    mj, model = hanging
    E = 2
    qpos = np.tile(mj.qpos0, (E, 1))
    qpos[:, -1] += rng.uniform(-0.3, 0.3, E)
    qvel = rng.uniform(-0.3, 0.3, (E, mj.nv))
    ctrl = rng.uniform(-1, 1, (E, 30, mj.nu))
    ad, fd, g = taped_gradient_pair(model, qpos, qvel, ctrl, name, rng, checkpoint_every=7)
    assert np.abs(g[name]).max() > 1e-3  # the poses move the loss
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-9), name


def test_bad_poses_are_refused(hanging):
    _, model = hanging
    with pytest.raises(ValueError, match="mocap_quat.*zero, expected a quaternion"):
        model.set_parameter("mocap_quat", np.zeros((2, 4)))
    with pytest.raises(ValueError, match="mocap_pos.*finite"):
        model.set_parameter("mocap_pos", np.full((2, 3), np.nan))
    sim = phalanx.Simulator(model, num_envs=3)
    with pytest.raises(ValueError, match=r"mocap_pos must have shape \(2, 3\)"):
        sim.mocap_pos = np.zeros((4, 2, 3))
