"""phalanx.torch and phalanx.jax: autograd wrappers of step and of a taped rollout.

torch.autograd.gradcheck compares the backward passes (phalanx.step_vjp, Tape.backward) with
finite differences of the forward, in double, on the scene of test_gradients.py (a sphere sliding
on the floor, one contact mode throughout, beside a motor-driven pendulum) and on the
contact-free double pendulum. Measured worst |analytic - numeric| entries of the Jacobians with
eps 1e-6: 1.4e-10 (step), 2e-9 (rollout of 30 steps), 1.2e-9 (body_mass), 8e-9 (geom_friction),
so the checks use atol 1e-7 and rtol 1e-6, tighter than gradcheck's defaults (1e-5, 1e-3).
jax.grad must equal the torch gradient of the same loss (both call the same NumPy API) and a
central difference along a random direction.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import phalanx
import phalanx.jax as pj
import phalanx.torch as pt
from phalanx.testing import assert_close, random_state

jax.config.update("jax_enable_x64", True)

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
GRADCHECK = dict(eps=1e-6, atol=1e-7, rtol=1e-6)

@pytest.fixture
def scene(sphere_and_pendulum, rng):
    """the sliding sphere and the pendulum: model, qpos (2, 8), qvel (2, 7), ctrl (2, 50, 1) in
    double (states away from contact-mode switches, see test_gradients.taped_scene)"""
    model = sphere_and_pendulum
    qpos = np.repeat(model.qpos0[None], 2, 0)
    qpos[:, 7] = [0.1, -0.2]
    qvel = np.array([[1.0, 0.3, -0.05, 0.5, -1.0, 0.2, 0.4],
                     [1.2, -0.2, 0.0, -0.3, 0.8, 0.1, -0.6]])
    ctrl = 0.5 * rng.uniform(-1, 1, (2, 50, model.nu))
    return model, qpos, qvel, ctrl


@pytest.fixture
def pendulum(rng):
    """the double pendulum (two hinges, no contacts, no actuators) at random states"""
    model = phalanx.load_model(MODELS / "double_pendulum.xml")
    qpos, qvel = random_state(model, 2, rng, qpos_scale=0.5, qvel_scale=1.0)
    return model, qpos, qvel


def tensors(*arrays, dtype=torch.float64, grad=True):
    return [torch.tensor(a, dtype=dtype, requires_grad=grad) for a in arrays]


# ---- torch: gradcheck against finite differences ----

def test_torch_step_gradcheck(scene):
    model, qpos, qvel, ctrl = scene
    q, v, u = tensors(qpos, qvel, ctrl[:, 0])
    assert torch.autograd.gradcheck(lambda q, v, u: pt.step(model, q, v, u), (q, v, u),
                                    **GRADCHECK)


def test_torch_rollout_gradcheck(scene):
    # the full Jacobian (one backward per output entry) of 30 steps of one environment ...
    model, qpos, qvel, ctrl = scene
    q, v, u = tensors(qpos[1:], qvel[1:], ctrl[1:, :30])
    assert torch.autograd.gradcheck(lambda q, v, u: pt.rollout(model, q, v, u), (q, v, u),
                                    **GRADCHECK)
    # ... and random projections of it for both environments over 50 steps, checkpointed
    q, v, u = tensors(qpos, qvel, ctrl)
    assert torch.autograd.gradcheck(
        lambda q, v, u: pt.rollout(model, q, v, u, checkpoint_every=7), (q, v, u),
        fast_mode=True, **GRADCHECK)


@pytest.mark.parametrize("name", ["body_mass", "dof_damping", "actuator_gear", "geom_friction"])
def test_torch_parameter_gradcheck(scene, name):
    # a shared parameter: its gradient is the per-environment gradients summed. The world body
    # has mass 0 and a negative mass is invalid, so for body_mass only bodies 1.. are perturbed
    model, qpos, qvel, ctrl = scene
    p0 = torch.tensor(getattr(model, name), dtype=torch.float64)
    first = 1 if name == "body_mass" else 0
    head = p0[:first]

    def with_tail(tail):
        return {name: torch.cat([head, tail]) if first else tail}

    tail = p0[first:].clone().requires_grad_()
    q, v = tensors(qpos, qvel, grad=False)
    u = torch.tensor(ctrl)
    try:
        assert torch.autograd.gradcheck(
            lambda p: pt.step(model, q, v, u[:, 0], with_tail(p)), (tail,), **GRADCHECK)
        assert torch.autograd.gradcheck(
            lambda p: pt.rollout(model, q[:1], v[:1], u[:1, :20], with_tail(p)), (tail,),
            **GRADCHECK)
    finally:
        model.set_parameter(name, p0.numpy())


def test_torch_double_pendulum_gradcheck(pendulum):
    # contact-free, no actuators (ctrl (E, 0)): state and parameter gradients of step and rollout
    model, qpos, qvel = pendulum
    assert model.nu == 0
    q, v = tensors(qpos, qvel)
    u1, u = torch.zeros(2, 0, dtype=torch.float64), torch.zeros(1, 40, 0, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda q, v: pt.step(model, q, v, u1), (q, v), **GRADCHECK)
    assert torch.autograd.gradcheck(lambda q, v: pt.rollout(model, q, v, u), (q[:1], v[:1]),
                                    **GRADCHECK)
    mass = torch.tensor(model.body_mass)
    damping = torch.tensor(model.dof_damping, requires_grad=True)
    tail = mass[1:].clone().requires_grad_()
    try:
        assert torch.autograd.gradcheck(
            lambda m, d: pt.rollout(model, q[:1].detach(), v[:1].detach(), u,
                                    {"body_mass": torch.cat([mass[:1], m]), "dof_damping": d}),
            (tail, damping), **GRADCHECK)
    finally:
        model.set_parameter("body_mass", mass.numpy())
        model.set_parameter("dof_damping", damping.detach().numpy())


def test_torch_rollout_equals_chained_steps(scene, rng):
    # the taped rollout and T chained step Functions: the same trajectory and gradients up to
    # round-off (the rollout warm-starts the LCP, a step starts cold, and pgs_stabilized re-solves
    # exactly on the clamping set either way); every checkpoint spacing gives identical gradients
    model, qpos, qvel, ctrl = scene
    ctrl = ctrl[:, :20]
    wq, wv = torch.tensor(rng.standard_normal((2, 20, 8))), torch.tensor(
        rng.standard_normal((2, 20, 7)))
    grads = []
    for every in [None, 1, 5, 0]:
        q, v, u = tensors(qpos, qvel, ctrl)
        if every is None:
            states, s = [], (q, v)
            for t in range(20):
                s = pt.step(model, *s, u[:, t])
                states.append(s)
            qs, vs = torch.stack([a for a, _ in states], 1), torch.stack([b for _, b in states], 1)
            reference = (qs.detach(), vs.detach())
        else:
            qs, vs = pt.rollout(model, q, v, u, checkpoint_every=every)
            torch.testing.assert_close(qs, reference[0], rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(vs, reference[1], rtol=1e-12, atol=1e-14)
        ((wq * qs).sum() + (wv * vs).sum() + (qs ** 2).sum()).backward()
        grads.append([q.grad, v.grad, u.grad])
    for g in grads[1:]:
        for a, b in zip(g, grads[0]):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for g in grads[2:]:
        for a, b in zip(g, grads[1]):
            assert torch.equal(a, b)


def test_torch_parameters_are_set_and_used_by_backward(scene):
    # the forward writes params into the model; the backward linearises at the forward's
    # parameters even when the model changed in between, and leaves the model as it found it
    model, qpos, qvel, ctrl = scene
    mass0 = np.array(model.body_mass)
    q, v, u = tensors(qpos, qvel, ctrl[:, 0], grad=False)
    try:
        grads = []
        for change in [False, True]:
            m = torch.tensor([0.0, 2.0, 0.9], dtype=torch.float64, requires_grad=True)
            q1, v1 = pt.step(model, q, v, u, {"body_mass": m})
            np.testing.assert_array_equal(model.body_mass, [0.0, 2.0, 0.9])
            if change:
                model.set_parameter("body_mass", mass0)
            v1.sum().backward()
            grads.append(m.grad)
            expected = mass0 if change else [0.0, 2.0, 0.9]
            np.testing.assert_array_equal(model.body_mass, expected)
        assert torch.equal(grads[0], grads[1]) and grads[0][1] != 0
    finally:
        model.set_parameter("body_mass", mass0)


# ---- jax: the same gradients as torch and as central differences ----

def loss_weights(rng, shape_q, shape_v):
    return rng.standard_normal(shape_q), rng.standard_normal(shape_v)


def jax_loss(fn, model, wq, wv):
    """L = sum(wq qpos) + sum(wv qvel) + sum(qpos^2)/2 of step or rollout outputs"""
    def loss(q, v, u, mass):
        qs, vs = fn(model, q, v, u, {"body_mass": mass})
        return jnp.sum(wq * qs) + jnp.sum(wv * vs) + 0.5 * jnp.sum(qs ** 2)
    return loss


def torch_grad(fn, model, wq, wv, qpos, qvel, ctrl, mass):
    q, v, u, m = tensors(qpos, qvel, ctrl, mass)
    qs, vs = fn(model, q, v, u, {"body_mass": m})
    (torch.sum(torch.tensor(wq) * qs) + torch.sum(torch.tensor(wv) * vs)
     + 0.5 * torch.sum(qs ** 2)).backward()
    return [x.grad.numpy() for x in (q, v, u, m)]


@pytest.mark.parametrize("kind", ["step", "rollout"])
def test_jax_grad_matches_torch_and_central_differences(scene, rng, kind):
    model, qpos, qvel, ctrl = scene
    mass = np.array(model.body_mass)
    if kind == "step":
        jfn, tfn, ctrl = pj.step, pt.step, ctrl[:, 0]
        wq, wv = loss_weights(rng, qpos.shape, qvel.shape)
    else:
        jfn, tfn = pj.rollout, pt.rollout
        wq, wv = loss_weights(rng, (2, 50, 8), (2, 50, 7))
    loss = jax_loss(jfn, model, wq, wv)
    args = (qpos, qvel, ctrl, mass)
    g_jax = jax.grad(loss, argnums=(0, 1, 2, 3))(*args)
    g_jit = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*args)
    g_torch = torch_grad(tfn, model, wq, wv, *args)
    np.testing.assert_array_equal(model.body_mass, mass)  # jax leaves the model unchanged
    for name, gj, gjit, gt in zip(["qpos", "qvel", "ctrl", "body_mass"], g_jax, g_jit, g_torch):
        assert gj.dtype == np.float64
        np.testing.assert_allclose(gj, gt, rtol=1e-10, atol=1e-12 * np.abs(gt).max(),
                                   err_msg=name)
        np.testing.assert_allclose(gjit, gj, rtol=1e-12, atol=0, err_msg=name)
    # central differences along a random direction of each argument (body 0 stays at mass 0)
    h = 1e-6
    for i, name in enumerate(["qpos", "qvel", "ctrl", "body_mass"]):
        d = rng.standard_normal(args[i].shape)
        if name == "body_mass":
            d[0] = 0.0
        plus = [a + h * d if j == i else a for j, a in enumerate(args)]
        minus = [a - h * d if j == i else a for j, a in enumerate(args)]
        fd = (float(loss(*plus)) - float(loss(*minus))) / (2 * h)
        ad = float(np.sum(np.asarray(g_jax[i]) * d))
        assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), name


def test_jax_rollout_checkpoints_and_vjp(scene, rng):
    # the backward re-runs the rollout onto a tape: every spacing gives the same gradient, and
    # jax.vjp's cotangents reach Tape.backward unchanged
    model, qpos, qvel, ctrl = scene
    wq, wv = rng.standard_normal((2, 50, 8)), rng.standard_normal((2, 50, 7))
    outs = []
    for every in [1, 4, 0]:
        (qs, vs), vjp = jax.vjp(
            lambda q, v, u: pj.rollout(model, q, v, u, checkpoint_every=every), qpos, qvel, ctrl)
        outs.append(vjp((jnp.asarray(wq), jnp.asarray(wv))))
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    g = tape.backward(wq, wv)
    for out in outs:
        for key, x in zip(["qpos", "qvel", "ctrl"], out):
            np.testing.assert_array_equal(np.asarray(x), g[key], err_msg=key)


# ---- errors ----

def test_torch_errors(scene):
    model, qpos, qvel, ctrl = scene
    q, v, u, us = tensors(qpos, qvel, ctrl[:, 0], ctrl)
    # another device: "meta" tensors stand in for CUDA ones on a machine without a GPU
    meta = torch.empty(2, 8, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match=r"qpos is on device 'meta'; phalanx.torch takes CPU and "
                                         r"CUDA tensors"):
        pt.step(model, meta, v, u)
    with pytest.raises(ValueError, match="params\\['body_mass'\\] is on device 'meta'"):
        pt.rollout(model, q, v, us, {"body_mass": torch.empty(3, device="meta")})
    # NaN: the stopped environments are named
    bad = qpos.copy()
    bad[1, 0] = np.nan
    with pytest.raises(RuntimeError, match=r"step stopped in 1 of 2 environment\(s\): 1 \(NaN/inf "
                                           r"state\)"):
        pt.step(model, torch.tensor(bad), v, u)
    bad_ctrl = ctrl.copy()
    bad_ctrl[0, 3] = np.inf
    with pytest.raises(RuntimeError, match=r"rollout stopped in 1 of 2 environment\(s\): 0 "
                                           r"\(NaN/inf ctrl\)"):
        pt.rollout(model, q, v, torch.tensor(bad_ctrl))
    # shapes: the NumPy API's messages
    with pytest.raises(ValueError, match=r"ctrl must have shape \(E, nu\) = \(2, 1\)"):
        pt.step(model, q, v, torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"qvel must have shape \(E, nv\) = \(2, 7\)"):
        pt.rollout(model, q, v[:, :6], us)
    with pytest.raises(ValueError, match=r"ctrl must have shape \(E, T, nu\)"):
        pt.rollout(model, q, v, u)
    with pytest.raises(ValueError, match=r"params\['body_mass'\] must have the model's shape "
                                         r"\(3,\), got \(2,\)"):
        pt.step(model, q, v, u, {"body_mass": torch.ones(2, dtype=torch.float64)})
    with pytest.raises(ValueError, match="unknown parameter 'mass'"):
        pt.step(model, q, v, u, {"mass": torch.ones(3)})
    # dtypes and types
    with pytest.raises(ValueError, match=r"qvel must have dtype float64 \(the dtype of qpos\)"):
        pt.step(model, q, v.float(), u)
    with pytest.raises(ValueError, match="qpos must be float32 or float64, got torch.bfloat16"):
        pt.step(model, q.bfloat16(), v, u)
    with pytest.raises(TypeError, match="qpos must be a torch.Tensor"):
        pt.step(model, qpos, v, u)
    # a rejected parameter value leaves the model unchanged
    mass = np.array(model.body_mass)
    with pytest.raises(ValueError, match=r"body_mass: entry 1 is -1, expected >= 0"):
        pt.step(model, q, v, u, {"body_mass": torch.tensor([0.0, -1.0, 1.0])})
    np.testing.assert_array_equal(model.body_mass, mass)


def test_jax_errors(scene):
    model, qpos, qvel, ctrl = scene
    with pytest.raises(ValueError, match=r"ctrl must have shape \(E, nu\) = \(2, 1\), got "
                                         r"\(2, 50, 1\)"):
        pj.step(model, qpos, qvel, ctrl)
    with pytest.raises(ValueError, match=r"ctrl must have shape \(E, T, nu\) = \(2, T, 1\)"):
        pj.rollout(model, qpos, qvel, ctrl[:, 0])
    with pytest.raises(ValueError, match="qvel must have dtype float64"):
        pj.step(model, qpos, qvel.astype(np.float32), ctrl[:, 0])
    with pytest.raises(ValueError, match=r"params\['geom_friction'\] must have the model's shape"):
        pj.step(model, qpos, qvel, ctrl[:, 0], {"geom_friction": np.ones(3)})
    bad = qpos.copy()
    bad[1, 0] = np.nan
    # raised in the host callback; JAX re-raises it as a JaxRuntimeError (a RuntimeError)
    with pytest.raises(RuntimeError, match=r"step stopped in 1 of 2 environment\(s\): 1 \(NaN/inf "
                                           r"state\)"):
        pj.step(model, bad, qvel, ctrl[:, 0])
    # the checks are the core's, the same for phalanx and phalanx.jax
    for args in [(qpos, qvel[:, :3], ctrl[:, 0]), (qpos, qvel.astype(np.float32), ctrl[:, 0])]:
        with pytest.raises(ValueError) as numpy_error:
            phalanx.step(model, *args)
        with pytest.raises(ValueError) as jax_error:
            pj.step(model, *args)
        assert str(jax_error.value) == str(numpy_error.value)
    with pytest.raises(RuntimeError, match=r"rollout stopped in 1 of 2 environment"):
        jax.jit(lambda q: pj.rollout(model, q, qvel, ctrl))(bad)[0].block_until_ready()


# ---- float32 ----

def test_float32_agrees_with_float64(scene, rng):
    # float32 rounds at 2^-24 = 6e-8 relative; 50 steps through the contact LCP and the backward
    # pass of the tape leave ~3e-7 (trajectory) and ~1e-6 (gradients) relative error in the
    # norm of each environment (measured). The bounds 1e-5 and 1e-4 keep a ~30x margin and still
    # catch a wrong Jacobian or a lost step (both O(1) relative changes).
    model, qpos, qvel, ctrl = scene
    wq, wv = rng.standard_normal((2, 50, 8)), rng.standard_normal((2, 50, 7))
    results = {}
    for dtype in [torch.float64, torch.float32]:
        q, v, u, m = tensors(qpos, qvel, ctrl, model.body_mass, dtype=dtype)
        qs, vs = pt.rollout(model, q, v, u, {"body_mass": m})
        assert qs.dtype == vs.dtype == dtype
        ((torch.tensor(wq, dtype=dtype) * qs).sum() + (torch.tensor(wv, dtype=dtype) * vs).sum()
         ).backward()
        assert q.grad.dtype == m.grad.dtype == dtype
        q1, v1 = pt.step(model, q.detach(), v.detach(), u[:, 0].detach())
        results[dtype] = [x.detach().double().numpy() for x in
                          (qs, vs, q1, v1, q.grad, v.grad, u.grad, m.grad[None])]
        if dtype == torch.float32:  # and jax in float32 gives the same trajectory
            jq, jv = pj.rollout(model, *(np.asarray(x, np.float32) for x in (qpos, qvel, ctrl)))
            assert jq.dtype == jnp.float32
            np.testing.assert_array_equal(np.asarray(jq), qs.detach().numpy())
    names = ["qpos", "qvel", "step qpos", "step qvel", "grad qpos", "grad qvel", "grad ctrl",
             "grad body_mass"]
    worst = [assert_close(results[torch.float32][i], results[torch.float64][i],
                          rtol=1e-5 if i < 4 else 1e-4, what=name)
             for i, name in enumerate(names)]
    assert max(worst) > 1e-8  # the float32 path really computed in float32


def test_torch_does_not_change_phalanx_threads():
    """torch and Phalanx share the process's OpenMP runtime, and torch sets OpenMP's thread
    count; Phalanx keeps its own, so its count and its results stay as set"""
    model = phalanx.load_model(str(MODELS / "cartpole.xml"))
    ctrl = np.random.default_rng(0).uniform(-1, 1, (64, 20, 1))
    before = phalanx.num_threads()
    try:
        phalanx.set_num_threads(1)
        one = phalanx.Simulator(model, 64).rollout(ctrl)
        phalanx.set_num_threads(2)
        torch.set_num_threads(1)
        torch.randn(512, 512).sum()  # a parallel op: torch sets OpenMP's count to 1
        assert phalanx.num_threads() == 2
        two = phalanx.Simulator(model, 64).rollout(ctrl)
        for a, b in zip(one, two):  # environments are independent of the thread split
            np.testing.assert_array_equal(a, b)
    finally:
        phalanx.set_num_threads(before)
