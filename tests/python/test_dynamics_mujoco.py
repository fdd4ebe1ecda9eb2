"""Smooth dynamics against MuJoCo (the C library through its Python bindings), on MuJoCo's
humanoid, the bundled examples and the models of Gymnasium and the DeepMind Control Suite.

With contacts, joint limits and all other constraints disabled, MuJoCo's pipeline is the
smooth one Phalanx implements:
  qM           = M(q) + diag(armature)                          (mass_matrix)
  qfrc_bias    = c(q, qvel), Coriolis, centrifugal, gravity     (bias_forces)
  qacc         = qM^-1 (qfrc_passive + qfrc_actuator - qfrc_bias) (forward_dynamics)
  qfrc_inverse = qM qacc + qfrc_bias - qfrc_passive              (inverse_dynamics)
and mj_step with the Euler integrator is semi-implicit Euler with implicit joint damping
(phalanx.step / rollout). Where a model asks for RK4, MuJoCo is set to Euler, which the loader
substitutes and lists in model.ignored. Fluid forces are in both (Gymnasium's swimmer; the
corner cases are test_fluid's).

Tolerances are norm-relative per environment, ||phalanx_e - mujoco_e|| <= rtol ||mujoco_e||
(phalanx.testing.assert_close): 1e-10 for the single evaluations in double, where both codes
round differently but solve the same equations; 1e-8 for 200-step trajectories, where those
round-off differences are carried and amplified by the dynamics.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import phalanx
from phalanx.testing import actuator_force, assert_close, random_ctrl, random_state

import mujoco  # noqa: E402

EXAMPLE_MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
HUMANOID = Path("/usr/share/mujoco/model/humanoid/humanoid.xml")


def package_dir(name: str) -> Path | None:
    """where an installed package lives, without importing it"""
    spec = importlib.util.find_spec(name)
    return Path(spec.submodule_search_locations[0]) if spec else None


GYM, DM = package_dir("gymnasium"), package_dir("dm_control")
NENV = 6
MODELS = (
    [pytest.param(HUMANOID, id="humanoid")]
    + [pytest.param(EXAMPLE_MODELS / f"{n}.xml", id=n) for n in ["cartpole", "double_pendulum"]]
    + [pytest.param(GYM and GYM / "envs" / "mujoco" / "assets" / f"{n}.xml", id=f"gym-{n}")
       for n in ["ant", "half_cheetah", "hopper", "walker2d", "humanoid", "swimmer",
                 "inverted_double_pendulum", "reacher"]]
    + [pytest.param(DM and DM / "suite" / f"{n}.xml", id=f"dm-{n}")
       for n in ["cheetah", "walker", "humanoid", "cartpole", "acrobot"]]
)


class Pair:
    """The same file loaded by Phalanx and by MuJoCo, constraints disabled in both."""

    def __init__(self, path: Path | None):
        if path is None or not path.exists():
            pytest.fail(f"{path} is missing")
        self.model = phalanx.load_model(path)
        self.model.contact = self.model.limit = False
        self.mj = mujoco.MjModel.from_xml_path(str(path))
        self.mj.opt.disableflags |= (
            mujoco.mjtDisableBit.mjDSBL_CONTACT
            | mujoco.mjtDisableBit.mjDSBL_LIMIT
            | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
        )
        # what Phalanx does not simulate and its loader lists in model.ignored: RK4 (it
        # substitutes Euler)
        if self.mj.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4:
            self.mj.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
        self.data = mujoco.MjData(self.mj)
        # the comparisons below need the same coordinates in the same order
        assert (self.model.nq, self.model.nv, self.model.nu) == (
            self.mj.nq,
            self.mj.nv,
            self.mj.nu,
        )
        assert self.model.timestep == self.mj.opt.timestep
        np.testing.assert_array_equal(self.model.gravity, self.mj.opt.gravity)

    def forward(self, qpos, qvel, ctrl):
        """mj_forward at one state -> (qM, qfrc_bias, qacc)"""
        d = self.data
        d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, qvel, ctrl
        mujoco.mj_forward(self.mj, d)
        M = np.zeros((self.mj.nv, self.mj.nv))
        if hasattr(d, "qM"):  # MuJoCo 3: mj_fullM(m, dst, qM)
            mujoco.mj_fullM(self.mj, M, d.qM)
        else:  # MuJoCo 4: mj_fullM(m, d, dst)
            mujoco.mj_fullM(self.mj, d, M)
        return M, d.qfrc_bias.copy(), d.qacc.copy()

    def inverse(self, qpos, qvel, qacc):
        """mj_inverse at one state -> qfrc_inverse"""
        d = self.data
        d.qpos[:], d.qvel[:], d.qacc[:] = qpos, qvel, qacc
        mujoco.mj_inverse(self.mj, d)
        return d.qfrc_inverse.copy()

    def rollout(self, qpos, qvel, ctrl, qfrc_applied=None):
        """mj_step through ctrl (T, nu) from one state, with qfrc_applied (nv) held when given
        -> states after each step (T, nq), (T, nv)"""
        d = self.data
        mujoco.mj_resetData(self.mj, d)
        d.qpos[:], d.qvel[:] = qpos, qvel
        if qfrc_applied is not None:
            d.qfrc_applied[:] = qfrc_applied
        qs, vs = [], []
        for u in ctrl:
            d.ctrl[:] = u
            mujoco.mj_step(self.mj, d)
            qs.append(d.qpos.copy())
            vs.append(d.qvel.copy())
        return np.array(qs), np.array(vs)


@pytest.fixture(scope="module", params=MODELS)
def pair(request) -> Pair:
    return Pair(request.param)


@pytest.fixture
def state(pair, rng):
    """random qpos near qpos0, qvel and ctrl (within and beyond ctrlrange) of NENV envs"""
    qpos, qvel = random_state(pair.model, NENV, rng)
    return qpos, qvel, random_ctrl(pair.model, (NENV,), rng)


def test_mass_matrix(pair, state):
    qpos, _, _ = state
    expected = np.array([pair.forward(q, np.zeros(pair.mj.nv), np.zeros(pair.mj.nu))[0]
                         for q in qpos])
    assert_close(phalanx.mass_matrix(pair.model, qpos), expected, 1e-10, "qM")


def test_bias_forces(pair, state):
    qpos, qvel, ctrl = state
    expected = np.array([pair.forward(q, v, u)[1] for q, v, u in zip(qpos, qvel, ctrl)])
    assert_close(phalanx.bias_forces(pair.model, qpos, qvel), expected, 1e-10, "qfrc_bias")


def test_forward_dynamics(pair, state):
    qpos, qvel, ctrl = state
    expected = np.array([pair.forward(q, v, u)[2] for q, v, u in zip(qpos, qvel, ctrl)])
    assert_close(phalanx.forward_dynamics(pair.model, qpos, qvel, ctrl), expected, 1e-10, "qacc")


def test_inverse_dynamics(pair, state, rng):
    qpos, qvel, _ = state
    qacc = 10 * rng.standard_normal((NENV, pair.model.nv))
    expected = np.array([pair.inverse(q, v, a) for q, v, a in zip(qpos, qvel, qacc)])
    actual = phalanx.inverse_dynamics(pair.model, qpos, qvel, qacc)
    assert_close(actual, expected, 1e-10, "qfrc_inverse")


def test_rollout_matches_euler(pair, rng):
    # 200 steps of MuJoCo's default integrator (Euler, implicit damping) under a random control
    # sequence, from random states with small velocities
    T = 200
    qpos, qvel = random_state(pair.model, 3, rng, qvel_scale=0.2)
    ctrl = random_ctrl(pair.model, (3, T), rng)
    qs, vs, status = phalanx.rollout(pair.model, qpos, qvel, ctrl)
    np.testing.assert_array_equal(status, 0)
    for e in range(3):
        q_ref, v_ref = pair.rollout(qpos[e], qvel[e], ctrl[e])
        assert_close(qs[e : e + 1], q_ref[None], 1e-8, f"qpos trajectory, env {e}")
        assert_close(vs[e : e + 1], v_ref[None], 1e-8, f"qvel trajectory, env {e}")


def test_step_with_applied_force_matches_qfrc_applied(pair, rng):
    # phalanx.step's qfrc is MuJoCo's qfrc_applied: 20 steps with a random generalized force
    # held, against mj_step; and a non-finite one is reported as a bad control
    nstep, E = 20, 3
    qpos, qvel = random_state(pair.model, E, rng, qvel_scale=0.2)
    ctrl = random_ctrl(pair.model, (E,), rng)
    qfrc = 5 * rng.standard_normal((E, pair.model.nv))
    qs, vs, status = phalanx.step(pair.model, qpos, qvel, ctrl, nstep=nstep, qfrc=qfrc)
    np.testing.assert_array_equal(status, 0)
    for e in range(E):
        q_ref, v_ref = pair.rollout(qpos[e], qvel[e], np.repeat(ctrl[e][None], nstep, 0), qfrc[e])
        assert_close(qs[e : e + 1], q_ref[-1:], 1e-8, f"qpos, env {e}")
        assert_close(vs[e : e + 1], v_ref[-1:], 1e-8, f"qvel, env {e}")
    # without the force the step differs (the force is not ignored)
    q0, v0, _ = phalanx.step(pair.model, qpos, qvel, ctrl, nstep=nstep)
    assert np.abs(v0 - vs).max() > 1e-3
    qfrc[1, 0] = np.nan
    qs, vs, status = phalanx.step(pair.model, qpos, qvel, ctrl, qfrc=qfrc)
    np.testing.assert_array_equal(status, [0, phalanx.STATUS_NAN_CTRL, 0])
    np.testing.assert_array_equal(qs[1], qpos[1])  # a stopped environment keeps its state
    with pytest.raises(ValueError, match="qfrc must have shape"):
        phalanx.step(pair.model, qpos, qvel, ctrl, qfrc=qfrc[:, :-1])


def test_inverse_of_forward_is_actuation(pair, state):
    # rnea(aba(tau)) == tau: inverse dynamics at the forward-dynamics acceleration returns the
    # actuator force gear * clamp(ctrl), the passive forces cancelling on both sides. Relative
    # to |actuation| + |bias|, the size of the terms that cancel (unactuated dofs have tau = 0).
    qpos, qvel, ctrl = state
    m = pair.model
    tau = phalanx.inverse_dynamics(m, qpos, qvel, phalanx.forward_dynamics(m, qpos, qvel, ctrl))
    expected = actuator_force(m, ctrl)
    scale = np.linalg.norm(expected, axis=1) + np.linalg.norm(
        phalanx.bias_forces(m, qpos, qvel), axis=1
    )
    err = np.linalg.norm(tau - expected, axis=1) / scale
    assert err.max() <= 1e-10, f"rnea(aba(tau)) - tau: relative error {err.max():.3e}"


def test_mass_matrix_is_symmetric_positive_definite(pair, state):
    qpos, _, _ = state
    M = phalanx.mass_matrix(pair.model, qpos)
    np.testing.assert_array_equal(M, M.transpose(0, 2, 1))
    eig = np.linalg.eigvalsh(M)
    assert (eig > 0).all(), f"smallest eigenvalue {eig.min()}"


def test_float32_matches_float64(pair, state, rng):
    # single precision rounds at 6e-8 relative; the tolerances allow for the depth of the
    # recursions, for cancellation in small components and for the conditioning of M in the
    # solve: M 1e-5, c and qacc 2e-4, qfrc_inverse 1e-4. Measured worst over 200 random states
    # of each model: M 6.5e-7, c 3.0e-5 (gym-reacher), qacc 1.7e-5, qfrc_inverse 1.8e-6.
    qpos, qvel, ctrl = state
    qacc = 10 * rng.standard_normal((NENV, pair.model.nv))
    m = pair.model
    f32 = dict(dtype=np.float32)
    M32 = phalanx.mass_matrix(m, qpos, **f32)
    assert M32.dtype == np.float32
    assert_close(M32, phalanx.mass_matrix(m, qpos), 1e-5, "qM float32")
    assert_close(phalanx.bias_forces(m, qpos, qvel, **f32), phalanx.bias_forces(m, qpos, qvel),
                 2e-4, "qfrc_bias float32")
    assert_close(phalanx.forward_dynamics(m, qpos, qvel, ctrl, **f32),
                 phalanx.forward_dynamics(m, qpos, qvel, ctrl), 2e-4, "qacc float32")
    assert_close(phalanx.inverse_dynamics(m, qpos, qvel, qacc, **f32),
                 phalanx.inverse_dynamics(m, qpos, qvel, qacc), 1e-4, "qfrc_inverse float32")
