"""The trajectory-optimisation examples of Nimble (Werling et al., RSS 2021): examples/catapult.py
and examples/jump_worm.py, imported from the examples directory and run on a small budget.

Each test checks what the optimisation is for and the physics of its result, not only that it
runs. Measured on the development machine (2 shared cores): the catapult's loss falls from 0.060
to 1.5e-4 in 60 iterations (about 0.2 s), its miss distance from 24.3 cm to 0.19 cm; the worm,
from 4 random starts in 60 iterations (about 4 s), jumps its centre of mass from 0.040 m (lying
flat) to a peak of 1.06 m with its lowest point 0.73 m above the floor.
"""

from __future__ import annotations


import numpy as np
import pytest

import phalanx

from conftest import load_example


@pytest.fixture(scope="module")
def catapult():
    return load_example("catapult")


@pytest.fixture(scope="module")
def jump_worm():
    return load_example("jump_worm")


@pytest.fixture(scope="module")
def catapult_result(catapult):
    return catapult.optimize(60, log=None)  # the example's defaults: target (1.2, 0, 0.35) at 0.3 s


@pytest.fixture(scope="module")
def worm_result(jump_worm):
    return jump_worm.optimize(60, starts=4, seed=0, log=None)


def test_catapult_hits_the_target(catapult, catapult_result, tmp_path):
    r = catapult_result
    b = r["best"]
    # the initial swing (all motors at -1) bats the ball nearly flat: at the target time it is
    # 24 cm from the target (23 cm too low) and lands at t = 0.35 s; the optimised torques must
    # loft it onto the target
    assert r["miss"][0] > 0.2
    assert r["loss"][b] < r["loss"][0] / 100  # measured: / 390
    assert r["miss"][b] < 0.01  # m; measured 0.19 cm
    assert np.all(np.abs(r["ctrl"]) <= 1.0)  # the control range is kept
    # the returned ball path is the one of the reported miss distance
    k = r["target_step"]
    assert np.linalg.norm(r["ball"][k] - r["target"]) == pytest.approx(r["miss"][b], abs=1e-12)
    path = tmp_path / "catapult.png"
    catapult.plot(r, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_catapult_ball_is_thrown_not_carried(catapult, catapult_result):
    # the target is beyond the arm's reach (0.9 m links + the ball's radius from the shoulder),
    # so the ball must fly: over the 50 ms before the target time it is in free flight, with
    # constant horizontal velocity and the vertical acceleration of gravity (semi-implicit
    # Euler integrates a ballistic path exactly: second differences of z are -g dt^2)
    r = catapult_result
    k, dt = r["target_step"], catapult.load_model().timestep
    reach = np.linalg.norm(r["target"][[0, 2]] - catapult.MOUNT)
    assert reach > 3 * catapult.LINK + 0.05
    x, z = r["ball"][k - 25 : k + 1, 0], r["ball"][k - 25 : k + 1, 2]
    np.testing.assert_allclose(np.diff(z, 2) / dt**2, -9.81, rtol=1e-6)
    vx = np.diff(x) / dt
    np.testing.assert_allclose(vx, vx[0], rtol=1e-9)
    assert vx[0] > 3.0  # m/s: thrown forward towards the target
    # the arm is back behind the pedestal's far edge well below the target: it does not follow
    tip = np.array([catapult.arm_points(a)[-1] for a in r["arm"][k - 25 : k + 1]])
    assert np.all(np.linalg.norm(tip - r["ball"][k - 25 : k + 1][:, [0, 2]], axis=1) > 0.3)


def test_jump_worm_jumps(jump_worm, worm_result, tmp_path):
    r = worm_result
    e, b = r["start"], r["best"]
    rest = r["rest_com"]
    assert rest == pytest.approx(0.0395)
    # small random torques barely lift the worm off the floor
    assert r["com_init"].max() < rest + 0.05
    # a centre of mass above 0.6 m cannot be reached by standing up (0.45 m plus a capsule
    # radius for the worm upright on one end): the worm must be in the air; measured 1.06 m
    peak = r["com"].max()
    assert peak > 0.6
    assert peak == pytest.approx(r["peak"][b, e])
    k = int(np.argmax(r["com"]))
    assert jump_worm.clearance(r["qpos"][k]) > 0.2  # m between the floor and the lowest point
    # the peak comes after the motors stopped (the worm coasts up) and before the rollout ends
    assert r["steps"] <= k < len(r["time"]) - 1
    # every start improved on its initial guess
    assert np.all(r["best_peaks"] > r["peak"][0] + 0.1)
    assert np.all(np.abs(r["ctrl"]) <= 1.0)
    path = tmp_path / "jump_worm.png"
    jump_worm.plot(r, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_jump_worm_energy_is_paid_by_the_motors(jump_worm, worm_result):
    # replay the optimised controls: contacts and joint limits can only take energy out, so the
    # worm's mechanical energy (kinetic with armature, plus potential) at every step is at most
    # the motors' work minus what the joint damping dissipated (semi-implicit Euler: the power
    # of a step uses the new velocity); measured: 285 J of the 442 J of motor work are lost
    r = worm_result
    model = jump_worm.load_model()
    ctrl = np.ascontiguousarray(r["ctrl"][None])
    qs, vs, status = phalanx.rollout(model, model.qpos0[None].astype(np.float64),
                                     np.zeros((1, model.nv)), ctrl)
    qs, vs = qs[0], vs[0]
    np.testing.assert_allclose(jump_worm.com_height(qs)[0], r["com"], atol=1e-12)  # deterministic
    M = phalanx.mass_matrix(model, qs)
    mass = model.body_mass.sum()
    g = -model.gravity[2]
    energy = (0.5 * np.einsum("ti,tij,tj->t", vs, M, vs)
              + mass * g * (jump_worm.com_height(qs)[0] - r["rest_com"]))
    dt = model.timestep
    dof = model.jnt_dofadr[model.actuator_trnid]
    force = model.actuator_gear * np.clip(r["ctrl"], -1, 1)
    work = np.cumsum(dt * np.sum(force * vs[:, dof], axis=1))
    damping = np.cumsum(dt * np.sum(model.dof_damping * vs**2, axis=1))
    assert np.all(energy <= work - damping + 0.5)  # J of slack for the integrator
    # and the jump is paid for: the potential energy at the peak came out of that budget
    k = int(np.argmax(r["com"]))
    assert mass * g * (r["com"][k] - r["rest_com"]) < work[k] - damping[k]


def test_jump_worm_com_height(jump_worm):
    # the height the example maximises, analytic in the example, against MuJoCo's centre of
    # mass of the same file, and its gradient dz_com/dq against central differences
    import mujoco

    rng = np.random.default_rng(3)
    q = rng.uniform(-1.5, 1.5, (6, 5))
    z, grad = jump_worm.com_height(q)
    mj = mujoco.MjModel.from_xml_path(str(jump_worm.MODEL))
    data = mujoco.MjData(mj)
    for qi, zi in zip(q, z):
        data.qpos[:] = qi
        mujoco.mj_forward(mj, data)
        assert zi == pytest.approx(data.subtree_com[1][2], abs=1e-12)
    h = 1e-6
    fd = np.stack([(jump_worm.com_height(q + h * d)[0] - jump_worm.com_height(q - h * d)[0])
                   / (2 * h) for d in np.eye(5)], axis=-1)
    np.testing.assert_allclose(grad, fd, atol=1e-9)

