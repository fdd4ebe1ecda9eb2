"""Trajectory costs for the sampling planners and for rollout losses, with their gradients.

A cost maps M rollouts of T steps, ``qs`` (M, T, nq) and ``vs`` (M, T, nv) (the state after
each step, as ``phalanx.rollout`` returns them) and ``ctrl`` (M, T, nu) (the control applied in
each step), to one number per rollout, (M,):

    cost(qs, vs, ctrl)                   -> value (M,)
    cost.value_and_grad(qs, vs, ctrl)    -> value, dq (M, T, nq), dv (M, T, nv), du (M, T, nu)

Built-in terms run in the C++ kernels (include/phalanx/cost.h) on the model's device, values and
gradients alike. Every cost of Phalanx (these terms and ``phalanx.losses``) follows one
convention: a term phi, for a quadratic term the squared error (x - target)^2 without a factor
1/2, is summed over all T steps with its running ``weight`` and added once more on the last
state with its ``terminal_weight``,

    C = sum_t sum_i weight_i phi_i(x_t, u_t) + sum_i terminal_weight_i phi_i(x_{T-1}).

``quadratic`` evaluates that quadratic term and its gradient in numpy (for targets that vary
per rollout or step, as ``phalanx.losses.StateCost`` takes them). The terms:

==================  ======================================================================
``Quadratic``       tracking of qpos, qvel and ctrl: (x - target)^2 per coordinate, or
                    2 (1 - cos(q - target)) for the ``angle_coords`` (hinges that wrap)
``BodyHeight``      (z - target)^2 of a body's origin
``BodyPosition``    (p_i - target_i)^2 of a body's origin along chosen world axes
``BodyUpright``     1 - (the body's z axis . world z): 0 upright, 2 upside down
``ComPosition``     (c_i - target_i)^2 of the centre of mass of all bodies
``ComVelocity``     (cdot_i - target_i)^2 of its velocity (e.g. a walking speed)
==================  ======================================================================

Costs compose with weights and sums, ``2.0 * height + upright + effort``; a sum of built-in
terms on one model stays one kernel call. ``CallableCost(fn)`` wraps any function of the batched
arrays, ``fn(qs, vs, ctrl) -> (M,)``, optionally with ``grad_fn`` for its gradients. Targets
and weights are numbers or per-coordinate arrays; weights must be finite and >= 0.
"""

from __future__ import annotations

import numbers
from typing import Callable, Sequence

import numpy as np

from . import _phalanx

__all__ = ["Cost", "Terms", "Quadratic", "BodyHeight", "BodyPosition", "BodyUpright",
           "ComPosition", "ComVelocity", "CallableCost", "as_cost", "quadratic"]

_KIND = _phalanx.COST_KINDS  # name -> kind of include/phalanx/cost.h


def check_trajectories(qs, vs, ctrl) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """qs (M, T, nq), vs (M, T, nv), ctrl (M, T, nu) with one M and T, as arrays"""
    qs, vs, ctrl = np.asarray(qs), np.asarray(vs), np.asarray(ctrl)
    if qs.ndim != 3 or vs.ndim != 3 or ctrl.ndim != 3 or not (
            qs.shape[:2] == vs.shape[:2] == ctrl.shape[:2]):
        raise ValueError(
            f"phalanx.costs: a cost takes qs (M, T, nq), vs (M, T, nv) and ctrl (M, T, nu) "
            f"with the same M and T, got {qs.shape}, {vs.shape}, {ctrl.shape}")
    return qs, vs, ctrl


def quadratic(x, target, weight, terminal_weight=0.0) -> tuple[np.ndarray, np.ndarray]:
    """The quadratic term of the convention above on trajectories x (M, T, n), in numpy:

        sum_t sum_i weight_i (x_ti - target_ti)^2 + sum_i terminal_weight_i (x_T-1,i - target_T-1,i)^2

    with weight and terminal_weight (n,) and target broadcast to x's shape. Returns (value (M,),
    its gradient with respect to x, shaped and typed like x)."""
    x = np.asarray(x)
    err = x - target
    w = np.array(np.broadcast_to(weight, x.shape[1:]), dtype=np.float64)
    w[-1] += terminal_weight
    g = w * err
    return (g * err).sum(axis=(1, 2)), (2 * g).astype(x.dtype)


class Cost:
    """A trajectory cost: ``cost(qs, vs, ctrl) -> (M,)`` and ``value_and_grad``. Costs add
    (``a + b``) and scale by numbers (``2.0 * a``)."""

    def __call__(self, qs, vs, ctrl) -> np.ndarray:
        raise NotImplementedError

    def value_and_grad(self, qs, vs, ctrl):
        """(value (M,), dq, dv, du): the gradients shaped like qs, vs and ctrl"""
        raise NotImplementedError(f"phalanx.costs: {self!r} has no gradient")

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return _SumCost([(1.0, self), (1.0, other)])

    def __mul__(self, weight) -> Cost:
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            return NotImplemented
        return _SumCost([(float(weight), self)])

    __rmul__ = __mul__


def _evaluate(cost, qs, vs, ctrl) -> np.ndarray:
    """cost(qs, vs, ctrl) checked to be (M,) real"""
    M = np.shape(qs)[0]
    c = np.asarray(cost(qs, vs, ctrl))
    if c.shape != (M,) or not (np.issubdtype(c.dtype, np.floating)
                                or np.issubdtype(c.dtype, np.integer)):
        raise ValueError(f"phalanx.costs: the cost {cost!r} must return a real array of shape "
                         f"(M,) = ({M},) (one cost per rollout), got {c.dtype} {c.shape}")
    return c


class _SumCost(Cost):
    """sum_i w_i cost_i"""

    def __init__(self, terms):
        self.terms = []
        for w, c in terms:  # flatten nested sums
            if isinstance(c, _SumCost):
                self.terms += [(w * w2, c2) for w2, c2 in c.terms]
            else:
                self.terms.append((w, c))

    def __call__(self, qs, vs, ctrl):
        return sum(w * _evaluate(c, qs, vs, ctrl) for w, c in self.terms)

    def value_and_grad(self, qs, vs, ctrl):
        total = None
        for w, c in self.terms:
            parts = [w * np.asarray(x) for x in c.value_and_grad(qs, vs, ctrl)]
            total = parts if total is None else [a + b for a, b in zip(total, parts)]
        return tuple(total)

    def __repr__(self):
        return " + ".join(f"{w:g} * {c!r}" for w, c in self.terms)


class Terms(Cost):
    """Built-in terms of one model, evaluated by the kernels: ``ints`` (n, 3) rows (kind, index,
    axis) and ``reals`` (n, 3) rows (target, weight, terminal weight) as include/phalanx/
    cost.h defines them. Use the named constructors (``Quadratic``, ``BodyHeight``, ...)."""

    def __init__(self, model, ints, reals, *, device: str = "cpu", name: str = "Terms"):
        self.model = model
        self.ints = np.ascontiguousarray(ints, dtype=np.int32).reshape(-1, 3)
        self.reals = np.ascontiguousarray(reals, dtype=np.float64).reshape(-1, 3)
        self.device = device
        self.name = name
        if len(self.ints) != len(self.reals):
            raise ValueError("phalanx.costs: Terms needs as many integer rows as real rows")
        weights = self.reals[:, 1:]
        if not np.all(np.isfinite(self.reals)) or np.any(weights < 0):
            raise ValueError(f"phalanx.costs: {name}: targets must be finite and weights finite "
                             f"and >= 0")

    def _native(self, qs, vs, ctrl, grad):
        qs, vs, ctrl = check_trajectories(qs, vs, ctrl)
        dtype = np.float32 if qs.dtype == np.float32 else np.float64
        arrays = [np.ascontiguousarray(a, dtype=dtype) for a in (qs, vs, ctrl)]
        for name, a, n, s in zip(("qs", "vs", "ctrl"), arrays,
                                 (self.model.nq, self.model.nv, self.model.nu),
                                 ("nq", "nv", "nu")):
            if a.shape[2] != n:
                raise ValueError(f"phalanx.costs: {self.name}: {name} must have shape "
                                 f"(M, T, {s}) = (M, T, {n}), got {a.shape}")
        if qs.shape[1] == 0:
            z = np.zeros(qs.shape[0], dtype)
            return (z, *[np.zeros_like(a) for a in arrays]) if grad else z
        return _phalanx.trajectory_cost(self.model, self.ints, self.reals, *arrays, grad=grad,
                                        device=self.device)

    def __call__(self, qs, vs, ctrl):
        return self._native(qs, vs, ctrl, False)

    def value_and_grad(self, qs, vs, ctrl):
        return self._native(qs, vs, ctrl, True)

    def __add__(self, other):
        if isinstance(other, Terms) and other.model is self.model:
            return Terms(self.model, np.concatenate([self.ints, other.ints]),
                         np.concatenate([self.reals, other.reals]), device=self.device,
                         name=f"{self.name} + {other.name}")
        return super().__add__(other)

    def __mul__(self, weight):
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            return NotImplemented
        if not (np.isfinite(weight) and weight >= 0):
            return super().__mul__(weight)  # negative weights sum in Python
        reals = self.reals.copy()
        reals[:, 1:] *= float(weight)
        return Terms(self.model, self.ints, reals, device=self.device,
                     name=f"{float(weight):g} * ({self.name})")

    __rmul__ = __mul__

    def __repr__(self):
        return f"{self.name} ({len(self.ints)} terms)"


def _vector(name, value, n, symbol) -> np.ndarray:
    v = np.asarray(value, dtype=np.float64)
    if v.ndim == 0:
        return np.full(n, float(v))
    if v.shape != (n,):
        raise ValueError(f"phalanx.costs: {name} must be a scalar or have shape ({symbol},) = "
                         f"({n},), got {v.shape}")
    return v.copy()


def _rows(kind, index, axis, target, weight, terminal):
    """term rows for equal-length sequences, dropping terms whose weights are both 0"""
    index, axis, target, weight, terminal = (np.atleast_1d(a) for a in np.broadcast_arrays(
        np.asarray(index), np.asarray(axis), np.asarray(target, dtype=np.float64),
        np.asarray(weight, dtype=np.float64), np.asarray(terminal, dtype=np.float64)))
    keep = (weight != 0) | (terminal != 0)
    ints = np.stack([np.full(keep.sum(), _KIND[kind]), index[keep], axis[keep]], axis=1)
    reals = np.stack([target[keep], weight[keep], terminal[keep]], axis=1)
    return ints, reals


def _concat(model, parts, device, name) -> Terms:
    ints = [i for i, _ in parts]
    reals = [r for _, r in parts]
    return Terms(model, np.concatenate(ints) if ints else np.zeros((0, 3)),
                 np.concatenate(reals) if reals else np.zeros((0, 3)), device=device, name=name)


def Quadratic(model, *, qpos_target=0.0, qvel_target=0.0, ctrl_target=0.0, qpos_weight=0.0,
              qvel_weight=0.0, ctrl_weight=0.0, terminal_weight=0.0,
              angle_coords: Sequence[int] = (), dt: float = 1.0, device: str = "cpu") -> Terms:
    """State and control tracking,

        sum_t dt [ sum_i qpos_weight_i e(q_ti) + sum_j qvel_weight_j (v_tj - qvel_target_j)^2
                   + sum_a ctrl_weight_a (u_ta - ctrl_target_a)^2 ]
        + terminal_weight [ the state terms of the last step ]

    with e(q) = (q - qpos_target)^2, or 2 (1 - cos(q - qpos_target)) for the qpos coordinates
    in ``angle_coords`` (the same curvature at the target, periodic in 2 pi). Targets and
    weights are scalars or per coordinate (nq,), (nv,), (nu,). ``dt`` (e.g. model.timestep)
    makes the running sum a time integral."""
    nq, nv, nu = model.nq, model.nv, model.nu
    angles = np.asarray(list(angle_coords), dtype=np.intp).reshape(-1)
    if angles.size and (angles.min() < 0 or angles.max() >= nq):
        raise ValueError(f"phalanx.costs: angle_coords must index qpos, in [0, nq) = "
                         f"[0, {nq}), got {angles.tolist()}")
    dt, tw = float(dt), float(terminal_weight)
    if not (np.isfinite(dt) and dt > 0 and np.isfinite(tw) and tw >= 0):
        raise ValueError(f"phalanx.costs: dt must be > 0 and terminal_weight >= 0, got {dt}, "
                         f"{tw}")
    wq = _vector("qpos_weight", qpos_weight, nq, "nq")
    wv = _vector("qvel_weight", qvel_weight, nv, "nv")
    wu = _vector("ctrl_weight", ctrl_weight, nu, "nu")
    is_angle = np.zeros(nq, bool)
    is_angle[angles] = True
    parts = []
    for kind, mask in (("qpos", ~is_angle), ("angle", is_angle)):
        idx = np.flatnonzero(mask)
        parts.append(_rows(kind, idx, 0, _vector("qpos_target", qpos_target, nq, "nq")[idx],
                           dt * wq[idx], tw * wq[idx]))
    parts.append(_rows("qvel", np.arange(nv), 0, _vector("qvel_target", qvel_target, nv, "nv"),
                       dt * wv, tw * wv))
    parts.append(_rows("ctrl", np.arange(nu), 0, _vector("ctrl_target", ctrl_target, nu, "nu"),
                       dt * wu, 0.0))
    return _concat(model, parts, device, "Quadratic")


def _body(model, body) -> int:
    if isinstance(body, str):
        b = int(model.body_id(body))
        if b < 0:
            raise ValueError(f"phalanx.costs: the model has no body named {body!r} (bodies: "
                             f"{', '.join(model.body_names)})")
        return b
    b = int(body)
    if not 0 <= b < model.nbody:
        raise ValueError(f"phalanx.costs: body {b} out of range [0, {model.nbody})")
    return b


def _axes(axes) -> np.ndarray:
    names = {"x": 0, "y": 1, "z": 2}
    a = np.asarray([names.get(x, x) if isinstance(x, str) else x for x in axes], dtype=np.intp)
    if a.ndim != 1 or a.size == 0 or a.min() < 0 or a.max() > 2:
        raise ValueError(f"phalanx.costs: axes must be among 0, 1, 2 (or 'x', 'y', 'z'), got "
                         f"{list(axes)}")
    return a


def BodyPosition(model, body, target, *, axes=(0, 1, 2), weight=1.0, terminal_weight=0.0,
                 device: str = "cpu") -> Terms:
    """sum over ``axes`` of (p_i - target_i)^2, p the origin of ``body`` (name or id) in world;
    target, weight and terminal_weight are numbers or one per axis"""
    b, a = _body(model, body), _axes(axes)
    n = len(a)
    return _concat(model, [_rows("body_pos", b, a, _vector("target", target, n, "axes"),
                                 _vector("weight", weight, n, "axes"),
                                 _vector("terminal_weight", terminal_weight, n, "axes"))],
                   device, f"BodyPosition({body!r})")


def BodyHeight(model, body, target, *, weight=1.0, terminal_weight=0.0,
               device: str = "cpu") -> Terms:
    """(z - target)^2 of the origin of ``body`` (name or id)"""
    t = BodyPosition(model, body, target, axes=(2,), weight=weight,
                     terminal_weight=terminal_weight, device=device)
    t.name = f"BodyHeight({body!r})"
    return t


def BodyUpright(model, body, *, axis=2, weight=1.0, terminal_weight=0.0,
                device: str = "cpu") -> Terms:
    """1 - (the body's ``axis`` . world z): 0 when that body axis points up, 2 when down"""
    b, a = _body(model, body), _axes((axis,))
    return _concat(model, [_rows("body_up", b, a, 0.0, weight, terminal_weight)], device,
                   f"BodyUpright({body!r})")


def _com(kind, model, target, axes, weight, terminal_weight, device, name) -> Terms:
    a = _axes(axes)
    n = len(a)
    return _concat(model, [_rows(kind, 0, a, _vector("target", target, n, "axes"),
                                 _vector("weight", weight, n, "axes"),
                                 _vector("terminal_weight", terminal_weight, n, "axes"))],
                   device, name)


def ComPosition(model, target, *, axes=(0, 1, 2), weight=1.0, terminal_weight=0.0,
                device: str = "cpu") -> Terms:
    """sum over ``axes`` of (c_i - target_i)^2, c the centre of mass of all bodies"""
    return _com("com_pos", model, target, axes, weight, terminal_weight, device, "ComPosition")


def ComVelocity(model, target, *, axes=(0, 1, 2), weight=1.0, terminal_weight=0.0,
                device: str = "cpu") -> Terms:
    """sum over ``axes`` of (cdot_i - target_i)^2, cdot the velocity of the centre of mass"""
    return _com("com_vel", model, target, axes, weight, terminal_weight, device, "ComVelocity")


class CallableCost(Cost):
    """A custom cost from a function of the batched rollout arrays,
    ``fn(qs (M, T, nq), vs (M, T, nv), ctrl (M, T, nu)) -> (M,)``, vectorised over the M
    rollouts; ``grad_fn(qs, vs, ctrl) -> (dq, dv, du)`` (optional) gives its gradients."""

    def __init__(self, fn: Callable, grad_fn: Callable | None = None):
        if not callable(fn) or (grad_fn is not None and not callable(grad_fn)):
            raise TypeError("phalanx.costs.CallableCost: fn (and grad_fn) must be callable "
                            "(fn(qs, vs, ctrl) -> (M,))")
        self.fn, self.grad_fn = fn, grad_fn

    def __call__(self, qs, vs, ctrl):
        qs, vs, ctrl = check_trajectories(qs, vs, ctrl)
        return _evaluate(self.fn, qs, vs, ctrl)

    def value_and_grad(self, qs, vs, ctrl):
        if self.grad_fn is None:
            return super().value_and_grad(qs, vs, ctrl)
        qs, vs, ctrl = check_trajectories(qs, vs, ctrl)
        dq, dv, du = self.grad_fn(qs, vs, ctrl)
        return self(qs, vs, ctrl), np.asarray(dq), np.asarray(dv), np.asarray(du)

    def __repr__(self):
        return f"CallableCost({getattr(self.fn, '__name__', self.fn)!r})"


def as_cost(cost) -> Cost:
    """a Cost as is, a callable as CallableCost"""
    if isinstance(cost, Cost):
        return cost
    if callable(cost):
        return CallableCost(cost)
    raise TypeError("phalanx.costs: a cost must be a phalanx.costs.Cost or a callable "
                    "fn(qs, vs, ctrl) -> (M,)")
