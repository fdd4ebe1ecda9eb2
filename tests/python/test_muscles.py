"""MuJoCo's muscles: the active force-length-velocity gain, the passive bias and the activation
dynamics with their act-dependent time constants, on joints and on fixed and spatial tendons.
Forces and trajectories against MuJoCo, every branch of the curves visited, and gradients of
taped rollouts (state, activations, controls, the nine gain and bias parameters) against central
differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import taped_gradient_pair

# a shoulder-elbow-wrist arm with four muscles: on a hinge (peak force from scale / acc0), on a
# slide with a smoothed activation switch (tausmooth), on a fixed tendon with its own time
# constants and scale, on a spatial tendon through three sites with its own curve shape; and a
# position servo beside them. Limits are off: MuJoCo's soft limits are not Phalanx's hard rows,
# and the ranges are there for the compiler's lengthrange.
ARM = """<mujoco><option timestep="0.002"><flag contact="disable" limit="disable"/></option>
<worldbody>
  <site name="origin" pos="0.05 0 1.05"/>
  <body pos="0 0 1"><joint name="shoulder" axis="0 1 0" range="-90 90" damping="0.05"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/><site name="upper" pos="0.15 0 0.03"/>
    <body pos="0.3 0 0"><joint name="elbow" axis="0 1 0" range="-120 10"/>
      <geom type="capsule" fromto="0 0 0 0.25 0 0" size="0.025"/>
      <site name="fore" pos="0.08 0 0.02"/>
      <body pos="0.25 0 0"><joint name="wrist" type="slide" axis="1 0 0" range="-0.05 0.05"/>
        <geom type="box" size="0.03 0.03 0.03" mass="0.2"/></body></body></body>
</worldbody>
<tendon>
  <fixed name="flexors"><joint joint="shoulder" coef="0.5"/><joint joint="elbow" coef="-0.3"/>
  </fixed>
  <spatial name="biceps"><site site="origin"/><site site="upper"/><site site="fore"/></spatial>
</tendon>
<actuator>
  <muscle name="shoulder" joint="shoulder" gear="0.02"/>
  <muscle name="wrist" joint="wrist" force="30" tausmooth="0.2"/>
  <muscle name="flexors" tendon="flexors" scale="300" timeconst="0.02 0.06"/>
  <muscle name="biceps" tendon="biceps" force="60" lmin="0.4" lmax="1.8" fpmax="1.5"/>
  <position name="servo" joint="elbow" kp="5" kv="0.2"/>
</actuator></mujoco>"""

MUSCLES = slice(0, 4)


@pytest.fixture(scope="module")
def arm():
    mj = mujoco.MjModel.from_xml_string(ARM)
    return mj, phalanx.from_mujoco(mj)


def test_muscles_convert_as_mujoco_compiled_them(arm):
    mj, model = arm
    assert model.na == mj.na == 4
    np.testing.assert_array_equal(model.actuator_gaintype[MUSCLES], mujoco.mjtGain.mjGAIN_MUSCLE)
    np.testing.assert_array_equal(model.actuator_gaintype, mj.actuator_gaintype)
    np.testing.assert_array_equal(model.actuator_biastype, mj.actuator_biastype)
    np.testing.assert_array_equal(model.actuator_dyntype, mj.actuator_dyntype)
    np.testing.assert_array_equal(model.actuator_gainprm, mj.actuator_gainprm[:, :9])
    np.testing.assert_array_equal(model.actuator_biasprm, mj.actuator_biasprm[:, :9])
    np.testing.assert_array_equal(model.actuator_dynprm, mj.actuator_dynprm[:, :3])
    np.testing.assert_array_equal(model.actuator_lengthrange, mj.actuator_lengthrange)
    np.testing.assert_array_equal(model.actuator_acc0, mj.actuator_acc0)
    # what the elements set: force -1 (from scale / acc0) unless given, tausmooth, time constants
    assert model.actuator_gainprm[0, 2] == -1 and model.actuator_gainprm[1, 2] == 30
    assert model.actuator_dynprm[1, 2] == 0.2
    np.testing.assert_array_equal(model.actuator_dynprm[2, :2], [0.02, 0.06])


def normalised_muscle_state(mj, d):
    """each muscle's normalised length and velocity (MuJoCo's curves' arguments) in d"""
    prm = mj.actuator_gainprm[MUSCLES]
    lr = mj.actuator_lengthrange[MUSCLES]
    L0 = (lr[:, 1] - lr[:, 0]) / (prm[:, 1] - prm[:, 0])
    L = prm[:, 0] + (d.actuator_length[MUSCLES] - lr[:, 0]) / L0
    V = d.actuator_velocity[MUSCLES] / (L0 * prm[:, 6])
    return L, V


def test_forces_match_mujoco_on_every_branch_of_the_curves(arm, rng):
    # forward dynamics at states spread over and beyond the length ranges and over the velocity
    # curve; the samples visit each piece of the gain, bias and velocity curves
    mj, model = arm
    E = 400
    qpos = rng.uniform([-5, -6, -0.15], [8, 6, 0.25], (E, mj.nq))
    qvel = rng.uniform(-30, 30, (E, mj.nv)) * rng.uniform(0, 1, (E, 1)) ** 2
    act = rng.uniform(-0.2, 1.2, (E, mj.na))
    ctrl = rng.uniform(-0.5, 0.5, (E, mj.nu))
    d = mujoco.MjData(mj)
    ref, Ls, Vs = [], [], []
    for q, v, a, u in zip(qpos, qvel, act, ctrl):
        d.qpos[:], d.qvel[:], d.act[:], d.ctrl[:] = q, v, a, u
        mujoco.mj_forward(mj, d)
        ref.append(d.qacc.copy())
        L, V = normalised_muscle_state(mj, d)
        Ls.append(L)
        Vs.append(V)
    ref, Ls, Vs = np.array(ref), np.array(Ls), np.array(Vs)
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl, act=act)
    np.testing.assert_allclose(qacc, ref, rtol=0, atol=1e-10 * np.abs(ref).max())
    # the pieces: length below lmin, the four parabolas, above lmax; velocity below -1, the two
    # parabolas, above fvmax - 1
    lmin, lmax, fvmax = (mj.actuator_gainprm[MUSCLES, k] for k in (4, 5, 8))
    a, b = 0.5 * (lmin + 1), 0.5 * (1 + lmax)
    for lo, hi in ((-np.inf, lmin), (lmin, a), (a, 1), (1, b), (b, lmax), (lmax, np.inf)):
        assert ((Ls > lo) & (Ls < hi)).any(axis=0).sum() >= 2, (lo, hi)
    for lo, hi in ((-np.inf, -1), (-1, 0), (0, fvmax - 1), (fvmax - 1, np.inf)):
        assert ((Vs > lo) & (Vs < hi)).any(), (lo, hi)


def test_trajectories_match_mujoco(arm, rng):
    # activations rise and fall through the switch of their time constants, controls beyond
    # [0, 1] are clamped as MuJoCo clamps them
    mj, model = arm
    E, T = 3, 500
    qpos = mj.qpos0 + rng.uniform(-0.3, 0.3, (E, mj.nq))
    qvel = rng.uniform(-1, 1, (E, mj.nv))
    act = rng.uniform(0, 1, (E, mj.na))
    ctrl = rng.uniform(-0.2, 1.2, (E, T, mj.nu))
    qs, vs, acts, status = phalanx.rollout(model, qpos, qvel, ctrl, act=act)
    assert not status.any()
    d = mujoco.MjData(mj)
    for e in range(E):
        d.qpos[:], d.qvel[:], d.act[:] = qpos[e], qvel[e], act[e]
        for t in range(T):
            d.ctrl[:] = ctrl[e, t]
            mujoco.mj_step(mj, d)
            np.testing.assert_allclose(acts[e, t], d.act, rtol=0, atol=1e-13)
            np.testing.assert_allclose(qs[e, t], d.qpos, rtol=0, atol=1e-10)
            np.testing.assert_allclose(vs[e, t], d.qvel, rtol=0, atol=1e-9)


PARAMS = ["actuator_gainprm", "actuator_biasprm", "actuator_gear"]


@pytest.mark.parametrize("name", ["qpos", "qvel", "act", "ctrl"] + PARAMS)
def test_taped_gradients_match_central_differences(arm, rng, name):
    # a loss on the final state and the activations through 40 steps in double, with controls
    # inside [0, 1], from two states: every muscle shorter than its optimal length in the first
    # and longer in the second (where the passive force acts)
    mj, model = arm
    E = 2
    qpos = np.array([[0.0, 0.0, 0.0], [2.2, -0.5, 0.06]]) + rng.uniform(-0.05, 0.05, (E, mj.nq))
    qvel = rng.uniform(-0.3, 0.3, (E, mj.nv))
    act = rng.uniform(0.2, 0.8, (E, mj.na))
    ctrl = rng.uniform(0.1, 0.9, (E, 40, mj.nu))
    ad, fd, g = taped_gradient_pair(model, qpos, qvel, ctrl, name, rng, act=act)
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-9), name
    if name in ("actuator_gainprm", "actuator_biasprm"):
        # the parameters each curve reads move the loss, the others not: force where it is
        # given, else scale (with acc0); the active curve no fpmax, the passive no lmin, vmax or
        # fvmax
        read = np.zeros((4, 9), bool)
        read[:, [0, 1, 4, 5, 6, 8] if name == "actuator_gainprm" else [0, 1, 5, 7]] = True
        read[:, 2] = model.actuator_gainprm[MUSCLES, 2] > 0
        read[:, 3] = ~read[:, 2]
        moved = np.abs(g[name][:, MUSCLES]).max(axis=0) > 0
        np.testing.assert_array_equal(moved, read)


def test_a_muscle_needs_its_length_range():
    # with the compiler's lengthrange computation off, a muscle keeps an empty range: refused
    xml = ARM.replace("<option", '<compiler><lengthrange mode="none"/></compiler><option')
    with pytest.raises(ValueError, match="actuator_lengthrange.*actuator 0: a muscle needs"):
        phalanx.from_mujoco(mujoco.MjModel.from_xml_string(xml))
