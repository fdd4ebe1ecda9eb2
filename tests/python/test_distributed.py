"""phalanx.distributed on a local Ray cluster of two CPUs: every result of a ShardedBatch (its
steps, rollouts, tapes, parameters and planners), also across a killed and restarted shard,
equals the single-process API's bit for bit; and the contact warm start's checkpoint."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ray

import phalanx
import phalanx.distributed as pd
from conftest import HUMANOID

CARTPOLE = Path(__file__).resolve().parents[2] / "examples" / "models" / "cartpole.xml"


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def assert_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y, strict=True)


def humanoid_controls(rng, E, nu, T=None):
    shape = (E, nu) if T is None else (E, T, nu)
    return rng.uniform(-0.4, 0.4, shape)


def kill_and_wait(batch, shard):
    """kill a shard's process and wait until Ray has started its next incarnation"""
    old = batch._tokens[shard]
    ray.kill(batch.actor(shard), no_restart=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if ray.get(batch.actor(shard).incarnation.remote(), timeout=10) != old:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"shard {shard} was not restarted")


def test_shard_ranges():
    assert pd.shard_ranges(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert pd.shard_ranges(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_steps_resets_and_parameters_equal_one_simulator(rng, dtype):
    """the humanoid falling with contacts (the warm start carried from step to step) over 3
    shards of 3, 2 and 2 environments, with masses per environment, partial resets and applied
    forces, against one Simulator of 7"""
    E = 7
    batch = pd.ShardedBatch(HUMANOID, E, 3, dtype=dtype, cpus_per_shard=0.5)
    sim = phalanx.Simulator(HUMANOID, E, dtype=dtype)
    m = sim.model
    masses = m.parameter("body_mass") * rng.uniform(0.8, 1.2, (E, m.nbody))
    batch.set_parameter("body_mass", masses)
    sim.set_parameter("body_mass", masses)
    qvel = rng.uniform(-0.5, 0.5, (E, m.nv))
    batch.reset(qvel=qvel)
    sim.reset(qvel=qvel)
    for k in range(30):
        u = humanoid_controls(rng, E, m.nu)
        f = rng.normal(0, 5, (E, m.nv)) if k % 7 == 3 else None
        xf = rng.normal(0, 5, (E, m.nbody, 6)) if k % 5 == 2 else None
        batch.step(u, nstep=2, qfrc=f, xfrc=xf)
        sim.step(u, nstep=2, qfrc=f, xfrc=xf)
        if k == 12:  # environments of two shards back to a given pose
            ids = [1, 4]
            q = np.repeat(m.qpos0[None], 2, 0)
            q[:, 2] += [0.1, 0.2]
            batch.reset(ids, qpos=q)
            sim.reset(ids, qpos=q)
    for name in ("qpos", "qvel", "ctrl", "status", "time"):
        np.testing.assert_array_equal(getattr(batch, name), getattr(sim, name), strict=True)
    np.testing.assert_array_equal(batch.parameter("body_mass"), sim.parameter("body_mass"))
    assert np.any(sim.qvel != qvel[0])  # it moved
    # phalanx.step from given states, the shards' own untouched
    u = humanoid_controls(rng, E, m.nu)
    q1 = sim.qpos + rng.normal(0, 0.01, sim.qpos.shape)
    assert_identical(batch.step(u, 3, qpos=q1, qvel=sim.qvel),
                     phalanx.step(m, q1, sim.qvel, u, nstep=3, dtype=dtype))
    np.testing.assert_array_equal(batch.qpos, sim.qpos)
    batch.close()


def test_rollouts_tapes_and_costs_equal_single_process(rng):
    """rollouts from given states and from the shards' own, taped, with and without a cost;
    the tape's gradients (the cost's own gradient added on the shards) equal phalanx.Tape's"""
    E, T = 5, 40
    batch = pd.ShardedBatch(HUMANOID, E, 2)
    sim = phalanx.Simulator(HUMANOID, E)
    m = sim.model
    for _ in range(5):  # states with contacts and a warm start
        u = humanoid_controls(rng, E, m.nu)
        batch.step(u)
        sim.step(u)
    U = humanoid_controls(rng, E, m.nu, T)
    q0, v0 = sim.qpos.copy(), sim.qvel.copy()

    # from the shards' own states: the warm start of the simulator is not a rollout's
    assert_identical(batch.rollout(ctrl=U), phalanx.rollout(m, q0, v0, U))
    np.testing.assert_array_equal(batch.qpos, q0)  # left unchanged

    q1 = q0 + rng.normal(0, 0.01, q0.shape)
    tape, ref_tape = pd.Tape(checkpoint_every=7), phalanx.Tape(checkpoint_every=7)
    out = batch.rollout(q1, v0, U, tape=tape)
    ref = phalanx.rollout(m, q1, v0, U, tape=ref_tape)
    assert_identical(out, ref)
    aq, av = rng.normal(size=ref[0].shape), rng.normal(size=ref[1].shape)
    grads, ref_grads = tape.backward(aq, av), ref_tape.backward(aq, av)
    assert grads.keys() == ref_grads.keys() and "body_mass" in grads
    assert_identical([grads[k] for k in ref_grads], list(ref_grads.values()))

    cost = 2.0 * phalanx.costs.BodyHeight(m, "head", 1.4) + phalanx.costs.Quadratic(
        m, ctrl_weight=0.1)
    values, status = batch.rollout(ctrl=U, cost=cost, tape=tape)
    qs, vs, ref_status = phalanx.rollout(m, q0, v0, U, tape=ref_tape)
    value, dq, dv, du = cost.value_and_grad(qs, vs, U)
    np.testing.assert_array_equal(values, value.astype(np.float64))
    np.testing.assert_array_equal(status, ref_status)
    grads, ref_grads = tape.backward(), ref_tape.backward(dq, dv)
    np.testing.assert_array_equal(grads["ctrl"], ref_grads["ctrl"] + du)
    np.testing.assert_array_equal(grads["qpos"], ref_grads["qpos"])
    named = tape.backward(grads=("ctrl", "body_mass"))  # the others not computed
    assert named.keys() == {"ctrl", "body_mass"}
    np.testing.assert_array_equal(named["ctrl"], grads["ctrl"])
    np.testing.assert_array_equal(named["body_mass"], grads["body_mass"])
    *trajectories, values2, _ = batch.rollout(ctrl=U, cost=cost, states=True)
    assert_identical(trajectories, (qs, vs))
    np.testing.assert_array_equal(values2, values)
    batch.close()


@pytest.mark.parametrize("kind", ["MPPI", "CEM"])
def test_planners_equal_single_process(kind):
    """3 iterations of 2 problems of 10 samples split 4 / 3 / 3 over three shards: the same
    plans as the single-process planner (built-in terms, and a Python cost)"""
    batch = pd.ShardedBatch(CARTPOLE, 3, 3, cpus_per_shard=0.5)
    m = batch.model
    terms = phalanx.costs.Quadratic(m, qpos_weight=[0.5, 5.0], ctrl_weight=0.01, angle_coords=[1])

    def swing(qs, vs, u):
        return (1 - np.cos(qs[..., 1])).sum(axis=1) + 0.1 * (vs[..., 0] ** 2).sum(axis=1)

    extra = dict(temperature=0.3) if kind == "MPPI" else dict(num_elites=3)
    q = np.repeat(m.qpos0[None], 2, 0)
    q[:, 1] = [3.0, 2.5]
    v = np.zeros((2, m.nv))
    for cost in (terms, swing):
        options = dict(horizon=25, num_samples=10, sigma=0.6, cost=cost, num_problems=2, seed=7,
                       noise_smoothing=0.4, **extra)
        one = getattr(phalanx.control, kind)(m, **options)
        sharded = getattr(pd, kind)(batch, **options)
        for _ in range(3):
            np.testing.assert_array_equal(sharded.plan(q, v, full=True), one.plan(q, v, full=True))
            one.shift()
            sharded.shift()
        np.testing.assert_array_equal(sharded.last_costs, one.last_costs)
        assert np.ptp(one.last_costs) > 0  # the samples differ
    batch.close()


def test_killed_shard_is_restored_and_results_equal_an_uninterrupted_run(rng):
    """A shard killed between steps, another during a rollout, and a taped shard killed before
    the backward pass: each is restarted, restored from its checkpoint (state, warm start,
    parameters) and the calls since replayed; every result equals one Simulator's."""
    E = 4
    batch = pd.ShardedBatch(HUMANOID, E, 2, checkpoint_every=4)
    sim = phalanx.Simulator(HUMANOID, E)
    m = sim.model
    damping = np.linspace(0.5, 2.0, E)[:, None] * m.parameter("dof_damping")[None]
    batch.set_parameter("dof_damping", damping)
    sim.set_parameter("dof_damping", damping)
    with pytest.warns(RuntimeWarning, match="shard 1 died"):
        for k in range(11):
            if k == 6:  # three steps after the last checkpoint (set_parameter and 3 steps)
                kill_and_wait(batch, 1)
            u = humanoid_controls(rng, E, m.nu)
            batch.step(u)
            sim.step(u)
    assert [(f.shard, f.call, f.replayed) for f in batch.faults] == [(1, "step", 3)]
    np.testing.assert_array_equal(batch.qpos, sim.qpos)
    np.testing.assert_array_equal(batch.qvel, sim.qvel)
    np.testing.assert_array_equal(batch.parameter("dof_damping"), sim.parameter("dof_damping"))

    # killed while it runs a long rollout
    U = humanoid_controls(rng, E, m.nu, 20000)
    killer = threading.Timer(0.3, lambda: ray.kill(batch.actor(0), no_restart=False))
    killer.start()
    with pytest.warns(RuntimeWarning, match="shard 0 died during rollout"):
        start = time.monotonic()
        out = batch.rollout(ctrl=U)
    killer.join()
    assert time.monotonic() - start > 0.3
    assert batch.faults[-1].call == "rollout"
    assert_identical(out, phalanx.rollout(m, sim.qpos, sim.qvel, U))

    # the tape's shard dies before the backward pass: it is recorded again
    tape, ref_tape = pd.Tape(), phalanx.Tape()
    V = U[:, :60]
    batch.rollout(ctrl=V, tape=tape)
    ref = phalanx.rollout(m, sim.qpos, sim.qvel, V, tape=ref_tape)
    kill_and_wait(batch, 1)
    aq = rng.normal(size=ref[0].shape)
    with pytest.warns(RuntimeWarning, match="shard 1 died during backward"):
        grads = tape.backward(aq)
    ref_grads = ref_tape.backward(aq)
    assert_identical([grads[k] for k in ref_grads], list(ref_grads.values()))
    assert [f.call for f in batch.faults] == ["step", "rollout", "backward"]
    # and the state it was restored to still steps on as one simulator
    u = humanoid_controls(rng, E, m.nu)
    batch.step(u)
    sim.step(u)
    np.testing.assert_array_equal(batch.qvel, sim.qvel)
    batch.close()


def test_errors():
    with pytest.raises(ValueError, match="num_shards"):
        pd.ShardedBatch(CARTPOLE, 2, 3)
    with pytest.raises(ValueError, match="3 shards of 1 CPU each need 3 CPUs; the Ray cluster has 2 "):
        pd.ShardedBatch(CARTPOLE, 3, 3)
    batch = pd.ShardedBatch(CARTPOLE, 4, 2)
    with pytest.raises(ValueError, match=r"ctrl must have shape \(4, 1\)"):
        batch.step(np.zeros((3, 1)))
    with pytest.raises(ValueError, match=r"phalanx.distributed: env_ids must lie in \[0, 4\)"):
        batch.reset([5])
    with pytest.raises(ValueError, match="unknown parameter"):
        batch.set_parameter("no_such", 1.0)
    with pytest.raises(ValueError, match="both qpos and qvel"):
        batch.rollout(np.zeros((4, 2)), None, np.zeros((4, 5, 1)))
    with pytest.raises(RuntimeError, match="has not recorded"):
        pd.Tape().backward()
    with pytest.raises(ValueError, match="fewer samples"):
        pd.MPPI(batch, horizon=5, num_samples=1, sigma=0.5, temperature=1.0,
                cost=phalanx.costs.Quadratic(batch.model, qpos_weight=1.0)).plan(
                    batch.model.qpos0, np.zeros(2))
    batch.close()


def test_warm_start_checkpoint_restores_the_contacts(rng):
    """WarmStart.state() taken mid-fall and restored into a new WarmStart: the steps that follow
    equal those of the simulator that kept its own (no Ray involved)"""
    E = 3
    a = phalanx.Simulator(HUMANOID, E)
    m = a.model
    for _ in range(30):  # 0.6 s: fallen onto the floor
        a.step(humanoid_controls(rng, E, m.nu), nstep=4)
    saved = a._warm.state()
    assert saved["nefc"].shape == (E, 1) and saved["nefc"].min() > 0  # on the floor
    b = phalanx.Simulator(m, E)
    b.qpos, b.qvel = a.qpos, a.qvel
    b._warm.restore(m, saved)
    c = phalanx.Simulator(m, E)  # the same state, started cold
    c.qpos, c.qvel = a.qpos, a.qvel
    u = humanoid_controls(rng, E, m.nu)
    for s in (a, b, c):
        s.step(u, nstep=3)
    np.testing.assert_array_equal(b.qvel, a.qvel)
    assert not np.array_equal(c.qvel, a.qvel)  # the warm start matters
    with pytest.raises(ValueError, match="does not fit"):
        phalanx.Simulator(m, E + 1)._warm.restore(m, {**saved, "pos": saved["pos"][:, :3]})
