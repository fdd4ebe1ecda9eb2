"""Rollout gradients through phalanx.Tape: the adjoint identity and float32 against float64.

The scene is the sphere sliding on the floor beside a motor-driven pendulum (conftest's
sphere_and_pendulum, stabilised PGS), from states that keep one contact mode for all T = 50
steps (as test_gradients.taped_scene), so the rollout is smooth in its inputs there. Quaternion
coordinates are perturbed and differentiated as the four numbers stored in qpos (step_vjp's
convention: each step normalises them), so no direction needs projecting.

The case of a tape that recorded nothing is in test_gradients.test_tape_errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import phalanx

E, T = 2, 50


@pytest.fixture
def scene(sphere_and_pendulum, rng):
    model = sphere_and_pendulum
    qpos = np.repeat(model.qpos0[None], E, 0)
    qpos[:, 7] = [0.1, -0.2]  # the pendulum's hinge
    qvel = np.array([[1.0, 0.3, -0.05, 0.5, -1.0, 0.2, 0.4],
                     [1.2, -0.2, 0.0, -0.3, 0.8, 0.1, -0.6]])
    ctrl = 0.5 * rng.uniform(-1, 1, (E, T, model.nu))
    return model, qpos, qvel, ctrl


def trajectory(model, qpos, qvel, ctrl):
    """the rollout's trajectories (qpos (n, T, nq), qvel (n, T, nv)) of a batch of n; no
    environment may stop"""
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    assert not (status & (phalanx.STATUS_NAN_STATE | phalanx.STATUS_NAN_CTRL
                          | phalanx.STATUS_NAN_RESULT)).any()
    return qs, vs


def test_adjoint_identity_of_the_rollout(scene, rng):
    # <J v, w> = <v, J^T w> with J the Jacobian of the whole trajectory (qpos and qvel after
    # every step) with respect to (initial qpos, initial qvel, ctrl sequence): J v by central
    # differences along one random direction v of all inputs at once (h = 1e-6, both sides in
    # one batched rollout), J^T w by tape.backward with adjoints w (dense, on qpos or qvel
    # only, on the first or last step only, on one environment only).
    # Expected error: round-off eps |y| / h ~ 1e-10 per entry, truncation O(h^2). Measured:
    # relative errors 4e-11 to 3.5e-10 (at other seeds up to 4.3e-10; h = 1e-5 gives ~1e-8,
    # h = 1e-4 ~1e-6: truncation); checked at 1e-7.
    model, qpos, qvel, ctrl = scene
    h = 1e-6
    vq, vv, vu = (rng.standard_normal(x.shape) for x in (qpos, qvel, ctrl))
    qs, vs = trajectory(model, np.concatenate([qpos + h * vq, qpos - h * vq]),
                        np.concatenate([qvel + h * vv, qvel - h * vv]),
                        np.concatenate([ctrl + h * vu, ctrl - h * vu]))
    jv_q, jv_v = (qs[:E] - qs[E:]) / (2 * h), (vs[:E] - vs[E:]) / (2 * h)

    tape = phalanx.Tape()
    counts = np.zeros((E, T, phalanx.NUM_COUNTS), np.int32)
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape, counts=counts)
    assert (counts[..., phalanx.COUNT_CONTACTS] == 1).all()  # through the contact all along

    def weights(kind):
        wq, wv = rng.standard_normal((E, T, model.nq)), rng.standard_normal((E, T, model.nv))
        if kind == "qpos only":
            wv[:] = 0
        elif kind == "qvel only":
            wq[:] = 0
        elif kind == "last step":
            wq[:, :-1] = wv[:, :-1] = 0
        elif kind == "first step":
            wq[:, 1:] = wv[:, 1:] = 0
        elif kind == "one environment":
            wq[1:] = wv[1:] = 0
        return wq, wv

    errors = {}
    for kind in ["all", "qpos only", "qvel only", "last step", "first step", "one environment"]:
        wq, wv = weights(kind)
        g = tape.backward(wq, wv)
        lhs = float((jv_q * wq).sum() + (jv_v * wv).sum())
        rhs = float((g["qpos"] * vq).sum() + (g["qvel"] * vv).sum() + (g["ctrl"] * vu).sum())
        errors[kind] = abs(rhs - lhs) / abs(lhs)
    print("relative errors of <v, J^T w> against <J v, w>:", errors)
    assert max(errors.values()) < 1e-7, errors


def test_float32_gradients_match_float64(scene, rng):
    # the same rollout gradients (initial state, controls and every model parameter) in
    # float32 and float64, from inputs and adjoints that float32 represents exactly, so the
    # difference is the arithmetic only. Measured normwise relative differences per array:
    # 1e-7 to 1.5e-6 (body_ipos the largest; over six seeds at most 2.8e-6), i.e. float32's
    # unit round-off 6e-8 amplified about 25x over 50 contact steps; checked at 2e-5.
    model, qpos, qvel, ctrl = scene
    wq = rng.standard_normal((E, T, model.nq))
    wv = rng.standard_normal((E, T, model.nv))
    inputs = [x.astype(np.float32) for x in (qpos, qvel, ctrl, wq, wv)]
    grads = {}
    for dtype in (np.float32, np.float64):
        q, v, u, aq, av = (np.ascontiguousarray(x, dtype=dtype) for x in inputs)
        tape = phalanx.Tape()
        phalanx.rollout(model, q, v, u, tape=tape)
        assert tape.dtype == dtype
        grads[dtype] = tape.backward(aq, av)
    errors = {}
    largest = max(np.linalg.norm(g) for g in grads[np.float64].values())
    for key, g64 in grads[np.float64].items():
        g32 = grads[np.float32][key]
        assert g32.dtype == np.float32 and g64.dtype == np.float64 and g32.shape == g64.shape
        scale = np.linalg.norm(g64)
        if scale == 0:  # e.g. restitution: no bounce in this scene
            assert not g32.any(), key
            continue
        if scale < 1e-9 * largest:
            # zero up to round-off (body_pos: where the lone pendulum hangs changes nothing; its
            # gradient is checked where it matters in test_parameters.py): float32's as small
            # against float32's round-off
            assert np.linalg.norm(g32) < 1e-4 * largest, key
            continue
        errors[key] = float(np.linalg.norm(g32 - g64) / scale)
    print("normwise relative differences float32 / float64:", errors)
    assert {"qpos", "qvel", "ctrl", "body_mass", "geom_friction"} <= errors.keys()
    assert max(errors.values()) < 2e-5, errors


def test_a_tape_on_reused_host_memory_gives_the_same_gradients(humanoid, rng):
    """A tape's large host blocks, freed, come back to the next tape of the same size (the CPU
    backend keeps them); a tape recorded there over another rollout's records gives the gradients
    a tape on fresh memory gives, bit for bit."""
    humanoid.contact = humanoid.limit = True  # the tape logs each step's LCP solution too
    n, steps = 64, 200
    qpos = np.repeat(humanoid.qpos0[None], n, 0).astype(np.float32)
    qvel = np.zeros((n, humanoid.nv), np.float32)
    ctrl = rng.uniform(-1, 1, (2, n, steps, humanoid.nu)).astype(np.float32)
    adj = rng.standard_normal((n, steps, humanoid.nq)).astype(np.float32)

    def gradients(c):
        tape = phalanx.Tape()
        phalanx.rollout(humanoid, qpos, qvel, c, tape=tape)
        return tape, tape.backward(adj, None)

    phalanx.release_host_memory()
    tape, fresh = gradients(ctrl[0])
    del tape
    phalanx.release_host_memory()
    tape, _ = gradients(ctrl[1])  # another rollout's records
    del tape
    idle = phalanx.idle_host_bytes()
    assert idle > 2**20
    tape, again = gradients(ctrl[0])
    assert phalanx.idle_host_bytes() < idle  # its blocks came back
    del tape
    for key in ("qpos", "qvel", "ctrl"):
        np.testing.assert_array_equal(again[key], fresh[key])


def test_backward_computes_the_gradients_named_alone(humanoid, rng):
    """Tape.backward(grads=names) and step_vjp(grads=names) return those gradients alone, equal
    bit for bit to the same names of a pass that computes every gradient: the humanoid with its
    contacts, a pack of environments on the lanes and one left over (9 in float32, 5 in
    float64 on an AVX2 host; the same on AVX-512's 16 and 8 lanes but for the remainder)."""
    humanoid.contact = humanoid.limit = True
    for dtype, n in ((np.float32, 9), (np.float64, 5)):
        steps = 60
        qpos = np.repeat(humanoid.qpos0[None], n, 0).astype(dtype)
        qvel = (0.5 * rng.standard_normal((n, humanoid.nv))).astype(dtype)
        ctrl = rng.uniform(-1, 1, (n, steps, humanoid.nu)).astype(dtype)
        wq = rng.standard_normal((n, steps, humanoid.nq)).astype(dtype)
        wv = rng.standard_normal((n, steps, humanoid.nv)).astype(dtype)
        tape = phalanx.Tape()
        counts = np.zeros((n, steps, phalanx.NUM_COUNTS), np.int32)
        phalanx.rollout(humanoid, qpos, qvel, ctrl, tape=tape, counts=counts)
        assert (counts[..., phalanx.COUNT_ROWS] > 0).mean() > 0.5  # steps with rows, mostly
        every = tape.backward(wq, wv)
        assert {"qpos", "qvel", "ctrl", "body_mass", "geom_friction"} <= every.keys()
        for names in (("ctrl",), ("qpos", "qvel", "ctrl"), ["body_mass", "qvel"]):
            some = tape.backward(wq, wv, grads=names)
            assert some.keys() == set(names)
            for name in names:
                np.testing.assert_array_equal(some[name], every[name], err_msg=name)
        u = np.ascontiguousarray(ctrl[:, 0])
        one = phalanx.step_vjp(humanoid, qpos, qvel, u, wq[:, 0], wv[:, 0])
        some = phalanx.step_vjp(humanoid, qpos, qvel, u, wq[:, 0], wv[:, 0],
                                grads=("qfrc", "dof_damping"))
        assert some.keys() == {"qfrc", "dof_damping"}
        for name in some:
            np.testing.assert_array_equal(some[name], one[name], err_msg=name)
    with pytest.raises(ValueError, match="unknown gradient 'mass'"):
        tape.backward(wq, wv, grads=("ctrl", "mass"))
    with pytest.raises(TypeError, match="grads must be a sequence of gradient names"):
        tape.backward(wq, wv, grads="ctrl")
    with pytest.raises(TypeError, match="got <class 'int'> among them"):
        tape.backward(wq, wv, grads=("ctrl", 3))
