"""Long runs: a million humanoid env-steps under random controls and pushes stay finite and
running; a NaN in one environment changes nothing of another (steps, rollouts on SIMD packs,
tapes); resident memory stays flat over thousands of calls."""

from __future__ import annotations

import os

import numpy as np
import pytest

import phalanx
import phalanx.control
import phalanx.costs
from conftest import HUMANOID


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_million_humanoid_steps_with_pushes_stay_finite(dtype):
    """1000 humanoids x 1000 steps with contacts: controls uniform over the actuators' range,
    each step chunk 10 % of them pushed on the torso (normal forces of 200 N), a third reset
    every 300 steps. No state may become non-finite and no environment may stop (no STATUS_NAN
    bit); the falls do reach high speeds, so the check is not vacuous."""
    E, chunks, nstep = 1000, 100, 10
    sim = phalanx.Simulator(HUMANOID, E, dtype=dtype)
    m = sim.model
    rng = np.random.default_rng(0)
    lo, hi = np.asarray(m.actuator_ctrlrange).reshape(-1, 2).T
    torso = m.body_id("torso")
    seen = np.zeros(E, np.uint32)
    fastest = 0.0
    for c in range(chunks):
        xfrc = np.zeros((E, m.nbody, 6))
        pushed = rng.random(E) < 0.1
        xfrc[pushed, torso, :3] = rng.normal(0, 200, (pushed.sum(), 3))
        sim.step(rng.uniform(lo, hi, (E, m.nu)), nstep=nstep, xfrc=xfrc)
        assert np.isfinite(sim.qpos).all() and np.isfinite(sim.qvel).all(), f"chunk {c}"
        fastest = max(fastest, float(np.abs(sim.qvel).max()))
        if c % 30 == 29:
            seen |= sim.status
            sim.reset(np.flatnonzero(rng.random(E) < 0.3))
    seen |= sim.status
    assert not np.any(seen & phalanx.STATUS_STOP_MASK)
    assert fastest > 10.0  # rad/s or m/s: the pushes and falls are violent
    assert np.all(sim.time > 0)


def isolated(run, E, bad, *args):
    """run(*args) on E environments, one of which (bad) gets NaN controls, against the same call
    on the E - 1 others alone: every output row of the others must be identical"""
    keep = np.flatnonzero(np.arange(E) != bad)
    return run(*args), run(*[a[keep] for a in args]), keep


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_nan_in_one_environment_changes_no_other(dtype, rng):
    """Humanoids with contacts, 19 environments (SIMD packs of several lanes with a remainder):
    environment 6 gets a NaN control half-way. Steps, rollouts and a taped rollout's gradients
    of the 18 others equal those of a batch without it, bit for bit, status bits included; the
    bad one stops with STATUS_NAN_CTRL."""
    E, T, bad = 19, 60, 6
    model = phalanx.load_model(HUMANOID)
    lo, hi = np.asarray(model.actuator_ctrlrange).reshape(-1, 2).T
    qpos = np.repeat(model.qpos0[None], E, 0).astype(dtype)
    qpos[:, 2] -= 0.3  # the feet start on the floor: contacts from the first step
    qvel = rng.uniform(-0.5, 0.5, (E, model.nv)).astype(dtype)
    ctrl = rng.uniform(lo, hi, (E, T, model.nu)).astype(dtype)
    ctrl[bad, T // 2:, 3] = np.nan

    def roll(q, v, u):
        return phalanx.rollout(model, q, v, u)

    (qs, vs, status), (qs1, vs1, status1), keep = isolated(roll, E, bad, qpos, qvel, ctrl)
    np.testing.assert_array_equal(qs[keep], qs1)
    np.testing.assert_array_equal(vs[keep], vs1)
    np.testing.assert_array_equal(status[keep], status1)
    assert status[bad] & phalanx.STATUS_NAN_CTRL

    def step(q, v, u):
        return phalanx.step(model, q, v, u, nstep=5)

    out, out1, keep = isolated(step, E, bad, qs[:, T // 2 - 1], vs[:, T // 2 - 1], ctrl[:, T // 2])
    for a, b in zip(out, out1):
        np.testing.assert_array_equal(a[keep], b)
    assert out[-1][bad] & phalanx.STATUS_NAN_CTRL

    def taped(q, v, u):
        tape = phalanx.Tape(checkpoint_every=7)
        qs, vs, _ = phalanx.rollout(model, q, v, u, tape=tape)
        g = tape.backward(np.ones_like(qs), np.ones_like(vs))
        return g["ctrl"], g["qpos"], g["body_mass"]

    grads, grads1, keep = isolated(taped, E, bad, qpos, qvel, ctrl)
    for a, b in zip(grads, grads1):
        np.testing.assert_array_equal(a[keep], b)
    assert not np.any(grads[0][bad])  # the stopped environment has zero gradients


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_flat_over_thousands_of_calls(rng):
    """2000 rounds of step, rollout, a taped rollout's backward pass, a Simulator step and an
    MPPI iteration (10^4 calls) on the humanoid with contacts. Resident memory is read every 200
    rounds after the first 200: the median growth per 200 rounds stays under 128 KB (a leak of
    640 bytes per round would exceed it: one trajectory of the batch is 18 KB) and the whole
    growth under 16 MB. (The allocators grow the heap in one-off steps of a few MB, which the
    median ignores.)"""
    E, T = 8, 10
    model = phalanx.load_model(HUMANOID)
    lo, hi = np.asarray(model.actuator_ctrlrange).reshape(-1, 2).T
    qpos = np.repeat(model.qpos0[None], E, 0)
    qpos[:, 2] -= 0.3
    qvel = np.zeros((E, model.nv))
    sim = phalanx.Simulator(model, E)
    mppi = phalanx.control.MPPI(model, horizon=5, num_samples=8, sigma=0.2, temperature=1.0,
                                cost=phalanx.costs.BodyHeight(model, "head", 1.4))

    def one_round():
        u = rng.uniform(lo, hi, (E, T, model.nu))
        phalanx.step(model, qpos, qvel, u[:, 0], nstep=2)
        tape = phalanx.Tape()
        qs, vs, _ = phalanx.rollout(model, qpos, qvel, u, tape=tape)
        tape.backward(np.ones_like(qs), np.ones_like(vs))
        sim.step(u[:, 0])
        mppi.plan(qpos[0], qvel[0])

    for _ in range(200):
        one_round()
    readings = [resident_bytes()]
    for _ in range(9):
        for _ in range(200):
            one_round()
        readings.append(resident_bytes())
    steps = np.diff(readings)
    assert np.median(steps) < 128 * 2**10, f"resident memory by 200 rounds: {readings}"
    assert readings[-1] - readings[0] < 16 * 2**20, f"resident memory: {readings}"
