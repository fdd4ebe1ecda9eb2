"""phalanx.contacts: the contacts detected at a state and the forces the step's constraint solve
applies through them. The forces are held to the step itself: put on the bodies as Cartesian
forces (xfrc) in a step with contacts disabled, they give the contact step's next state."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx

# a box and a capsule with friction (condim 3) and a frictionless sphere (condim 1) on a plane
# (condim 1: a contact takes the larger of its geoms'), sunk a little into it, and a box stacked
# on the first: body-body contacts as well
SCENE = """<mujoco><option timestep="0.002"{flags}/><worldbody>
  <geom type="plane" size="5 5 0.1" condim="1"/>
  <body pos="0 0 0.098"><freejoint/><geom type="box" size="0.2 0.15 0.1" friction="0.8"/>
    <inertial pos="0.02 -0.01 0" mass="2" diaginertia="0.02 0.03 0.04"/></body>
  <body pos="0.03 0.02 0.297"><freejoint/><geom type="box" size="0.1 0.1 0.1" friction="0.5"/>
  </body>
  <body pos="1 0 0.049"><freejoint/><geom type="sphere" size="0.05" condim="1"/></body>
  <body pos="-1 0 0.038" euler="0 90 0"><freejoint/>
    <geom type="capsule" size="0.04" fromto="0 0 -0.2 0 0 0.2" friction="1.2"/></body>
</worldbody></mujoco>"""


@pytest.fixture(scope="module")
def scene():
    mj = mujoco.MjModel.from_xml_string(SCENE.format(flags=""))
    free = mujoco.MjModel.from_xml_string(
        SCENE.format(flags="").replace('timestep="0.002"/>',
                                       'timestep="0.002"><flag contact="disable"/></option>'))
    return mj, phalanx.from_mujoco(mj), phalanx.from_mujoco(free)


def states(mj, rng, E):
    qpos = np.repeat(mj.qpos0[None], E, 0)
    qvel = 0.3 * rng.standard_normal((E, mj.nv))
    qvel[:, 2::6] = -np.abs(qvel[:, 2::6])  # every body moving down into what it rests on
    return qpos, qvel


def as_body_forces(mj, qpos, found):
    """the contact forces as xfrc: force and torque about each body's centre of mass, in
    world"""
    E = qpos.shape[0]
    xfrc = np.zeros((E, mj.nbody, 6))
    data = mujoco.MjData(mj)
    for e in range(E):
        data.qpos[:] = qpos[e]
        mujoco.mj_kinematics(mj, data)
        for i in range(found["count"][e]):
            world = found["frame"][e, i].T @ found["force"][e, i]
            p = found["pos"][e, i]
            for geom, sign in zip(found["geom"][e, i], (-1.0, 1.0)):
                b = mj.geom_bodyid[geom]
                if b == 0:
                    continue
                xfrc[e, b, :3] += sign * world
                xfrc[e, b, 3:] += sign * np.cross(p - data.xipos[b], world)
    return xfrc


def test_contact_forces_reproduce_the_contact_step(scene, rng):
    mj, model, free = scene
    E = 12
    qpos, qvel = states(mj, rng, E)
    ctrl = np.zeros((E, 0))
    found = phalanx.contacts(model, qpos, qvel)
    # every body touches: box-plane 4, box-box, sphere-plane, capsule-plane
    assert np.all(found["count"] >= 7)
    q1, v1, status = phalanx.step(model, qpos, qvel, ctrl)
    assert not np.any(status)
    xfrc = as_body_forces(mj, qpos, found)
    q2, v2, status = phalanx.step(free, qpos, qvel, ctrl, xfrc=xfrc)
    assert not np.any(status)
    scale = np.abs(v1).max()
    np.testing.assert_allclose(v2, v1, rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(q2, q1, rtol=0, atol=1e-12)
    # without them the step is a different one: the forces carry the contacts
    q3, v3, _ = phalanx.step(free, qpos, qvel, ctrl)
    assert np.abs(v3 - v1).max() > 1e3 * 1e-11 * scale


def test_frames_signs_and_frictionless_rows(scene, rng):
    mj, model, _ = scene
    qpos, qvel = states(mj, rng, 4)
    found = phalanx.contacts(model, qpos, qvel)
    plane, sphere = 0, 3  # geom 0, body 3
    for e in range(4):
        n = found["count"][e]
        frames = found["frame"][e, :n]
        np.testing.assert_allclose(frames @ frames.transpose(0, 2, 1),
                                   np.broadcast_to(np.eye(3), frames.shape), atol=1e-12)
        on_plane = found["geom"][e, :n, 0] == plane
        # the normal points from the plane (geom 1) up into the body it holds, which it pushes
        np.testing.assert_allclose(frames[on_plane, 0], [[0, 0, 1]] * on_plane.sum(),
                                   atol=1e-12)
        assert np.all(found["force"][e, :n, 0] >= 0)
        assert np.any(found["force"][e, :n, 0] > 0)
        # the frictionless sphere's contact has one row: no tangential force
        of_sphere = mj.geom_bodyid[found["geom"][e, :n, 1]] == sphere
        assert of_sphere.sum() == 1
        np.testing.assert_array_equal(found["force"][e, :n][of_sphere][:, 1:], 0)
        assert np.any(found["force"][e, :n][~of_sphere][:, 1:] != 0)
        # past the contacts found: zeros
        assert not np.any(found["pos"][e, n:]) and not np.any(found["force"][e, n:])


def test_without_contact_there_is_nothing(scene):
    mj, model, _ = scene
    qpos = np.repeat(mj.qpos0[None], 2, 0)
    qpos[:, 2::7] += 1.0  # every body lifted well clear of the plane and of each other
    qpos[:, 9] += 1.0
    found = phalanx.contacts(model, qpos)
    np.testing.assert_array_equal(found["count"], 0)
    assert not np.any(found["force"])


def test_constraint_force_is_the_contact_forces_in_joint_space(scene, rng):
    """qfrc_constraint of a scene with contacts only: the contact forces mapped to the joints
    as MuJoCo maps a force at a point of a body (mj_applyFT)"""
    mj, model, _ = scene
    E = 6
    qpos, qvel = states(mj, rng, E)
    found = phalanx.contacts(model, qpos, qvel)
    data = mujoco.MjData(mj)
    for e in range(E):
        data.qpos[:] = qpos[e]
        mujoco.mj_kinematics(mj, data)
        mujoco.mj_comPos(mj, data)
        expected = np.zeros(mj.nv)
        for i in range(found["count"][e]):
            world = found["frame"][e, i].T @ found["force"][e, i]
            for geom, sign in zip(found["geom"][e, i], (-1.0, 1.0)):
                b = mj.geom_bodyid[geom]
                if b > 0:
                    mujoco.mj_applyFT(mj, data, sign * world, np.zeros(3),
                                      found["pos"][e, i].copy(), b, expected)
        got = found["qfrc_constraint"][e]
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * np.abs(expected).max())
        assert np.abs(expected).max() > 1.0


# hinge and slide joints against their limits, a joint with friction loss and damping, a
# connect constraint closing a loop and a capsule on the plane: every kind of row. The capsule's
# inertia is isotropic, so that its gyroscopic force has no velocity slope: implicitfast's step
# with rows leaves that slope out of its metric, the step without rows keeps it.
LIMITS = """<mujoco><option timestep="0.005" integrator="{integrator}">{flags}</option><worldbody>
  <geom type="plane" size="5 5 0.1"/>
  <body name="a" pos="0 0 1"><joint type="hinge" axis="0 1 0" range="-0.3 0.3" damping="0.4"/>
    <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.05"/>
    <body name="b" pos="0.5 0 0"><joint type="hinge" axis="0 1 0" frictionloss="0.2"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.05"/></body></body>
  <body name="c" pos="1 0 1"><joint type="slide" axis="0 0 1" range="-0.2 0.2"/>
    <geom type="sphere" size="0.05"/></body>
  <body pos="-1 0 0.038" euler="0 90 0"><freejoint/>
    <geom type="capsule" size="0.04" fromto="0 0 -0.2 0 0 0.2"/>
    <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/></body>
</worldbody><equality><connect body1="b" body2="c" anchor="0.5 0 0"/></equality>
</mujoco>"""


@pytest.mark.parametrize("integrator", ["Euler", "implicitfast"])
def test_constraint_force_reproduces_the_constrained_step(integrator, rng):
    """added as qfrc to a step with every constraint disabled, qfrc_constraint gives the
    constrained step's next state: it is the whole of the rows' force, for either
    integrator's metric"""
    mj = mujoco.MjModel.from_xml_string(LIMITS.format(integrator=integrator, flags=""))
    free = mujoco.MjModel.from_xml_string(
        LIMITS.format(integrator=integrator, flags='<flag constraint="disable"/>'))
    model, unconstrained = phalanx.from_mujoco(mj), phalanx.from_mujoco(free)
    E = 8
    qpos = np.repeat(mj.qpos0[None], E, 0)
    qpos[:, 0] = rng.uniform(0.25, 0.35, E) * rng.choice([-1, 1], E)  # at or past the limit
    qpos[:, 2] = rng.uniform(0.15, 0.25, E)
    qvel = rng.standard_normal((E, mj.nv))
    qvel[:, 5] = -np.abs(qvel[:, 5])  # the capsule moving down into the plane
    ctrl = np.zeros((E, 0))
    found = phalanx.contacts(model, qpos, qvel)
    force = found["qfrc_constraint"]
    q1, v1, status = phalanx.step(model, qpos, qvel, ctrl)
    assert not np.any(status)
    q2, v2, status = phalanx.step(unconstrained, qpos, qvel, ctrl, qfrc=force)
    assert not np.any(status)
    scale = np.abs(v1).max()
    np.testing.assert_allclose(v2, v1, rtol=0, atol=1e-11 * scale)
    np.testing.assert_allclose(q2, q1, rtol=0, atol=1e-12)
    # every kind of row pushed: the limits, the friction loss, the connect and the contact
    assert np.all(np.abs(force[:, [0, 1, 2]]) > 1e-3) and np.all(np.abs(force[:, 5]) > 1e-3)
    q3, v3, _ = phalanx.step(unconstrained, qpos, qvel, ctrl)
    assert np.abs(v3 - v1).max() > 1e3 * 1e-11 * scale


def test_constraint_force_is_reported_for_one_step_only(scene):
    from phalanx import _phalanx

    mj, model, _ = scene
    qpos = mj.qpos0[None].copy()
    with pytest.raises(ValueError, match="one step"):
        _phalanx.step(model, qpos, np.zeros((1, mj.nv)), np.zeros((1, 0)), 2,
                      constraint_force=True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_detection_alone_finds_the_steps_contacts(scene, rng, dtype):
    """contacts(forces=False), the narrowphase without a step, finds the contacts the step's
    own detection finds, bit for bit, and MuJoCo's count (mj_collision) at the same states"""
    mj, model, _ = scene
    qpos, qvel = states(mj, rng, 6)
    qpos[:, 2::7] += rng.uniform(-0.02, 0.05, (6, 4))  # some bodies lifted clear, some sunk
    stepped = phalanx.contacts(model, qpos, qvel, dtype=dtype)
    alone = phalanx.contacts(model, qpos, forces=False, dtype=dtype)
    assert not np.all(alone["count"] == alone["count"][0])  # the states differ in contacts
    np.testing.assert_array_equal(alone["overflow"], 0)
    for key in ("count", "pos", "frame", "dist", "geom"):
        np.testing.assert_array_equal(alone[key], stepped[key], err_msg=key)
    data = mujoco.MjData(mj)
    for e in range(6):
        data.qpos[:] = qpos[e]
        mujoco.mj_forward(mj, data)
        assert alone["count"][e] == data.ncon
