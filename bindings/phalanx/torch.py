"""PyTorch autograd for Phalanx: one step and a whole checkpointed rollout as differentiable
functions of the state, the controls and (optionally) the model parameters.

    import phalanx, phalanx.torch as pt
    qpos1, qvel1 = pt.step(model, qpos, qvel, ctrl)                       # (E, nq), (E, nv)
    qs, vs = pt.rollout(model, qpos0, qvel0, ctrl_seq, params={"body_mass": mass})
    loss(qs, vs).backward()          # grads of qpos0, qvel0, ctrl_seq (E, T, nu) and mass
    body = pt.kinematics(model, qpos, qvel)   # xpos, xmat, site_xpos, site_xmat, com, com_vel

Inputs are tensors of shape (E, n), float32 or float64 (the dtype of ``qpos``; ``qvel`` and
``ctrl`` must have the same dtype), all on the CPU or all on one CUDA device. They reach the
kernels through DLPack without a copy (C-contiguous tensors; others are made contiguous first),
and the results, new tensors on the same device, are written by the kernels in place: no host
round trip on either device. CUDA tensors need a build with the CUDA backend and a GPU (else
``RuntimeError``); other devices raise ``ValueError``. Wrong shapes raise ``ValueError`` naming
the expected shape, e.g. ``ctrl must have shape (E, nu) = (2, 1)``.

An environment whose step sets a stopping status bit (``phalanx.STATUS_NAN_STATE``,
``STATUS_NAN_CTRL``, ``STATUS_NAN_RESULT``) makes the call raise ``RuntimeError`` naming the
environments. The warning bits (``STATUS_CONTACT_OVERFLOW``, ``STATUS_LCP_NOT_CONVERGED``) are
not reported here; call ``phalanx.step`` / ``phalanx.rollout`` directly to read them.

The backward passes are ``phalanx.step_vjp`` (one step) and ``phalanx.Tape.backward`` (a
rollout), computing only the gradients autograd asks for. They are exact for smooth dynamics
and, through contacts, on the clamping set of the LCP (use ``model.lcp_solver =
"pgs_stabilized"`` or ``"dantzig"``); see ``phalanx.step_vjp`` for ``complementarity_aware``
and ``bounce_correction``. Double backward and the torch.func
transforms (vmap, jacrev, jvp) are not supported; ``torch.autograd.functional.jacobian`` (one
backward per output) works.

A model whose actuators have dynamics (``model.na > 0``) carries their activations: pass
``act`` (E, na) and the functions return it after qvel, with its gradient flowing like the
state's.

Parameters (``params``) may be float32 or float64 tensors of any requires_grad; the model stores
their values as float64 (a float32 value is stored exactly as that float32 number).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch.autograd.function import once_differentiable

import phalanx
from phalanx import _phalanx

__all__ = ["step", "rollout", "kinematics", "PARAMETERS"]

# the differentiable model parameters (names of model.set_parameter and step_vjp's gradients)
PARAMETERS = phalanx.PARAMETERS
_SHAPES = dict(phalanx._PARAMETERS)  # name -> (lambda model: shape)
_FLOATS = (torch.float32, torch.float64)


def step(model: phalanx.Model, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor,
         params: Mapping[str, torch.Tensor] | None = None, *, act: torch.Tensor | None = None,
         complementarity_aware: bool = False,
         bounce_correction: bool = False) -> tuple[torch.Tensor, ...]:
    """One differentiable step: (qpos (E, nq), qvel (E, nv), ctrl (E, nu)) -> (qpos', qvel').

    A model with actuator activations (``model.na > 0``) needs ``act`` (E, na); the result is
    then (qpos', qvel', act'), differentiable in act too.

    ``params`` maps parameter names (``phalanx.PARAMETERS``: body_mass, body_inertia,
    dof_damping, dof_armature, jnt_stiffness, actuator_gear, body_ipos, geom_friction,
    geom_restitution, geom_size) to tensors of the model's shape for that parameter (e.g.
    body_mass (nbody,)), shared by all environments.
    **The forward writes them into the model with model.set_parameter**, so the model keeps
    them afterwards (later calls without ``params`` use them). Their gradients are summed over
    the environments. The backward differentiates at the parameters the forward ran with, even
    if the model was changed in between (it sets them for the VJP and puts back what it found).
    Note that body 0 (the world) has mass 0 and a parameter must stay valid (non-negative
    masses), which limits finite-difference checks to the other entries.
    """
    names, values = _params(model, params)
    qpos, qvel, ctrl, act = _state(model, qpos, qvel, ctrl, act)
    options = (bool(complementarity_aware), bool(bounce_correction))
    out = _Step.apply(model, options, names, qpos, qvel, ctrl, act, *values)
    return out if model.na > 0 else out[:2]


def rollout(model: phalanx.Model, qpos0: torch.Tensor, qvel0: torch.Tensor, ctrl: torch.Tensor,
            params: Mapping[str, torch.Tensor] | None = None, *, act: torch.Tensor | None = None,
            mocap_pos: torch.Tensor | None = None, mocap_quat: torch.Tensor | None = None,
            checkpoint_every: int = 0, memory_budget: int = 0,
            complementarity_aware: bool = False,
            bounce_correction: bool = False) -> tuple[torch.Tensor, ...]:
    """T differentiable steps driven by ctrl (E, T, nu) from (qpos0 (E, nq), qvel0 (E, nv)).

    Returns (qpos (E, T, nq), qvel (E, T, nv)), the state after each step, as phalanx.rollout.
    When a gradient is needed the forward records a ``phalanx.Tape(checkpoint_every,
    memory_budget)`` (see its docstring: a checkpoint every ceil(sqrt(T)) steps or fewer by default) and
    the backward calls ``tape.backward``; gradients flow to qpos0, qvel0, ctrl and ``params``.
    ``params`` is as in ``step``: the forward writes them into the model (which keeps them);
    the tape holds the model it recorded, so the backward is unaffected by later changes. With
    actuator activations pass the initial ``act`` (E, na); the result is then (qpos, qvel, act
    (E, T, na)). ``mocap_pos`` (E, T, nmocap, 3) and ``mocap_quat`` (E, T, nmocap, 4), each
    optional, are the mocap bodies' poses of each step, as ``phalanx.rollout`` takes them, and
    receive their gradients per step (they replace the parameters of those names, which
    ``params`` must then not hold).
    """
    names, values = _params(model, params)
    qpos0, qvel0, ctrl, act = _state(model, qpos0, qvel0, ctrl, act)
    for name, t in (("mocap_pos", mocap_pos), ("mocap_quat", mocap_quat)):
        if t is not None:
            _check_tensor(name, t)
            if name in names:
                raise ValueError(f"phalanx.torch: {name} is given per step and in params; "
                                 "pass one of them")
    options = (int(checkpoint_every), int(memory_budget), bool(complementarity_aware),
               bool(bounce_correction))
    out = _Rollout.apply(model, options, names, qpos0, qvel0, ctrl, act, mocap_pos, mocap_quat,
                         *values)
    return out if model.na > 0 else out[:2]


_KINEMATICS = ("xpos", "xmat", "site_xpos", "site_xmat", "com", "com_vel")


def kinematics(model: phalanx.Model, qpos: torch.Tensor,
               qvel: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Body and site frames and the centre of mass as differentiable functions of the state:
    ``phalanx.kinematics``' ``xpos`` (E, nbody, 3), ``xmat`` (E, nbody, 3, 3), ``site_xpos``
    (E, nsite, 3), ``site_xmat`` (E, nsite, 3, 3), ``com`` (E, 3) and, with qvel, ``com_vel``
    (E, 3), for rewards and observations that read them. The backward is
    ``phalanx.kinematics_vjp``. The arrays go through numpy (a copy each way), on the device of
    qpos."""
    _check_tensor("qpos", qpos)
    if qvel is not None:
        _check_tensor("qvel", qvel)
    outs = _Kinematics.apply(model, qpos, qvel)
    names = _KINEMATICS if qvel is not None else _KINEMATICS[:-1]
    return dict(zip(names, outs))


def _device(t: torch.Tensor) -> str:
    return "cuda" if t.is_cuda else "cpu"


class _Kinematics(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, qpos, qvel):
        q = qpos.detach().cpu().numpy()
        v = None if qvel is None else qvel.detach().cpu().numpy()
        k = phalanx.kinematics(model, q, v, device=_device(qpos))
        ctx.model = model
        ctx.has_qvel = qvel is not None
        ctx.save_for_backward(*((qpos, qvel) if ctx.has_qvel else (qpos,)))
        names = _KINEMATICS if qvel is not None else _KINEMATICS[:-1]
        return tuple(torch.from_numpy(np.ascontiguousarray(k[n])).to(qpos.device)
                     for n in names)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        qpos = saved[0]
        qvel = saved[1] if ctx.has_qvel else None
        seeds = {n: None if g is None else g.detach().cpu().numpy()
                 for n, g in zip(_KINEMATICS, grads)}
        adj = phalanx.kinematics_vjp(ctx.model, qpos.detach().cpu().numpy(),
                                     None if qvel is None else qvel.detach().cpu().numpy(),
                                     device=_device(qpos), **seeds)
        gq = torch.from_numpy(adj["qpos"]).to(qpos.device)
        gv = torch.from_numpy(adj["qvel"]).to(qpos.device) if qvel is not None else None
        return None, gq, gv


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, options, names, qpos, qvel, ctrl, act, *values):
        _set_parameters(model, names, values)
        E = qpos.shape[0]
        q1, v1 = _empty(qpos, (E, model.nq)), _empty(qpos, (E, model.nv))
        a1 = act.detach().clone().contiguous()  # advanced in place
        status = _empty(qpos, (E,), torch.int32)
        _phalanx.step_into(model, _dl(qpos), _dl(qvel), _dl(ctrl), q1, v1, status, 1, None,
                           _carried(model, a1))
        phalanx.raise_if_stopped(_status(status), "step")
        ctx.model, ctx.options, ctx.names = model, options, names
        ctx.param_dtypes = [v.dtype for v in values]
        if any(ctx.needs_input_grad):
            # every parameter as the forward saw it, so that the backward linearises there
            ctx.snapshot = {n: model.parameter(n) for n in PARAMETERS}
            ctx.save_for_backward(qpos, qvel, ctrl, act)
        return q1, v1, a1

    @staticmethod
    @once_differentiable
    def backward(ctx, adj_qpos, adj_qvel, adj_act):
        qpos, qvel, ctrl, act = ctx.saved_tensors
        grads = _grad_tensors(ctx, qpos, ctrl.shape)
        with phalanx.model_parameters(ctx.model, ctx.snapshot):
            _phalanx.step_vjp_into(ctx.model, _dl(qpos), _dl(qvel), _dl(ctrl),
                                   _dl(_adjoint(adj_qpos, qpos, ctx.model.nq)),
                                   _dl(_adjoint(adj_qvel, qpos, ctx.model.nv)), _carried_grads(
                                       ctx.model, grads), phalanx._gradient_flags(*ctx.options),
                                   _carried(ctx.model, _dl(act)),
                                   _carried(ctx.model, _dl(_adjoint(adj_act, qpos,
                                                                    ctx.model.na))))
        return (None, None, None, *_grads(ctx, grads))


class _Rollout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, model, options, names, qpos0, qvel0, ctrl, act0, mocap_pos, mocap_quat,
                *values):
        checkpoint_every, memory_budget = options[:2]
        _set_parameters(model, names, values)
        tape = None
        if any(ctx.needs_input_grad):
            tape = phalanx.Tape(checkpoint_every=checkpoint_every, memory_budget=memory_budget)
        E, T = qpos0.shape[0], ctrl.shape[1] if ctrl.dim() == 3 else 0
        qs, vs = _empty(qpos0, (E, T, model.nq)), _empty(qpos0, (E, T, model.nv))
        acts = _empty(qpos0, (E, T, model.na))
        status = _empty(qpos0, (E,), torch.int32)
        poses = {name: _dl(t.to(qpos0.dtype)) for name, t in
                 (("mocap_pos", mocap_pos), ("mocap_quat", mocap_quat)) if t is not None}
        _phalanx.rollout_into(model, _dl(qpos0), _dl(qvel0), _dl(ctrl), qs, vs, status, tape,
                              None, _carried(model, act0.detach().clone().contiguous()),
                              _carried(model, acts), **poses)
        phalanx.raise_if_stopped(_status(status), "rollout")
        ctx.model, ctx.tape, ctx.options, ctx.names = model, tape, options, names
        ctx.param_dtypes = [v.dtype for v in values]
        ctx.like, ctx.ctrl_shape = qpos0.detach(), ctrl.shape
        ctx.inputs = {name: (tuple(t.shape) if name in poses else None, t.dtype if name in poses
                             else None) for name, t in (("mocap_pos", mocap_pos),
                                                        ("mocap_quat", mocap_quat))}
        return qs, vs, acts

    @staticmethod
    @once_differentiable
    def backward(ctx, adj_qpos, adj_qvel, adj_act):
        grads = _grad_tensors(ctx, ctx.like, ctx.ctrl_shape, ctx.inputs)
        dtype = ctx.like.dtype
        _phalanx.tape_backward_into(
            ctx.tape, None if adj_qpos is None else _dl(adj_qpos.to(dtype)),
            None if adj_qvel is None else _dl(adj_qvel.to(dtype)),
            _carried_grads(ctx.model, grads), phalanx._gradient_flags(*ctx.options[2:]),
            None if adj_act is None else _carried(ctx.model, _dl(adj_act.to(dtype))))
        return (None, None, None, *_grads(ctx, grads))


def _dl(t: torch.Tensor) -> torch.Tensor:
    """a tensor DLPack can export: detached (no autograd history) and C-contiguous"""
    return t.detach().contiguous()


def _empty(like: torch.Tensor, shape, dtype=None) -> torch.Tensor:
    return torch.empty(shape, dtype=like.dtype if dtype is None else dtype, device=like.device)


def _zeros(like: torch.Tensor, shape) -> torch.Tensor:
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def _status(status: torch.Tensor) -> np.ndarray:
    return status.cpu().numpy().view(np.uint32)


def _adjoint(adj, like, n):
    """the adjoint of an output (zeros for None) in the inputs' dtype and device"""
    if adj is None:
        return torch.zeros((like.shape[0], n), dtype=like.dtype, device=like.device)
    return adj.to(like.dtype)


def _grad_tensors(ctx, like, ctrl_shape, inputs=None):
    """the gradient tensors the backward fills: those autograd asks for (inputs after model,
    options and names: qpos, qvel, ctrl, act, the further inputs (name -> (shape, dtype), shape
    None for one not given: a rollout's per-step mocap poses), then the parameters), per
    environment"""
    E, model = like.shape[0], ctx.model
    need = ctx.needs_input_grad[3:]
    shapes = {"qpos": (E, model.nq), "qvel": (E, model.nv), "ctrl": tuple(ctrl_shape),
              "act": (E, model.na), **{k: v[0] for k, v in (inputs or {}).items()}}
    grads = {name: _zeros(like, shape) for (name, shape), wanted in zip(shapes.items(), need)
             if wanted and shape is not None}
    for name, wanted in zip(ctx.names, need[len(shapes):]):
        if wanted:
            grads[name] = _empty(like, (E, *_SHAPES[name](model)))
    return grads


def _carried(model, t):
    """the activations' tensor for the extension: None for a model without any"""
    return t if model.na > 0 else None


def _carried_grads(model, grads):
    """the gradient tensors the extension fills: act's only for a model with activations"""
    return grads if model.na > 0 else {k: v for k, v in grads.items() if k != "act"}


def _grads(ctx, grads):
    """the gradients of (qpos, qvel, ctrl, act, *inputs, *params) from the filled tensors, in
    each input's dtype; a parameter shared by every environment gets the sum of theirs"""
    out = [grads.get(name) for name in ("qpos", "qvel", "ctrl", "act")]
    for name, (_, dtype) in getattr(ctx, "inputs", {}).items():
        out.append(grads[name].to(dtype) if name in grads else None)
    for name, dtype in zip(ctx.names, ctx.param_dtypes):
        out.append(grads[name].sum(dim=0).to(dtype) if name in grads else None)
    return out


def _state(model, qpos, qvel, ctrl, act):
    """check that the state arguments are float tensors on the CPU or CUDA (their shapes, common
    dtype and device are checked by the core, as for every caller); act (E, na), of width 0 for
    a model without activations"""
    for name, t in (("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)):
        _check_tensor(name, t)
    if act is None:
        if model.na > 0:
            raise ValueError(f"phalanx.torch: the model has actuator activations (na = "
                             f"{model.na}): pass act= (E, na) (zeros start at rest)")
        act = torch.zeros((qpos.shape[0], 0), dtype=qpos.dtype, device=qpos.device)
    _check_tensor("act", act)
    return qpos, qvel, ctrl, act


def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"phalanx.torch: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"phalanx.torch: {name} is on device '{t.device}'; phalanx.torch takes CPU and CUDA "
            "tensors (move it with .cpu() or .cuda())")
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

