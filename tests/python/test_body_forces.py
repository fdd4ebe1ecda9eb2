"""Cartesian forces and torques on bodies (xfrc, MuJoCo's xfrc_applied) as a step input: the
accelerations MuJoCo computes for the same forces, the equivalence with the generalized force
J^T xfrc, and gradients (state, forces, centres of mass) against central differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import parameter_difference

# a free body and an arm of a hinge, a ball and a slide whose last body sits off its centre of
# mass; no contacts or limits: the smooth dynamics MuJoCo's forward matches exactly
SCENE = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <body pos="0 0 1"><freejoint/><geom type="box" size="0.1 0.2 0.05" pos="0.02 0 0.01"/></body>
  <body pos="1 0 1"><joint type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
    <body pos="0.3 0 0"><joint type="ball"/><geom type="capsule" fromto="0 0 0 0 0 -0.3"
      size="0.03"/>
      <body pos="0 0 -0.3"><joint type="slide" axis="1 0 0"/>
        <geom type="sphere" size="0.05" pos="0.03 0.02 0"/></body></body></body>
</worldbody></mujoco>"""


@pytest.fixture(scope="module")
def scene():
    mj = mujoco.MjModel.from_xml_string(SCENE)
    return mj, phalanx.from_mujoco(mj)


def random_state(mj, rng, E):
    qpos = np.repeat(mj.qpos0[None], E, 0)
    qpos[:, :3] += 0.2 * rng.standard_normal((E, 3))
    quat = rng.standard_normal((E, 4))
    qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    qpos[:, 7] = rng.uniform(-1, 1, E)
    quat = rng.standard_normal((E, 4))
    qpos[:, 8:12] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    qpos[:, 12] = rng.uniform(-0.1, 0.1, E)
    return qpos, rng.standard_normal((E, mj.nv))


def test_accelerations_match_mujoco_xfrc_applied(scene, rng):
    mj, model = scene
    E = 16
    qpos, qvel = random_state(mj, rng, E)
    xfrc = rng.standard_normal((E, mj.nbody, 6))
    q1, v1, status = phalanx.step(model, qpos, qvel, np.zeros((E, 0)), xfrc=xfrc)
    assert not status.any()
    data = mujoco.MjData(mj)
    for e in range(E):
        # MuJoCo's Euler step (damping implicit, as Phalanx's) with the same body forces
        mujoco.mj_resetData(mj, data)
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        data.xfrc_applied[:] = xfrc[e]
        mujoco.mj_step(mj, data)
        np.testing.assert_allclose(v1[e], data.qvel, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(q1[e], data.qpos, rtol=1e-10, atol=1e-10)
    # the same as the generalized force J^T xfrc, which MuJoCo's mj_applyFT computes
    qfrc = np.zeros((E, mj.nv))
    for e in range(E):
        data.qpos[:] = qpos[e]
        mujoco.mj_forward(mj, data)
        qfrc[e] = _xfrc_generalized(mj, data, xfrc[e])
    q2, v2, _ = phalanx.step(model, qpos, qvel, np.zeros((E, 0)), qfrc=qfrc)
    np.testing.assert_allclose(v1, v2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(q1, q2, rtol=1e-12, atol=1e-12)


def _xfrc_generalized(mj, data, xfrc):
    """J^T xfrc at each body's centre of mass, by mj_applyFT"""
    out = np.zeros(mj.nv)
    for b in range(1, mj.nbody):
        mujoco.mj_applyFT(mj, data, xfrc[b, :3], xfrc[b, 3:], data.xipos[b], b, out)
    return out


def test_forces_are_held_over_several_steps(scene, rng):
    # nstep steps with xfrc held equal as many single steps (the generalized force follows the
    # configuration), and a non-finite force stops the environment with STATUS_NAN_CTRL alone
    mj, model = scene
    qpos, qvel = random_state(mj, rng, 3)
    xfrc = rng.standard_normal((3, mj.nbody, 6))
    qa, va, _ = phalanx.step(model, qpos, qvel, np.zeros((3, 0)), xfrc=xfrc, nstep=5)
    qb, vb = qpos, qvel
    for _ in range(5):
        qb, vb, _ = phalanx.step(model, qb, vb, np.zeros((3, 0)), xfrc=xfrc)
    np.testing.assert_array_equal(qa, qb)
    np.testing.assert_array_equal(va, vb)
    xfrc[1, 2, 4] = np.nan
    q, _, status = phalanx.step(model, qpos, qvel, np.zeros((3, 0)), xfrc=xfrc)
    assert list(status) == [0, phalanx.STATUS_NAN_CTRL, 0]
    np.testing.assert_array_equal(q[1], qpos[1])
    with pytest.raises(ValueError, match="xfrc"):
        phalanx.step(model, qpos, qvel, np.zeros((3, 0)), xfrc=xfrc[:, :3])


def test_gradients_match_central_differences(scene, rng):
    mj, model = scene
    E = 2
    qpos, qvel = random_state(mj, rng, E)
    xfrc = rng.standard_normal((E, mj.nbody, 6))
    u = np.zeros((E, 0))
    wq, wv = rng.standard_normal((E, mj.nq)), rng.standard_normal((E, mj.nv))
    g = phalanx.step_vjp(model, qpos, qvel, u, wq, wv, xfrc=xfrc)
    assert g["xfrc"].shape == (E, mj.nbody, 6)

    def loss(q=qpos, v=qvel, x=xfrc):
        q1, v1, _ = phalanx.step(model, q, v, u, xfrc=x)
        return float((wq * q1).sum() + (wv * v1).sum())

    h = 1e-6
    for name, x0 in [("xfrc", xfrc), ("qvel", qvel), ("qpos", qpos)]:
        d = rng.standard_normal(x0.shape)
        if name == "qpos":
            d[:, 3:7] = d[:, 8:12] = 0  # quaternions: their tangents are qvel's business
        key = {"xfrc": "x", "qvel": "v", "qpos": "q"}[name]
        fd = (loss(**{key: x0 + h * d}) - loss(**{key: x0 - h * d})) / (2 * h)
        assert float((g[name] * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-9), name
    # the centres of mass move the forces' points of application
    p0 = np.array(model.body_ipos)
    d = rng.standard_normal(p0.shape)
    d[0] = 0
    fd = parameter_difference(model, "body_ipos", lambda: loss(), d)
    assert float((g["body_ipos"].sum(0) * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_the_simulator_steps_with_added_forces(scene, rng):
    # sim.step(qfrc=, xfrc=) equals phalanx.step with the same forces, in place
    mj, model = scene
    qpos, qvel = random_state(mj, rng, 3)
    qfrc = rng.standard_normal((3, mj.nv))
    xfrc = rng.standard_normal((3, mj.nbody, 6))
    sim = phalanx.Simulator(model, num_envs=3)
    sim.qpos, sim.qvel = qpos, qvel
    sim.step(nstep=4, qfrc=qfrc, xfrc=xfrc)
    q, v, status = phalanx.step(model, qpos, qvel, np.zeros((3, 0)), nstep=4, qfrc=qfrc,
                                xfrc=xfrc)
    assert not status.any()
    np.testing.assert_array_equal(sim.qpos, q)
    np.testing.assert_array_equal(sim.qvel, v)
    np.testing.assert_allclose(sim.time, 4 * mj.opt.timestep)
