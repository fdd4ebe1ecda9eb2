"""The DLPack entry points (_phalanx.*_into), which phalanx.torch runs on: tensors of any
framework read and written where they live, equal bit for bit to the NumPy API."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import phalanx
import phalanx.torch
from phalanx import _phalanx


@pytest.fixture
def scene(sphere_and_pendulum, rng):
    model = sphere_and_pendulum
    E, T = 3, 20
    qpos = np.repeat(model.qpos0[None], E, 0)
    qpos[:, 7] = [0.1, -0.2, 0.3]
    qvel = rng.uniform(-0.5, 0.5, (E, model.nv))
    ctrl = rng.uniform(-0.5, 0.5, (E, T, model.nu))
    return model, qpos, qvel, ctrl


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_step_and_rollout_into_equal_the_numpy_api(scene, framework):
    model, qpos, qvel, ctrl = scene
    E, T = ctrl.shape[:2]
    wrap = (lambda a: a) if framework == "numpy" else torch.from_numpy
    q1, v1, s1 = phalanx.step(model, qpos, qvel, ctrl[:, 0], nstep=3)
    q_out, v_out = np.empty_like(qpos), np.empty_like(qvel)
    status = np.full(E, -1, dtype=np.int32)
    _phalanx.step_into(model, wrap(qpos), wrap(qvel), wrap(ctrl[:, 0].copy()), wrap(q_out),
                       wrap(v_out), wrap(status), 3)
    np.testing.assert_array_equal(q_out, q1)  # written in place, into the caller's memory
    np.testing.assert_array_equal(v_out, v1)
    np.testing.assert_array_equal(status.view(np.uint32), s1)

    tape = phalanx.Tape(checkpoint_every=4)
    qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    w = np.random.default_rng(1).standard_normal(qs.shape)
    ref = tape.backward(w, None)
    qs2, vs2 = np.empty_like(qs), np.empty_like(vs)
    tape2 = phalanx.Tape(checkpoint_every=4)
    _phalanx.rollout_into(model, wrap(qpos), wrap(qvel), wrap(ctrl), wrap(qs2), wrap(vs2),
                          wrap(status), tape2)
    np.testing.assert_array_equal(qs2, qs)
    np.testing.assert_array_equal(vs2, vs)
    grads = {"ctrl": np.empty_like(ctrl), "geom_size": np.empty((E, model.ngeom, 3))}
    _phalanx.tape_backward_into(tape2, wrap(w), None, {k: wrap(v) for k, v in grads.items()}, 0)
    for name, g in grads.items():
        np.testing.assert_array_equal(g, ref[name], err_msg=name)


def test_step_vjp_into_fills_only_what_is_asked(scene, rng):
    model, qpos, qvel, ctrl = scene
    u = ctrl[:, 0].copy()
    wq, wv = rng.standard_normal(qpos.shape), rng.standard_normal(qvel.shape)
    ref = phalanx.step_vjp(model, qpos, qvel, u, wq, wv, complementarity_aware=True)
    grads = {"qvel": np.full_like(qvel, np.nan), "body_mass": np.full((3, model.nbody), np.nan),
             "body_ipos": np.full((3, model.nbody, 3), np.nan)}
    _phalanx.step_vjp_into(model, qpos, qvel, u, wq, wv, grads,
                           _phalanx.GRAD_COMPLEMENTARITY_AWARE)
    for name, g in grads.items():
        np.testing.assert_array_equal(g, ref[name], err_msg=name)


def test_into_errors(scene):
    model, qpos, qvel, ctrl = scene
    E = qpos.shape[0]
    u = ctrl[:, 0].copy()
    out = lambda: (np.empty_like(qpos), np.empty_like(qvel), np.empty(E, dtype=np.int32))  # noqa
    with pytest.raises(ValueError, match=r"qvel must have dtype float64 \(the dtype of qpos\) "
                       r"and shape \(E, nv\) = \(3, 7\), got dtype float32"):
        _phalanx.step_into(model, qpos, qvel.astype(np.float32), u, *out())
    with pytest.raises(ValueError, match=r"ctrl must have shape \(E, nu\) = \(3, 1\), got \(3, 2\)"):
        _phalanx.step_into(model, qpos, qvel, np.zeros((E, 2)), *out())
    with pytest.raises(ValueError, match="qpos must be C-contiguous"):
        _phalanx.step_into(model, np.asfortranarray(np.repeat(qpos, 2, 1)[:, ::2]), qvel, u,
                           *out())
    with pytest.raises(ValueError, match="qpos must be an array with DLPack"):
        _phalanx.step_into(model, qpos.tolist(), qvel, u, *out())
    with pytest.raises(ValueError, match="status_out must have dtype int32"):
        _phalanx.step_into(model, qpos, qvel, u, *out()[:2], np.empty(E))
    with pytest.raises(ValueError, match="unknown gradient 'mass'"):
        _phalanx.step_vjp_into(model, qpos, qvel, u, qpos, qvel, {"mass": np.empty(3)}, 0)
    tape = phalanx.Tape()
    with pytest.raises(RuntimeError, match="holds no rollout"):
        _phalanx.tape_backward_into(tape, np.zeros((E, 1, model.nq)), None, {}, 0)


def test_numpy_dlpack_and_torch_callers_get_the_same_checks(scene):
    # one argument table checks every caller: the same message for the same wrong argument
    model, qpos, qvel, ctrl = scene
    E = qpos.shape[0]
    bad = np.zeros((E, 2))
    expected = r"phalanx: ctrl must have shape \(E, nu\) = \(3, 1\), got \(3, 2\)$"
    with pytest.raises(ValueError, match=expected):
        phalanx.step(model, qpos, qvel, bad)
    with pytest.raises(ValueError, match=expected):
        _phalanx.step_into(model, qpos, qvel, bad, np.empty_like(qpos), np.empty_like(qvel),
                           np.empty(E, np.int32))
    with pytest.raises(ValueError, match=expected):
        phalanx.torch.step(model, torch.from_numpy(qpos), torch.from_numpy(qvel),
                           torch.from_numpy(bad))
    expected = (r"phalanx: adj_qvel_next must have dtype float64 \(the dtype of qpos\) and "
                r"shape \(E, nv\) = \(3, 7\), got dtype float32$")
    adj = (np.ones_like(qpos), np.ones_like(qvel, dtype=np.float32))
    with pytest.raises(ValueError, match=expected):
        phalanx.step_vjp(model, qpos, qvel, ctrl[:, 0], *adj)
    with pytest.raises(ValueError, match=expected):
        _phalanx.step_vjp_into(model, qpos, qvel, ctrl[:, 0].copy(), *adj, {}, 0)
    # a gradient tensor has its parameter's shape, named by the core's table
    with pytest.raises(ValueError, match=r"body_inertia must have shape \(E, nbody, 3\) = "
                                         r"\(3, 3, 3\), got \(3, 3\)"):
        _phalanx.step_vjp_into(model, qpos, qvel, ctrl[:, 0].copy(), *adj[:1], qvel,
                               {"body_inertia": np.empty((E, 3))}, 0)


def test_numpy_conversions_are_those_of_numpy(scene):
    # lists, strided views and other dtypes are read as numpy.ascontiguousarray(x, dtype) reads
    # them: the results equal those of the converted arrays, bit for bit
    model, qpos, qvel, ctrl = scene
    u = ctrl[:, 0].copy()
    ref = phalanx.step(model, qpos.astype(np.float32), qvel.astype(np.float32),
                       u.astype(np.float32))
    wide = np.repeat(qvel, 2, axis=1)[:, ::2]  # not contiguous
    for got in [phalanx.step(model, qpos, qvel, u, dtype=np.float32),
                phalanx.step(model, qpos.tolist(), wide.astype(np.float32), u,
                             dtype="float32")]:
        for a, b in zip(got, ref):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    ref = phalanx.step(model, qpos, qvel, u)
    for a, b in zip(phalanx.step(model, qpos, wide, u), ref):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"qpos must be a float32 or float64 array of shape "
                                         r"\(E, nq\) = \(3, 8\), got dtype int64 \(pass dtype= "
                                         r"to convert\)"):
        phalanx.step(model, qpos.astype(np.int64), qvel, u)
