"""Ball joints' limits (MuJoCo's: the rotation angle of the joint's quaternion at most the larger
of its range's two numbers) as one-sided rows of the LCP: the cone holds a thrown rod, the rod
rests on it where MuJoCo's soft limit rests it, and gradients through the row (whose direction
turns with the quaternion) against central differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import rollout_gradient_pair

SLOP = 1e-3  # the limit rows' slop (rad), left uncorrected

ROD = """<mujoco><compiler angle="radian"/><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <body pos="0 0 1"><joint name="ball" type="ball" range="0 0.6" damping="0.2"/>
    <geom type="capsule" fromto="0 0 0 0.4 0 -0.1" size="0.03"/></body>
</worldbody></mujoco>"""


def angle(quat):
    """rotation angles of unit quaternions (..., 4)"""
    return 2 * np.arctan2(np.linalg.norm(quat[..., 1:], axis=-1), np.abs(quat[..., 0]))


@pytest.fixture
def rod():
    mj = mujoco.MjModel.from_xml_string(ROD)
    return mj, phalanx.from_mujoco(mj)


def test_the_cone_holds_a_thrown_rod(rod):
    # thrown sideways and down from the joint's zero: the rod reaches the cone, never leaves it by
    # more than one step of travel at the impact, and comes to rest on it (gravity pulls it
    # beyond), circling down to its lowest point, within the slop; without the limit the rod
    # swings far past
    mj, model = rod
    qpos, qvel = np.array([[1.0, 0, 0, 0]]), np.array([[3.0, 2.0, 4.0]])
    T = 2500
    qs, vs, status = phalanx.rollout(model, qpos, qvel, np.zeros((1, T, 0)))
    assert not status.any()
    theta = angle(qs[0])
    assert theta.max() > 0.6 - 1e-3 and theta.max() < 0.6 + 0.015
    assert theta[-1] == pytest.approx(0.6, abs=2 * SLOP)  # the slop, and gravity's lag
    assert np.abs(vs[0, -1]).max() < 0.01
    # MuJoCo from the same start: resting on the cone about the same axis (its soft limit gives
    # 0.02 rad under the rod's weight)
    data = mujoco.MjData(mj)
    data.qpos[:], data.qvel[:] = qpos[0], qvel[0]
    for _ in range(T):
        mujoco.mj_step(mj, data)
    ref = data.qpos.copy()
    assert 0.6 < angle(ref) < 0.63
    axis = lambda q: np.sign(q[0]) * q[1:] / np.linalg.norm(q[1:])
    assert np.abs(axis(qs[0, -1]) - axis(ref)).max() < 0.02
    free = phalanx.from_mujoco(mj)
    free.limit = False
    qf, _, _ = phalanx.rollout(free, qpos, qvel, np.zeros((1, T, 0)))
    assert angle(qf[0]).max() > 1.2


@pytest.mark.parametrize("name", ["qpos", "qvel", "dof_damping"])
def test_gradients_through_the_cone_match_central_differences(rod, rng, name):
    # 30 steps in double from just beyond the cone (within the slop, so no push-out), gravity
    # pressing the rod into it and a small turn about the vertical, so that the row is active
    # throughout and its direction turns
    _, model = rod
    half = 0.6005 / 2
    qpos = np.array([[np.cos(half), 0.0, np.sin(half), 0.0]])
    qvel = np.array([[0.0, 0.0, 0.3]]) + 0.01 * rng.standard_normal((1, 3))
    ctrl = np.zeros((1, 30, 0))
    qs, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    theta = angle(qs[0])
    assert (theta > 0.6).all() and (theta < 0.6 + SLOP).all()  # the row held throughout
    axes = qs[0, :, 1:] / np.linalg.norm(qs[0, :, 1:], axis=1, keepdims=True)
    assert np.abs(axes[-1] - axes[0]).max() > 1e-3  # and turned
    ad, fd = rollout_gradient_pair(model, qpos, qvel, ctrl, name, rng, ["dof_damping"])
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), name
