"""The Python API: argument checking, status bits, devices, options and the Model object, on
MuJoCo's humanoid (nq 28, nv 27, nu 21)."""

from __future__ import annotations

import numpy as np
import pytest

import phalanx
from conftest import HUMANOID
from phalanx.testing import random_ctrl, random_state

E = 4
G = 9.81


@pytest.fixture
def state(humanoid, rng):
    qpos, qvel = random_state(humanoid, E, rng, qvel_scale=0.5)
    return qpos, qvel, random_ctrl(humanoid, (E,), rng)


def call(name, model, qpos, qvel, ctrl, qacc, rollout_ctrl, **kw):
    """run one API function with the arguments it takes"""
    if name == "mass_matrix":
        return phalanx.mass_matrix(model, qpos, **kw)
    if name == "bias_forces":
        return phalanx.bias_forces(model, qpos, qvel, **kw)
    if name == "forward_dynamics":
        return phalanx.forward_dynamics(model, qpos, qvel, ctrl, **kw)
    if name == "inverse_dynamics":
        return phalanx.inverse_dynamics(model, qpos, qvel, qacc, **kw)
    if name == "step":
        return phalanx.step(model, qpos, qvel, ctrl, **kw)
    if name == "rollout":
        return phalanx.rollout(model, qpos, qvel, rollout_ctrl, **kw)
    raise AssertionError(name)


FUNCTIONS = ["mass_matrix", "bias_forces", "forward_dynamics", "inverse_dynamics", "step",
             "rollout"]
ARGUMENTS = {  # the arguments each function checks besides qpos
    "mass_matrix": [],
    "bias_forces": ["qvel"],
    "forward_dynamics": ["qvel", "ctrl"],
    "inverse_dynamics": ["qvel", "qacc"],
    "step": ["qvel", "ctrl"],
    "rollout": ["qvel", "rollout_ctrl"],
}
# for each argument: good shape, wrong shapes, and the expected shape as the message gives it
SHAPES = {
    "qpos": ((E, 28), [(E, 27), (28,), (E, 28, 1), (E, 7)], "(E, nq) = (4, 28)"),
    "qvel": ((E, 27), [(E, 28), (E - 1, 27), (27,)], "(E, nv) = (4, 27)"),
    "ctrl": ((E, 21), [(E, 20), (E + 1, 21), (E, 21, 1)], "(E, nu) = (4, 21)"),
    "qacc": ((E, 27), [(E, 26), (1, 27)], "(E, nv) = (4, 27)"),
    "rollout_ctrl": ((E, 5, 21), [(E, 5, 20), (E + 1, 5, 21)], "(E, T, nu) = (4, 5, 21)"),
}


def arguments(dtype=np.float64, **replace):
    """zero arrays of the good shapes, some replaced"""
    args = {name: np.zeros(good, dtype) for name, (good, _, _) in SHAPES.items()}
    args["qpos"][:, 3] = 1  # a unit quaternion for the free joint
    args.update(replace)
    return args


@pytest.mark.parametrize("function", FUNCTIONS)
def test_wrong_shape_names_the_expected_shape(humanoid, function):
    for arg in ["qpos", *ARGUMENTS[function]]:
        for shape in SHAPES[arg][1]:
            bad = arguments(**{arg: np.zeros(shape)})
            with pytest.raises(ValueError) as info:
                call(function, humanoid, **bad)
            # the message names the argument by its API name (rollout's ctrl is "ctrl")
            name = "ctrl" if arg == "rollout_ctrl" and function == "rollout" else arg
            assert f"{name} must have shape" in str(info.value)
            expected = SHAPES[arg][2]
            if arg == "qpos" and len(shape) != 2:
                expected = "(E, nq) = (E, 28)"  # no batch size without a 2-D qpos
            assert expected in str(info.value), str(info.value)


def test_rollout_ctrl_of_wrong_rank_names_the_expected_shape(humanoid):
    with pytest.raises(ValueError, match=r"\(E, T, nu\) = \(4, T, 21\)"):
        call("rollout", humanoid, **arguments(rollout_ctrl=np.zeros((E, 21))))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_wrong_dtype_names_the_expected_shape_and_dtype(humanoid, function):
    # an argument whose dtype differs from qpos's
    for arg in ARGUMENTS[function]:
        bad = arguments(**{arg: np.zeros(SHAPES[arg][0], np.float32)})
        with pytest.raises(ValueError) as info:
            call(function, humanoid, **bad)
        assert SHAPES[arg][2] in str(info.value) and "float64" in str(info.value)
    # qpos of a dtype that is no scalar type
    for dtype in (np.int64, np.float16, np.complex128):
        bad = arguments(qpos=np.zeros((E, 28), dtype))
        with pytest.raises(ValueError) as info:
            call(function, humanoid, **bad)
        assert "(E, nq) = (4, 28)" in str(info.value) and "float32 or float64" in str(info.value)
    # all float32 is fine and gives float32
    out = call(function, humanoid, **arguments(np.float32))
    assert (out[0] if isinstance(out, tuple) else out).dtype == np.float32
    # and an explicit dtype other than float32 or float64 is refused
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        call(function, humanoid, **arguments(), dtype=np.int32)


def test_explicit_dtype_converts(humanoid, state):
    qpos, qvel, ctrl = state
    a = phalanx.forward_dynamics(humanoid, qpos, qvel, ctrl, dtype=np.float32)
    b = phalanx.forward_dynamics(humanoid, *(x.astype(np.float32) for x in state))
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a, b)


def test_non_contiguous_inputs(humanoid, state):
    qpos, qvel, ctrl = state
    strided = [np.asfortranarray(qpos), np.repeat(qvel, 2, axis=0)[::2], ctrl]
    assert not strided[0].flags.c_contiguous and not strided[1].flags.c_contiguous
    np.testing.assert_array_equal(phalanx.forward_dynamics(humanoid, *strided),
                                  phalanx.forward_dynamics(humanoid, qpos, qvel, ctrl))


def test_step_does_not_modify_inputs(humanoid, state):
    before = [x.copy() for x in state]
    qpos, qvel, status = phalanx.step(humanoid, *state, nstep=3)
    for x, y in zip(state, before):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(qpos, state[0]) and not np.array_equal(qvel, state[1])
    assert status.dtype == np.uint32 and status.shape == (E,)


def test_nstep_equals_repeated_single_steps(humanoid, state):
    # the same arithmetic in the same order, so equal to the last bit
    qpos, qvel, ctrl = state
    q5, v5, s5 = phalanx.step(humanoid, qpos, qvel, ctrl, nstep=5)
    q, v = qpos, qvel
    for _ in range(5):
        q, v, s = phalanx.step(humanoid, q, v, ctrl)
        np.testing.assert_array_equal(s, 0)
    np.testing.assert_array_equal(q5, q)
    np.testing.assert_array_equal(v5, v)
    np.testing.assert_array_equal(s5, 0)
    # and nstep = 0 returns the state unchanged
    q0, v0, _ = phalanx.step(humanoid, qpos, qvel, ctrl, nstep=0)
    np.testing.assert_array_equal(q0, qpos)
    np.testing.assert_array_equal(v0, qvel)
    for bad in (-1, 1.5, "2"):
        with pytest.raises(ValueError, match="nstep"):
            phalanx.step(humanoid, qpos, qvel, ctrl, nstep=bad)


def test_rollout_records_each_step(humanoid, state, rng):
    qpos, qvel, _ = state
    ctrl = random_ctrl(humanoid, (E, 6), rng)
    qs, vs, status = phalanx.rollout(humanoid, qpos, qvel, ctrl)
    assert qs.shape == (E, 6, 28) and vs.shape == (E, 6, 27)
    np.testing.assert_array_equal(status, 0)
    q, v = qpos, qvel
    for t in range(6):
        q, v, _ = phalanx.step(humanoid, q, v, np.ascontiguousarray(ctrl[:, t]))
        np.testing.assert_array_equal(qs[:, t], q)
        np.testing.assert_array_equal(vs[:, t], v)


def test_rollout_writes_into_given_buffers(humanoid, state, rng):
    qpos, qvel, _ = state
    ctrl = random_ctrl(humanoid, (E, 5), rng)
    expected = phalanx.rollout(humanoid, qpos, qvel, ctrl)
    out = (np.full((E, 5, 28), np.nan), np.full((E, 5, 27), np.nan))
    qs, vs, _ = phalanx.rollout(humanoid, qpos, qvel, ctrl, out=out)
    assert qs is out[0] and vs is out[1]
    np.testing.assert_array_equal(qs, expected[0])
    np.testing.assert_array_equal(vs, expected[1])
    with pytest.raises(ValueError, match=r"\(E, T, nq\) = \(4, 5, 28\)"):
        phalanx.rollout(humanoid, qpos, qvel, ctrl, out=(np.empty((E, 4, 28)), out[1]))
    with pytest.raises(ValueError, match="float64"):
        phalanx.rollout(humanoid, qpos, qvel, ctrl, out=(out[0].astype(np.float32), out[1]))


def test_nan_ctrl_flags_only_its_environment(humanoid, state):
    qpos, qvel, ctrl = state
    bad = ctrl.copy()
    bad[1, 5] = np.nan
    q, v, status = phalanx.step(humanoid, qpos, qvel, bad, nstep=3)
    np.testing.assert_array_equal(status, [0, phalanx.STATUS_NAN_CTRL, 0, 0])
    # the flagged environment keeps its state; the others equal a batch without it
    np.testing.assert_array_equal(q[1], qpos[1])
    np.testing.assert_array_equal(v[1], qvel[1])
    good = [0, 2, 3]
    q_ref, v_ref, s_ref = phalanx.step(humanoid, qpos[good], qvel[good], ctrl[good], nstep=3)
    np.testing.assert_array_equal(q[good], q_ref)
    np.testing.assert_array_equal(v[good], v_ref)
    np.testing.assert_array_equal(s_ref, 0)


def test_nan_in_rollout_stops_its_environment(humanoid, state, rng):
    qpos, qvel, _ = state
    ctrl = random_ctrl(humanoid, (E, 8), rng)
    ctrl[2, 3, 0] = np.inf
    qs, vs, status = phalanx.rollout(humanoid, qpos, qvel, ctrl)
    np.testing.assert_array_equal(status, [0, 0, phalanx.STATUS_NAN_CTRL, 0])
    # env 2 holds the state it reached after step 2 (index 2 is the state after 3 steps)
    for t in range(3, 8):
        np.testing.assert_array_equal(qs[2, t], qs[2, 2])
        np.testing.assert_array_equal(vs[2, t], vs[2, 2])
    good = [0, 1, 3]
    qs_ref, vs_ref, _ = phalanx.rollout(humanoid, qpos[good], qvel[good], ctrl[good])
    np.testing.assert_array_equal(qs[good], qs_ref)
    np.testing.assert_array_equal(vs[good], vs_ref)


def test_nan_state_is_flagged(humanoid, state):
    qpos, qvel, ctrl = state
    qpos, qvel = qpos.copy(), qvel.copy()
    qpos[0, 10] = np.nan
    qvel[3, 0] = -np.inf
    _, _, status = phalanx.step(humanoid, qpos, qvel, ctrl)
    np.testing.assert_array_equal(
        status, [phalanx.STATUS_NAN_STATE, 0, 0, phalanx.STATUS_NAN_STATE]
    )
    bits = [phalanx.STATUS_NAN_STATE, phalanx.STATUS_NAN_CTRL, phalanx.STATUS_NAN_RESULT]
    assert len(set(bits)) == 3 and all(b & (b - 1) == 0 for b in bits)  # distinct single bits


def test_divergence_is_flagged(humanoid, state):
    # a step so long that the free fall overflows: qvel_z ~ -g dt, z ~ -g dt^2 = -inf
    qpos, qvel, ctrl = state
    humanoid.timestep = 1e300
    _, _, status = phalanx.step(humanoid, qpos, qvel, ctrl, nstep=2)
    np.testing.assert_array_equal(status, phalanx.STATUS_NAN_RESULT)


def test_concurrent_calls_on_one_model(humanoid, state):
    # the C++ calls run without the GIL; threads sharing a Model (and its compiled copy) get the
    # results of serial calls
    from concurrent.futures import ThreadPoolExecutor

    expected = phalanx.forward_dynamics(humanoid, *state)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: phalanx.forward_dynamics(humanoid, *state), range(16)))
    for r in results:
        np.testing.assert_array_equal(r, expected)


def test_empty_batch(humanoid):
    q, v, s = phalanx.step(humanoid, np.zeros((0, 28)), np.zeros((0, 27)), np.zeros((0, 21)))
    assert q.shape == (0, 28) and v.shape == (0, 27) and s.shape == (0,)
    assert phalanx.mass_matrix(humanoid, np.zeros((0, 28))).shape == (0, 27, 27)


def test_cuda_raises_without_gpu_and_matches_cpu_with_one(humanoid, state):
    with pytest.raises(ValueError, match="unknown device"):
        phalanx.mass_matrix(humanoid, state[0], device="tpu")
    if phalanx.cuda_available():
        np.testing.assert_allclose(
            phalanx.forward_dynamics(humanoid, *state, device="cuda"),
            phalanx.forward_dynamics(humanoid, *state), rtol=1e-10, atol=1e-10)
        return
    with pytest.raises(RuntimeError, match="cuda"):
        phalanx.forward_dynamics(humanoid, *state, device="cuda")
    with pytest.raises(RuntimeError, match="cuda"):
        phalanx.step(humanoid, *state, device="cuda")


def test_gravity_and_timestep_can_change(humanoid):
    # at qpos0 (every spring at rest) and qvel = 0 the humanoid falls freely: qacc is -g on the
    # free joint's z and 0 elsewhere, so one Euler step gives qvel_z = -g dt and
    # z = z0 - g dt^2; the bias force on z is the weight, total mass * g
    qpos = humanoid.qpos0[None].copy()
    zero_v, zero_u = np.zeros((1, 27)), np.zeros((1, 21))
    mass = humanoid.body_mass.sum()
    assert phalanx.bias_forces(humanoid, qpos, zero_v)[0, 2] == pytest.approx(mass * G, rel=1e-14)
    for dt in (humanoid.timestep, 1e-3):
        humanoid.timestep = dt
        q, v, _ = phalanx.step(humanoid, qpos, zero_v, zero_u)
        expected_v = np.zeros(27)
        expected_v[2] = -G * dt
        np.testing.assert_allclose(v[0], expected_v, rtol=0, atol=1e-12)
        assert q[0, 2] == pytest.approx(qpos[0, 2] - G * dt * dt, abs=1e-14)
    humanoid.gravity = (0.0, 0.0, 0.0)
    np.testing.assert_array_equal(humanoid.gravity, 0.0)
    np.testing.assert_allclose(phalanx.bias_forces(humanoid, qpos, zero_v), 0.0, atol=1e-12)
    q, v, _ = phalanx.step(humanoid, qpos, zero_v, zero_u)
    np.testing.assert_allclose(v, 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="timestep"):
        humanoid.timestep = -1.0
    with pytest.raises(ValueError):
        humanoid.gravity = (0.0, np.nan, 0.0)


def test_model_arrays(humanoid):
    m = humanoid
    assert (m.nq, m.nv, m.nu, m.nbody, m.njnt, m.ngeom) == (28, 27, 21, 17, 22, 20)
    assert all(isinstance(n, int) for n in (m.nq, m.nv, m.nu, m.nbody, m.njnt, m.ngeom))
    assert len(m.body_names) == 17 and m.body_names[1] == "torso"
    assert len(m.joint_names) == 22 and m.joint_names[0] == "root"
    assert len(m.geom_names) == 20 and len(m.actuator_names) == 21
    assert m.joint_id("abdomen_y") == m.joint_names.index("abdomen_y")
    assert m.body_id("no such body") == -1
    assert isinstance(m.ignored, list) and all(isinstance(s, str) for s in m.ignored)
    assert "nq=28" in repr(m) and "nu=21" in repr(m)
    shapes = {
        "qpos0": (28,), "body_pos": (17, 3), "body_quat": (17, 4), "body_mass": (17,),
        "body_inertia": (17, 3), "body_parentid": (17,), "jnt_type": (22,), "jnt_range": (22, 2),
        "jnt_axis": (22, 3), "dof_damping": (27,), "dof_parentid": (27,), "geom_size": (20, 3),
        "geom_quat": (20, 4), "actuator_gear": (21,), "actuator_ctrlrange": (21, 2),
    }
    for name, shape in shapes.items():
        a = getattr(m, name)
        assert a.shape == shape, name
        assert a.dtype in (np.float64, np.int32), name
        with pytest.raises(ValueError, match="read-only"):
            a[...] = 0
    assert m.jnt_type[0] == 0 and (m.jnt_type[1:] == 3).all()  # free, then hinges
    np.testing.assert_array_equal(m.qpos0[:7], [0, 0, 1.5, 1, 0, 0, 0])


def test_arrays_outlive_their_model(humanoid):
    # the arrays keep the Model alive
    import gc

    mass = phalanx.load_model(humanoid.source).body_mass
    gc.collect()
    assert mass.shape == (17,) and mass[0] == 0 and mass[1:].min() > 0


def test_bad_model_path_raises(tmp_path):
    missing = tmp_path / "missing.xml"
    with pytest.raises(FileNotFoundError, match="missing.xml"):
        phalanx.load_model(missing)
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body></mujoco>")
    with pytest.raises(RuntimeError, match="broken.xml"):
        phalanx.load_model(broken)
    with pytest.raises(TypeError):
        phalanx.mass_matrix("not a model", np.zeros((1, 1)))


def test_cuda_available_and_emulated_are_bools():
    # an emulated device (a PHX_CUDA_EMULATION build) is always available
    assert isinstance(phalanx.cuda_available(), bool)
    assert isinstance(phalanx.cuda_emulated(), bool)
    assert phalanx.cuda_available() or not phalanx.cuda_emulated()


def test_cylinder_lands_on_its_cap_and_falls_freely_with_contacts_off(tmp_path):
    # with contacts on, an upright cylinder dropped on the floor comes to rest on its cap (centre
    # at its half-height, less the penetration the Baumgarte correction leaves: the slop); with
    # contacts off it falls freely: qvel' = g dt, qpos' = qpos + g dt^2 (semi-implicit Euler)
    path = tmp_path / "cylinder.xml"
    path.write_text("<mujoco><worldbody><geom type='plane' size='1 1 .1'/>"
                    "<body pos='0 0 1'><freejoint/><geom name='can' type='cylinder' size='.1 .2'/>"
                    "</body></worldbody></mujoco>")
    model = phalanx.load_model(path)
    qpos, qvel, ctrl = model.qpos0[None], np.zeros((1, model.nv)), np.zeros((1, 0))
    qs, vs, status = phalanx.rollout(model, qpos, qvel, np.zeros((1, 1500, 0)))
    assert abs(qs[0, -1, 2] - 0.2) < 1.1e-3
    np.testing.assert_allclose(qs[0, -1, 3:], [1, 0, 0, 0], atol=1e-3)  # upright
    assert np.abs(vs[0, -1]).max() < 1e-3
    model.contact = False
    q1, v1, status = phalanx.step(model, qpos, qvel, ctrl)
    dt, g = model.timestep, model.gravity[2]
    assert status[0] == 0
    assert v1[0, 2] == pytest.approx(g * dt, rel=1e-12)
    assert q1[0, 2] == pytest.approx(1.0 + g * dt * dt, rel=1e-12)


def test_lcp_sweep_tolerance_stops_the_sweeps_within_it(rng):
    # the humanoid lowered onto the floor (about 30 constraint rows per step): with
    # lcp_sweep_tolerance > 0 the projected Gauss-Seidel sweeps stop early, and the first step whose
    # velocities differ from every sweep's differs by a few times the tolerance (m/s); 0, the
    # default, is every sweep
    model = phalanx.load_model(str(HUMANOID))
    E, T = 32, 12
    qpos = np.repeat(model.qpos0[None], E, axis=0)
    qpos[:, 2] -= 0.35
    qpos[:, 7:] += 0.2 * rng.uniform(-1, 1, (E, model.nq - 7))
    qvel = rng.uniform(-1, 1, (E, model.nv))
    ctrl = rng.uniform(-1, 1, (E, T, model.nu))
    assert model.lcp_sweep_tolerance == 0
    _, every, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    for tol in (1e-6, 1e-4):
        model.lcp_sweep_tolerance = tol
        _, early, _ = phalanx.rollout(model, qpos, qvel, ctrl)
        change = np.abs(early - every).max(axis=(0, 2))  # per step
        first = np.flatnonzero(change)[0]
        assert 0 < change[first] < 5 * tol, (tol, change[first])
    model.lcp_sweep_tolerance = 0
    assert np.array_equal(phalanx.rollout(model, qpos, qvel, ctrl)[1], every)
    with pytest.raises(ValueError):
        model.lcp_sweep_tolerance = -1e-6
