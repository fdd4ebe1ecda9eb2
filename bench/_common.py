"""Shared pieces of the Python benchmarks: the MuJoCo baseline and result files."""

import argparse
import json
import os
import time

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

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


def write_result(result, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"  written to {path}")


def parse_args(description, result_file, envs=4096, steps=1000):
    """The options every rollout benchmark takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--envs", type=int, default=envs)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", default=os.path.join(RESULTS, result_file))
    return parser.parse_args()
