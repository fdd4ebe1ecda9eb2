"""JAX transformations for Phalanx: one step and a whole rollout as ``jax.custom_vjp`` functions.

    import jax, phalanx, phalanx.jax as pj
    jax.config.update("jax_enable_x64", True)      # for float64
    qpos1, qvel1 = pj.step(model, qpos, qvel, ctrl)               # (E, nq), (E, nv)
    grad = jax.grad(lambda u: loss(*pj.rollout(model, qpos0, qvel0, u)))(ctrl_seq)

The simulation runs on the host through ``jax.pure_callback`` and the NumPy API, so the
functions work eagerly, under ``jax.jit`` and with ``jax.grad`` / ``jax.vjp`` (reverse mode
only: forward-mode ``jax.jvp`` is not defined for a custom_vjp). ``jax.vmap`` runs the callback
once per mapped element (``vmap_method="sequential"``); the functions are already batched over
the E environments, which is the fast way. Arrays on an accelerator are copied to the host and
back. float32 and float64 are supported (the dtype of ``qpos``; ``qvel`` and ``ctrl`` must have
the same dtype); float64 needs ``jax_enable_x64``.

Shapes and dtypes are checked when the function is traced and raise ``ValueError`` naming the
expected shape. An environment whose step sets a stopping status bit (``STATUS_NAN_*``) raises
``RuntimeError`` inside the callback, which JAX re-raises (as ``jax.errors.JaxRuntimeError``
under ``jit``, with the message naming the environments).

A model whose actuators have dynamics (``model.na > 0``) carries their activations: pass
``act`` (E, na) and the functions return it after qvel, differentiable like the state.

``params`` maps parameter names (``PARAMETERS``) to arrays of the model's shape, shared by all
environments, with gradients summed over them. Unlike ``phalanx.torch``, the model is not left
changed: the callback sets the parameters, runs, and puts back what it found, so the functions
stay pure (JAX may reorder, repeat or drop callbacks).

The backward of ``step`` calls ``phalanx.step_vjp``; the backward of ``rollout`` keeps only the
inputs as residuals and re-runs the rollout with a ``phalanx.Tape`` inside the callback, then
calls ``tape.backward``: the forward stores nothing beyond the inputs and the trajectory. Both
compute the gradients of the inputs and of the parameters passed in ``params`` alone.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

import phalanx
from phalanx import _phalanx

__all__ = ["step", "rollout", "PARAMETERS"]

PARAMETERS = phalanx.PARAMETERS
_SHAPES = dict(phalanx._PARAMETERS)  # name -> (lambda model: shape)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def step(model: phalanx.Model, qpos, qvel, ctrl, params: Mapping | None = None, *, act=None,
         complementarity_aware: bool = False, bounce_correction: bool = False):
    """One differentiable step: (qpos (E, nq), qvel (E, nv), ctrl (E, nu)) -> (qpos', qvel').

    ``params``: optional dict name -> array of the model's shape (see the module docstring);
    the model is restored after the call. The contact-gradient options are those of
    ``phalanx.step_vjp``. A model with actuator activations (``model.na > 0``) needs ``act``
    (E, na); the result is then (qpos', qvel', act'), differentiable in act too.
    """
    qpos, qvel, ctrl, act, params = _check(model, qpos, qvel, ctrl, act, params, rollout=False)
    options = (bool(complementarity_aware), bool(bounce_correction))
    out = _step(model, options, qpos, qvel, ctrl, act, params)
    return out if model.na > 0 else out[:2]


def rollout(model: phalanx.Model, qpos0, qvel0, ctrl, params: Mapping | None = None, *,
            act=None, mocap_pos=None, mocap_quat=None, checkpoint_every: int = 0,
            memory_budget: int = 0, complementarity_aware: bool = False,
            bounce_correction: bool = False):
    """T differentiable steps driven by ctrl (E, T, nu) -> (qpos (E, T, nq), qvel (E, T, nv)).

    The backward re-runs the rollout onto ``phalanx.Tape(checkpoint_every, memory_budget)``
    and calls ``tape.backward``. ``params`` as in ``step``. With actuator activations pass the
    initial ``act`` (E, na); the result is then (qpos, qvel, act (E, T, na)). ``mocap_pos``
    (E, T, nmocap, 3) and ``mocap_quat`` (E, T, nmocap, 4), each optional, are the mocap
    bodies' poses of each step, as ``phalanx.rollout`` takes them, differentiable (they replace
    the parameters of those names, which ``params`` must then not hold).
    """
    qpos0, qvel0, ctrl, act, params = _check(model, qpos0, qvel0, ctrl, act, params,
                                             rollout=True)
    poses = {}
    for name, value in (("mocap_pos", mocap_pos), ("mocap_quat", mocap_quat)):
        if value is not None:
            if name in params:
                raise ValueError(f"phalanx.jax: {name} is given per step and in params; pass "
                                 "one of them")
            poses[name] = jnp.asarray(value, qpos0.dtype)
    options = (int(checkpoint_every), int(memory_budget), bool(complementarity_aware),
               bool(bounce_correction))
    out = _rollout(model, options, qpos0, qvel0, ctrl, act, params, poses)
    return out if model.na > 0 else out[:2]


# The functions below carry the activations act (E, na) always, of width 0 when the model has
# none (the NumPy API then takes and returns none).

# ---- one step ----

@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _step(model, options, qpos, qvel, ctrl, act, params):
    return _step_fwd(model, options, qpos, qvel, ctrl, act, params)[0]


def _step_fwd(model, options, qpos, qvel, ctrl, act, params):
    def host(qpos, qvel, ctrl, act, params):
        q, v, u, a = _arrays(qpos, qvel, ctrl, act)
        with phalanx.model_parameters(model, params):
            out = phalanx.step(model, q, v, u, act=_act(model, a))
        phalanx.raise_if_stopped(out[-1], "step")
        return out[0], out[1], out[2] if model.na > 0 else a

    out = _callback(host, (_like(qpos), _like(qvel), _like(act)), qpos, qvel, ctrl, act, params)
    return out, (qpos, qvel, ctrl, act, params)


def _step_bwd(model, options, residuals, cotangents):
    qpos, qvel, ctrl, act, params = residuals
    complementarity_aware, bounce_correction = options

    def host(qpos, qvel, ctrl, act, params, adj_qpos, adj_qvel, adj_act):
        q, v, u, a, aq, av, aa = _arrays(qpos, qvel, ctrl, act, adj_qpos, adj_qvel, adj_act)
        with phalanx.model_parameters(model, params):
            g = phalanx.step_vjp(model, q, v, u, aq, av, act=_act(model, a),
                                 adj_act_next=_act(model, aa),
                                 complementarity_aware=complementarity_aware,
                                 bounce_correction=bounce_correction,
                                 grads=_names(model, params))
        return _grads(g, q.dtype, params, a)

    adj = [jnp.asarray(c, qpos.dtype) for c in cotangents]
    shapes = (_like(qpos), _like(qvel), _like(ctrl), _like(act),
              {n: _like(p) for n, p in params.items()})
    return _callback(host, shapes, qpos, qvel, ctrl, act, params, *adj)


_step.defvjp(_step_fwd, _step_bwd)


# ---- rollout ----

@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _rollout(model, options, qpos0, qvel0, ctrl, act0, params, poses):
    return _rollout_fwd(model, options, qpos0, qvel0, ctrl, act0, params, poses)[0]


def _rollout_fwd(model, options, qpos0, qvel0, ctrl, act0, params, poses):
    E, T = ctrl.shape[:2]

    def host(qpos0, qvel0, ctrl, act0, params, poses):
        q, v, u, a = _arrays(qpos0, qvel0, ctrl, act0)
        with phalanx.model_parameters(model, params):
            out = phalanx.rollout(model, q, v, u, act=_act(model, a), **_poses(poses))
        phalanx.raise_if_stopped(out[-1], "rollout")
        acts = out[2] if model.na > 0 else np.zeros((E, T, 0), q.dtype)
        return out[0], out[1], acts

    shapes = (jax.ShapeDtypeStruct((E, T, model.nq), qpos0.dtype),
              jax.ShapeDtypeStruct((E, T, model.nv), qpos0.dtype),
              jax.ShapeDtypeStruct((E, T, model.na), qpos0.dtype))
    out = _callback(host, shapes, qpos0, qvel0, ctrl, act0, params, poses)
    return out, (qpos0, qvel0, ctrl, act0, params, poses)


def _rollout_bwd(model, options, residuals, cotangents):
    qpos0, qvel0, ctrl, act0, params, poses = residuals
    checkpoint_every, memory_budget, complementarity_aware, bounce_correction = options

    def host(qpos0, qvel0, ctrl, act0, params, poses, adj_qpos, adj_qvel, adj_act):
        q, v, u, a, aq, av, aa = _arrays(qpos0, qvel0, ctrl, act0, adj_qpos, adj_qvel, adj_act)
        tape = phalanx.Tape(checkpoint_every=checkpoint_every, memory_budget=memory_budget)
        with phalanx.model_parameters(model, params):
            status = phalanx.rollout(model, q, v, u, tape=tape, act=_act(model, a),
                                     **_poses(poses))[-1]
        phalanx.raise_if_stopped(status, "rollout")
        g = tape.backward(aq, av, adj_act=_act(model, aa),
                          complementarity_aware=complementarity_aware,
                          bounce_correction=bounce_correction,
                          grads=_names(model, params, poses))
        return (*_grads(g, q.dtype, params, a), {n: g[n].astype(q.dtype) for n in poses})

    adj = [jnp.asarray(c, qpos0.dtype) for c in cotangents]
    shapes = (_like(qpos0), _like(qvel0), _like(ctrl), _like(act0),
              {n: _like(p) for n, p in params.items()}, {n: _like(p) for n, p in poses.items()})
    return _callback(host, shapes, qpos0, qvel0, ctrl, act0, params, poses, *adj)


_rollout.defvjp(_rollout_fwd, _rollout_bwd)


# ---- helpers ----

def _callback(host, shapes, *args):
    return jax.pure_callback(host, shapes, *args, vmap_method="sequential")


def _like(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


def _arrays(*xs):
    """C-contiguous numpy arrays of the callback's arguments (no copy when they already are)"""
    return [np.ascontiguousarray(x) for x in xs]


def _poses(poses):
    """the per-step mocap poses as phalanx.rollout's keyword arguments"""
    return {n: np.ascontiguousarray(p) for n, p in poses.items()}


def _act(model, a):
    """the activations for the NumPy API: None for a model without any"""
    return a if model.na > 0 else None


def _names(model, params, poses=()):
    """the gradients _grads reads (and a rollout's per-step poses'): the others are not
    computed"""
    return ("qpos", "qvel", "ctrl", *(("act",) if model.na > 0 else ()), *params, *poses)


def _grads(g, dtype, params, act):
    """(qpos, qvel, ctrl, act, params) gradients; act's is empty without activations"""
    ga = g["act"].astype(dtype, copy=False) if "act" in g else np.zeros(act.shape, dtype)
    out = (g["qpos"].astype(dtype, copy=False), g["qvel"].astype(dtype, copy=False),
           g["ctrl"].astype(dtype, copy=False), ga,
           {n: g[n].sum(axis=0).astype(np.asarray(p).dtype) for n, p in params.items()})
    return out


def _check(model, qpos, qvel, ctrl, act, params, rollout):
    """the arguments as jax arrays, their shapes and dtypes checked (at trace time); act (E, na)
    of width 0 for a model without activations"""
    if not isinstance(model, phalanx.Model):
        raise TypeError(f"phalanx.jax: model must be a phalanx.Model, got {type(model).__name__}")
    qpos, qvel, ctrl = jnp.asarray(qpos), jnp.asarray(qvel), jnp.asarray(ctrl)
    if act is None and model.na > 0:
        raise ValueError(f"phalanx.jax: the model has actuator activations (na = {model.na}): "
                         "pass act= (E, na) (zeros start at rest)")
    act = jnp.zeros((qpos.shape[0], 0), qpos.dtype) if act is None else jnp.asarray(act)
    if act.shape != (qpos.shape[0], model.na) or act.dtype != qpos.dtype:
        raise ValueError(f"phalanx.jax: act must have shape (E, na) = ({qpos.shape[0]}, "
                         f"{model.na}) and qpos's dtype {qpos.dtype}, got {act.shape} "
                         f"{act.dtype}")
    dtype = np.dtype(qpos.dtype)
    if dtype not in _FLOATS:
        raise ValueError(f"phalanx.jax: qpos must be float32 or float64, got {dtype} (float64 "
                         "needs jax.config.update('jax_enable_x64', True))")
    # shapes and dtypes as the core checks every call, on stand-ins of the arrays (which hold no
    # values while jax traces)
    stand_ins = [np.empty(x.shape, np.dtype(x.dtype)) for x in (qpos, qvel, ctrl)]
    _phalanx.check_state(model, *stand_ins, rollout)
    checked = {}
    for name, value in ({} if params is None else params).items():
        if name not in _SHAPES:
            raise ValueError(f"phalanx.jax: unknown parameter {name!r}; the differentiable "
                             f"parameters are {', '.join(PARAMETERS)}")
        value = jnp.asarray(value)
        shape = tuple(_SHAPES[name](model))
        if value.shape != shape:
            raise ValueError(f"phalanx.jax: params[{name!r}] must have the model's shape "
                             f"{shape}, got {value.shape}")
        if np.dtype(value.dtype) not in _FLOATS:
            raise ValueError(f"phalanx.jax: params[{name!r}] must be float32 or float64, got "
                             f"{value.dtype}")
        checked[name] = value
    return qpos, qvel, ctrl, act, checked


