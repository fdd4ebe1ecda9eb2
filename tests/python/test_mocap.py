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


# ---- poses per step of a rollout ---------------------------------------------------------------

def pose_tracks(rng, model, E, T):
    """smooth per-step poses about the model's: each body circles (radius up to 5 cm) and turns
    about a random axis (up to 0.4 rad) over T steps, with random quaternion norms"""
    s = np.linspace(0, 1, T)[None, :, None]
    phase = rng.uniform(0, 2 * np.pi, (E, 1, model.nmocap))
    pos = np.repeat(model.mocap_pos[None, None], E, 0).repeat(T, 1).copy()
    pos[..., 0] += 0.05 * s[..., 0][..., None] * np.cos(2 * np.pi * s + phase)
    pos[..., 1] += 0.05 * s[..., 0][..., None] * np.sin(2 * np.pi * s + phase)
    axis = rng.standard_normal((E, 1, model.nmocap, 3))
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)
    half = 0.2 * s[..., None]
    turn = np.concatenate([np.cos(half) + 0 * axis[..., :1], np.sin(half) * axis], -1)
    quat = quat_mul(turn, np.asarray(model.mocap_quat)[None, None])
    return pos, quat * rng.uniform(0.5, 2, (E, 1, model.nmocap, 1))


def quat_mul(a, b):
    w1, x1, y1, z1 = np.moveaxis(a, -1, 0)
    w2, x2, y2, z2 = np.moveaxis(b, -1, 0)
    return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2],
                    -1)


def test_a_rollout_moves_the_mocap_bodies_step_by_step_as_mujoco_does(rng):
    # the pendulum swings from the moving, turning hand; MuJoCo steps with data.mocap_pos and
    # mocap_quat set before each mj_step. The same rollout as single steps with the parameters
    # set between them gives the same bits.
    mj = mujoco.MjModel.from_xml_string(HANGING.split("<equality>")[0] +
                                        HANGING.split("</equality>")[1])
    model = phalanx.from_mujoco(mj)
    E, T = 3, 400
    pos, quat = pose_tracks(rng, model, E, T)
    qpos = np.tile(mj.qpos0, (E, 1))
    qpos[:, -1] = rng.uniform(-0.5, 0.5, E)
    qvel = rng.uniform(-0.5, 0.5, (E, mj.nv))
    ctrl = rng.uniform(-0.2, 0.2, (E, T, mj.nu))
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl, mocap_pos=pos, mocap_quat=quat)
    assert not status.any()
    d = mujoco.MjData(mj)
    for e in range(E):
        d.qpos[:], d.qvel[:] = qpos[e], qvel[e]
        for t in range(T):
            d.ctrl[:], d.mocap_pos[:], d.mocap_quat[:] = ctrl[e, t], pos[e, t], quat[e, t]
            mujoco.mj_step(mj, d)
            np.testing.assert_allclose(qs[e, t], d.qpos, rtol=0, atol=1e-10)
            np.testing.assert_allclose(vs[e, t], d.qvel, rtol=0, atol=1e-9)
    hinge = model.jnt_qposadr[model.joint_id("swing")]
    assert np.ptp(qs[:, :, hinge], axis=1).min() > 0.1  # it swings
    sim = phalanx.Simulator(model, num_envs=E)
    sim.reset(qpos=qpos, qvel=qvel)
    sim_qs, _ = sim.rollout(ctrl, mocap_pos=pos, mocap_quat=quat)
    np.testing.assert_array_equal(sim_qs, qs)
    np.testing.assert_array_equal(sim.mocap_pos, np.broadcast_to(model.mocap_pos, (E, 2, 3)))
    q, v = qpos, qvel
    for t in range(T):
        model.set_parameter("mocap_pos", pos[:, t])
        model.set_parameter("mocap_quat", quat[:, t])
        q, v, _ = phalanx.step(model, q, v, ctrl[:, t])
        np.testing.assert_array_equal(q, qs[:, t])


@pytest.mark.parametrize("name", ["mocap_pos", "mocap_quat"])
def test_gradients_of_the_poses_of_each_step_match_central_differences(hanging, rng, name):
    # through the pendulum on the hand and the ball held to the anchor by the connect row
    mj, model = hanging
    E, T = 2, 30
    qpos = np.tile(mj.qpos0, (E, 1))
    qpos[:, -1] += rng.uniform(-0.3, 0.3, E)
    qvel = rng.uniform(-0.3, 0.3, (E, mj.nv))
    ctrl = rng.uniform(-1, 1, (E, T, mj.nu))
    pos, quat = pose_tracks(rng, model, E, T)
    ad, fd, g = taped_gradient_pair(model, qpos, qvel, ctrl, name, rng, checkpoint_every=7,
                                    inputs={"mocap_pos": pos, "mocap_quat": quat})
    assert g[name].shape == (E, T, mj.nmocap, 3 if name == "mocap_pos" else 4)
    assert np.abs(g[name][:, :-1]).max() > 1e-3  # every step's poses move the loss
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-9), name


def test_poses_held_per_step_have_the_gradients_of_the_parameters_summed(hanging, rng):
    # the same rollout with the parameters, and with per-step poses equal to them: the same
    # trajectory, and the per-step gradients summed over the steps are the parameters'; poses
    # given per step for positions only leave the orientations' gradients those of the parameter
    mj, _ = hanging
    model = phalanx.from_mujoco(mj)  # its own: the parameters set here stay with it
    E, T = 2, 40
    qpos = np.tile(mj.qpos0, (E, 1))
    qvel = rng.uniform(-0.3, 0.3, (E, mj.nv))
    ctrl = rng.uniform(-1, 1, (E, T, mj.nu))
    pos, quat = random_poses(rng, E, mj.nmocap)
    model.set_parameter("mocap_pos", pos)
    model.set_parameter("mocap_quat", quat)
    adj_q, adj_v = rng.standard_normal((E, T, mj.nq)), rng.standard_normal((E, T, mj.nv))
    runs = {}
    for given in ((), ("mocap_pos",), ("mocap_pos", "mocap_quat")):
        tracks = {"mocap_pos": np.repeat(pos[:, None], T, 1), "mocap_quat": np.repeat(quat[:, None], T, 1)}
        tape = phalanx.Tape(checkpoint_every=5)
        q, v, _ = phalanx.rollout(model, qpos, qvel, ctrl, tape=tape, **{k: tracks[k] for k in given})
        runs[given] = q, v, tape.backward(adj_q, adj_v)
    ref_q, ref_v, ref = runs[()]
    for given, (q, v, g) in runs.items():
        np.testing.assert_array_equal(q, ref_q)
        np.testing.assert_array_equal(v, ref_v)
        for name in ("mocap_pos", "mocap_quat"):
            got = g[name].sum(axis=1) if name in given else g[name]
            np.testing.assert_allclose(got, ref[name], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g["ctrl"], ref["ctrl"], rtol=1e-12, atol=1e-14)


def test_bad_poses_per_step_stop_their_environment_only(hanging, rng):
    mj, model = hanging
    E, T = 3, 20
    qpos, qvel = np.tile(mj.qpos0, (E, 1)), np.zeros((E, mj.nv))
    ctrl = np.zeros((E, T, mj.nu))
    pos, quat = pose_tracks(rng, model, E, T)
    good = phalanx.rollout(model, qpos, qvel, ctrl, mocap_pos=pos, mocap_quat=quat)
    pos[1, 5, 0, 2] = np.nan
    quat[2, 9, 1] = 0
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl, mocap_pos=pos, mocap_quat=quat)
    stops = status & phalanx.STATUS_STOP_MASK
    assert list(stops) == [0, phalanx.STATUS_NAN_CTRL, phalanx.STATUS_NAN_CTRL]
    assert status[0] == good[2][0]
    np.testing.assert_array_equal(qs[0], good[0][0])  # the neighbour is untouched
    for e, t in ((1, 5), (2, 9)):  # stopped before the bad step: its state repeats
        np.testing.assert_array_equal(qs[e, :t], good[0][e, :t])
        np.testing.assert_array_equal(qs[e, t:], np.repeat(good[0][e, t - 1][None], T - t, 0))
    with pytest.raises(ValueError, match="mocap_pos"):
        phalanx.rollout(model, qpos, qvel, ctrl, mocap_pos=pos[:, :-1])
    with pytest.raises(ValueError, match="mocap_quat"):
        phalanx.rollout(model, qpos, qvel, ctrl, mocap_quat=quat[..., :3])


def short_run(rng, mj, model, E=2, T=12):
    """(qpos, qvel, ctrl, mocap_pos, mocap_quat) of E rollouts of T steps from rest poses"""
    qpos = np.tile(mj.qpos0, (E, 1))
    qvel = rng.uniform(-0.3, 0.3, (E, mj.nv))
    ctrl = rng.uniform(-1, 1, (E, T, mj.nu))
    return (qpos, qvel, ctrl, *pose_tracks(rng, model, E, T))


def test_torch_rollout_takes_the_poses_per_step_with_their_gradients(hanging, rng):
    # phalanx.torch's rollout: the same trajectory as phalanx.rollout, gradients of the per-step
    # poses as Tape.backward's, and torch.autograd.gradcheck in double on a short horizon
    import torch

    import phalanx.torch as pt

    mj, model = hanging
    qpos, qvel, ctrl, pos, quat = short_run(rng, mj, model)
    q0, v0, u = (torch.tensor(x) for x in (qpos, qvel, ctrl))
    p = torch.tensor(pos, requires_grad=True)
    r = torch.tensor(quat, requires_grad=True)
    qs, vs = pt.rollout(model, q0, v0, u, mocap_pos=p, mocap_quat=r, checkpoint_every=5)
    ref_q, ref_v, _ = phalanx.rollout(model, qpos, qvel, ctrl, mocap_pos=pos, mocap_quat=quat)
    np.testing.assert_array_equal(qs.detach().numpy(), ref_q)
    wq, wv = rng.standard_normal(ref_q.shape), rng.standard_normal(ref_v.shape)
    ((qs * torch.tensor(wq)).sum() + (vs * torch.tensor(wv)).sum()).backward()
    tape = phalanx.Tape(checkpoint_every=5)
    phalanx.rollout(model, qpos, qvel, ctrl, mocap_pos=pos, mocap_quat=quat, tape=tape)
    g = tape.backward(wq, wv)
    np.testing.assert_allclose(p.grad.numpy(), g["mocap_pos"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r.grad.numpy(), g["mocap_quat"], rtol=1e-12, atol=1e-14)
    assert torch.autograd.gradcheck(
        lambda a, b: pt.rollout(model, q0, v0, u, mocap_pos=a, mocap_quat=b)[0][:, -1],
        (p, r), eps=1e-6, atol=1e-7, rtol=1e-6)
    with pytest.raises(ValueError, match="mocap_pos is given per step and in params"):
        pt.rollout(model, q0, v0, u, {"mocap_pos": torch.tensor(model.mocap_pos)}, mocap_pos=p)


def test_jax_rollout_takes_the_poses_per_step_with_their_gradients(hanging, rng):
    # phalanx.jax's rollout: jax.grad of the per-step poses equals Tape.backward's
    import jax
    import jax.numpy as jnp

    import phalanx.jax as pj

    jax.config.update("jax_enable_x64", True)
    mj, model = hanging
    qpos, qvel, ctrl, pos, quat = short_run(rng, mj, model)
    wq = rng.standard_normal(ctrl.shape[:2] + (mj.nq,))

    def loss(p, r):
        qs, _ = pj.rollout(model, qpos, qvel, ctrl, mocap_pos=p, mocap_quat=r,
                           checkpoint_every=5)
        return jnp.sum(qs * wq)

    value, (gp, gr) = jax.value_and_grad(loss, argnums=(0, 1))(jnp.asarray(pos), jnp.asarray(quat))
    tape = phalanx.Tape(checkpoint_every=5)
    qs, _, _ = phalanx.rollout(model, qpos, qvel, ctrl, mocap_pos=pos, mocap_quat=quat, tape=tape)
    g = tape.backward(wq, None)
    assert float(value) == pytest.approx(float((qs * wq).sum()), rel=1e-14)
    np.testing.assert_allclose(np.asarray(gp), g["mocap_pos"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(gr), g["mocap_quat"], rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="mocap_quat is given per step and in params"):
        pj.rollout(model, qpos, qvel, ctrl, {"mocap_quat": model.mocap_quat}, mocap_quat=quat)
