"""Rollout losses and a one-call loss-and-gradient of a rollout.

A loss is a ``phalanx.costs.Cost``: it maps the trajectories of a rollout, ``qs`` (E, T, nq) and
``vs`` (E, T, nv) (the state after each step, as phalanx.rollout returns them) and the controls
``ctrl`` (E, T, nu) to one value per environment (E,), and ``value_and_grad`` gives its
gradients with respect to those three arrays. The built-in terms of ``phalanx.costs`` (state,
body and centre-of-mass tracking, evaluated in the kernels) are losses as they are; this module
adds tracking with per-environment and per-step targets (``StateCost``) and control effort
(``ControlCost``) in numpy. Losses add: ``StateCost(...) + ControlCost(...)``.

The losses follow the convention of ``phalanx.costs``: a quadratic term is the squared error
without a factor 1/2, weighted by its running weight at every step, and the terminal weight adds
the term once more at the last step. ``StateCost(qpos_weight=W, terminal_qpos_weight=tw * W)``
with a fixed target therefore equals ``costs.Quadratic(model, qpos_weight=W,
terminal_weight=tw)``.
``value_and_grad`` runs the rollout on a tape, evaluates the loss and returns its gradients
with respect to the initial state, the controls and the model parameters.

    loss = losses.StateCost(qpos_target=q_goal, terminal_qpos_weight=100.0) + \
           losses.ControlCost(weight=1e-3)
    value, grads = losses.value_and_grad(model, qpos, qvel, ctrl, loss)
"""

from __future__ import annotations

import numpy as np

import phalanx

from .costs import Cost, quadratic

__all__ = ["Loss", "StateCost", "ControlCost", "value_and_grad"]

Loss = Cost  # a loss is a cost with a gradient


class _NumpyLoss(Cost):
    """a loss defined by ``value_and_grad``; its value is the first output"""

    def __call__(self, qs, vs, ctrl):
        return self.value_and_grad(qs, vs, ctrl)[0]


def _weights(w, n, name):
    w = np.asarray(w, dtype=np.float64)
    if w.ndim > 1 or (w.ndim == 1 and w.shape[0] != n):
        raise ValueError(f"phalanx: {name} must be a scalar or have shape ({n},), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"phalanx: {name} must be finite and >= 0")
    return np.broadcast_to(w, (n,))


class StateCost(_NumpyLoss):
    """Quadratic tracking of qpos and qvel, running and terminal:

        L = sum_t (|x_t - x*|^2_W + |v_t - v*|^2_V) + |x_T-1 - x*|^2_Wf + |v_T-1 - v*|^2_Vf

    per environment, with |e|^2_W = sum_i W_i e_i^2 (the convention of ``phalanx.costs``: no
    factor 1/2, the terminal term added to the running one at the last step), running weights
    W = qpos_weight, V = qvel_weight and terminal weights Wf = terminal_qpos_weight,
    Vf = terminal_qvel_weight (scalars or per coordinate, >= 0). Targets are (nq,) / (nv,),
    (E, n) or (E, T, n); None is zero. Quaternion coordinates are compared as the four stored
    numbers."""

    def __init__(self, qpos_target=None, qvel_target=None, *, qpos_weight=0.0, qvel_weight=0.0,
                 terminal_qpos_weight=0.0, terminal_qvel_weight=0.0):
        self.targets = (qpos_target, qvel_target)
        self.weights = (qpos_weight, qvel_weight, terminal_qpos_weight, terminal_qvel_weight)

    def value_and_grad(self, qs, vs, ctrl):
        value = np.zeros(qs.shape[0])
        grads = []
        for x, target, w, wf, name in [
                (qs, self.targets[0], self.weights[0], self.weights[2], "qpos"),
                (vs, self.targets[1], self.weights[1], self.weights[3], "qvel")]:
            E, T, n = x.shape
            w = _weights(w, n, f"{name}_weight")
            wf = _weights(wf, n, f"terminal_{name}_weight")
            target = np.zeros(n) if target is None else np.asarray(target, dtype=np.float64)
            if target.ndim == 2:
                target = target[:, None, :]
            try:
                target = np.broadcast_to(target, x.shape)
            except ValueError:
                raise ValueError(f"phalanx: {name}_target must have shape ({n},), (E, {n}) or "
                                 f"(E, T, {n}) = ({E}, {T}, {n}), got {target.shape}") from None
            v, g = quadratic(x, target, w, wf)
            value += v
            grads.append(g)
        return value, grads[0], grads[1], np.zeros_like(ctrl)


class ControlCost(_NumpyLoss):
    """Control effort, sum_t |u_t|^2_W = sum_t sum_a W_a u_ta^2 with diagonal weight W (scalar or
    (nu,), >= 0), as ``costs.Quadratic``'s ctrl_weight (no factor 1/2)."""

    def __init__(self, weight=1.0):
        self.weight = weight

    def value_and_grad(self, qs, vs, ctrl):
        value, g = quadratic(ctrl, 0.0, _weights(self.weight, ctrl.shape[2], "weight"))
        return value, np.zeros_like(qs), np.zeros_like(vs), g


def value_and_grad(model, qpos, qvel, ctrl, loss: Cost, *, tape: phalanx.Tape | None = None,
                   complementarity_aware: bool = False, bounce_correction: bool = False,
                   dtype=None, device: str = "cpu"):
    """Roll out (qpos, qvel, ctrl (E, T, nu)) on a tape, evaluate ``loss`` and back-propagate.

    Returns (value (E,), grads) with grads as ``Tape.backward`` gives them (initial ``qpos``,
    ``qvel``, ``ctrl`` including the loss's direct control term, and the per-environment model
    parameters) plus ``qs``, ``vs`` (the trajectories) and ``status``. An environment whose
    rollout stopped raises RuntimeError (phalanx.raise_if_stopped). ``tape`` (default a new
    phalanx.Tape()) sets the checkpoint spacing.
    """
    tape = phalanx.Tape() if tape is None else tape
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl, tape=tape, dtype=dtype,
                                     device=device)
    phalanx.raise_if_stopped(status, "rollout")
    u = np.asarray(ctrl, dtype=qs.dtype)
    value, dq, dv, du = loss.value_and_grad(qs, vs, u)
    grads = tape.backward(dq, dv, complementarity_aware=complementarity_aware,
                          bounce_correction=bounce_correction)
    grads["ctrl"] = grads["ctrl"] + du
    grads.update(qs=qs, vs=vs, status=status)
    return value, grads
