"""The CUDA backend against the CPU backend, bit for bit: every entry point that takes a device
(the dynamics functions, step, rollout and its tape, step_vjp, step_jacobians, the planners and
the Simulator), on MuJoCo's humanoid with contacts and joint limits, in float32 and float64,
and its errors. The kernels are the same source on both devices and run the same arithmetic,
so the results agree exactly.

It needs a CUDA device: a GPU, or the emulated one of a PHX_CUDA_EMULATION build, where the
backend's own sources (memory, copies, launch geometry, the __global__ shell and the CUB calls)
run on the CPU; scripts/test_cuda_emulation.sh builds that with AddressSanitizer and runs this
module, and scripts/test.sh (CI) runs the script. Without a device the module is skipped."""

import numpy as np
import pytest

import phalanx
from phalanx import control, costs
from conftest import HUMANOID

pytestmark = pytest.mark.skipif(not phalanx.cuda_available(),
                                reason="no CUDA device (a GPU, or a PHX_CUDA_EMULATION build)")

DTYPES = [np.float32, np.float64]


@pytest.fixture
def model():
    """the humanoid as MuJoCo ships it: contacts with the floor and joint limits on"""
    return phalanx.load_model(HUMANOID)


def start(model, rng, nenv=6, dtype=np.float64):
    """states just above the floor with random joint speeds, and random controls"""
    qpos = np.repeat(model.qpos0[None], nenv, 0)
    qpos[:, 2] = rng.uniform(1.0, 1.4, nenv)
    qvel = rng.uniform(-1, 1, (nenv, model.nv))
    ctrl = rng.uniform(-1, 1, (nenv, model.nu))
    return qpos.astype(dtype), qvel.astype(dtype), ctrl.astype(dtype)


def both(f, *args, **kwargs):
    """f on the CPU and on CUDA"""
    return f(*args, device="cpu", **kwargs), f(*args, device="cuda", **kwargs)


def assert_same(a, b, where=""):
    """equal arrays (or dicts and tuples of them), bit for bit"""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key}]")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamics_functions(model, rng, dtype):
    qpos, qvel, ctrl = start(model, rng, dtype=dtype)
    qacc = rng.standard_normal(qvel.shape).astype(dtype)
    assert_same(*both(phalanx.mass_matrix, model, qpos), "mass_matrix")
    assert_same(*both(phalanx.bias_forces, model, qpos, qvel), "bias_forces")
    assert_same(*both(phalanx.kinematics, model, qpos, qvel), "kinematics")
    assert_same(*both(phalanx.forward_dynamics, model, qpos, qvel, ctrl), "forward_dynamics")
    assert_same(*both(phalanx.inverse_dynamics, model, qpos, qvel, qacc), "inverse_dynamics")
    cpu, cuda = both(phalanx.bytes_per_env, model, dtype=dtype)
    assert cpu == cuda > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_step_and_rollout(model, rng, dtype):
    # a fall onto the floor: contacts appear, the LCP runs, joint limits act
    qpos, qvel, ctrl = start(model, rng, dtype=dtype)
    qfrc = rng.standard_normal(qvel.shape).astype(dtype)
    xfrc = rng.standard_normal((len(qpos), model.nbody, 6)).astype(dtype)
    assert_same(*both(phalanx.step, model, qpos, qvel, ctrl, nstep=20, qfrc=qfrc, xfrc=xfrc),
                "step")
    T = 150
    ctrls = rng.uniform(-1, 1, (len(qpos), T, model.nu)).astype(dtype)
    counts = [np.zeros((len(qpos), T, phalanx.NUM_COUNTS), np.int32) for _ in range(2)]
    cpu = phalanx.rollout(model, qpos, qvel, ctrls, counts=counts[0], device="cpu")
    cuda = phalanx.rollout(model, qpos, qvel, ctrls, counts=counts[1], device="cuda")
    assert_same(cpu, cuda, "rollout")
    assert_same(counts[0], counts[1], "counts")
    assert counts[0][..., phalanx.COUNT_CONTACTS].max() >= 4  # it reached the floor


def test_rollout_across_warp_tiles(model, rng):
    # the kernels that step forward lay their constraint rows out interleaved in tiles of a
    # warp's 32 environments: 37 of them fill one tile and part of a second
    qpos, qvel, _ = start(model, rng, nenv=37, dtype=np.float32)
    T = 60
    ctrls = rng.uniform(-1, 1, (len(qpos), T, model.nu)).astype(np.float32)
    counts = [np.zeros((len(qpos), T, phalanx.NUM_COUNTS), np.int32) for _ in range(2)]
    cpu = phalanx.rollout(model, qpos, qvel, ctrls, counts=counts[0], device="cpu")
    cuda = phalanx.rollout(model, qpos, qvel, ctrls, counts=counts[1], device="cuda")
    assert_same(cpu, cuda, "rollout")
    assert_same(counts[0], counts[1], "counts")
    # environments of both tiles reached the floor
    rows = counts[0][..., phalanx.COUNT_ROWS].max(axis=1)
    assert rows[:32].max() > 0 and rows[32:].max() > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_tape_backward(model, rng, dtype):
    qpos, qvel, _ = start(model, rng, dtype=dtype)
    T = 60
    ctrls = rng.uniform(-1, 1, (len(qpos), T, model.nu)).astype(dtype)
    adj = (rng.standard_normal((len(qpos), T, model.nq)).astype(dtype),
           rng.standard_normal((len(qpos), T, model.nv)).astype(dtype))
    grads = []
    for device in ("cpu", "cuda"):
        tape = phalanx.Tape(checkpoint_every=7)
        phalanx.rollout(model, qpos, qvel, ctrls, tape=tape, device=device)
        grads.append(tape.backward(*adj, complementarity_aware=True))
    assert_same(*grads, "tape.backward")
    assert np.abs(grads[0]["qvel"]).max() > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_step_vjp_and_jacobians(model, rng, dtype):
    qpos, qvel, ctrl = start(model, rng, nenv=3, dtype=dtype)
    qpos[:, 2] = 1.28  # the feet on the floor: contacts in the replayed step
    adj = (rng.standard_normal(qpos.shape).astype(dtype),
           rng.standard_normal(qvel.shape).astype(dtype))
    assert_same(*both(phalanx.step_vjp, model, qpos, qvel, ctrl, *adj), "step_vjp")
    assert_same(*both(phalanx.step_jacobians, model, qpos, qvel, ctrl, parameters=True,
                      bounce_correction=True), "step_jacobians")


def test_step_vjp_across_warp_tiles(model, rng):
    # the step's vjp lays out the rows of the step it replays interleaved, as the forward
    # kernels do: 37 environments fill one tile of 32 and part of a second
    qpos, qvel, ctrl = start(model, rng, nenv=37, dtype=np.float32)
    qpos[:, 2] = rng.uniform(1.2, 1.3, len(qpos))  # feet on or near the floor
    adj = (rng.standard_normal(qpos.shape).astype(np.float32),
           rng.standard_normal(qvel.shape).astype(np.float32))
    counts = np.zeros((len(qpos), 1, phalanx.NUM_COUNTS), np.int32)
    phalanx.rollout(model, qpos, qvel, ctrl[:, None], counts=counts)
    rows = counts[:, 0, phalanx.COUNT_ROWS]
    assert rows[:32].max() > 0 and rows[32:].max() > 0  # steps with rows in both tiles
    assert_same(*both(phalanx.step_vjp, model, qpos, qvel, ctrl, *adj), "step_vjp")


def cost(model):
    return costs.Quadratic(model, qpos_target=model.qpos0, qpos_weight=1.0, qvel_weight=0.01,
                           ctrl_weight=0.01)


@pytest.mark.parametrize("dtype", DTYPES)
def test_planners(model, rng, dtype):
    # the segmented reductions (MPPI's minimum and sum) and sort (CEM's elites) are CUB's on
    # CUDA and kernels on the CPU
    qpos, qvel, _ = start(model, rng, nenv=2)
    plans = []
    for device in ("cpu", "cuda"):
        mppi = control.MPPI(model, 8, 16, 0.3, 0.5, cost=cost(model), num_problems=2, seed=3,
                            iterations=2, dtype=dtype, device=device)
        cem = control.CEM(model, 8, 16, 4, 0.3, cost=cost(model), num_problems=2, seed=3,
                          dtype=dtype, device=device)
        plans.append((mppi.plan(qpos, qvel, full=True), mppi.last_costs, mppi.last_weights,
                      cem.plan(qpos, qvel, full=True), cem.std, cem.last_elites))
    assert_same(*plans, "planners")


@pytest.mark.parametrize("dtype", DTYPES)
def test_simulator(model, rng, dtype):
    qpos, qvel, _ = start(model, rng, nenv=4)
    sims = [phalanx.Simulator(model, 4, device=device, dtype=dtype) for device in ("cpu", "cuda")]
    masses = model.parameter("body_mass") * rng.uniform(0.9, 1.1, (4, model.nbody))
    for sim in sims:
        sim.reset(qpos=qpos, qvel=qvel)
        sim.set_parameter("body_mass", masses)  # a mass per environment
    # the contact rows carry over from call to call on both devices (a warm start), so the
    # calls agree with each other and with one rollout of the same steps
    ctrl = rng.uniform(-1, 1, (4, 30, model.nu)).astype(dtype)
    once = phalanx.rollout(model, qpos.astype(dtype), qvel.astype(dtype), ctrl, device="cuda")
    for k in range(3):
        for sim in sims:
            for t in range(10 * k, 10 * k + 10):
                sim.step(ctrl[:, t])
        assert_same(*[(sim.qpos, sim.qvel, sim.status, sim.time) for sim in sims], "Simulator")
    assert_same((sims[1].qpos, sims[1].qvel), (once[0][:, -1], once[1][:, -1]), "one rollout")
    assert_same(*[sim.rollout(ctrl) for sim in sims], "Simulator.rollout")


def test_errors_and_status_bits(model, rng):
    qpos, qvel, ctrl = start(model, rng, nenv=3)
    with pytest.raises(ValueError, match="ctrl must have shape"):
        phalanx.step(model, qpos, qvel, ctrl[:, :5], device="cuda")
    # a NaN in one environment stops it alone, with the same bits as on the CPU
    qvel[1, 4] = np.nan
    cpu, cuda = both(phalanx.rollout, model, qpos, qvel,
                     np.repeat(ctrl[:, None], 20, axis=1))
    assert_same(cpu, cuda, "rollout with a NaN")
    assert cpu[2][1] & phalanx.STATUS_NAN_STATE and not cpu[2][0] & phalanx.STATUS_NAN_STATE


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_model_in_local_memory(sphere_and_pendulum, rng, dtype):
    # a model whose whole scratch fits a thread's local memory (the humanoid's above is split:
    # its workspaces there, its contact rows in global memory)
    model = sphere_and_pendulum
    qpos = np.repeat(model.qpos0[None], 5, 0).astype(dtype)
    qvel = rng.uniform(-1, 1, (5, model.nv)).astype(dtype)
    T = 40
    ctrls = rng.uniform(-1, 1, (5, T, model.nu)).astype(dtype)
    assert_same(*both(phalanx.rollout, model, qpos, qvel, ctrls), "rollout")
    adj = (rng.standard_normal((5, T, model.nq)).astype(dtype),
           rng.standard_normal((5, T, model.nv)).astype(dtype))
    grads = []
    for device in ("cpu", "cuda"):
        tape = phalanx.Tape(checkpoint_every=6)
        phalanx.rollout(model, qpos, qvel, ctrls, tape=tape, device=device)
        grads.append(tape.backward(*adj))
    assert_same(*grads, "tape.backward")
    assert np.abs(grads[0]["qvel"]).max() > 0
