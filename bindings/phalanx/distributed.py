"""One batch of environments spread over processes and machines, on Ray: ``phalanx.distributed``.

Needs Ray (``pip install ".[distributed]"``, or ``pip install ray``)::

    import ray, phalanx.distributed as pd
    ray.init()                      # a local cluster; ray.init(address="auto") joins one
    batch = pd.ShardedBatch("humanoid.xml", num_envs=8192, num_shards=4, dtype=np.float32)
    batch.step(ctrl)                # (E, nu): each shard steps its environments
    costs, status = batch.rollout(ctrl=u, cost=cost)     # from the shards' own states
    tape = pd.Tape()
    costs, status = batch.rollout(ctrl=u, cost=cost, tape=tape)
    grads = tape.backward()         # {"ctrl": (E, T, nu), "qpos": (E, nq), ...}

A ``ShardedBatch`` splits E environments into ``num_shards`` contiguous slices (sizes differing
by at most one), each owned by a Ray actor that holds a ``phalanx.Simulator`` of its slice on
its device: one actor per GPU (``device="cuda"`` asks Ray for one GPU per shard) or per group of
``cpus_per_shard`` CPU cores (the actor runs that many OpenMP threads). Every method
takes and returns arrays of the whole batch, with the shapes of the single-process API, and
gives the same numbers bit for bit (each environment is computed alone, whichever process
holds it):

- ``reset`` and ``step``: ``phalanx.Simulator``'s, on the shards' own state (``step`` with
  given states is ``phalanx.step``);
- ``rollout(qpos, qvel, ctrl, tape=..., cost=...)``: ``phalanx.rollout`` from the given states,
  or from the shards' current states when qpos and qvel are None (which it leaves unchanged);
  with a ``cost`` (``phalanx.costs``) each shard evaluates it on its own trajectories and only
  the costs come back;
- ``Tape.backward``: the gradients of a taped rollout, per environment (a shared parameter's
  gradient is their sum over E, as for ``phalanx.Tape``); after a rollout with a cost, the
  cost's own gradient is added on the shards;
- ``set_parameter``, ``parameter``: per environment or shared;
- ``qpos``, ``qvel``, ``act``, ``ctrl``, ``status``, ``time``: gathered copies.

What crosses the network is what the caller passes and asks for: controls, costs, gradients.
States stay in their shards unless read; a rollout without a cost returns its trajectories
(as ``phalanx.rollout`` does), one with a cost only the costs. Within a node Ray's object store
hands numpy arrays to the actors without copies.

``MPPI`` and ``CEM`` here are ``phalanx.control``'s planners with their samples split over the
shards: each shard draws, rolls out and costs its slice of the K samples of every problem
(keyed by their numbers in the whole sampling, so the noise is the single-process planner's),
and the update runs on the caller's side on the gathered costs and perturbations: the plans
equal those of ``phalanx.control.MPPI`` / ``CEM`` for the same seed, bit for bit.

Faults. A shard whose process dies (a crash, a killed worker, an out-of-memory kill) is
restarted by Ray (``max_restarts``). The batch notices the failed call, waits for the new
actor, restores the shard's environments from its last checkpoint (state, controls, status,
time, the contact warm start and the parameters set), replays the calls that changed it since,
and repeats the failed call: the results equal those of an uninterrupted run, and
``batch.faults`` lists what happened (``Fault`` records; a ``RuntimeWarning`` is issued too).
A checkpoint is taken every ``checkpoint_every`` state-changing calls and by ``checkpoint()``;
it stays in the object store of the shard's node (it survives the process, not the node).
Tapes are re-recorded from their kept inputs when their shard restarted before ``backward``.

Thread safety: a ShardedBatch is driven from one thread.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import os
import time
import warnings

import numpy as np

from . import control, costs
from .simulator import env_indices

__all__ = ["ShardedBatch", "Tape", "MPPI", "CEM", "Fault", "shard_ranges"]

_STATE = ("qpos", "qvel", "act", "ctrl", "status", "time")


def _ray():
    try:
        import ray
    except ImportError as err:  # the optional extra
        raise ImportError("phalanx.distributed needs Ray: pip install 'phalanx[distributed]' "
                          "(or pip install ray)") from err
    return ray


def shard_ranges(num_envs: int, num_shards: int) -> list[tuple[int, int]]:
    """the environments [lo, hi) of each shard: contiguous, sizes differing by at most one"""
    base, extra = divmod(num_envs, num_shards)
    bounds = [0]
    for i in range(num_shards):
        bounds.append(bounds[-1] + base + (i < extra))
    return list(zip(bounds[:-1], bounds[1:]))


@dataclasses.dataclass
class Fault:
    """a shard that died and was restored: which, during what call, how many calls were
    replayed on its restored state, how long the recovery took, and Ray's error"""

    shard: int
    call: str
    replayed: int
    seconds: float
    error: str


class _Restarted:
    """what a shard answers to a call meant for an earlier incarnation of it"""


# --- the shard: runs in the actor's process -----------------------------------------------------


def _portable_cost(cost):
    """a cost as it travels to the shards: built-in terms as their arrays (the shard's own
    model evaluates them), anything else as itself (pickled by Ray)"""
    if cost is None:
        return None
    cost = costs.as_cost(cost)
    if isinstance(cost, costs.Terms):
        return ("terms", cost.ints, cost.reals)
    return ("callable", cost)


class _Shard:
    """A slice of the batch's environments: a phalanx.Simulator of its own model, its tapes and
    planner batches. Ray runs it as an actor (ray.remote(_Shard))."""

    def __init__(self, model_path, num_envs, device, dtype, threads):
        import phalanx

        phalanx.set_num_threads(threads)
        self._px = phalanx
        self.model = phalanx.load_model(model_path)
        self.sim = phalanx.Simulator(self.model, num_envs, device=device, dtype=dtype)
        self.device, self.dtype = device, np.dtype(dtype)
        self.tapes = {}  # tape id -> (phalanx.Tape, cost, (qs, vs, ctrl) for the cost's gradient)
        self.planners = {}  # (N, K, H, hold) -> PlannerBatch
        self.set_names = set()  # parameters set since the start: part of a checkpoint
        self.token = os.urandom(8).hex()  # this incarnation of the actor

    def call(self, token, method, *args):
        """run one of the methods below (one entry point, so that the batch can log and
        replay), or return _Restarted when the caller last saw another incarnation"""
        if token != self.token:
            return _Restarted()
        return getattr(self, method)(*args)

    def pair(self, token, method):
        """(whether the caller's incarnation is this one, the method's result), as two
        objects, so that the caller checks the first and keeps the second in the object store"""
        if token != self.token:
            return False, None
        return True, getattr(self, method)()

    def incarnation(self):
        return self.token

    # the Simulator's state
    def reset(self, ids, qpos, qvel, act):
        self.sim.reset(ids, qpos, qvel, act)

    def step(self, ctrl, nstep, qfrc, xfrc):
        self.sim.step(ctrl, nstep, qfrc=qfrc, xfrc=xfrc)

    def step_from(self, start, ctrl, nstep, qfrc, xfrc):
        """``phalanx.step`` from start = (qpos, qvel, act), the shard's state untouched"""
        qpos, qvel, act = start
        return self._px.step(self.model, qpos, qvel, ctrl, nstep=nstep, qfrc=qfrc, xfrc=xfrc,
                             act=act, dtype=self.dtype, device=self.device)

    def get(self, name):
        return np.array(getattr(self.sim, name))

    def state(self):
        """the initial state of a rollout from the shard's own state"""
        s = self.sim
        return s.qpos.copy(), s.qvel.copy(), s.act.copy() if self.model.na > 0 else None

    def set_parameter(self, name, values):
        self.sim.set_parameter(name, values)
        self.set_names.add(name)

    def parameter(self, name):
        return self.sim.parameter(name)

    # checkpoints
    def checkpoint(self):
        return {"state": {name: self.get(name) for name in _STATE},
                "warm": self.sim._warm.state(),
                "parameters": {name: self.sim.parameter(name) for name in self.set_names}}

    def restore(self, checkpoint):
        if checkpoint is None:  # none taken yet: the state of a new shard
            return
        s = self.sim
        for name, value in checkpoint["state"].items():
            getattr(s, "_" + name)[...] = value
        s._warm.restore(self.model, checkpoint["warm"], self.device)
        for name, value in checkpoint["parameters"].items():
            self.set_parameter(name, value)

    # rollouts, tapes and planners
    def _cost(self, portable):
        if portable is None:
            return None
        if portable[0] == "terms":
            return costs.Terms(self.model, portable[1], portable[2])
        return portable[1]

    def rollout(self, start, ctrl, tape, cost, need_states):
        """``phalanx.rollout`` from start = (qpos, qvel, act) or, None, from the shard's own
        state; with a cost: (costs, status)"""
        qpos, qvel, act = self.state() if start is None else start
        px_tape = None
        if tape is not None:
            px_tape = self._px.Tape(checkpoint_every=tape[1], memory_budget=tape[2])
        out = self._px.rollout(self.model, qpos, qvel, ctrl, tape=px_tape, act=act,
                               dtype=self.dtype, device=self.device)
        cost = self._cost(cost)
        kept = None
        if cost is not None:
            held = np.ascontiguousarray(ctrl, dtype=self.dtype)
            value = np.asarray(costs._evaluate(cost, out[0], out[1], held), dtype=np.float64)
            value[(out[-1] & self._px.STATUS_STOP_MASK) != 0] = np.inf
            kept = (out[0], out[1], held)
            out = (value, out[-1]) if not need_states else (*out[:-1], value, out[-1])
        if tape is not None:
            self.tapes[tape[0]] = (px_tape, cost, kept)
        return out

    def backward(self, tape_id, adj_qpos, adj_qvel, adj_act, flags):
        """Tape.backward of a tape recorded here; None when this incarnation never recorded it
        (the shard restarted since)"""
        if tape_id not in self.tapes:
            return None
        px_tape, cost, kept = self.tapes[tape_id]
        du = None
        if cost is not None:
            _, dq, dv, du = cost.value_and_grad(*kept)
            adj_qpos = dq if adj_qpos is None else adj_qpos + dq
            adj_qvel = dv if adj_qvel is None else adj_qvel + dv
        grads = px_tape.backward(adj_qpos, adj_qvel, adj_act=adj_act, **flags)
        if du is not None and "ctrl" in grads:
            grads["ctrl"] = grads["ctrl"] + du
        return grads

    def drop_tape(self, tape_id):
        self.tapes.pop(tape_id, None)

    def planner_samples(self, shape, dtype, cost, native, sampling, qpos, qvel, plan, act):
        """a slice of a planner's samples: (costs, eps, ctrl) of the numbers sampling gives"""
        if shape not in self.planners:
            self.planners[shape] = control.planner_batch(self.model, *shape, dtype, self.device)
        batch = self.planners[shape]
        values = control.draw_samples(batch, self.model, self._cost(cost), native, sampling,
                                      qpos, qvel, plan, act)
        return values, batch.eps, batch.ctrl


# --- the batch: runs in the caller's process ----------------------------------------------------


class ShardedBatch:
    """E environments of one model on ``num_shards`` Ray actors.

    ``model_path``: an MJCF or URDF file every shard loads (readable on every node: a shared
    file system or the same path on each machine). ``device`` "cpu" or "cuda" and ``dtype``
    float32 or float64 as for ``phalanx.Simulator``. ``cpus_per_shard`` (default 1) and
    ``gpus_per_shard`` (default 1 on CUDA, else 0) are each actor's Ray resources;
    ``threads_per_shard`` its OpenMP threads (default: cpus_per_shard, at least 1).
    ``checkpoint_every``: state-changing calls between checkpoints (default 100);
    ``max_restarts``: restarts Ray grants each shard (default 3); ``restart_timeout``: seconds
    to wait for a restarted shard (default 120). Ray must be initialised (``ray.init``), or it
    is started here on the local machine.
    """

    def __init__(self, model_path, num_envs: int, num_shards: int, *, device: str = "cpu",
                 dtype=np.float64, cpus_per_shard: float = 1, gpus_per_shard: float | None = None,
                 threads_per_shard: int | None = None, checkpoint_every: int = 100,
                 max_restarts: int = 3, restart_timeout: float = 120.0) -> None:
        ray = _ray()
        import phalanx

        num_envs, num_shards = (_positive("num_envs", num_envs),
                                _positive("num_shards", num_shards))
        if num_shards > num_envs:
            raise ValueError(f"phalanx.distributed: num_shards ({num_shards}) must not exceed "
                             f"num_envs ({num_envs})")
        self._checkpoint_every = _positive("checkpoint_every", checkpoint_every)
        self.restart_timeout = float(restart_timeout)
        self.model_path = os.path.abspath(os.fspath(model_path))  # the workers may run elsewhere
        self.model = phalanx.load_model(self.model_path)  # shapes, names and the planners' side
        self.num_envs, self.num_shards = num_envs, num_shards
        self.device, self.dtype = device, np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"phalanx.distributed: dtype must be float32 or float64, got "
                             f"{self.dtype}")
        self.ranges = shard_ranges(num_envs, num_shards)
        if not ray.is_initialized():
            ray.init()
        if gpus_per_shard is None:
            gpus_per_shard = 1 if device == "cuda" else 0
        total = ray.cluster_resources()
        for what, per in (("CPU", cpus_per_shard), ("GPU", gpus_per_shard)):
            have = total.get(what, 0)
            if per * num_shards > have:  # the actors would wait for resources forever
                raise ValueError(
                    f"phalanx.distributed: {num_shards} shards of {per:g} {what} each need "
                    f"{per * num_shards:g} {what}s; the Ray cluster has {have:g} (lower "
                    f"num_shards or {what.lower()}s_per_shard, or add nodes)")
        threads = (max(1, int(cpus_per_shard)) if threads_per_shard is None
                   else _positive("threads_per_shard", threads_per_shard))
        actor = ray.remote(_Shard).options(num_cpus=cpus_per_shard, num_gpus=gpus_per_shard,
                                            max_restarts=max_restarts, max_task_retries=0)
        self._actors = [actor.remote(self.model_path, hi - lo, device, self.dtype.name, threads)
                        for lo, hi in self.ranges]
        self.faults: list[Fault] = []
        self._log = [[] for _ in self._actors]  # state-changing calls since the checkpoint
        self._since = 0
        self._tape_ids = itertools.count()
        # each shard's incarnation (the shards are up: a bad model fails here)
        try:
            self._tokens = ray.get([a.incarnation.remote() for a in self._actors],
                                   timeout=self.restart_timeout)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise RuntimeError(
                f"phalanx.distributed: the {num_shards} shards did not start within "
                f"{self.restart_timeout:.0f} s; the Ray cluster has "
                f"{ray.available_resources()} free of {total} (other actors hold the rest?)"
            ) from None
        self._checkpoints = [None] * num_shards
        self.checkpoint()

    # --- plumbing --------------------------------------------------------------------------

    def actor(self, shard: int):
        """the Ray actor of a shard (e.g. for ray.kill in a test of the fault handling)"""
        return self._actors[shard]

    def _run(self, method, args, changes_state=False, shards=None):
        """method(*args[j]) on shard shards[j] (default: every shard, in order), in parallel
        -> their results. A shard that died is recovered and its call repeated."""
        ray = _ray()
        shards = list(range(self.num_shards)) if shards is None else list(shards)
        args = dict(zip(shards, args))

        def issue(i):
            return self._actors[i].call.remote(self._tokens[i], method, *args[i])

        refs = {i: issue(i) for i in shards}
        results = {}
        for i in shards:
            while True:
                try:
                    results[i] = ray.get(refs[i])
                    if not isinstance(results[i], _Restarted):
                        break
                    err = "restarted before this call"
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                    err = repr(e)
                self._recover(i, method, err)
                refs[i] = issue(i)
        if changes_state:
            for i in shards:
                self._log[i].append((method, args[i]))
            self._since += 1
            if self._since >= self._checkpoint_every:
                self.checkpoint()
        return [results[i] for i in shards]

    def _recover(self, shard, method, err):
        """wait for Ray's restart of a dead shard, restore its checkpoint and replay its log"""
        ray = _ray()
        start = time.monotonic()
        actor = self._actors[shard]
        dead = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.GetTimeoutError)
        while True:  # until a restored incarnation has replayed the log
            try:
                token = ray.get(actor.incarnation.remote(), timeout=self.restart_timeout)
                ray.get(actor.restore.remote(self._checkpoints[shard]))
                for name, args in self._log[shard]:
                    if isinstance(ray.get(actor.call.remote(token, name, *args)), _Restarted):
                        raise ray.exceptions.ActorUnavailableError("restarted again", None)
                break
            except dead as again:
                if time.monotonic() - start > self.restart_timeout:
                    raise RuntimeError(
                        f"phalanx.distributed: shard {shard} died during {method} and was not "
                        f"restored within {self.restart_timeout:.0f} s (restarts exhausted?)"
                    ) from again
                time.sleep(0.1)
        self._tokens[shard] = token
        fault = Fault(shard, method, len(self._log[shard]), time.monotonic() - start, err)
        self.faults.append(fault)
        warnings.warn(f"phalanx.distributed: shard {shard} died during {method}; restarted, "
                      f"restored and {fault.replayed} call(s) replayed in {fault.seconds:.1f} s",
                      RuntimeWarning, stacklevel=4)

    def _kept(self, method):
        """method() of every shard, its results left in the object store: their refs"""
        ray = _ray()
        refs = []
        for i, a in enumerate(self._actors):
            while True:
                ok, result = a.pair.options(num_returns=2).remote(self._tokens[i], method)
                try:
                    if ray.get(ok):
                        break
                    err = "restarted before this call"
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                    err = repr(e)
                self._recover(i, method, err)
            refs.append(result)
        return refs

    def checkpoint(self) -> None:
        """Take a checkpoint of every shard now (kept in the object store, not fetched)."""
        self._checkpoints = self._kept("checkpoint")
        self._log = [[] for _ in self._actors]
        self._since = 0

    def _split(self, name, value, width=None):
        """an (E, ...) array as each shard's rows; None stays None for every shard"""
        if value is None:
            return [None] * self.num_shards
        value = np.asarray(value)
        if value.shape[:1] != (self.num_envs,) or (width is not None
                                                   and value.shape[1:] != tuple(width)):
            expected = (self.num_envs, *(width if width is not None else value.shape[1:]))
            raise ValueError(f"phalanx.distributed: {name} must have shape {expected}, got "
                             f"{value.shape}")
        return [value[lo:hi] for lo, hi in self.ranges]

    def _gather(self, name):
        return np.concatenate(self._run("get", [(name,)] * self.num_shards))

    def close(self) -> None:
        """End the shards' actors."""
        ray = _ray()
        for a in self._actors:
            ray.kill(a, no_restart=True)
        self._actors = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return (f"phalanx.distributed.ShardedBatch({self.model.name!r}, num_envs={self.num_envs}, "
                f"num_shards={self.num_shards}, device={self.device!r}, "
                f"dtype={self.dtype.name})")

    # --- the Simulator's state ---------------------------------------------------------------

    def _gathered(name):  # noqa: N805: a property of every shard's Simulator attribute
        return property(lambda self: self._gather(name),
                        doc=f"the Simulator's {name} of every environment, gathered (a copy)")

    qpos, qvel, act, ctrl, status, time = map(_gathered, _STATE)
    del _gathered

    def reset(self, env_ids=None, qpos=None, qvel=None, act=None) -> None:
        """``phalanx.Simulator.reset`` of the environments env_ids (None: all; an index, indices
        or a boolean mask (E,)), with shared (nq,) or per-environment (len(env_ids), nq)
        states."""
        ids = env_indices(env_ids, self.num_envs, "phalanx.distributed")
        args = []
        for lo, hi in self.ranges:
            mine = (ids >= lo) & (ids < hi)  # shared rows as they are, per-environment ones split
            rows = [v if v is None or np.ndim(v) == 1 else np.asarray(v)[mine]
                    for v in (qpos, qvel, act)]
            args.append((ids[mine] - lo, *rows))
        self._run("reset", args, changes_state=True)

    def step(self, ctrl=None, nstep: int = 1, *, qfrc=None, xfrc=None, qpos=None, qvel=None,
             act=None):
        """``phalanx.Simulator.step`` on every shard: ctrl (E, nu) (None: the shards' own),
        qfrc (E, nv) and xfrc (E, nbody, 6) optional; the shards' states advance in place.

        Given qpos (E, nq) and qvel (E, nv) (and act (E, na) with activation state), it is
        ``phalanx.step`` instead: from those states, the shards' own untouched, returning what
        ``phalanx.step`` returns (qpos, qvel[, act], status)."""
        m = self.model
        nstep = _positive("nstep", nstep)
        forces = list(zip(self._split("qfrc", qfrc, (m.nv,)),
                          self._split("xfrc", xfrc, (m.nbody, 6))))
        if qpos is None and qvel is None:
            ctrls = self._split("ctrl", ctrl, (m.nu,))
            self._run("step", [(c, nstep, *f) for c, f in zip(ctrls, forces)],
                      changes_state=True)
            return None
        if qpos is None or qvel is None or ctrl is None:
            raise ValueError("phalanx.distributed: a step from given states needs qpos, qvel "
                             "and ctrl")
        starts = zip(self._split("qpos", qpos, (m.nq,)), self._split("qvel", qvel, (m.nv,)),
                     self._split("act", act, (m.na,)))
        args = [(s, c, nstep, *f) for s, c, f in zip(starts, self._split("ctrl", ctrl, (m.nu,)),
                                                     forces)]
        return tuple(np.concatenate(p) for p in zip(*self._run("step_from", args)))

    # --- parameters -------------------------------------------------------------------------

    def set_parameter(self, name: str, values) -> None:
        """``phalanx.Simulator.set_parameter``: values of the parameter's shape (shared) or
        (E, *shape), one row per environment."""
        shape = tuple(dict(_parameters())[name](self.model)) if name in dict(
            _parameters()) else None
        if shape is None:
            raise ValueError(f"phalanx.distributed: unknown parameter {name!r}")
        values = np.asarray(values, dtype=np.float64)
        if values.shape == shape:
            args = [(name, values)] * self.num_shards
        elif values.shape == (self.num_envs, *shape):
            args = [(name, v) for v in self._split(name, values)]
        else:
            raise ValueError(f"phalanx.distributed: parameter {name} must have shape {shape} "
                             f"(shared) or {(self.num_envs, *shape)}, got {values.shape}")
        self._run("set_parameter", args, changes_state=True)

    def parameter(self, name: str) -> np.ndarray:
        """the values (E, *shape) each environment uses, gathered"""
        return np.concatenate(self._run("parameter", [(name,)] * self.num_shards))

    # --- rollouts ---------------------------------------------------------------------------

    def rollout(self, qpos=None, qvel=None, ctrl=None, *, act=None, tape: Tape | None = None,
                cost=None, states: bool | None = None) -> tuple[np.ndarray, ...]:
        """``phalanx.rollout`` of the batch: ctrl (E, T, nu) from qpos (E, nq), qvel (E, nv)
        (and act (E, na) with activation state), or, when qpos and qvel are None, from the
        shards' current states (left unchanged).

        Without a cost, returns what ``phalanx.rollout`` returns (trajectories gathered). With
        ``cost`` (a ``phalanx.costs`` cost or a function of (qs, vs, ctrl)), each shard
        evaluates it on its trajectories and returns ``(costs (E,), status (E,))`` (+inf for a
        stopped environment); ``states=True`` also returns the trajectories before them.
        ``tape``, a ``phalanx.distributed.Tape``, records the rollout on the shards."""
        ray = _ray()
        m = self.model
        if ctrl is None:
            raise ValueError("phalanx.distributed: rollout needs ctrl (E, T, nu)")
        ctrl = np.asarray(ctrl)
        if ctrl.ndim != 3:
            raise ValueError(f"phalanx.distributed: ctrl must have shape (E, T, nu) = "
                             f"({self.num_envs}, T, {m.nu}), got {ctrl.shape}")
        ctrls = self._split("ctrl", ctrl, (ctrl.shape[1], m.nu))
        if (qpos is None) != (qvel is None):
            raise ValueError("phalanx.distributed: give both qpos and qvel, or neither (the "
                             "shards' own states)")
        if qpos is None:  # the shards' own states (for a tape kept in the shards' stores)
            starts = self._kept("state") if tape is not None else [None] * self.num_shards
        else:
            starts = [(q, v, a) for q, v, a in zip(self._split("qpos", qpos, (m.nq,)),
                                                   self._split("qvel", qvel, (m.nv,)),
                                                   self._split("act", act, (m.na,)))]
        need_states = cost is None or bool(states)
        portable = _portable_cost(cost)
        tape_args = [None] * self.num_shards
        if tape is not None:
            if not isinstance(tape, Tape):
                raise TypeError("phalanx.distributed: tape must be a phalanx.distributed.Tape")
            tape_id = next(self._tape_ids)
            # the inputs stay in the object store so that a restarted shard can record again
            starts = [s if isinstance(s, ray.ObjectRef) else ray.put(s) for s in starts]
            ctrls = [ray.put(c) for c in ctrls]
            tape_args = [(tape_id, tape.checkpoint_every, tape.memory_budget)] * self.num_shards
        args = [(s, c, t, portable, need_states) for s, c, t in zip(starts, ctrls, tape_args)]
        if tape is not None:
            tape._recorded(self, args)
        parts = self._run("rollout", args)
        return tuple(np.concatenate(p) for p in zip(*parts))

    # --- planners ---------------------------------------------------------------------------

    def _planner_samples(self, planner, qpos, qvel, act):
        """the sampling stage of a planner, its K samples split over the shards -> (costs,
        eps, ctrl), each gathered over the samples"""
        N, K = planner.num_problems, planner.num_samples
        if K < self.num_shards:
            raise ValueError(f"phalanx.distributed: {planner._name} has fewer samples ({K}) "
                             f"than the batch has shards ({self.num_shards})")
        native = isinstance(planner.cost, costs.Terms)
        portable = _portable_cost(planner.cost)
        args = []
        for lo, hi in shard_ranges(K, self.num_shards):
            shape = (N, hi - lo, planner.horizon, planner.hold)
            args.append((shape, planner.dtype.name, portable, native,
                         planner.sampling(lo, K), qpos, qvel, planner._u, act))
        parts = self._run("planner_samples", args)
        return tuple(np.concatenate(p, axis=1) for p in zip(*parts))


class Tape:
    """The record of a ShardedBatch rollout, each shard's part kept by that shard:
    ``checkpoint_every`` and ``memory_budget`` as for ``phalanx.Tape``."""

    def __init__(self, checkpoint_every: int = 0, memory_budget: int = 0) -> None:
        self.checkpoint_every = operator.index(checkpoint_every)
        self.memory_budget = operator.index(memory_budget)
        self._batch = None
        self._args = None

    def _recorded(self, batch, args):
        self._drop()
        self._batch, self._args = batch, args

    def _drop(self):
        if self._batch is not None and self._batch._actors:
            tape_id = self._args[0][2][0]
            for a, t in zip(self._batch._actors, self._batch._tokens):
                a.call.remote(t, "drop_tape", tape_id)
        self._batch = self._args = None

    def backward(self, adj_qpos=None, adj_qvel=None, *, adj_act=None, grads=None,
                 complementarity_aware: bool = False,
                 bounce_correction: bool = False) -> dict[str, np.ndarray]:
        """``phalanx.Tape.backward`` over the shards: adj_qpos (E, T, nq), adj_qvel (E, T, nv)
        and adj_act (E, T, na), each None for zero; after a rollout with a cost, that cost's
        gradient is added. Returns the gradients gathered per environment: those named in
        ``grads`` (None: all)."""
        batch = self._batch
        if batch is None:
            raise RuntimeError("phalanx.distributed: the tape has not recorded a rollout")
        adjs = [batch._split(n, a) for n, a in (("adj_qpos", adj_qpos), ("adj_qvel", adj_qvel),
                                                ("adj_act", adj_act))]
        flags = dict(complementarity_aware=complementarity_aware,
                     bounce_correction=bounce_correction, grads=grads)
        tape_id = self._args[0][2][0]
        args = [(tape_id, q, v, a, flags) for q, v, a in zip(*adjs)]
        parts = batch._run("backward", args)
        lost = [i for i, p in enumerate(parts) if p is None]
        if lost:  # restarted since recording: record again from the kept inputs
            batch._run("rollout", [self._args[i] for i in lost], shards=lost)
            again = batch._run("backward", [args[i] for i in lost], shards=lost)
            for i, p in zip(lost, again):
                parts[i] = p
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


class _Sharded:
    """the sampling stage of a phalanx.control planner on a ShardedBatch's shards"""

    def __init__(self, batch: ShardedBatch, *args, **options):
        if not isinstance(batch, ShardedBatch):
            raise TypeError("phalanx.distributed: the first argument must be a ShardedBatch")
        self.sharded = batch
        options.setdefault("dtype", batch.dtype)
        super().__init__(batch.model, *args, **options)

    def _draw(self, qpos, qvel, act):
        values, eps, ctrl = self.sharded._planner_samples(self, qpos, qvel, act)
        self._batch.set_samples(np.ascontiguousarray(eps), np.ascontiguousarray(ctrl),
                                np.ascontiguousarray(values))
        return values


class MPPI(_Sharded, control.MPPI):
    """``phalanx.control.MPPI`` with its samples rolled out on a ShardedBatch's shards:
    ``MPPI(batch, horizon, num_samples, sigma, temperature, cost=..., ...)``, the other
    arguments those of phalanx.control.MPPI (the model is the batch's)."""


class CEM(_Sharded, control.CEM):
    """``phalanx.control.CEM`` with its samples rolled out on a ShardedBatch's shards:
    ``CEM(batch, horizon, num_samples, num_elites, sigma, cost=..., ...)``."""


def _positive(name, value) -> int:
    import phalanx

    return phalanx._count(name, value, 1, "phalanx.distributed")


def _parameters():
    """(name, shape of a model) of every field set_parameter takes: the parameters and the
    other per-environment fields"""
    import phalanx

    return phalanx._BATCHED_FIELDS
