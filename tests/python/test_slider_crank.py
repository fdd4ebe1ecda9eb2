"""Slider-crank transmissions (MuJoCo's slidercrank): the extension and its row against MuJoCo's
forward dynamics on its slider_crank sample, a rod too short for the crank included, and rollout
gradients against central differences."""

from __future__ import annotations

import pathlib

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import MUJOCO_SAMPLES, rollout_gradient_pair

SAMPLE = MUJOCO_SAMPLES / "slider_crank" / "slider_crank.xml"
pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="libmujoco-samples not installed")


@pytest.fixture
def crank():
    return mujoco.MjModel.from_xml_path(str(SAMPLE)), phalanx.load_model(SAMPLE)


def broken(mj, d, u):
    """whether actuator u's rod is too short for its crank at the state in d (det <= 0)"""
    c, s = mj.actuator_trnid[u]
    a, v = d.site_xmat[s].reshape(3, 3)[:, 2], d.site_xpos[c] - d.site_xpos[s]
    return np.dot(a, v) ** 2 + mj.actuator_cranklength[u] ** 2 - np.dot(v, v) <= 0


def test_the_transmission_converts_as_mujoco_compiled_it(crank):
    mj, model = crank
    np.testing.assert_array_equal(model.actuator_trntype, [2, 2, 2])
    np.testing.assert_array_equal(model.actuator_trnid, mj.actuator_trnid[:, 0])
    np.testing.assert_array_equal(model.actuator_slidersite, mj.actuator_trnid[:, 1])
    np.testing.assert_array_equal(model.actuator_cranklength, mj.actuator_cranklength)


def test_accelerations_match_mujoco(crank, rng):
    # the position servos read the extension (bias -kp L) and push along its row: MuJoCo's qacc
    # without contacts, at qpos0 (where the third crank is broken) and random states, both
    # branches of every actuator met
    mj, model = crank
    mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    model.contact = False
    E = 48
    qpos = np.vstack([mj.qpos0, rng.uniform(-1.5, 1.5, (E - 1, mj.nq))])
    qvel = rng.uniform(-1, 1, (E, mj.nv))
    ctrl = rng.uniform(-0.1, 0.1, (E, mj.nu))
    d = mujoco.MjData(mj)
    ref, branches = [], set()
    for q, v, u in zip(qpos, qvel, ctrl):
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        mujoco.mj_forward(mj, d)
        ref.append(d.qacc.copy())
        branches |= {(i, broken(mj, d, i)) for i in range(mj.nu)}
    assert branches == {(i, b) for i in range(mj.nu) for b in (False, True)}
    ref = np.array(ref)
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl)
    np.testing.assert_allclose(qacc, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


PARAMS = ["actuator_gear", "actuator_gainprm", "actuator_biasprm"]


@pytest.mark.parametrize("name", ["qpos", "qvel", "ctrl"] + PARAMS)
def test_gradients_match_central_differences(crank, rng, name):
    # 20 steps in double without contacts, from a state where every rod reaches its crank
    mj, model = crank
    model.contact = False
    qpos = np.array([[-0.6, -0.23, -1.42]])
    d = mujoco.MjData(mj)
    d.qpos[:] = qpos[0]
    mujoco.mj_forward(mj, d)
    assert not any(broken(mj, d, u) for u in range(mj.nu))
    qvel = rng.uniform(-0.3, 0.3, (1, mj.nv))
    ctrl = rng.uniform(-0.09, 0.09, (1, 20, mj.nu))
    ad, fd = rollout_gradient_pair(model, qpos, qvel, ctrl, name, rng, PARAMS)
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), name


def test_the_sample_steps_with_contacts(crank):
    mj, model = crank
    qs, _, status = phalanx.rollout(model, mj.qpos0[None], np.zeros((1, mj.nv)),
                                    np.full((1, 500, mj.nu), 0.05))
    assert not (status & phalanx.STATUS_STOP_MASK).any()
    assert np.abs(qs[0, -1] - mj.qpos0).max() > 0.01  # the servos moved the cranks
