"""Shared pieces of the Python benchmarks: the MuJoCo baseline and result files."""

import argparse
import json
import os
import statistics
import time

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout
from tqdm import tqdm

import phalanx

HUMANOID = "/usr/share/mujoco/model/humanoid/humanoid.xml"
RESULTS = os.path.join(os.path.dirname(__file__), "results")


def time_mujoco(mj_model, ctrl, chunk, nthread):
    """Seconds for mujoco.rollout to run ctrl (E, T, nu) from the model's initial state with one
    MjData per thread, in chunks of steps whose trajectories land in a reused buffer."""
    nenv, nstep, _ = ctrl.shape
    data = [mujoco.MjData(mj_model) for _ in range(nthread)]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.empty(mujoco.mj_stateSize(mj_model, spec))
    mujoco.mj_getState(mj_model, data[0], state0, spec)
    state = np.repeat(state0[None], nenv, axis=0)
    out = np.empty((nenv, chunk, state0.size))
    start = time.perf_counter()
    for t0 in range(0, nstep, chunk):
        c = np.ascontiguousarray(ctrl[:, t0:t0 + chunk])
        traj, _ = mj_rollout.rollout(mj_model, data, state, c, state=out[:, :c.shape[1]])
        state = np.ascontiguousarray(traj[:, -1])
    return time.perf_counter() - start


def time_phalanx(model, ctrl, chunk):
    """Seconds for phalanx.rollout in float32 to run ctrl (E, T, nu) from qpos0 at rest, in chunks
    of steps written into reused buffers, and per env-step averages of the step counters
    (phalanx.COUNT_*, a dict by lower-case name) with the fraction of constrained steps whose
    clamping-set warm start solved the LCP ("set_hit_rate"). Raises on a non-finite state."""
    nenv, nstep, _ = ctrl.shape
    qpos = np.repeat(model.qpos0[None].astype(np.float32), nenv, axis=0)
    qvel = np.zeros((nenv, model.nv), np.float32)
    ctrl = ctrl.astype(np.float32)
    out = (np.empty((nenv, chunk, model.nq), np.float32),
           np.empty((nenv, chunk, model.nv), np.float32))
    counts = np.empty((nenv, chunk, phalanx.NUM_COUNTS), np.int32)
    totals = np.zeros(phalanx.NUM_COUNTS)
    constrained_steps = 0
    flags = 0
    start = time.perf_counter()
    for t0 in range(0, nstep, chunk):
        c = np.ascontiguousarray(ctrl[:, t0:t0 + chunk])
        n = c.shape[1]
        full = n == chunk
        qs, vs, status = phalanx.rollout(model, qpos, qvel, c, out=out if full else None,
                                         counts=counts if full else None)
        qpos, qvel = qs[:, n - 1].copy(), vs[:, n - 1].copy()
        if full:
            totals += counts.reshape(-1, phalanx.NUM_COUNTS).sum(axis=0)
            constrained_steps += int((counts[..., phalanx.COUNT_ROWS] > 0).sum())
        flags |= int(np.bitwise_or.reduce(status))
    elapsed = time.perf_counter() - start
    if flags & (phalanx.STATUS_NAN_STATE | phalanx.STATUS_NAN_CTRL | phalanx.STATUS_NAN_RESULT):
        raise RuntimeError("phalanx: non-finite state in some environments")
    stats = dict(zip(["contacts", "rows", "warm_rows", "set_hits", "overflow", "gjk_iterations",
                      "epa_iterations"], totals / (nenv * nstep)))
    stats["set_hit_rate"] = totals[phalanx.COUNT_SET_HIT] / max(constrained_steps, 1)
    return elapsed, stats, flags


def race(name, model, mj_model, ctrl, args):
    """phalanx.rollout (float32) and mujoco.rollout on the same controls, alternating, args.repeats
    times; returns the median seconds and env-steps/s of each (keys "phalanx_float32",
    "mujoco"), and the last Phalanx run's counters and status bits"""
    env_steps = ctrl.shape[0] * ctrl.shape[1]
    times = {"phalanx_float32": [], "mujoco": []}
    stats = flags = None
    for r in tqdm(range(args.repeats), desc=name, disable=None):
        elapsed, stats, flags = time_phalanx(model, ctrl, args.chunk)
        times["phalanx_float32"].append(elapsed)
        times["mujoco"].append(time_mujoco(mj_model, ctrl, args.chunk, args.threads))
        print(f"{name} repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{k} {env_steps / v[-1]:,.0f} env-steps/s" for k, v in times.items()), flush=True)
    median = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: env_steps / v for k, v in median.items()}
    return median, rate, stats, flags


def median_seconds(f, repeats, warmup=False):
    """the median wall time of `repeats` calls of f, after one untimed call when warmup"""
    if warmup:
        f()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def write_result(result, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"  written to {path}")


def parse_args(description, result_file, envs=4096, steps=1000):
    """The options every rollout benchmark takes; Phalanx's CPU backend set to --threads."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--envs", type=int, default=envs)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=os.path.join(RESULTS, result_file))
    args = parser.parse_args()
    phalanx.set_num_threads(args.threads)  # Phalanx runs on as many threads as MuJoCo
    return args
