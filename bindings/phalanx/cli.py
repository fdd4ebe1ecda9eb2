"""The ``phalanx`` command line: ``info``, ``bench``, ``demo`` and ``view``.

    phalanx info MODEL [--json]
        what a model holds: counts, options, joints, actuators, geoms, the differentiable
        parameters, what the loader ignored and the memory one environment takes
    phalanx bench [MODEL] [--envs N] [--steps T] [--dtype float32|float64] [--device cpu|cuda]
                  [--threads K] [--repeats R] [--json]
        rollout throughput (median env-steps/s) with random controls inside ctrlrange
    phalanx demo [MODE] [--envs N] [--seconds S] [--out DIR] [--json]
        a short demonstration; MODE ``drop`` (the default): humanoids dropped onto the floor
    phalanx view MODEL [--traj FILE.npz] [--out FILE.html] [--contacts]
        a self-contained HTML page that plays a trajectory in 3-D (phalanx.viewer)

``python -m phalanx ...`` runs the same. MODEL defaults to MuJoCo's humanoid
(/usr/share/mujoco/model/humanoid/humanoid.xml, Debian package libmujoco-samples) where a
command takes one optionally. A missing file or a bad option prints one line on stderr and
exits with status 2.

Threads. The CPU backend runs environments in parallel with OpenMP. ``--threads K`` sets the
count with ``phalanx.set_num_threads`` for the command's duration and restores the previous
count afterwards (so ``main`` can be called from a running program). Without ``--threads``
the default applies (OMP_NUM_THREADS if set before Python started, else all cores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections import Counter

import numpy as np

import phalanx

HUMANOID = "/usr/share/mujoco/model/humanoid/humanoid.xml"

# the core's status bits, (name, bit) in the order they are reported
STATUS_BITS = phalanx.STATUS_BITS
# jnt_type values, by the core's names
_JOINT_FREE, _JOINT_SLIDE, _JOINT_HINGE = (phalanx.JOINT_TYPES.index(t)
                                           for t in ("free", "slide", "hinge"))


def _type_name(names, t) -> str:
    """the core's name of joint or geom type t (phalanx.JOINT_TYPES, GEOM_TYPES)"""
    t = int(t)
    return names[t] if 0 <= t < len(names) else f"type {t}"


class CliError(Exception):
    """A user error (missing file, bad option): one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors raised as CliError instead of usage plus exit."""

    def error(self, message):
        raise CliError(f"{self.prog}: error: {message} (see {self.prog} --help)")


# ----------------------------------------------------------------------------------------------
# shared helpers


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return x


def load(path: str | None) -> phalanx.Model:
    """The model at path (MuJoCo's humanoid for None); CliError when missing or malformed."""
    default = path is None
    path = HUMANOID if default else os.fspath(path)
    if not os.path.isfile(path):
        hint = (" (MuJoCo's humanoid comes with Debian's libmujoco-samples; or pass a MODEL)"
                if default else "")
        raise CliError(f"phalanx: no such model file: {path}{hint}")
    try:
        return phalanx.load_model(path)
    except RuntimeError as e:  # malformed or unsupported input; the message names file and line
        raise CliError(" ".join(str(e).split())) from None


@contextlib.contextmanager
def threads(requested: int | None):
    """Run the block with `requested` CPU threads (None: as configured) and restore the
    previous count afterwards; yields the number of threads the calls use."""
    before = phalanx.num_threads()
    if requested is not None:
        phalanx.set_num_threads(requested)
    try:
        yield phalanx.num_threads()
    finally:
        phalanx.set_num_threads(before)


def ctrl_bounds(model: phalanx.Model) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) (nu,) for random controls: ctrlrange where the actuator is ctrl-limited,
    [-1, 1] otherwise."""
    lo = np.full(model.nu, -1.0)
    hi = np.full(model.nu, 1.0)
    limited = np.asarray(model.actuator_ctrllimited, bool)
    if model.nu:
        lo[limited] = model.actuator_ctrlrange[limited, 0]
        hi[limited] = model.actuator_ctrlrange[limited, 1]
    return lo, hi


def status_summary(status: np.ndarray) -> dict[str, int]:
    """Number of environments with each STATUS_* bit set."""
    status = np.asarray(status)
    return {name: int(np.count_nonzero(status & bit)) for name, bit in STATUS_BITS}


def _status_line(summary: dict[str, int], nenv: int, model: phalanx.Model) -> str:
    """One line: how many environments have each status bit; the first three stopped them."""
    notes = {"contact_overflow": f"warning: more than nconmax={model.nconmax} contacts",
             "lcp_not_converged": f"warning: LCP residual above lcp_residual_limit="
                                  f"{model.lcp_residual_limit:g} m/s at some step"}
    parts = [f"{name} in {n} of {nenv} envs ({notes.get(name, 'stopped')})"
             for name, n in summary.items() if n]
    return "status: " + ("; ".join(parts) if parts else "all clear")


def _dump(obj) -> str:
    def default(x):
        if isinstance(x, np.generic):
            return x.item()
        if isinstance(x, np.ndarray):
            return x.tolist()
        raise TypeError(f"not JSON serialisable: {type(x).__name__}")
    return json.dumps(obj, indent=2, default=default)


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


class _RolloutChunks:
    """phalanx.rollout in chunks of steps, carrying the state from one chunk to the next, with
    trajectory and counts buffers reused across chunks (one set per chunk length)."""

    def __init__(self, model, nenv, dtype, device):
        self.model, self.nenv, self.dtype, self.device = model, nenv, np.dtype(dtype), device
        self._buffers = {}
        self.act = None  # the last chunk's final activations (with activation state)

    def buffers(self, n):
        if n not in self._buffers:
            m, e, dt = self.model, self.nenv, self.dtype
            self._buffers[n] = ((np.empty((e, n, m.nq), dt), np.empty((e, n, m.nv), dt)),
                                np.zeros((e, n, phalanx.NUM_COUNTS), np.int32))
        return self._buffers[n]

    def run(self, qpos, qvel, ctrl, act=None):
        """One chunk from (qpos, qvel) and, with activation state, act (None: zeros): -> (qs,
        vs, status, counts, seconds); qs, vs and counts are the reused buffers (valid until the
        next call with the same length), the final activations go to self.act; seconds times
        the rollout call alone."""
        out, counts = self.buffers(ctrl.shape[1])
        if self.model.na > 0 and act is None:
            act = np.zeros((self.nenv, self.model.na), self.dtype)
        start = time.perf_counter()
        result = phalanx.rollout(self.model, qpos, qvel, ctrl, out=out, counts=counts, act=act,
                                 device=self.device)
        seconds = time.perf_counter() - start
        self.act = result[2][:, -1].copy() if self.model.na > 0 else None
        return result[0], result[1], result[-1], counts, seconds


# ----------------------------------------------------------------------------------------------
# phalanx info


def model_info(model: phalanx.Model) -> dict:
    """Everything `phalanx info` reports, as plain Python values."""
    joint_names = list(model.joint_names)
    actuators = []
    dyntypes = ("none", "integrator", "filter", "filterexact")
    for i, name in enumerate(model.actuator_names):
        j = int(model.actuator_trnid[i])
        tendon = model.actuator_trntype[i] == 1
        actuators.append({
            "name": name,
            "joint": joint_names[j] if not tendon and 0 <= j < len(joint_names) else None,
            "tendon": j if tendon else None,
            "dynamics": dyntypes[int(model.actuator_dyntype[i])],
            "ctrlrange": ([float(x) for x in model.actuator_ctrlrange[i]]
                          if model.actuator_ctrllimited[i] else None),
            "gear": float(model.actuator_gear[i]),
        })
    jtypes = Counter(_type_name(phalanx.JOINT_TYPES, t) for t in model.jnt_type)
    gtypes = Counter(_type_name(phalanx.GEOM_TYPES, t) for t in model.geom_type)
    return {
        "name": model.name,
        "source": model.source,
        "counts": {k: int(getattr(model, k)) for k in
                   ("nq", "nv", "nu", "na", "nbody", "njnt", "ngeom", "ntendon", "nsite",
                    "neq", "npair", "nconmax")},
        "options": {
            "timestep": float(model.timestep),
            "integrator": model.integrator,
            "gravity": [float(g) for g in model.gravity],
            "density": float(model.density),
            "viscosity": float(model.viscosity),
            "wind": [float(v) for v in model.wind],
            "contact": bool(model.contact),
            "limit": bool(model.limit),
            "lcp_solver": model.lcp_solver,
            "lcp_iterations": int(model.lcp_iterations),
            "lcp_max_iterations": int(model.lcp_max_iterations),
            "lcp_tolerance": float(model.lcp_tolerance),
            "lcp_residual_limit": float(model.lcp_residual_limit),
        },
        "joints": {"by_type": dict(jtypes), "limited": int(np.count_nonzero(model.jnt_limited))},
        "actuators": actuators,
        "geoms": {"by_type": dict(gtypes)},
        "parameters": {name: list(np.shape(model.parameter(name)))
                       for name in phalanx.PARAMETERS},
        "ignored": list(model.ignored),
        **_device_memory(model),
    }


def _device_memory(model) -> dict:
    """bytes per environment in each scalar type"""
    return {"bytes_per_env": {"float32": int(phalanx.bytes_per_env(model, dtype=np.float32)),
                              "float64": int(phalanx.bytes_per_env(model, dtype=np.float64))}}


def _print_info(info: dict) -> None:
    c, o = info["counts"], info["options"]
    print(f"model      {info['name']!r} from {info['source']}")
    print("counts     " + "  ".join(f"{k} {v}" for k, v in c.items()))
    gravity = ", ".join(f"{g:g}" for g in o["gravity"])
    print(f"options    timestep {o['timestep']:g} s ({o['integrator']}), gravity ({gravity}) m/s^2, "
          f"contact {'on' if o['contact'] else 'off'}, limit {'on' if o['limit'] else 'off'}, "
          f"lcp_solver {o['lcp_solver']} ({o['lcp_iterations']} iterations, up to "
          f"{o['lcp_max_iterations']} where the residual stays above its limit, tolerance "
          f"{o['lcp_tolerance']:g} m/s, residual limit {o['lcp_residual_limit']:g} m/s)")
    if o["density"] or o["viscosity"]:
        wind = ", ".join(f"{v:g}" for v in o["wind"])
        print(f"medium     density {o['density']:g} kg/m^3, viscosity {o['viscosity']:g} Pa s, "
              f"wind ({wind}) m/s")
    by_type = ", ".join(f"{n} {t}" for t, n in info["joints"]["by_type"].items()) or "none"
    print(f"joints     {c['njnt']}: {by_type}; {info['joints']['limited']} limited")
    by_type = ", ".join(f"{n} {t}" for t, n in info["geoms"]["by_type"].items()) or "none"
    print(f"geoms      {c['ngeom']}: {by_type}")
    print(f"actuators  {c['nu']}" + (":" if c["nu"] else ""))
    if info["actuators"]:
        width = max(len(a["name"] or "?") for a in info["actuators"])
        def moved(a):
            return f"tendon {a['tendon']}" if a["tendon"] is not None else (
                f"joint {a['joint'] or '?'}")

        jwidth = max(len(moved(a)) for a in info["actuators"])
        for a in info["actuators"]:
            r = a["ctrlrange"]
            rng = f"[{r[0]:g}, {r[1]:g}]" if r is not None else "unlimited"
            dyn = "" if a["dynamics"] == "none" else f"  dynamics {a['dynamics']}"
            print(f"  {a['name'] or '?':{width}s}  {moved(a):{jwidth}s}  "
                  f"ctrlrange {rng:14s} gear {a['gear']:g}{dyn}")
    params = ", ".join(f"{n} {tuple(s)}" for n, s in info["parameters"].items())
    print(f"parameters {params}")
    ignored = info["ignored"]
    print(f"ignored    {len(ignored)} kind(s) of element or attribute the loader did not use"
          + (":" if ignored else ""))
    for item in ignored:
        print(f"  {item}")
    b = info["bytes_per_env"]
    print(f"memory     {_bytes(b['float32'])} per env in float32, {_bytes(b['float64'])} in "
          f"float64 (state and step workspace, cpu)")


def cmd_info(args) -> int:
    info = model_info(load(args.model))
    if args.json:
        print(_dump(info))
    else:
        _print_info(info)
    return 0


# ----------------------------------------------------------------------------------------------
# phalanx bench


def cmd_bench(args) -> int:
    model = load(args.model)
    if args.no_contact:
        model.contact = False
    if args.no_limit:
        model.limit = False
    if args.device == "cuda" and not phalanx.cuda_available():
        raise CliError("phalanx: --device cuda, but CUDA is not available (no GPU visible or "
                       "the CUDA backend was not built)")
    dtype = np.dtype(args.dtype)
    with threads(args.threads) as nthread:
        if not args.json:
            print(f"{model.name!r} ({model.source}): {args.envs} envs x {args.steps} steps, "
                  f"{dtype.name}, {args.device}, {nthread if nthread else '?'} threads, contact "
                  f"{'on' if model.contact else 'off'}, limit {'on' if model.limit else 'off'}, "
                  f"lcp_solver {model.lcp_solver}", flush=True)
        timing = _bench_repeats(model, args, dtype)
    result = _bench_result(model, args, dtype, nthread, timing)
    if args.json:
        print(_dump(result))
    else:
        _print_bench(model, args, result, timing)
    return 0


def _bench_repeats(model, args, dtype) -> dict:
    """Times args.repeats rollouts of the same random controls, chunk by chunk, after a warm-up
    call; the counts and status bits of the first repeat"""
    nenv, nstep = args.envs, args.steps
    chunk = min(args.chunk, nstep)
    lo, hi = ctrl_bounds(model)
    runner = _RolloutChunks(model, nenv, dtype, args.device)
    qpos0 = np.repeat(model.qpos0[None].astype(dtype), nenv, axis=0)
    qvel0 = np.zeros((nenv, model.nv), dtype)
    # warm-up, not timed: compiles the model onto the device and touches the buffers
    runner.run(qpos0, qvel0, np.zeros((nenv, 1, model.nu), dtype))

    seconds = []
    totals = np.zeros(phalanx.NUM_COUNTS, np.int64)
    max_contacts = 0
    status_all = np.zeros(nenv, np.uint32)
    for r in range(args.repeats):
        # the same controls in every repeat, drawn outside the timed calls
        rng = np.random.default_rng(args.seed)
        qpos, qvel, act = qpos0, qvel0, None
        elapsed = 0.0
        for t0 in range(0, nstep, chunk):
            n = min(chunk, nstep - t0)
            ctrl = rng.uniform(lo, hi, size=(nenv, n, model.nu)).astype(dtype)
            qs, vs, status, counts, dt = runner.run(qpos, qvel, ctrl, act)
            act = runner.act
            t1 = time.perf_counter()
            qpos, qvel = qs[:, n - 1].copy(), vs[:, n - 1].copy()  # buffers are reused
            elapsed += dt + time.perf_counter() - t1
            if r == 0:  # every repeat does the same work
                totals += counts.reshape(-1, phalanx.NUM_COUNTS).sum(axis=0)
                max_contacts = max(max_contacts, int(counts[..., phalanx.COUNT_CONTACTS].max()))
                status_all |= status
        seconds.append(elapsed)
        if not args.json:
            print(f"  repeat {r + 1}/{args.repeats}: {elapsed:.3f} s, "
                  f"{nenv * nstep / elapsed:,.0f} env-steps/s", flush=True)
    return {"seconds": seconds, "chunk": chunk, "totals": totals, "max_contacts": max_contacts,
            "status": status_all}


def _bench_result(model, args, dtype, nthread, timing: dict) -> dict:
    """the figures of a benchmark run, as `phalanx bench --json` prints them"""
    env_steps = args.envs * args.steps
    median = statistics.median(timing["seconds"])
    per_step = timing["totals"] / env_steps
    status_all = timing["status"]
    return {
        "model": model.source,
        "name": model.name,
        "envs": args.envs,
        "steps": args.steps,
        "chunk": timing["chunk"],
        "dtype": dtype.name,
        "device": args.device,
        "threads": nthread,
        "repeats": args.repeats,
        "contact": bool(model.contact),
        "limit": bool(model.limit),
        "lcp_solver": model.lcp_solver,
        "seconds": timing["seconds"],
        "median_seconds": median,
        "env_steps": env_steps,
        "env_steps_per_second": env_steps / median,
        "simulated_seconds_per_env": args.steps * model.timestep,
        "contacts_per_step": float(per_step[phalanx.COUNT_CONTACTS]),
        "max_contacts": timing["max_contacts"],
        "rows_per_step": float(per_step[phalanx.COUNT_ROWS]),
        "overflow_per_step": float(per_step[phalanx.COUNT_OVERFLOW]),
        "gjk_iterations_per_step": float(per_step[phalanx.COUNT_GJK_ITERATIONS]),
        "epa_iterations_per_step": float(per_step[phalanx.COUNT_EPA_ITERATIONS]),
        "status": status_summary(status_all),
        "stopped": int(np.count_nonzero(status_all & phalanx.STATUS_STOP_MASK)),
        "bytes_per_env": int(phalanx.bytes_per_env(model, dtype=dtype, device=args.device)),
    }


def _print_bench(model, args, result: dict, timing: dict) -> None:
    totals = timing["totals"]
    print(f"median {result['env_steps_per_second']:,.0f} env-steps/s "
          f"({result['median_seconds']:.3f} s for {result['env_steps']:,} env-steps, "
          f"{args.repeats} repeat(s); {result['simulated_seconds_per_env']:g} s simulated per env)")
    if totals[phalanx.COUNT_ROWS] or totals[phalanx.COUNT_OVERFLOW]:
        print(f"contacts {result['contacts_per_step']:.2f} per env-step "
              f"(max {result['max_contacts']}), {result['rows_per_step']:.2f} LCP rows, "
              f"{result['overflow_per_step']:.3g} beyond nconmax={model.nconmax}")
    if totals[phalanx.COUNT_GJK_ITERATIONS]:
        print(f"convex narrowphase {result['gjk_iterations_per_step']:.1f} GJK and "
              f"{result['epa_iterations_per_step']:.1f} EPA iterations per env-step")
    print(_status_line(result["status"], args.envs, model))
    print(f"memory {_bytes(result['bytes_per_env'])} per env ({result['dtype']}, {args.device})")


# ----------------------------------------------------------------------------------------------
# phalanx demo


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (..., 4) quaternions (w, x, y, z)."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def drop_poses(model: phalanx.Model, nenv: int, rng: np.random.Generator) -> np.ndarray:
    """(nenv, nq) float64 initial poses for the drop demo: the reference pose qpos0 raised by
    0-0.3 m, turned about the vertical at random, tilted by up to 0.3 rad about a random
    horizontal axis, and each hinge or slide joint moved by up to 0.3 within its range."""
    qpos = np.repeat(model.qpos0[None].astype(np.float64), nenv, axis=0)
    a = int(model.jnt_qposadr[0])
    qpos[:, a + 2] += rng.uniform(0.0, 0.3, nenv)
    yaw = rng.uniform(-np.pi, np.pi, nenv)
    tilt = rng.uniform(0.0, 0.3, nenv)
    axis = rng.uniform(-np.pi, np.pi, nenv)
    q_yaw = np.stack([np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)], axis=-1)
    q_tilt = np.stack([np.cos(tilt / 2), np.sin(tilt / 2) * np.cos(axis),
                       np.sin(tilt / 2) * np.sin(axis), 0 * tilt], axis=-1)
    quat = _quat_mul(_quat_mul(q_yaw, q_tilt), qpos[:, a + 3:a + 7])
    qpos[:, a + 3:a + 7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    for j in range(1, model.njnt):
        if int(model.jnt_type[j]) not in (_JOINT_SLIDE, _JOINT_HINGE):
            continue
        k = int(model.jnt_qposadr[j])
        q = qpos[:, k] + rng.uniform(-0.3, 0.3, nenv)
        if model.jnt_limited[j]:
            q = np.clip(q, *model.jnt_range[j])
        qpos[:, k] = q
    return qpos


def demo_drop(args) -> int:
    """Mode ``drop``: nenv copies of a model whose first joint is free (MuJoCo's humanoid by
    default) dropped onto the floor from randomised poses, passive (zero controls), contacts
    and joint limits on. Reports as it goes how many have fallen (root below half its height in
    qpos0), the contacts and how fast the batch simulates."""
    model = load(args.model)
    if model.njnt == 0 or int(model.jnt_type[0]) != _JOINT_FREE:
        raise CliError(f"phalanx: demo drop needs a model whose first joint is free; "
                       f"{model.source} has none")
    nenv = args.envs
    dt = model.timestep
    nstep = max(1, round(args.seconds / dt))
    nreport = max(1, min(10, nstep))
    chunk = math.ceil(nstep / nreport)
    zaddr = int(model.jnt_qposadr[0]) + 2
    z_fallen = 0.5 * float(model.qpos0[zaddr])
    rng = np.random.default_rng(args.seed)
    qpos = drop_poses(model, nenv, rng)
    qvel = np.zeros((nenv, model.nv))
    runner = _RolloutChunks(model, nenv, np.float64, "cpu")

    heights = np.empty((nenv, nstep + 1))
    heights[:, 0] = qpos[:, zaddr]
    contacts = np.empty((nenv, nstep), np.int32)
    status_all = np.zeros(nenv, np.uint32)
    progress = []
    wall = 0.0
    if not args.json:
        print(f"demo drop: {nenv} x {model.name!r} dropped from randomised poses, zero controls, "
              f"{nstep} steps of {dt:g} s; fallen = root below {z_fallen:.2f} m", flush=True)
    with threads(args.threads):
        done = 0
        while done < nstep:
            n = min(chunk, nstep - done)
            qs, vs, status, counts, seconds = runner.run(qpos, qvel,
                                                         np.zeros((nenv, n, model.nu)),
                                                         runner.act if done else None)
            wall += seconds
            qpos, qvel = qs[:, n - 1].copy(), vs[:, n - 1].copy()
            heights[:, done + 1:done + n + 1] = qs[:, :, zaddr]
            contacts[:, done:done + n] = counts[..., phalanx.COUNT_CONTACTS]
            status_all |= status
            done += n
            z = qpos[:, zaddr]
            row = {"step": done, "time": done * dt, "wall_seconds": wall,
                   "fallen": float(np.mean(z < z_fallen)),
                   "height_mean": float(z.mean()), "height_min": float(z.min()),
                   "contacts_per_env": float(counts[:, n - 1, phalanx.COUNT_CONTACTS].mean())}
            progress.append(row)
            if not args.json:
                print(f"  t {row['time']:5.2f} s: fallen {100 * row['fallen']:5.1f} %, root "
                      f"height mean {row['height_mean']:.2f} m (min {row['height_min']:.2f}), "
                      f"{row['contacts_per_env']:.1f} contacts per env, "
                      f"{row['time'] / wall:,.1f} simulated s per wall s", flush=True)

    simulated = nstep * dt
    summary = status_summary(status_all)
    result = {
        "mode": "drop",
        "model": model.source,
        "envs": nenv,
        "steps": nstep,
        "timestep": dt,
        "simulated_seconds": simulated,
        "wall_seconds": wall,
        "realtime_factor": simulated / wall,
        "env_steps_per_second": nenv * nstep / wall,
        "contacts_per_step": float(contacts.mean()),
        "fallen_threshold": z_fallen,
        "fallen": float(np.mean(qpos[:, zaddr] < z_fallen)),
        "progress": progress,
        "status": summary,
        "plot": None,
    }
    if args.out is not None:
        result["plot"] = _plot_drop(args.out, heights, contacts, dt, z_fallen, model.name)
    if args.json:
        print(_dump(result))
    else:
        _print_drop(model, result)
    return 0


def _print_drop(model, result: dict) -> None:
    nenv, simulated, wall = result["envs"], result["simulated_seconds"], result["wall_seconds"]
    print(f"{nenv} envs x {simulated:g} s simulated in {wall:.2f} s of rollout: "
          f"{result['realtime_factor']:,.1f}x real time per env, "
          f"{nenv * simulated / wall:,.0f} env-seconds per second, "
          f"{result['env_steps_per_second']:,.0f} env-steps/s")
    print(f"fallen {100 * result['fallen']:.1f} % of envs; {result['contacts_per_step']:.2f} "
          f"contacts per env-step")
    print(_status_line(result["status"], nenv, model))
    if result["plot"]:
        print(f"plot written to {result['plot']}")


def _plot_drop(out, heights, contacts, dt, z_fallen, name):
    """The drop demo's plot in out/demo_drop.png, or None (with a note) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("phalanx: matplotlib is not installed; no plot written", file=sys.stderr)
        return None
    os.makedirs(out, exist_ok=True)
    t = np.arange(heights.shape[1]) * dt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    lo, med, hi = np.percentile(heights, [10, 50, 90], axis=0)
    ax1.fill_between(t, lo, hi, alpha=0.3, label="10-90 %")
    ax1.plot(t, med, label="median")
    for e in range(min(5, heights.shape[0])):
        ax1.plot(t, heights[e], lw=0.6, alpha=0.6)
    ax1.axhline(z_fallen, color="k", ls=":", label="fallen below")
    ax1.set(ylabel="root height (m)", title=f"{heights.shape[0]} x {name} dropped")
    ax1.legend(fontsize=8)
    ax2.plot(t, np.mean(heights < z_fallen, axis=0), label="fraction fallen")
    ax2.plot(t[1:], contacts.mean(axis=0) / max(1, contacts.max()),
             label=f"contacts per env / {max(1, int(contacts.max()))}")
    ax2.set(xlabel="t (s)", ylim=(-0.02, 1.02))
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "demo_drop.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# the demo modes: name -> (function(args) -> exit status, one-line description)
DEMOS = {
    "drop": (demo_drop, "humanoids dropped onto the floor from randomised poses"),
}


def cmd_demo(args) -> int:
    return DEMOS[args.mode][0](args)


# ----------------------------------------------------------------------------------------------
# phalanx view


def cmd_view(args) -> int:
    import phalanx.viewer

    model = load(args.model)
    qpos, dt = model.qpos0, None
    if args.traj is not None:
        if not os.path.isfile(args.traj):
            raise CliError(f"phalanx: no such trajectory file: {args.traj}")
        with np.load(args.traj) as npz:
            if "qpos" not in npz:
                raise CliError(f"phalanx: {args.traj} holds no array 'qpos' (it has "
                               f"{', '.join(npz.files) or 'nothing'})")
            qpos = npz["qpos"]
            dt = float(npz["dt"]) if "dt" in npz else None
    out = args.out or os.path.splitext(os.path.basename(args.model))[0] + ".html"
    try:
        phalanx.viewer.html(model, qpos, out, dt=dt, contacts=args.contacts,
                            title=os.path.basename(args.model))
    except (ValueError, FileNotFoundError) as e:
        raise CliError(" ".join(str(e).split())) from None
    print(f"wrote {out}")
    return 0


# ----------------------------------------------------------------------------------------------
# entry point


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="phalanx", description="Phalanx: batched differentiable rigid-body "
                     "simulation. Model facts, throughput and a short demonstration.")
    parser.add_argument("--version", action="version", version=f"phalanx {phalanx.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("info", help="what a model holds and what the loader ignored",
                       description="Counts, options, joints, actuators, geoms, differentiable "
                       "parameters, ignored elements and memory per environment of a model.")
    p.add_argument("model", metavar="MODEL", help="MJCF (.xml) or URDF (.urdf) file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("bench", help="rollout throughput (env-steps/s)",
                       description="Median env-steps/s of phalanx.rollout from the model's "
                       "reference pose with random controls inside ctrlrange, in chunks of "
                       "steps (timed: the rollout calls and the state hand-over between chunks; "
                       "not the drawing of controls; one untimed warm-up step first).")
    p.add_argument("model", metavar="MODEL", nargs="?", default=None,
                   help=f"MJCF or URDF file (default: {HUMANOID})")
    p.add_argument("--envs", type=_positive_int, default=1024, help="environments (1024)")
    p.add_argument("--steps", type=_positive_int, default=200, help="steps per rollout (200)")
    p.add_argument("--chunk", type=_positive_int, default=100,
                   help="steps per phalanx.rollout call (100)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="OpenMP threads (default: OMP_NUM_THREADS or all cores)")
    p.add_argument("--repeats", type=_positive_int, default=3, help="timed repeats (3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random controls (0)")
    p.add_argument("--no-contact", action="store_true", help="switch contacts off")
    p.add_argument("--no-limit", action="store_true", help="switch joint limits off")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_bench)

    modes = "; ".join(f"{k}: {d}" for k, (_, d) in DEMOS.items())
    p = sub.add_parser("demo", help="a short demonstration on the CPU",
                       description=f"A short demonstration on the CPU. Modes: {modes}.")
    p.add_argument("mode", metavar="MODE", nargs="?", default="drop", choices=list(DEMOS),
                   help=f"one of {', '.join(DEMOS)} (default: drop)")
    p.add_argument("--model", default=None,
                   help=f"model whose first joint is free (default: {HUMANOID})")
    p.add_argument("--envs", type=_positive_int, default=256, help="environments (256)")
    p.add_argument("--seconds", type=_positive_float, default=2.0,
                   help="simulated seconds (2)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write a plot (demo_<mode>.png) there; needs matplotlib")
    p.add_argument("--threads", type=_positive_int, default=None, help="OpenMP threads")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial poses (0)")
    p.add_argument("--json", action="store_true", help="print JSON (no progress lines)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("view", help="an HTML page that plays a trajectory in 3-D",
                       description="Writes one self-contained HTML page (three.js inlined) "
                       "that plays the model's trajectory: a time slider, play and pause, "
                       "several environments in a grid.")
    p.add_argument("model", metavar="MODEL", help="MJCF (.xml) or URDF (.urdf) file")
    p.add_argument("--traj", default=None, metavar="FILE.npz",
                   help="qpos (T, nq) or (E, T, nq), optionally dt (default: the model's "
                   "reference pose)")
    p.add_argument("--out", default=None, metavar="FILE.html",
                   help="the page (default: MODEL's name with .html, here)")
    p.add_argument("--contacts", action="store_true", help="mark the contact points")
    p.set_defaults(func=cmd_view)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line on argv (sys.argv[1:] for None); returns the exit status: 0, or 2
    for a missing file or a bad option (one line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except CliError as e:
        print(e, file=sys.stderr)
        return 2
    except ValueError as e:  # the core refusing a model it cannot step, in one line
        if not str(e).startswith("phalanx:"):
            raise
        print(" ".join(str(e).split()), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help and --version
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        print("phalanx: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
