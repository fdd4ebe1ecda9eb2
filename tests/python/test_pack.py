"""SIMD passes over environments on the CPU: a batched rollout or step of a contact-free model
runs packs of environments on vector lanes, and each environment's trajectory must equal the
one it has when rolled out alone (one environment never fills a pack: the scalar kernel), bit
for bit, in float32 and float64, whatever the other environments of its pack do."""

import numpy as np
import pytest

import phalanx


def random_batch(model, rng, nenv, nstep, dtype):
    qpos = np.repeat(model.qpos0[None], nenv, axis=0)
    qpos[:, 7:] += 0.3 * rng.uniform(-1, 1, size=(nenv, model.nq - 7))
    qvel = rng.uniform(-1, 1, size=(nenv, model.nv))
    ctrl = rng.uniform(-1, 1, size=(nenv, nstep, model.nu))
    return qpos.astype(dtype), qvel.astype(dtype), ctrl.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_rollout_equals_each_environment_alone(humanoid, rng, dtype):
    nenv, nstep = 37, 30  # two or four whole packs and a remainder
    qpos, qvel, ctrl = random_batch(humanoid, rng, nenv, nstep, dtype)
    # a lane that branches apart from its pack's at the first step: a zero quaternion on the
    # free joint, which the step normalises to the identity where the others divide by a norm
    qpos[5, 3:7] = 0
    phalanx.pack_stats()
    qs, vs, status = phalanx.rollout(humanoid, qpos, qvel, ctrl)
    stats = phalanx.pack_stats()
    assert not status.any()
    lanes = 16 if dtype == np.float32 else 8  # AVX-512; AVX2 hosts have half
    assert stats["passes"] >= (nenv // lanes) * nstep
    assert stats["fallbacks"] == 1
    for e in range(nenv):
        q1, v1, s1 = phalanx.rollout(humanoid, qpos[e:e + 1], qvel[e:e + 1], ctrl[e:e + 1])
        assert np.array_equal(qs[e], q1[0]), e
        assert np.array_equal(vs[e], v1[0]), e
    assert phalanx.pack_stats()["passes"] == 0  # one environment: the scalar kernel alone


def test_nan_control_stops_only_its_environment(humanoid, rng):
    nenv, nstep = 16, 10
    qpos, qvel, ctrl = random_batch(humanoid, rng, nenv, nstep, np.float64)
    ctrl[6, 4, 0] = np.nan
    qs, vs, status = phalanx.rollout(humanoid, qpos, qvel, ctrl)
    assert status[6] == phalanx.STATUS_NAN_CTRL
    assert not np.delete(status, 6).any()
    # the stopped environment repeats the state it stopped in
    assert np.array_equal(qs[6, 4:], np.repeat(qs[6, 3:4], nstep - 4, axis=0))
    for e in (5, 7):
        q1, _, _ = phalanx.rollout(humanoid, qpos[e:e + 1], qvel[e:e + 1], ctrl[e:e + 1])
        assert np.array_equal(qs[e], q1[0])

