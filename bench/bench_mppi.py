"""MPPI iteration latency and rollout throughput: K samples x H steps on the humanoid and the
cart-pole, on all CPU cores.

One planning iteration of ``phalanx.control.MPPI`` is two kernel launches: sampling (noise,
controls, rollout and in-kernel cost of every sample) and the update. This benchmark times
``planner.plan(qpos, qvel)`` (one iteration) after a warm-up and, for comparison, a plain batched
``phalanx.rollout`` of K x H controls from the same state (no noise, no cost, trajectories
written out), so the planner's overhead over raw stepping shows. Throughput is K * H / time,
in sampled env-steps per second. Medians of --repeats.

Models: MuJoCo's humanoid standing on the floor (the cost of examples/humanoid_mppi.py) and
examples/models/cartpole.xml hanging (the cost of examples/cartpole_mppi.py).

    .venv/bin/python bench/bench_mppi.py [--samples 1024] [--horizon 64] [--repeats 5]
                                         [--dtype float32]

Measured on the development machine (2 cores, shared with another job), K = 1024, H = 64,
float32: the humanoid 653 ms per iteration (100,345 env-steps/s; a plain rollout of the same
controls 600 ms, so the planner adds 9 %: noise, in-kernel cost and update); the cart-pole
19.8 ms (3.3 M env-steps/s, the same as the plain rollout).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

import phalanx
import phalanx.control as control

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import cartpole_mppi  # noqa: E402
import humanoid_mppi  # noqa: E402


def problems():
    humanoid = phalanx.load_model(humanoid_mppi.HUMANOID)
    cartpole = phalanx.load_model(cartpole_mppi.MODEL)
    return [("humanoid (27 dof, contacts)", humanoid, humanoid_mppi.make_cost(humanoid),
             humanoid_mppi.standing_pose(humanoid), 0.2, 0.05, 0.9),
            ("cart-pole", cartpole, cartpole_mppi.make_cost(cartpole), np.array([0.0, np.pi]),
             0.3, 1.0, 0.5)]


def median_time(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--horizon", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    phalanx.set_num_threads(args.threads)
    dtype = np.dtype(args.dtype)
    K, H = args.samples, args.horizon
    print(f"MPPI, K = {K} samples x H = {H} steps, {args.dtype}, {phalanx.num_threads()} "
          f"threads on {platform.processor() or platform.machine()} ({os.cpu_count()} cores); "
          f"median of {args.repeats}")
    print(f"\n{'model':28s} {'iteration':>10s} {'env-steps/s':>12s} {'plain rollout':>14s} "
          f"{'env-steps/s':>12s} {'overhead':>9s}")
    for name, model, cost, q0, sigma, lam, beta in problems():
        planner = control.MPPI(model, H, K, sigma, lam, noise_smoothing=beta, seed=0, cost=cost,
                               dtype=dtype)
        qpos, qvel = q0[None].astype(dtype), np.zeros((1, model.nv), dtype)
        t_plan = median_time(lambda: planner.plan(qpos, qvel), args.repeats)
        qk, vk = np.repeat(qpos, K, 0), np.repeat(qvel, K, 0)
        ctrl = planner.last_samples[1].reshape(K, H, model.nu).astype(dtype)
        t_roll = median_time(lambda: phalanx.rollout(model, qk, vk, ctrl), args.repeats)
        print(f"{name:28s} {t_plan * 1e3:8.1f}ms {K * H / t_plan:12,.0f} {t_roll * 1e3:12.1f}ms "
              f"{K * H / t_roll:12,.0f} {t_plan / t_roll:8.2f}x")


if __name__ == "__main__":
    main()
