"""Sampling-based model-predictive control on the batched backend: MPPI (Williams et al.,
"Information theoretic MPC for model-based reinforcement learning", ICRA 2017) and the
cross-entropy method (CEM), as receding-horizon controllers.

A planner holds N independent planning problems (``num_problems``), each a nominal plan of
``horizon`` control rows (H, nu), each row held for ``hold`` physics steps (default 1: one row
per step; a robot commanded every 0.1 s at 1 kHz plans with hold=100, so a sample rolls out
H * hold steps while the noise and the update act on H rows). One planning iteration is two
kernel launches on the model's device (``_phalanx.PlannerBatch``, host/api.h), over arrays that
stay there:

1. sampling, one thread per sample for all N * K samples: its noise from the counter-based
   Philox generator (sample p * K + k of problem p, stream = the planner's iteration counter,
   time-correlated by ``noise_smoothing``, scaled by sigma), its controls clip(u + eps,
   ctrlrange) (eps becomes the perturbation actually applied), its rollout from its problem's
   state, and its cost, accumulated step by step by the built-in terms of ``phalanx.costs``;
2. the update, one thread per problem: MPPI's weights (the minimum cost subtracted before the
   exponential) and u += sum_k w_k eps_k, clipped; or CEM's elites (a stable argsort's first n)
   and the refit of mean and standard deviation with smoothing and a floor.

Both run the C++ core (include/phalanx/planner.h, cost.h, step.h) on the CPU (OpenMP) or with
``device="cuda"``. A cost that is not built from ``phalanx.costs`` terms (``CallableCost``, a
function) is evaluated in Python on the samples' trajectories, which the sampling kernel then
records, between the two launches.

Receding horizon::

    cost = phalanx.costs.Quadratic(model, qpos_weight=..., angle_coords=[1], dt=model.timestep)
    planner = phalanx.control.MPPI(model, horizon=80, num_samples=256, sigma=0.6,
                                   temperature=0.5, cost=cost)
    for t in range(steps):
        u = planner.plan(sim.qpos, sim.qvel)   # (N, nu), the first row of the improved plan
        sim.step(u)
        planner.shift()                        # warm start: the plan moved one step earlier

A sample whose physics stopped (a NaN or inf in the state, ``phalanx.STATUS_NAN_*``) gets cost
+inf, i.e. weight 0 / never an elite.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _phalanx, costs
from ._exclusive import exclusive
from .costs import _evaluate, _vector

__all__ = ["MPPI", "CEM"]

_STOPPED = _phalanx.STATUS_STOP_MASK


# --- the sampling stage ----------------------------------------------------------------------


def planner_batch(model, num_problems, num_samples, horizon, hold, dtype, device):
    """the device arrays of num_problems x num_samples planner samples"""
    cls = _phalanx.PlannerBatch32 if np.dtype(dtype) == np.float32 else _phalanx.PlannerBatch64
    return cls(model, num_problems, num_samples, horizon, hold, device)


def draw_samples(batch, model, cost, native, sampling, qpos, qvel, plan, act) -> np.ndarray:
    """One sampling stage in ``batch`` (N problems x K samples): noise, controls, rollouts
    and costs from the problems' states and plans (N, H, nu), with the keywords ``sampling``
    of ``_Planner.sampling``. ``native``: the cost is built-in terms of ``model``, evaluated in
    the kernel; otherwise it runs in Python on the recorded trajectories (a stopped sample
    costs +inf). Returns the costs (N, K), also left in the batch for its update."""
    N, K, H, nu = batch.num_problems, batch.num_samples, batch.horizon, model.nu
    terms = cost if native else costs.Terms(model, np.zeros((0, 3)), np.zeros((0, 3)))
    values, status = batch.rollouts(terms.ints, terms.reals, qpos, qvel, plan, record=not native,
                                    act=act, **sampling)
    if not native:  # a Python cost on the recorded trajectories
        qs, vs = batch.trajectories()
        ctrl = batch.ctrl.reshape(N * K, H, nu)
        if batch.hold > 1:
            ctrl = np.repeat(ctrl, batch.hold, axis=1)
        values = np.asarray(_evaluate(cost, qs, vs, ctrl), dtype=values.dtype).reshape(
            N, K).copy()
        values[(status & _STOPPED) != 0] = np.inf
        batch.set_costs(values)
    return values


# --- planners --------------------------------------------------------------------------------


def _positive_int(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"phalanx.control: {name} must be a positive integer, got {value!r}")
    return int(value)


class _Planner:
    """What MPPI and CEM share: the plans, sampling, the batched rollout and the costs.

    Options of both (keywords): ``cost`` a phalanx.costs.Cost or a function (qs, vs, ctrl) ->
    (M,) (required); ``noise_smoothing`` beta in [0, 1), the time correlation of the noise
    (its marginal standard deviation stays sigma; default 0); ``seed`` of the Philox noise
    (default 0); ``num_problems`` N independent problems (e.g. N environments controlled at
    once; default 1); ``include_nominal``: sample 0 of every problem is the unperturbed plan,
    so a good plan is never lost and its cost is reported in ``last_nominal_cost`` (default
    True); ``initial_plan`` (H, nu) or (N, H, nu), default zeros (clipped to ctrlrange);
    ``iterations`` per ``plan`` call by default; ``gradient_steps`` G >= 0 (default 0) and
    ``gradient_step`` alpha (default 0.5): gradient-refined sampling, see ``refine``;
    ``hold`` physics steps each plan row is applied for (default 1; a cost then sees
    trajectories of H * hold steps and controls repeated to match); ``ctrlrange`` (lo, hi) or
    (nu, 2): the range the plans and samples are clipped to, e.g. tighter than the actuators'
    (default: the model's ctrlrange where ctrllimited, else unlimited); ``dtype`` of the
    rollouts (default float64); ``device`` "cpu" or "cuda".
    """

    _name = "planner"

    def __init__(self, model, horizon, num_samples, sigma, *, cost, noise_smoothing=0.0,
                 seed=0, num_problems=1, include_nominal=True, initial_plan=None, iterations=1,
                 gradient_steps=0, gradient_step=0.5, hold=1, ctrlrange=None, dtype=np.float64,
                 device="cpu"):
        self.model = model
        self.horizon = _positive_int("horizon", horizon)
        self.hold = _positive_int("hold", hold)
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
        self.cost = costs.as_cost(cost)
        if isinstance(gradient_steps, bool) or not isinstance(gradient_steps, numbers.Integral) \
                or gradient_steps < 0:
            raise ValueError(f"phalanx.control: gradient_steps must be an integer >= 0, got "
                             f"{gradient_steps!r}")
        self.gradient_steps = int(gradient_steps)
        self.gradient_step = float(gradient_step)
        if not (np.isfinite(self.gradient_step) and self.gradient_step > 0):
            raise ValueError(f"phalanx.control: gradient_step must be positive, got "
                             f"{gradient_step!r}")
        self.include_nominal = bool(include_nominal)
        if ctrlrange is None:
            rng = np.asarray(model.actuator_ctrlrange, dtype=np.float64).reshape(nu, 2)
            limited = np.asarray(getattr(model, "actuator_ctrllimited", np.ones(nu)), bool)
            limited &= rng[:, 0] < rng[:, 1]
        else:
            rng = np.asarray(ctrlrange, dtype=np.float64)
            if rng.shape == (2,):
                rng = np.broadcast_to(rng, (nu, 2))
            if rng.shape != (nu, 2) or not np.all(rng[:, 0] < rng[:, 1]) or np.isnan(rng).any():
                raise ValueError(f"phalanx.control: ctrlrange must be (lo, hi) or (nu, 2) = "
                                 f"({nu}, 2) with lo < hi, got {np.asarray(ctrlrange).tolist()}")
            limited = np.ones(nu, bool)
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

    @exclusive("phalanx.control planner")
    def reset(self) -> None:
        """Back to the initial plans and iteration 0: the same seed then repeats the same
        samples and plans."""
        self._u = self._initial.copy()
        self._iteration = 0
        self._batch = getattr(self, "_batch", None)  # the device arrays, kept across resets
        self.last_costs = None  # (N, K) costs of the last iteration's samples
        self.last_refined_cost = None  # (N,) cost of each plan after the gradient steps
        self.last_nominal_cost = None  # (N,) cost of each plan before that iteration (if
        # include_nominal: sample 0)

    @exclusive("phalanx.control planner")
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

    @exclusive("phalanx.control planner")
    def plan(self, qpos, qvel, iterations: int | None = None, *, full: bool = False, act=None):
        """Improve the plans from the current states, qpos (N, nq) and qvel (N, nv) (for
        N = 1 also (nq,) and (nv,)), and with activation state (``model.na > 0``) act (N, na),
        by ``iterations`` planning iterations (default: the planner's ``iterations``). Returns
        the first control row of each plan, (N, nu) ((nu,) for 1-D states), or with
        ``full=True`` the whole plans (N, H, nu)."""
        iterations = self.iterations if iterations is None else _positive_int(
            "iterations", iterations)
        qpos, qvel, act, flat = self._states(qpos, qvel, act)
        for _ in range(iterations):
            self._iterate(qpos, qvel, act)
            if self.gradient_steps:
                self.last_refined_cost = self.refine(qpos, qvel, self.gradient_steps, act=act)
        out = self._u.copy() if full else self._u[:, 0].copy()
        return out[0] if flat else out

    # --- one iteration ----------------------------------------------------------------------

    def _states(self, qpos, qvel, act=None):
        N, m = self.num_problems, self.model
        if act is None and m.na > 0:
            raise ValueError(f"phalanx.control.{self._name}: the model has actuator activations "
                             f"(na = {m.na}): pass act= (N, na), the problems' activations")
        qpos, qvel = np.asarray(qpos), np.asarray(qvel)
        act = np.zeros((qpos.shape[0] if qpos.ndim > 1 else 1, 0)) if act is None else (
            np.asarray(act))
        flat = qpos.ndim == 1 and qvel.ndim == 1 and N == 1
        if flat:
            qpos, qvel = qpos[None], qvel[None]
            act = act.reshape(1, -1)
        for name, a, n, s in [("qpos", qpos, m.nq, "nq"), ("qvel", qvel, m.nv, "nv"),
                              ("act", act, m.na, "na")]:
            if a.shape != (N, n):
                extra = f" or ({s},) = ({n},)" if N == 1 else ""
                raise ValueError(f"phalanx.control.{self._name}: {name} must have shape "
                                 f"(N, {s}) = ({N}, {n}){extra}, got {a.shape}")
            if not np.all(np.isfinite(a)):
                bad = np.flatnonzero(~np.isfinite(a).all(axis=1))
                raise ValueError(f"phalanx.control.{self._name}: {name} of problem(s) "
                                 f"{bad.tolist()} is not finite")
        act = np.ascontiguousarray(act, dtype=self.dtype) if m.na > 0 else None
        return (np.ascontiguousarray(qpos, dtype=self.dtype),
                np.ascontiguousarray(qvel, dtype=self.dtype), act, flat)

    def _clip(self, u):
        return np.clip(u, self._lo, self._hi)

    def _held(self, u):
        """plans (M, H, nu) as the controls of every physics step, (M, H * hold, nu)"""
        return u if self.hold == 1 else np.repeat(u, self.hold, axis=1)

    def _native(self) -> bool:
        """whether the cost runs inside the sampling kernel"""
        return isinstance(self.cost, costs.Terms) and self.cost.model is self.model

    def _noise_scale(self) -> np.ndarray:
        """(N, H, nu): the standard deviation of each plan entry's noise"""
        raise NotImplementedError

    def _sample(self, qpos, qvel, act) -> np.ndarray:
        """the sampling stage: every sample's noise, controls, rollout and cost -> (N, K)"""
        if self._batch is None:
            self._batch = planner_batch(self.model, self.num_problems, self.num_samples,
                                        self.horizon, self.hold, self.dtype, self.device)
        values = self._draw(qpos, qvel, act)
        self._check_costs(values)
        self.last_costs = values
        if self.include_nominal:
            self.last_nominal_cost = values[:, 0].copy()
        return values

    def _draw(self, qpos, qvel, act) -> np.ndarray:
        """the samples of this iteration drawn, rolled out and costed in self._batch -> (N, K)
        costs"""
        return draw_samples(self._batch, self.model, self.cost, self._native(),
                            self.sampling(), qpos, qvel, self._u, act)

    def sampling(self, first_sample: int = 0, total_samples: int = 0) -> dict:
        """the arguments of this iteration's sampling stage (PlannerBatch.rollouts) after the
        cost's, for samples first_sample.. of total_samples (0: all of them)"""
        return dict(sigma=np.ascontiguousarray(self._noise_scale(), dtype=self.dtype),
                    lo=self._lo, hi=self._hi, seed=self.seed, stream=self._iteration % 2**32,
                    beta=self.noise_smoothing, include_nominal=self.include_nominal,
                    first_sample=first_sample, total_samples=total_samples)

    def _check_costs(self, values):
        nan = np.isnan(values).any(axis=1)
        if nan.any():
            bad = np.flatnonzero(nan)
            raise ValueError(
                f"phalanx.control.{self._name}: the cost is NaN for problem(s) "
                f"{bad[:10].tolist()} (e.g. problem {bad[0]}, samples "
                f"{np.flatnonzero(np.isnan(values[bad[0]]))[:10].tolist()}); check the cost "
                f"function and the states")
        finite = np.isfinite(values).any(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise ValueError(f"phalanx.control.{self._name}: no sample of problem(s) "
                             f"{bad[:10].tolist()} has a finite cost (the physics stopped or "
                             f"the cost is inf)")

    @property
    def last_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """the last iteration's samples, (eps, ctrl), each (N, K, H, nu): the perturbations
        applied and the controls clip(u + eps) that were rolled out"""
        if self._batch is None:
            raise RuntimeError(f"phalanx.control.{self._name}: no iteration has run yet")
        return self._batch.eps, self._batch.ctrl

    def _iterate(self, qpos, qvel, act):
        raise NotImplementedError

    @exclusive("phalanx.control planner")
    def refine(self, qpos, qvel, steps: int = 1, *, act=None) -> np.ndarray:
        """Gradient-refined sampling: ``steps`` gradient steps on every plan from the states
        qpos (N, nq), qvel (N, nv), through the rollout's adjoint (a taped rollout of the N
        plans, the cost's gradient with respect to the trajectory, ``Tape.backward``). A step
        moves each plan against its gradient g, scaled so that its largest entry moves by
        ``gradient_step`` * sigma, and tries that step and its halves 1/2, 1/4, 1/8 in one
        batched rollout; a problem keeps the cheapest candidate if it beats its plan (else the
        plan stays). The cost must have a gradient (``phalanx.costs`` terms, or a
        CallableCost with ``grad_fn``). Returns the plans' costs after the steps, (N,).
        ``plan`` runs this after each sampling iteration when ``gradient_steps`` > 0. With
        activation state, ``act`` (N, na) holds the problems' activations."""
        from . import Tape, rollout

        qpos, qvel, act, _ = self._states(qpos, qvel, act)
        N, H, nu = self.num_problems, self.horizon, self.model.nu
        fractions = np.array([1.0, 0.5, 0.25, 0.125])
        scale = self.gradient_step * np.asarray(self._noise_scale(), dtype=np.float64)
        value = None
        for _ in range(_positive_int("steps", steps)):
            tape = Tape(checkpoint_every=1)
            u = self._held(self._u)
            out = rollout(self.model, qpos, qvel, u, tape=tape, act=act, device=self.device)
            qs, vs, status = out[0], out[1], out[-1]
            value, dq, dv, du = self.cost.value_and_grad(qs, vs, u)
            value = np.where((np.asarray(status) & _STOPPED) != 0, np.inf, value)
            g = np.asarray(tape.backward(dq, dv, grads=("ctrl",))["ctrl"], dtype=np.float64) + du
            g = g.reshape(N, H, self.hold, nu).sum(axis=2)  # a row's steps share it
            top = np.abs(g).reshape(N, -1).max(axis=1)[:, None, None]
            direction = np.divide(g, top, out=np.zeros_like(g), where=top > 0)
            trial = self._clip(self._u[None] - fractions[:, None, None, None] * scale[None]
                               * direction[None]).astype(self.dtype)  # (4, N, H, nu)
            trial = trial.transpose(1, 0, 2, 3).reshape(N * 4, H, nu)
            held = self._held(trial)
            out = rollout(self.model, np.repeat(qpos, 4, 0), np.repeat(qvel, 4, 0), held,
                          act=None if act is None else np.repeat(act, 4, 0), device=self.device)
            qs, vs, status = out[0], out[1], out[-1]
            c = np.asarray(self.cost(qs, vs, held), dtype=np.float64)
            c = np.where((np.asarray(status) & _STOPPED) != 0, np.inf, c).reshape(N, 4)
            best = c.argmin(axis=1)
            better = c[np.arange(N), best] < value
            chosen = trial.reshape(N, 4, H, nu)[np.arange(N), best]
            self._u = np.where(better[:, None, None], chosen, self._u)
            value = np.where(better, c[np.arange(N), best], value)
        return value


class MPPI(_Planner):
    """Model predictive path integral control (Williams et al. 2017) for N problems.

    ``model``: a phalanx.Model; ``horizon`` H control rows, each ``hold`` steps of
    model.timestep (default 1); ``num_samples`` K per problem and iteration; ``sigma`` the
    noise standard deviation, a scalar or (nu,); ``temperature`` lambda of the weights
    exp(-(c - min c) / lambda) (in the units of the cost). The keyword options (``cost``,
    ``noise_smoothing``, ``seed``, ``num_problems``, ``include_nominal``, ``initial_plan``,
    ``iterations``, ``gradient_steps``, ``gradient_step``, ``hold``, ``ctrlrange``, ``dtype``,
    ``device``) are those of both planners (see ``_Planner``).

    After an iteration ``last_costs`` (N, K) and ``last_weights`` (N, K) hold its costs and
    weights.
    """

    _name = "MPPI"

    def __init__(self, model, horizon: int, num_samples: int, sigma, temperature: float,
                 **options):
        lam = float(temperature)
        if not (np.isfinite(lam) and lam > 0):
            raise ValueError(f"phalanx.control.MPPI: temperature must be positive and finite, "
                             f"got {temperature!r}")
        self.temperature = lam
        super().__init__(model, horizon, num_samples, sigma, **options)

    @exclusive("phalanx.control planner")
    def reset(self) -> None:
        super().reset()
        self.last_weights = None

    def _noise_scale(self):
        N, H, nu = self.num_problems, self.horizon, self.model.nu
        return np.broadcast_to(self.sigma, (N, H, nu))

    def _iterate(self, qpos, qvel, act):
        self._sample(qpos, qvel, act)
        ok = self._batch.update_mppi(self._u, self.temperature, self._lo, self._hi)
        if not np.all(ok):  # NaN and all-inf costs were reported above; kept as a guard
            bad = np.flatnonzero(~np.asarray(ok))
            raise ValueError(f"phalanx.control.MPPI: no weights for problem(s) "
                             f"{bad[:10].tolist()} (NaN or no finite cost)")
        self.last_weights = self._batch.weights
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
    mean. ``std`` (N, H, nu) is the current standard deviation. The other keyword options are
    MPPI's (see ``_Planner``).
    """

    _name = "CEM"

    def __init__(self, model, horizon: int, num_samples: int, num_elites: int, sigma, *,
                 smoothing: float = 0.1, sigma_min: float = 0.05, iterations: int = 3,
                 **options):
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
        super().__init__(model, horizon, num_samples, sigma, iterations=iterations, **options)

    @exclusive("phalanx.control planner")
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

    @exclusive("phalanx.control planner")
    def shift(self, steps: int = 1) -> None:
        """The means moved ``steps`` rows earlier (last row repeated); the standard deviations
        back to ``sigma``, so that the next plan explores afresh."""
        super().shift(steps)
        self._std = self._initial_std()

    def _noise_scale(self):
        return self._std

    def _iterate(self, qpos, qvel, act):
        self._sample(qpos, qvel, act)
        self._batch.update_cem(self._u, self._std, self.num_elites, self.smoothing,
                               self.sigma_min)
        self.last_elites = self._batch.elites
        self._iteration += 1
