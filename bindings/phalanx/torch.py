"""PyTorch autograd for Phalanx: one step and a whole checkpointed rollout as differentiable
functions of the state, the controls and (optionally) the model parameters.

    import phalanx, phalanx.torch as pt
    qpos1, qvel1 = pt.step(model, qpos, qvel, ctrl)                       # (E, nq), (E, nv)
    qs, vs = pt.rollout(model, qpos0, qvel0, ctrl_seq, params={"body_mass": mass})
    loss(qs, vs).backward()          # grads of qpos0, qvel0, ctrl_seq (E, T, nu) and mass

Inputs are CPU tensors of shape (E, n), float32 or float64 (the dtype of ``qpos``; ``qvel`` and
``ctrl`` must have the same dtype). They are handed to the NumPy API without a copy when they are
C-contiguous; results are new tensors. Tensors on another device raise ``ValueError``: the CUDA
path of Phalanx needs a GPU build (PHX_CUDA=ON) and is not wired to torch yet, so move the
tensors with ``.cpu()``. Wrong shapes raise the ``ValueError`` of the NumPy API naming the
expected shape, e.g. ``ctrl must have shape (E, nu) = (2, 1)``.

An environment whose step sets a stopping status bit (``phalanx.STATUS_NAN_STATE``,
``STATUS_NAN_CTRL``, ``STATUS_NAN_RESULT``) makes the call raise ``RuntimeError`` naming the
environments. The warning bits (``STATUS_CONTACT_OVERFLOW``, ``STATUS_LCP_NOT_CONVERGED``) are
not reported here; call ``phalanx.step`` / ``phalanx.rollout`` directly to read them.

The backward passes call ``phalanx.step_vjp`` (one step) and ``phalanx.Tape.backward`` (a
rollout): gradients are exact for smooth dynamics and, through contacts, on the clamping set of
the LCP (use ``model.lcp_solver = "pgs_stabilized"`` or ``"dantzig"``); see ``phalanx.step_vjp``
for ``complementarity_aware`` and ``bounce_correction``. Double backward and the torch.func
transforms (vmap, jacrev, jvp) are not supported; ``torch.autograd.functional.jacobian`` (one
backward per output) works.

Parameters (``params``) may be float32 or float64 tensors of any requires_grad; the model stores
their values as float64 (a float32 value is stored exactly as that float32 number).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import numpy as np
import torch
from torch.autograd.function import once_differentiable

import phalanx

__all__ = ["step", "rollout", "PARAMETERS"]

# the differentiable model parameters (names of model.set_parameter and step_vjp's gradients)
PARAMETERS = tuple(name for name, _ in phalanx._PARAMETERS)
_SHAPES = dict(phalanx._PARAMETERS)  # name -> (lambda model: shape)
_FLOATS = (torch.float32, torch.float64)


def step(model: phalanx.Model, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor,
         params: Mapping[str, torch.Tensor] | None = None, *,
         complementarity_aware: bool = False,
         bounce_correction: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One differentiable step: (qpos (E, nq), qvel (E, nv), ctrl (E, nu)) -> (qpos', qvel').

    ``params`` maps parameter names (``PARAMETERS``: body_mass, body_inertia, dof_damping,
    dof_armature, jnt_stiffness, actuator_gear, geom_friction, geom_restitution) to tensors of
    the model's shape for that parameter (e.g. body_mass (nbody,)), shared by all environments.
    **The forward writes them into the model with model.set_parameter**, so the model keeps
    them afterwards (later calls without ``params`` use them). Their gradients are summed over
    the environments. The backward differentiates at the parameters the forward ran with, even
    if the model was changed in between (it sets them for the VJP and puts back what it found).
    Note that body 0 (the world) has mass 0 and a parameter must stay valid (non-negative
    masses), which limits finite-difference checks to the other entries.
    """
    names, values = _params(model, params)
    qpos, qvel, ctrl = _state(qpos, qvel, ctrl, ctrl_ndim=2)
    options = (bool(complementarity_aware), bool(bounce_correction))
    return _Step.apply(model, options, names, qpos, qvel, ctrl, *values)


def rollout(model: phalanx.Model, qpos0: torch.Tensor, qvel0: torch.Tensor, ctrl: torch.Tensor,
            params: Mapping[str, torch.Tensor] | None = None, *, checkpoint_every: int = 0,
            memory_budget: int = 0, complementarity_aware: bool = False,
            bounce_correction: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """T differentiable steps driven by ctrl (E, T, nu) from (qpos0 (E, nq), qvel0 (E, nv)).

    Returns (qpos (E, T, nq), qvel (E, T, nv)), the state after each step, as phalanx.rollout.
    When a gradient is needed the forward records a ``phalanx.Tape(checkpoint_every,
    memory_budget)`` (see its docstring: a checkpoint every ceil(sqrt(T)) steps by default) and
    the backward calls ``tape.backward``; gradients flow to qpos0, qvel0, ctrl and ``params``.
    ``params`` is as in ``step``: the forward writes them into the model (which keeps them);
    the tape holds the model it recorded, so the backward is unaffected by later changes.
    """
    names, values = _params(model, params)
    qpos0, qvel0, ctrl = _state(qpos0, qvel0, ctrl, ctrl_ndim=3)
    options = (int(checkpoint_every), int(memory_budget), bool(complementarity_aware),
               bool(bounce_correction))
    return _Rollout.apply(model, options, names, qpos0, qvel0, ctrl, *values)


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, options, names, qpos, qvel, ctrl, *values):
        _set_parameters(model, names, values)
        q1, v1, status = phalanx.step(model, _numpy(qpos), _numpy(qvel), _numpy(ctrl))
        phalanx.raise_if_stopped(status, "step")
        ctx.model, ctx.options, ctx.names = model, options, names
        ctx.param_dtypes = [v.dtype for v in values]
        if any(ctx.needs_input_grad):
            # every parameter as the forward saw it, so that the backward linearises there
            ctx.snapshot = {n: np.array(getattr(model, n)) for n in PARAMETERS}
            ctx.save_for_backward(qpos, qvel, ctrl)
        return torch.from_numpy(q1), torch.from_numpy(v1)

    @staticmethod
    @once_differentiable
    def backward(ctx, adj_qpos, adj_qvel):
        qpos, qvel, ctrl = ctx.saved_tensors
        complementarity_aware, bounce_correction = ctx.options
        adj_q = _adjoint(adj_qpos, qpos)
        adj_v = _adjoint(adj_qvel, qvel)
        with _model_parameters(ctx.model, ctx.snapshot):
            g = phalanx.step_vjp(ctx.model, _numpy(qpos), _numpy(qvel), _numpy(ctrl), adj_q,
                                 adj_v, complementarity_aware=complementarity_aware,
                                 bounce_correction=bounce_correction)
        return (None, None, None, *_grads(ctx, g))


class _Rollout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, options, names, qpos0, qvel0, ctrl, *values):
        checkpoint_every, memory_budget = options[:2]
        _set_parameters(model, names, values)
        tape = None
        if any(ctx.needs_input_grad):
            tape = phalanx.Tape(checkpoint_every=checkpoint_every, memory_budget=memory_budget)
        qs, vs, status = phalanx.rollout(model, _numpy(qpos0), _numpy(qvel0), _numpy(ctrl),
                                         tape=tape)
        phalanx.raise_if_stopped(status, "rollout")
        ctx.tape, ctx.options, ctx.names = tape, options, names
        ctx.param_dtypes = [v.dtype for v in values]
        ctx.dtype = qpos0.dtype
        return torch.from_numpy(qs), torch.from_numpy(vs)

    @staticmethod
    @once_differentiable
    def backward(ctx, adj_qpos, adj_qvel):
        complementarity_aware, bounce_correction = ctx.options[2:]
        g = ctx.tape.backward(
            None if adj_qpos is None else _numpy(adj_qpos.to(ctx.dtype)),
            None if adj_qvel is None else _numpy(adj_qvel.to(ctx.dtype)),
            complementarity_aware=complementarity_aware, bounce_correction=bounce_correction)
        return (None, None, None, *_grads(ctx, g))


def _grads(ctx, g):
    """the gradients of (qpos, qvel, ctrl, *params) from a step_vjp / tape.backward dict"""
    out = [torch.from_numpy(g["qpos"]), torch.from_numpy(g["qvel"]), torch.from_numpy(g["ctrl"])]
    for name, dtype in zip(ctx.names, ctx.param_dtypes):
        out.append(torch.from_numpy(g[name].sum(axis=0)).to(dtype))  # shared by every env
    return out


def _state(qpos, qvel, ctrl, ctrl_ndim):
    """check the state arguments' type, device and dtype (the NumPy API checks shapes)"""
    tensors = {"qpos": qpos, "qvel": qvel, "ctrl": ctrl}
    for name, t in tensors.items():
        _check_tensor(name, t)
    dtype = qpos.dtype
    for name, t in tensors.items():
        if t.dtype != dtype:
            raise ValueError(f"phalanx.torch: {name} must have dtype {dtype} (the dtype of "
                             f"qpos), got {t.dtype}")
    if ctrl.dim() != ctrl_ndim:
        shape = "(E, nu)" if ctrl_ndim == 2 else "(E, T, nu)"
        raise ValueError(f"phalanx.torch: ctrl must have shape {shape}, got {tuple(ctrl.shape)}")
    return qpos, qvel, ctrl


def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"phalanx.torch: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(
            f"phalanx.torch: {name} is on device '{t.device}', but phalanx.torch runs on the CPU "
            "only; move it with .cpu() (the CUDA path needs a GPU build of Phalanx, "
            "PHX_CUDA=ON, and is not wired to torch yet)")
    if t.dtype not in _FLOATS:
        raise ValueError(f"phalanx.torch: {name} must be float32 or float64, got {t.dtype}")


def _params(model, params):
    """(names, tensors) of a params dict, checked against the model's parameter shapes"""
    if not isinstance(model, phalanx.Model):
        raise TypeError(f"phalanx.torch: model must be a phalanx.Model, got "
                        f"{type(model).__name__}")
    if params is None:
        return (), ()
    names, values = [], []
    for name, value in params.items():
        if name not in _SHAPES:
            raise ValueError(f"phalanx.torch: unknown parameter {name!r}; the differentiable "
                             f"parameters are {', '.join(PARAMETERS)}")
        _check_tensor(f"params[{name!r}]", value)
        shape = tuple(_SHAPES[name](model))
        if tuple(value.shape) != shape:
            raise ValueError(f"phalanx.torch: params[{name!r}] must have the model's shape "
                             f"{shape}, got {tuple(value.shape)}")
        names.append(name)
        values.append(value)
    return tuple(names), tuple(values)


def _set_parameters(model, names, values):
    for name, value in zip(names, values):
        model.set_parameter(name, value.detach().numpy().astype(np.float64))


@contextlib.contextmanager
def _model_parameters(model, values):
    """set the model parameters in ``values`` where they differ, and restore them on exit"""
    changed = {}
    try:
        for name, value in values.items():
            current = np.array(getattr(model, name))  # a copy: the attribute is a view
            if not np.array_equal(current, value):
                changed[name] = current
                model.set_parameter(name, value)
        yield
    finally:
        for name, value in changed.items():
            model.set_parameter(name, value)


def _numpy(t: torch.Tensor) -> np.ndarray:
    """a C-contiguous numpy view of a CPU tensor (a copy only when it is not contiguous)"""
    return t.detach().contiguous().numpy()


def _adjoint(adj, like):
    if adj is None:
        return np.zeros(tuple(like.shape), dtype=_numpy(like).dtype)
    return _numpy(adj.to(like.dtype))

