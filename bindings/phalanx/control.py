"""Sampling-based model-predictive control on the batched backend: MPPI (Williams et al.,
"Information theoretic MPC for model-based reinforcement learning", ICRA 2017) and the
cross-entropy method (CEM), as receding-horizon controllers.

A planner holds N independent planning problems (``num_problems``), each a nominal plan of
``horizon`` control rows (H, nu). One planning iteration:

1. draws the noise of all N * K samples at once from the counter-based Philox generator of the
   C++ core (``_phalanx.planner_noise``: sample p * K + k of problem p, stream = the planner's
   iteration counter, time-correlated by ``noise_smoothing``), so that a seed fixes every plan;
2. forms the sample controls clip(u + eps, ctrlrange) and keeps eps = the perturbation actually
   applied (what MPPI's update averages);
3. rolls out all N * K samples from their problem's current state in ONE batched
   ``phalanx.rollout`` call (the kernels: OpenMP on the CPU, or CUDA with ``device="cuda"``);
4. evaluates the cost object on the batched trajectories, (N * K, H, nq), (N * K, H, nv) and
   the controls (N * K, H, nu), giving costs (N, K);
5. updates each plan: MPPI's weights come from the C++ core (``_phalanx.mppi_weights``: the
   minimum subtracted before the exponential, NaN reported), u += sum_k w_k eps_k, clipped;
   CEM's elites from ``_phalanx.smallest_indices`` (a stable argsort's first n), then the mean
   and standard deviation are refit with smoothing and a floor.

Everything between the kernels is numpy on the host; the per-problem arithmetic (noise,
weights, elites) is the C++ core's (include/phalanx/planner.h), the same code the batched GPU
kernels will run.

Receding horizon::

    planner = phalanx.control.MPPI(model, horizon=80, num_samples=256, sigma=0.6,
                                   temperature=0.5, cost=cost)
    for t in range(steps):
        u = planner.plan(sim.qpos, sim.qvel)   # (N, nu), the first row of the improved plan
        sim.step(u)
        planner.shift()                        # warm start: the plan moved one step earlier

Costs are objects ``cost(qs, vs, ctrl) -> (M,)`` on batched rollouts (M = N * K):
``QuadraticCost`` (weighted squared errors; ``angle_coords`` use 2 (1 - cos) instead of the
square, so that hinge angles wrap), ``CallableCost(fn)`` around any function, and sums and
scalar multiples of them (``2.0 * a + b``). A sample whose physics stopped (a NaN or inf in
the state, ``phalanx.STATUS_NAN_*``) gets cost +inf, i.e. weight 0 / never an elite.
"""

from __future__ import annotations

import numbers
from typing import Callable, Sequence

import numpy as np

from . import _phalanx

__all__ = ["Cost", "QuadraticCost", "CallableCost", "MPPI", "CEM"]

_STOPPED = _phalanx.STATUS_NAN_STATE | _phalanx.STATUS_NAN_CTRL | _phalanx.STATUS_NAN_RESULT


# --- costs -----------------------------------------------------------------------------------


def _check_trajectories(qs, vs, ctrl) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    qs, vs, ctrl = np.asarray(qs), np.asarray(vs), np.asarray(ctrl)
    if qs.ndim != 3 or vs.ndim != 3 or ctrl.ndim != 3 or not (
            qs.shape[:2] == vs.shape[:2] == ctrl.shape[:2]):
        raise ValueError(
            f"phalanx.control: a cost takes qs (M, T, nq), vs (M, T, nv) and ctrl (M, T, nu) "
            f"with the same M and T, got {qs.shape}, {vs.shape}, {ctrl.shape}")
    return qs, vs, ctrl


class Cost:
    """A trajectory cost: ``cost(qs, vs, ctrl) -> (M,)`` for M rollouts of T steps, qs
    (M, T, nq) and vs (M, T, nv) the states after each step, ctrl (M, T, nu) the controls
    applied. Costs add (``a + b``) and scale by numbers (``2.0 * a``)."""

    def __call__(self, qs, vs, ctrl) -> np.ndarray:
        raise NotImplementedError

    def __add__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return _SumCost([(1.0, self), (1.0, other)])

    def __mul__(self, weight) -> "Cost":
        if not isinstance(weight, numbers.Real):
            return NotImplemented
        return _SumCost([(float(weight), self)])

    __rmul__ = __mul__


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
        total = None
        for w, c in self.terms:
            v = w * _evaluate(c, qs, vs, ctrl)
            total = v if total is None else total + v
        return total

    def __repr__(self):
        return " + ".join(f"{w:g} * {c!r}" for w, c in self.terms)


def _evaluate(cost, qs, vs, ctrl) -> np.ndarray:
    """cost(qs, vs, ctrl) checked to be (M,) real"""
    M = np.shape(qs)[0]
    c = np.asarray(cost(qs, vs, ctrl))
    if c.shape != (M,) or not (np.issubdtype(c.dtype, np.floating)
                                or np.issubdtype(c.dtype, np.integer)):
        raise ValueError(f"phalanx.control: the cost {cost!r} must return a real array of shape "
                         f"(M,) = ({M},) (one cost per rollout), got {c.dtype} {c.shape}")
    return c


class CallableCost(Cost):
    """A custom cost from a function of the batched rollout arrays,
    ``fn(qs (M, T, nq), vs (M, T, nv), ctrl (M, T, nu)) -> (M,)``, vectorised over the M
    rollouts."""

    def __init__(self, fn: Callable):
        if not callable(fn):
            raise TypeError("phalanx.control.CallableCost: fn must be callable "
                            "(fn(qs, vs, ctrl) -> (M,))")
        self.fn = fn

    def __call__(self, qs, vs, ctrl):
        qs, vs, ctrl = _check_trajectories(qs, vs, ctrl)
        return _evaluate(self.fn, qs, vs, ctrl)

    def __repr__(self):
        return f"CallableCost({getattr(self.fn, '__name__', self.fn)!r})"


def _vector(name, value, n, symbol) -> np.ndarray:
    v = np.asarray(value, dtype=np.float64)
    if v.ndim == 0:
        return np.full(n, float(v))
    if v.shape != (n,):
        raise ValueError(f"phalanx.control: {name} must be a scalar or have shape ({symbol},) = "
                         f"({n},), got {v.shape}")
    return v.copy()


class QuadraticCost(Cost):
    """Tracking cost, summed over the T steps of a rollout plus a terminal term on its last
    state:

        sum_t [ sum_i qpos_weight_i e(q_ti) + sum_j qvel_weight_j (v_tj - qvel_target_j)^2
                + sum_a ctrl_weight_a (u_ta - ctrl_target_a)^2 ]
        + terminal_weight * [ state terms of the last step ]

    with e(q_ti) = (q_ti - qpos_target_i)^2, or, for the qpos coordinates listed in
    ``angle_coords`` (hinge angles), 2 (1 - cos(q_ti - qpos_target_i)): the same curvature at
    the target, periodic in 2 pi, bounded by 4. Weights and targets are scalars or per
    coordinate (nq,), (nv,), (nu,); ``nq``, ``nv`` and ``nu`` are taken from the targets or
    weights given as arrays, or from ``model``. ``dt`` (e.g. model.timestep) multiplies the
    running sum (a time integral instead of a sum over steps; default 1).
    """

    def __init__(self, model=None, *, qpos_target=0.0, qvel_target=0.0, qpos_weight=0.0,
                 qvel_weight=0.0, ctrl_weight=0.0, ctrl_target=0.0, terminal_weight=0.0,
                 angle_coords: Sequence[int] = (), dt: float = 1.0, nq=None, nv=None, nu=None):
        def size(given, from_model, *arrays):
            if given is not None:
                return int(given)
            if from_model is not None:
                return int(from_model)
            for a in arrays:
                if np.ndim(a) == 1:
                    return len(a)
            return None

        nq = size(nq, getattr(model, "nq", None), qpos_target, qpos_weight)
        nv = size(nv, getattr(model, "nv", None), qvel_target, qvel_weight)
        nu = size(nu, getattr(model, "nu", None), ctrl_target, ctrl_weight)
        self.nq, self.nv, self.nu = nq, nv, nu
        # sizes unknown until the first call are fixed then (scalars only)
        self._given = dict(qpos_target=qpos_target, qvel_target=qvel_target,
                           qpos_weight=qpos_weight, qvel_weight=qvel_weight,
                           ctrl_weight=ctrl_weight, ctrl_target=ctrl_target)
        self.terminal_weight = float(terminal_weight)
        self.dt = float(dt)
        self.angle_coords = np.asarray(list(angle_coords), dtype=np.intp).reshape(-1)
        self._arrays = None
        if None not in (nq, nv, nu):
            self._setup(nq, nv, nu)

    def _setup(self, nq, nv, nu):
        g = self._given
        self.qpos_target = _vector("qpos_target", g["qpos_target"], nq, "nq")
        self.qpos_weight = _vector("qpos_weight", g["qpos_weight"], nq, "nq")
        self.qvel_target = _vector("qvel_target", g["qvel_target"], nv, "nv")
        self.qvel_weight = _vector("qvel_weight", g["qvel_weight"], nv, "nv")
        self.ctrl_target = _vector("ctrl_target", g["ctrl_target"], nu, "nu")
        self.ctrl_weight = _vector("ctrl_weight", g["ctrl_weight"], nu, "nu")
        a = self.angle_coords
        if a.size and (a.min() < 0 or a.max() >= nq):
            raise ValueError(f"phalanx.control: angle_coords must index qpos, in [0, nq) = "
                             f"[0, {nq}), got {a.tolist()}")
        self.angle_mask = np.zeros(nq, bool)
        self.angle_mask[a] = True
        self.nq, self.nv, self.nu = nq, nv, nu
        self._arrays = True

    def _state_terms(self, q, v) -> np.ndarray:
        """(..., nq), (..., nv) -> (...,) the weighted state errors"""
        e = q - self.qpos_target
        sq = np.where(self.angle_mask, 2.0 * (1.0 - np.cos(e)), e * e)
        dv = v - self.qvel_target
        return sq @ self.qpos_weight + (dv * dv) @ self.qvel_weight

    def __call__(self, qs, vs, ctrl):
        qs, vs, ctrl = _check_trajectories(qs, vs, ctrl)
        if self._arrays is None:
            self._setup(self.nq or qs.shape[2], self.nv or vs.shape[2], self.nu or ctrl.shape[2])
        for name, a, n, s in [("qs", qs, self.nq, "nq"), ("vs", vs, self.nv, "nv"),
                              ("ctrl", ctrl, self.nu, "nu")]:
            if a.shape[2] != n:
                raise ValueError(f"phalanx.control.QuadraticCost: {name} must have shape "
                                 f"(M, T, {s}) = (M, T, {n}), got {a.shape}")
        du = ctrl - self.ctrl_target
        running = self._state_terms(qs, vs) + (du * du) @ self.ctrl_weight  # (M, T)
        total = self.dt * running.sum(axis=1)
        if self.terminal_weight and qs.shape[1] > 0:
            total = total + self.terminal_weight * self._state_terms(qs[:, -1], vs[:, -1])
        return total

    def __repr__(self):
        return f"QuadraticCost(nq={self.nq}, nv={self.nv}, nu={self.nu})"


def _as_cost(cost) -> Cost:
    if isinstance(cost, Cost):
        return cost
    if callable(cost):
        return CallableCost(cost)
    raise TypeError("phalanx.control: cost must be a phalanx.control.Cost or a callable "
                    "fn(qs, vs, ctrl) -> (M,)")


# --- planners --------------------------------------------------------------------------------


def _positive_int(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"phalanx.control: {name} must be a positive integer, got {value!r}")
    return int(value)


class _Planner:
    """What MPPI and CEM share: the plans, sampling, the batched rollout and the costs."""

    _name = "planner"

    def __init__(self, model, horizon, num_samples, sigma, *, noise_smoothing, seed, cost,
                 num_problems, include_nominal, initial_plan, iterations, dtype, device):
        self.model = model
        self.horizon = _positive_int("horizon", horizon)
        self.num_samples = _positive_int("num_samples", num_samples)
        self.num_problems = _positive_int("num_problems", num_problems)
        self.iterations = _positive_int("iterations", iterations)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"phalanx.control: dtype must be float32 or float64, got "
                             f"{self.dtype}")
        self.device = device
        nu = model.nu
        if nu < 1:
            raise ValueError("phalanx.control: the model has no actuators (nu = 0)")
        self.sigma = _vector("sigma", sigma, nu, "nu")
        if not (np.all(np.isfinite(self.sigma)) and np.all(self.sigma > 0)):
            raise ValueError(f"phalanx.control: sigma must be positive and finite, got "
                             f"{self.sigma.tolist()}")
        beta = float(noise_smoothing)
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"phalanx.control: noise_smoothing must be in [0, 1), got {beta}")
        self.noise_smoothing = beta
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not (
                0 <= seed < 2**64):
            raise ValueError(f"phalanx.control: seed must be an integer in [0, 2^64), got "
                             f"{seed!r}")
        self.seed = int(seed)
        self.cost = _as_cost(cost)
        self.include_nominal = bool(include_nominal)
        rng = np.asarray(model.actuator_ctrlrange, dtype=np.float64).reshape(nu, 2)
        limited = np.asarray(getattr(model, "actuator_ctrllimited", np.ones(nu)), bool)
        limited &= rng[:, 0] < rng[:, 1]
        self._lo = np.where(limited, rng[:, 0], -np.inf).astype(self.dtype)
        self._hi = np.where(limited, rng[:, 1], np.inf).astype(self.dtype)
        N, H = self.num_problems, self.horizon
        if initial_plan is None:
            init = np.zeros((N, H, nu))
        else:
            init = np.asarray(initial_plan, dtype=np.float64)
            if init.shape == (H, nu):
                init = np.broadcast_to(init, (N, H, nu))
            if init.shape != (N, H, nu):
                raise ValueError(f"phalanx.control: initial_plan must have shape (H, nu) = "
                                 f"({H}, {nu}) or (N, H, nu) = ({N}, {H}, {nu}), got "
                                 f"{np.shape(initial_plan)}")
        self._initial = self._clip(init.astype(self.dtype))
        self.reset()

    # --- public state -----------------------------------------------------------------------

    @property
    def controls(self) -> np.ndarray:
        """(N, H, nu): the current nominal plans (a copy)"""
        return self._u.copy()

    @property
    def iteration(self) -> int:
        """planning iterations since construction or the last reset (the noise stream)"""
        return self._iteration

    def reset(self) -> None:
        """Back to the initial plans and iteration 0: the same seed then repeats the same
        samples and plans."""
        self._u = self._initial.copy()
        self._iteration = 0
        self.last_costs = None  # (N, K) costs of the last iteration's samples
        self.last_nominal_cost = None  # (N,) cost of each plan before that iteration (if
        # include_nominal: sample 0)

    def shift(self, steps: int = 1) -> None:
        """Warm start for the next control step: every plan moved ``steps`` rows earlier, its
        last row repeated (call after applying the first ``steps`` rows)."""
        steps = _positive_int("steps", steps)
        self._u = self._shifted(self._u, steps)

    @staticmethod
    def _shifted(a, steps):
        H = a.shape[1]
        s = min(steps, H - 1)
        out = a.copy()
        if s > 0:
            out[:, :H - s] = a[:, s:]
            out[:, H - s:] = a[:, -1:]
        return out

    def plan(self, qpos, qvel, iterations: int | None = None, *, full: bool = False):
        """Improve the plans from the current states, qpos (N, nq) and qvel (N, nv) (for
        N = 1 also (nq,) and (nv,)), by ``iterations`` planning iterations (default: the
        planner's ``iterations``). Returns the first control row of each plan, (N, nu)
        ((nu,) for 1-D states), or with ``full=True`` the whole plans (N, H, nu)."""
        iterations = self.iterations if iterations is None else _positive_int(
            "iterations", iterations)
        qpos, qvel, flat = self._states(qpos, qvel)
        for _ in range(iterations):
            self._iterate(qpos, qvel)
        out = self._u.copy() if full else self._u[:, 0].copy()
        return out[0] if flat else out

    # --- one iteration ----------------------------------------------------------------------

    def _states(self, qpos, qvel):
        N, m = self.num_problems, self.model
        qpos, qvel = np.asarray(qpos), np.asarray(qvel)
        flat = qpos.ndim == 1 and qvel.ndim == 1 and N == 1
        if flat:
            qpos, qvel = qpos[None], qvel[None]
        for name, a, n, s in [("qpos", qpos, m.nq, "nq"), ("qvel", qvel, m.nv, "nv")]:
            if a.shape != (N, n):
                extra = f" or ({s},) = ({n},)" if N == 1 else ""
                raise ValueError(f"phalanx.control.{self._name}: {name} must have shape "
                                 f"(N, {s}) = ({N}, {n}){extra}, got {a.shape}")
            if not np.all(np.isfinite(a)):
                bad = np.flatnonzero(~np.isfinite(a).all(axis=1))
                raise ValueError(f"phalanx.control.{self._name}: {name} of problem(s) "
                                 f"{bad.tolist()} is not finite")
        return (np.ascontiguousarray(qpos, dtype=self.dtype),
                np.ascontiguousarray(qvel, dtype=self.dtype), flat)

    def _unit_noise(self, sigma) -> np.ndarray:
        """the noise of this iteration, (N, K, H, nu): sample p * K + k, stream = iteration"""
        N, K, H = self.num_problems, self.num_samples, self.horizon
        nu = self.model.nu
        stream = self._iteration % 2**32
        eps = _phalanx.planner_noise(self.seed, 0, N * K, stream, H,
                                     np.ascontiguousarray(sigma, dtype=self.dtype),
                                     self.noise_smoothing)
        return eps.reshape(N, K, H, nu)

    def _clip(self, u):
        return np.clip(u, self._lo, self._hi)

    def _rollout_costs(self, qpos, qvel, ctrl) -> np.ndarray:
        """one batched rollout of the N * K samples -> costs (N, K)"""
        from . import rollout  # the package's checked entry point

        N, K, H = self.num_problems, self.num_samples, self.horizon
        m = self.model
        M = N * K
        flat = ctrl.reshape(M, H, m.nu)
        qs, vs, status = rollout(m, np.repeat(qpos, K, axis=0), np.repeat(qvel, K, axis=0),
                                 flat, device=self.device)
        costs = np.asarray(_evaluate(self.cost, qs, vs, flat), dtype=self.dtype).copy()
        costs[(np.asarray(status) & _STOPPED) != 0] = np.inf
        costs = costs.reshape(N, K)
        nan = np.isnan(costs).any(axis=1)
        if nan.any():
            bad = np.flatnonzero(nan)
            raise ValueError(
                f"phalanx.control.{self._name}: the cost is NaN for problem(s) "
                f"{bad[:10].tolist()} (e.g. problem {bad[0]}, samples "
                f"{np.flatnonzero(np.isnan(costs[bad[0]]))[:10].tolist()}); check the cost "
                f"function and the states")
        finite = np.isfinite(costs).any(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise ValueError(f"phalanx.control.{self._name}: no sample of problem(s) "
                             f"{bad[:10].tolist()} has a finite cost (the physics stopped or "
                             f"the cost is inf)")
        self.last_costs = costs
        if self.include_nominal:
            self.last_nominal_cost = costs[:, 0].copy()
        return costs

    def _iterate(self, qpos, qvel):
        raise NotImplementedError


class MPPI(_Planner):
    """Model predictive path integral control (Williams et al. 2017) for N problems.

    ``model``: a phalanx.Model; ``horizon`` H control steps of model.timestep; ``num_samples``
    K per problem and iteration; ``sigma`` the noise standard deviation, a scalar or (nu,);
    ``temperature`` lambda of the weights exp(-(c - min c) / lambda) (in the units of the
    cost); ``noise_smoothing`` beta in [0, 1), the time correlation of the noise (marginal
    standard deviation stays sigma); ``seed`` of the Philox noise; ``cost`` a
    phalanx.control.Cost or a function (qs, vs, ctrl) -> (M,); ``num_problems`` N independent
    problems (e.g. N environments controlled at once); ``include_nominal``: sample 0 of every
    problem is the unperturbed plan (so a good plan is never lost and its cost is reported in
    ``last_nominal_cost``); ``initial_plan`` (H, nu) or (N, H, nu), default zeros (clipped to
    ctrlrange); ``iterations`` per ``plan`` call by default; ``dtype`` of the rollouts;
    ``device`` of the rollouts ("cpu" or "cuda").

    After an iteration ``last_costs`` (N, K) and ``last_weights`` (N, K) hold its costs and
    weights.
    """

    _name = "MPPI"

    def __init__(self, model, horizon: int, num_samples: int, sigma, temperature: float, *,
                 noise_smoothing: float = 0.0, seed: int = 0, cost, num_problems: int = 1,
                 include_nominal: bool = True, initial_plan=None, iterations: int = 1,
                 dtype=np.float64, device: str = "cpu"):
        lam = float(temperature)
        if not (np.isfinite(lam) and lam > 0):
            raise ValueError(f"phalanx.control.MPPI: temperature must be positive and finite, "
                             f"got {temperature!r}")
        self.temperature = lam
        super().__init__(model, horizon, num_samples, sigma, noise_smoothing=noise_smoothing,
                         seed=seed, cost=cost, num_problems=num_problems,
                         include_nominal=include_nominal, initial_plan=initial_plan,
                         iterations=iterations, dtype=dtype, device=device)

    def reset(self) -> None:
        super().reset()
        self.last_weights = None

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """This iteration's samples without advancing: (eps (N, K, H, nu), the perturbations
        actually applied; ctrl (N, K, H, nu) = clip(u + eps))"""
        eps = self._unit_noise(self.sigma)
        if self.include_nominal:
            eps[:, 0] = 0
        ctrl = self._clip(self._u[:, None] + eps)
        return ctrl - self._u[:, None], ctrl

    def _iterate(self, qpos, qvel):
        eps, ctrl = self.sample()
        costs = self._rollout_costs(qpos, qvel, ctrl)
        w, ok = _phalanx.mppi_weights(np.ascontiguousarray(costs), self.temperature)
        if not np.all(ok):  # NaN and all-inf costs were reported above; kept as a guard
            bad = np.flatnonzero(~np.asarray(ok))
            raise ValueError(f"phalanx.control.MPPI: no weights for problem(s) "
                             f"{bad[:10].tolist()} (NaN or no finite cost)")
        self.last_weights = w
        # planner.h's mppi_update: u += sum_k w_k eps_k, clamped to the control range
        _phalanx.mppi_update(self._u, w.astype(self.dtype),
                             np.ascontiguousarray(eps, dtype=self.dtype), self._lo, self._hi)
        self._iteration += 1


class CEM(_Planner):
    """The cross-entropy method for N problems: each plan is a Gaussian, mean (H, nu) and
    standard deviation (H, nu) per entry; each iteration samples K control sequences
    (clipped to ctrlrange), keeps the ``num_elites`` cheapest (``_phalanx.smallest_indices``,
    ties by index) and refits

        mean = smoothing * mean + (1 - smoothing) * elite mean,
        std  = max(smoothing * std + (1 - smoothing) * elite std, sigma_min)

    (elite std with 1 / n; the same as cem_refit of the C++ core). ``sigma`` is the initial
    standard deviation (scalar or (nu,)), restored by ``shift`` and ``reset``;
    ``noise_smoothing`` correlates the unit noise in time; ``iterations`` per ``plan`` call
    by default (CEM needs several). The other arguments are MPPI's. The plan returned is the
    mean. ``std`` (N, H, nu) is the current standard deviation.
    """

    _name = "CEM"

    def __init__(self, model, horizon: int, num_samples: int, num_elites: int, sigma, *,
                 smoothing: float = 0.1, sigma_min: float = 0.05, iterations: int = 3,
                 noise_smoothing: float = 0.0, seed: int = 0, cost, num_problems: int = 1,
                 include_nominal: bool = True, initial_plan=None, dtype=np.float64,
                 device: str = "cpu"):
        self.num_elites = _positive_int("num_elites", num_elites)
        if self.num_elites > num_samples:
            raise ValueError(f"phalanx.control.CEM: num_elites must be in [1, num_samples] = "
                             f"[1, {num_samples}], got {num_elites}")
        self.smoothing = float(smoothing)
        if not 0.0 <= self.smoothing < 1.0:
            raise ValueError(f"phalanx.control.CEM: smoothing must be in [0, 1), got {smoothing}")
        self.sigma_min = float(sigma_min)
        if not (np.isfinite(self.sigma_min) and self.sigma_min >= 0):
            raise ValueError(f"phalanx.control.CEM: sigma_min must be >= 0, got {sigma_min}")
        super().__init__(model, horizon, num_samples, sigma, noise_smoothing=noise_smoothing,
                         seed=seed, cost=cost, num_problems=num_problems,
                         include_nominal=include_nominal, initial_plan=initial_plan,
                         iterations=iterations, dtype=dtype, device=device)

    def reset(self) -> None:
        super().reset()
        self._std = self._initial_std()
        self.last_elites = None

    def _initial_std(self):
        N, H, nu = self.num_problems, self.horizon, self.model.nu
        return np.broadcast_to(self.sigma.astype(self.dtype), (N, H, nu)).copy()

    @property
    def std(self) -> np.ndarray:
        """(N, H, nu): the current standard deviation of each plan (a copy)"""
        return self._std.copy()

    def shift(self, steps: int = 1) -> None:
        """The means moved ``steps`` rows earlier (last row repeated); the standard deviations
        back to ``sigma``, so that the next plan explores afresh."""
        super().shift(steps)
        self._std = self._initial_std()

    def sample(self) -> np.ndarray:
        """This iteration's sample controls without advancing, (N, K, H, nu) =
        clip(mean + std * unit noise)"""
        eps = self._unit_noise(np.ones(self.model.nu)) * self._std[:, None]
        if self.include_nominal:
            eps[:, 0] = 0
        return self._clip(self._u[:, None] + eps)

    def _iterate(self, qpos, qvel):
        ctrl = self.sample()
        costs = self._rollout_costs(qpos, qvel, ctrl)
        elites = _phalanx.smallest_indices(np.ascontiguousarray(costs), self.num_elites)
        self.last_elites = elites
        # planner.h's cem_refit: elite mean and std blended by smoothing, std floored
        _phalanx.cem_refit(self._u, self._std, np.ascontiguousarray(ctrl, dtype=self.dtype),
                           elites, self.smoothing, self.sigma_min)
        self._iteration += 1
