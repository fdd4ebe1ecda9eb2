"""phalanx.Simulator: the stateful batch against the functional API it wraps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import phalanx
from conftest import HUMANOID

CARTPOLE = Path(__file__).resolve().parents[2] / "examples" / "models" / "cartpole.xml"


@pytest.fixture
def cartpole():
    return phalanx.load_model(CARTPOLE)


def _scatter(sim, rng):
    """distinct states and controls per environment"""
    sim.qpos[:] = rng.uniform(-0.3, 0.3, sim.qpos.shape)
    sim.qvel[:] = rng.uniform(-0.5, 0.5, sim.qvel.shape)
    sim.ctrl[:] = rng.uniform(-1, 1, sim.ctrl.shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_step_equals_functional_step_bit_for_bit(cartpole, rng, dtype):
    sim = phalanx.Simulator(cartpole, 5, dtype=dtype)
    assert sim.qpos.dtype == sim.qvel.dtype == sim.ctrl.dtype == dtype
    _scatter(sim, rng)
    qpos, qvel, ctrl = sim.qpos.copy(), sim.qvel.copy(), sim.ctrl.copy()
    views = sim.qpos, sim.qvel, sim.ctrl
    sim.step(nstep=3)                                  # controls written in place above
    q1, v1, s1 = phalanx.step(cartpole, qpos, qvel, ctrl, nstep=3)
    assert sim.qpos is views[0] and sim.qvel is views[1] and sim.ctrl is views[2]
    np.testing.assert_array_equal(views[0], q1)        # the arrays were advanced in place
    np.testing.assert_array_equal(sim.qvel, v1)
    np.testing.assert_array_equal(sim.status, s1)
    assert sim.status.dtype == np.uint32
    np.testing.assert_allclose(sim.time, 3 * cartpole.timestep)

    u = rng.uniform(-1, 1, (5, 1))                     # ctrl passed to step (float64 input)
    sim.step(u)
    q2, v2, _ = phalanx.step(cartpole, q1, v1, u.astype(dtype))
    np.testing.assert_array_equal(sim.qpos, q2)
    np.testing.assert_array_equal(sim.qvel, v2)
    np.testing.assert_array_equal(sim.ctrl, u.astype(dtype))


def test_step_with_contacts_equals_functional_step(rng):
    """the humanoid with floor contacts and limits, a few steps into its fall"""
    model = phalanx.load_model(HUMANOID)
    sim = phalanx.Simulator(model, 3)
    sim.qpos[:, 2] = 1.0  # torso low enough for the feet to touch
    sim.ctrl[:] = rng.uniform(-1, 1, sim.ctrl.shape)
    qpos, qvel = sim.qpos.copy(), sim.qvel.copy()
    sim.step(nstep=4)
    q1, v1, s1 = phalanx.step(model, qpos, qvel, sim.ctrl, nstep=4)
    np.testing.assert_array_equal(sim.qpos, q1)
    np.testing.assert_array_equal(sim.qvel, v1)
    np.testing.assert_array_equal(sim.status, s1)


def test_steps_carry_the_contact_warm_start_like_a_rollout(rng):
    # the humanoid falling onto the floor for 120 steps: one step per call warm-starts each
    # contact solve from the previous call's impulses, exactly as inside one rollout
    model = phalanx.load_model(HUMANOID)
    E, T = 3, 120
    ctrl = rng.uniform(-1, 1, (E, T, model.nu))
    sim = phalanx.Simulator(model, E)
    sim.qpos[:, 2] = 1.0
    q0, v0 = sim.qpos.copy(), sim.qvel.copy()
    rows = np.zeros((T, E), np.int32)
    for t in range(T):
        sim.step(ctrl[:, t])
        rows[t] = sim._warm.rows()
    qs, vs, status = phalanx.rollout(model, q0, v0, ctrl)
    assert (rows > 0).sum(axis=0).min() > T // 4  # in contact for much of the run
    np.testing.assert_array_equal(sim.qpos, qs[:, -1])
    np.testing.assert_array_equal(sim.qvel, vs[:, -1])
    np.testing.assert_array_equal(sim.status, status)
    # a reset starts those environments cold: its next step equals a fresh functional step
    before = sim._warm.rows()
    sim.reset(env_ids=[1], qpos=qs[1, -1], qvel=vs[1, -1])
    after = sim._warm.rows()
    assert after[1] == 0 and (after[[0, 2]] == before[[0, 2]]).all()
    sim.step(ctrl[:, -1])
    q1, v1, _ = phalanx.step(model, qs[1:2, -1], vs[1:2, -1], ctrl[1:2, -1])
    np.testing.assert_array_equal(sim.qpos[1], q1[0])


def test_assignment_copies_into_the_same_arrays(cartpole):
    sim = phalanx.Simulator(cartpole, 2)
    q = sim.qpos
    sim.qpos = [[0.1, 0.2], [0.3, 0.4]]
    assert sim.qpos is q
    np.testing.assert_array_equal(q, [[0.1, 0.2], [0.3, 0.4]])


def test_rollout_equals_repeated_steps(cartpole, rng):
    E, T = 4, 12
    sim = phalanx.Simulator(cartpole, E)
    _scatter(sim, rng)
    ctrl = rng.uniform(-1, 1, (E, T, 1))
    stepper = phalanx.Simulator(cartpole, E)
    stepper.qpos, stepper.qvel = sim.qpos, sim.qvel
    qs, vs = sim.rollout(ctrl)
    assert qs.shape == (E, T, 2) and vs.shape == (E, T, 2)
    for t in range(T):
        stepper.step(ctrl[:, t])
        np.testing.assert_array_equal(qs[:, t], stepper.qpos)
        np.testing.assert_array_equal(vs[:, t], stepper.qvel)
    # the final state stays in the simulator, with the last controls and the elapsed time
    np.testing.assert_array_equal(sim.qpos, stepper.qpos)
    np.testing.assert_array_equal(sim.qvel, stepper.qvel)
    np.testing.assert_array_equal(sim.ctrl, ctrl[:, -1])
    np.testing.assert_allclose(sim.time, T * cartpole.timestep)
    np.testing.assert_allclose(stepper.time, sim.time)


def test_reset_of_some_envs_leaves_the_others_untouched(cartpole, rng):
    sim = phalanx.Simulator(cartpole, 5)
    _scatter(sim, rng)
    sim.step(nstep=2)
    before = sim.qpos.copy(), sim.qvel.copy(), sim.ctrl.copy(), sim.time.copy()
    sim.reset([1, 3])
    others = [0, 2, 4]
    for now, then in zip((sim.qpos, sim.qvel, sim.ctrl, sim.time), before):
        np.testing.assert_array_equal(now[others], then[others])
    np.testing.assert_array_equal(sim.qpos[[1, 3]], np.repeat(cartpole.qpos0[None], 2, 0))
    np.testing.assert_array_equal(sim.qvel[[1, 3]], 0)
    np.testing.assert_array_equal(sim.ctrl[[1, 3]], 0)
    np.testing.assert_array_equal(sim.time[[1, 3]], 0)

    # given values: shared, or one row per selected environment in env_ids' order; a mask
    sim.reset([4, 0], qpos=[[0.4, 0.04], [0.0, 0.01]], qvel=[1.0, -1.0])
    np.testing.assert_array_equal(sim.qpos[[4, 0]], [[0.4, 0.04], [0.0, 0.01]])
    np.testing.assert_array_equal(sim.qvel[[0, 4]], [[1.0, -1.0], [1.0, -1.0]])
    np.testing.assert_array_equal(sim.qpos[2], before[0][2])
    sim.reset(np.array([False, False, True, False, False]), qpos=[0.2, 0.0])
    np.testing.assert_array_equal(sim.qpos[2], [0.2, 0.0])
    np.testing.assert_array_equal(sim.qpos[1], cartpole.qpos0)


def test_per_env_parameters_change_only_those_envs(cartpole, rng):
    """a per-environment body mass: each environment's trajectory equals a run of the model with
    that mass for every environment"""
    E, T = 3, 15
    masses = np.repeat(cartpole.parameter("body_mass")[None], E, 0)
    masses[1, 2] *= 2.0                           # env 1: a heavier pole
    q0 = rng.uniform(-0.2, 0.2, (E, 2))
    ctrl = rng.uniform(-1, 1, (E, T, 1))

    sim = phalanx.Simulator(cartpole, E)
    sim.set_parameter("body_mass", masses)
    np.testing.assert_array_equal(sim.parameter("body_mass"), masses)
    sim.reset(qpos=q0)
    qs, _ = sim.rollout(ctrl)

    for e in range(E):
        ref_model = phalanx.load_model(CARTPOLE)
        ref_model.set_parameter("body_mass", masses[e])
        ref, _, _ = phalanx.rollout(ref_model, q0[e:e + 1], np.zeros((1, 2)), ctrl[e:e + 1])
        np.testing.assert_array_equal(qs[e], ref[0])
    nominal, _, _ = phalanx.rollout(phalanx.load_model(CARTPOLE), q0[1:2], np.zeros((1, 2)),
                                    ctrl[1:2])
    assert np.abs(qs[1] - nominal[0]).max() > 1e-3   # the heavier pole moves differently

    # the model object is shared: it holds the per-environment values
    assert cartpole.parameter("body_mass").shape == (E, 3)
    sim.set_parameter("body_mass", masses[0])         # shared shape: every environment
    np.testing.assert_array_equal(sim.parameter("body_mass"), np.repeat(masses[:1], E, 0))


def test_randomize_draws_scale_factors_for_the_selected_envs(cartpole):
    E = 6
    sim = phalanx.Simulator(cartpole, E)
    nominal = cartpole.parameter("dof_damping")
    values = sim.randomize("dof_damping", 0.5, 1.5, rng=np.random.default_rng(7))
    scale = values / nominal
    assert values.shape == (E, 2) and np.all((scale >= 0.5) & (scale < 1.5))
    assert np.unique(scale[:, 0]).size == E            # independent per environment
    np.testing.assert_array_equal(sim.parameter("dof_damping"), values)
    again = phalanx.Simulator(phalanx.load_model(CARTPOLE), E).randomize(
        "dof_damping", 0.5, 1.5, rng=7)
    np.testing.assert_array_equal(again, values)       # reproducible from a seed

    # only env_ids are redrawn, from the nominal values (not compounding)
    redrawn = sim.randomize("dof_damping", 2.0, 2.0, rng=1, env_ids=[2])
    np.testing.assert_array_equal(redrawn[2], 2.0 * nominal)
    np.testing.assert_array_equal(np.delete(redrawn, 2, 0), np.delete(values, 2, 0))
    sim.restore_parameters()
    np.testing.assert_array_equal(cartpole.parameter("dof_damping"), nominal)


def test_nan_ctrl_flags_and_freezes_only_its_env(cartpole, rng):
    E = 4
    sim = phalanx.Simulator(cartpole, E)
    _scatter(sim, rng)
    sim.ctrl[2, 0] = np.nan
    before = sim.qpos.copy(), sim.qvel.copy(), sim.ctrl.copy()
    sim.step(nstep=2)
    expected = np.array([0, 0, phalanx.STATUS_NAN_CTRL, 0], np.uint32)
    np.testing.assert_array_equal(sim.status, expected)
    np.testing.assert_array_equal(sim.stopped, [False, False, True, False])
    q1, v1, _ = phalanx.step(cartpole, before[0], before[1], before[2], nstep=2)
    np.testing.assert_array_equal(sim.qpos, q1)        # env 2 kept its state, as the kernels do
    np.testing.assert_array_equal(sim.qpos[2], before[0][2])

    # it stays frozen (state, time, status) though its control is finite again
    sim.ctrl[2, 0] = 0.5
    sim.step()
    qs, _ = sim.rollout(np.full((E, 3, 1), 0.1))
    np.testing.assert_array_equal(sim.qpos[2], before[0][2])
    np.testing.assert_array_equal(qs[2], np.repeat(before[0][2:3], 3, 0))
    np.testing.assert_array_equal(sim.status, expected)
    # the call in which it stopped counts in full, later ones not
    assert sim.time[2] == 2 * cartpole.timestep and sim.time[0] == 6 * cartpole.timestep
    with pytest.raises(RuntimeError, match=r"environment\(s\): 2 \(NaN/inf ctrl\)"):
        phalanx.raise_if_stopped(sim.status)

    sim.reset(2)
    assert not sim.stopped.any() and sim.status[2] == 0
    sim.step()
    assert sim.time[2] == cartpole.timestep


def test_wrong_shapes_raise_value_errors_naming_the_shape(cartpole):
    sim = phalanx.Simulator(cartpole, 3)
    cases = [
        (lambda: sim.step(np.zeros((3, 2))), r"ctrl must have shape \(E, nu\) = \(3, 1\)"),
        (lambda: sim.step(np.zeros(3)), r"ctrl must have shape \(E, nu\) = \(3, 1\)"),
        (lambda: sim.rollout(np.zeros((3, 1))), r"ctrl must have shape \(E, T, nu\) = \(3, T, 1\)"),
        (lambda: setattr(sim, "qpos", np.zeros((2, 2))), r"qpos must have shape \(E, nq\)"),
        (lambda: setattr(sim, "qvel", np.zeros((3, 3))), r"qvel must have shape \(E, nv\)"),
        (lambda: sim.reset([0, 1], qpos=np.zeros((3, 2))), r"\(len\(env_ids\), nq\) = \(2, 2\)"),
        (lambda: sim.reset([3]), r"env_ids must lie in \[0, 3\)"),
        (lambda: sim.reset([1, 1]), "repeated"),
        (lambda: sim.reset(np.ones(2, bool)), r"mask must have shape \(E,\) = \(3,\)"),
        (lambda: sim.set_parameter("body_mass", np.ones((2, 3))), r"\(3,\) \(shared\) or \(3, 3\)"),
        (lambda: sim.set_parameter("mass", 1.0), "unknown parameter 'mass'"),
        (lambda: sim.randomize("body_mass", [1, 2], [2, 3]), "broadcast"),
        (lambda: sim.step(nstep=-1), "nstep must be a non-negative integer"),
        (lambda: phalanx.Simulator(cartpole, 0), "num_envs must be a positive integer"),
        (lambda: phalanx.Simulator(cartpole, 2, dtype=np.int32), "float32 or float64"),
        (lambda: phalanx.Simulator(cartpole, 2, device="tpu"), "unknown device 'tpu'"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    # the model checks values
    with pytest.raises(ValueError, match="expected >= 0"):
        sim.set_parameter("body_mass", [0.0, -1.0, 1.0])


@pytest.mark.skipif(phalanx.cuda_available(), reason="a GPU is present")
def test_cuda_without_gpu_raises_the_extension_error(cartpole):
    with pytest.raises(RuntimeError, match="device 'cuda' is not available"):
        phalanx.Simulator(cartpole, 2, device="cuda")


def test_path_and_repr():
    sim = phalanx.Simulator(CARTPOLE, 2, dtype=np.float32)
    assert repr(sim) == "phalanx.Simulator('cartpole', num_envs=2, device='cpu', dtype=float32)"
    assert sim.num_envs == 2 and sim.device == "cpu" and sim.dtype == np.float32
