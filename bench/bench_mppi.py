"""MPPI iteration latency and rollout throughput: K samples x H steps on the humanoid and the
cart-pole, on both CPU cores.

One planning iteration of ``phalanx.control.MPPI`` is two kernel launches: sampling (the noise,
controls, rollout and in-kernel cost of every sample) and the update (weights and the new plan).
For each model this benchmark times, in one process and interleaved within every repeat:

  iteration      ``planner.plan(qpos, qvel)`` with iterations=1, from a fixed state, after a
                 warm-up iteration (the planner's device arrays are then allocated);
  plain rollout  ``phalanx.rollout`` of the K x H controls that iteration sampled, from the same
                 state, into preallocated trajectory buffers (no noise, no cost, no update, but
                 the trajectories are written out), so that the planner's overhead over raw
                 batched stepping shows as the ratio iteration / rollout;

and prints the medians (and fastest repeats) with the throughput K * H / time in sampled
env-steps per second. Other processes may share the cores: the numbers are medians over
--repeats and the load average before and after is printed with them.

Models and costs (phalanx.costs terms, evaluated inside the sampling kernel):

- MuJoCo's humanoid (/usr/share/mujoco/model/humanoid/humanoid.xml as it is: 27 dof, 21 motors,
  contacts and joint limits on), standing: its reference pose lowered onto the floor and settled
  for 10 steps of zero torque. Cost: ``Quadratic`` towards that standing pose, weighted on the
  free joint's height and orientation (upright), lightly on the joints, velocities and torques.
  sigma 0.2, lambda 0.05, noise smoothing 0.9 (the settings of examples/humanoid_mppi.py).
- examples/models/cartpole.xml with the pole hanging (angle pi), the cost of
  examples/cartpole_mppi.py (``make_cost``), sigma 0.3, lambda 1.0, noise smoothing 0.5.

    .venv/bin/python bench/bench_mppi.py [--samples 1024] [--horizon 64] [--repeats 10]
                                         [--dtype both|float32|float64] [--threads 2] [--quick]

``--quick``: 256 samples x 16 steps, 3 repeats (seconds). The default run (both scalar types)
takes about 25 s.

The results are printed and written as JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import phalanx
import phalanx.control
import phalanx.costs as costs

from _common import HUMANOID

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import cartpole_mppi  # noqa: E402  (the cart-pole model and its swing-up cost)

SETTLE_STEPS = 10  # zero-torque steps that put the standing humanoid's feet into contact


class Problem:
    """A model, its planning cost, the state planned from and the MPPI settings."""

    def __init__(self, name, model, cost, qpos, qvel, sigma, temperature, smoothing):
        self.name, self.model, self.cost = name, model, cost
        self.qpos, self.qvel = qpos, qvel
        self.sigma, self.temperature, self.smoothing = sigma, temperature, smoothing


def humanoid_problem() -> Problem:
    """The humanoid standing: reference pose lowered 0.2 m onto the floor, then settled"""
    model = phalanx.load_model(HUMANOID)
    stand = np.array(model.qpos0, dtype=np.float64)
    stand[2] -= 0.2  # the reference pose floats 0.2 m above the floor
    qs, vs, _ = phalanx.rollout(model, stand[None], np.zeros((1, model.nv)),
                                np.zeros((1, SETTLE_STEPS, model.nu)))
    # root height 100, root quaternion (upright) 10, the joints 1; velocities and torques light
    qpos_weight = np.r_[0.0, 0.0, 100.0, np.full(4, 10.0), np.ones(model.nq - 7)]
    cost = costs.Quadratic(model, qpos_target=stand, qpos_weight=qpos_weight, qvel_weight=0.01,
                           ctrl_weight=0.01, terminal_weight=1.0, dt=model.timestep)
    return Problem("humanoid (27 dof, contacts)", model, cost, qs[0, -1], vs[0, -1],
                   sigma=0.2, temperature=0.05, smoothing=0.9)


def cartpole_problem() -> Problem:
    """The cart-pole with its pole hanging, at rest, and the swing-up cost of the example"""
    model = phalanx.load_model(cartpole_mppi.MODEL)
    return Problem("cart-pole", model, cartpole_mppi.make_cost(model), np.array([0.0, np.pi]),
                   np.zeros(model.nv), sigma=0.3, temperature=1.0, smoothing=0.5)


class Case:
    """One problem at one scalar type: the planner, the rollout's inputs and output buffers,
    and the wall times of every repeat."""

    def __init__(self, problem: Problem, K: int, H: int, dtype):
        self.problem, self.K, self.H, self.dtype = problem, K, H, np.dtype(dtype)
        m = problem.model
        self.planner = phalanx.control.MPPI(
            m, H, K, problem.sigma, problem.temperature, cost=problem.cost,
            noise_smoothing=problem.smoothing, seed=0, dtype=self.dtype)
        self.qpos = problem.qpos[None].astype(self.dtype)
        self.qvel = problem.qvel[None].astype(self.dtype)
        self.qpos_k = np.repeat(self.qpos, K, axis=0)
        self.qvel_k = np.repeat(self.qvel, K, axis=0)
        self.out = (np.empty((K, H, m.nq), self.dtype), np.empty((K, H, m.nv), self.dtype))
        self.times = {"iteration": [], "rollout": []}
        self.stopped = 0.0  # the fraction of samples whose physics stopped (cost inf)

    def iterate(self):
        self.planner.plan(self.qpos, self.qvel, iterations=1)

    def rollout(self):
        ctrl = np.ascontiguousarray(self.planner.last_samples[1][0], dtype=self.dtype)
        phalanx.rollout(self.problem.model, self.qpos_k, self.qvel_k, ctrl, out=self.out)

    def timed(self, key, fn):
        start = time.perf_counter()
        fn()
        self.times[key].append(time.perf_counter() - start)

    def warm_up(self):
        self.iterate()
        self.rollout()

    def repeat(self):
        self.timed("iteration", self.iterate)
        self.stopped = float(np.mean(np.isinf(self.planner.last_costs)))
        self.timed("rollout", self.rollout)

    def summary(self) -> dict:
        med = {k: statistics.median(v) for k, v in self.times.items()}
        fastest = {k: min(v) for k, v in self.times.items()}
        steps = self.K * self.H
        return dict(median=med, fastest=fastest, steps_per_s=steps / med["iteration"],
                    rollout_steps_per_s=steps / med["rollout"],
                    overhead=med["iteration"] / med["rollout"], stopped=self.stopped)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=1024, help="K")
    parser.add_argument("--horizon", type=int, default=64, help="H")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="256 samples x 16 steps, 3 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.horizon, args.repeats = 256, 16, 3
    return args


def print_table(cases, K, H):
    print(f"\n{'model':28s} {'dtype':7s} {'iteration':>10s} {'(fastest)':>10s} "
          f"{'env-steps/s':>12s} {'rollout':>9s} {'env-steps/s':>12s} {'iter/rollout':>12s}")
    for c in cases:
        s = c.summary()
        print(f"{c.problem.name:28s} {c.dtype.name:7s} {s['median']['iteration'] * 1e3:8.1f}ms "
              f"{s['fastest']['iteration'] * 1e3:8.1f}ms {s['steps_per_s']:12,.0f} "
              f"{s['median']['rollout'] * 1e3:7.1f}ms {s['rollout_steps_per_s']:12,.0f} "
              f"{s['overhead']:11.2f}x")
        if s["stopped"]:
            print(f"  {c.problem.name}: {100 * s['stopped']:.1f} % of the samples stopped "
                  f"(NaN/inf; cost inf)")
    print(f"env-steps/s = K * H / time = {K} * {H} / time; rollout = plain phalanx.rollout of "
          f"the same controls")


def main(argv=None):
    args = parse_args(argv)
    phalanx.set_num_threads(args.threads)
    dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    load_before = os.getloadavg()[0]
    cases = [Case(p, args.samples, args.horizon, dt)
             for p in (humanoid_problem(), cartpole_problem()) for dt in dtypes]
    for c in cases:
        c.warm_up()
    for r in tqdm(range(args.repeats), desc="repeats", disable=None):
        for c in cases:
            c.repeat()
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{c.problem.name.split()[0]} {c.dtype.name} {c.times['iteration'][-1] * 1e3:.1f} / "
            f"{c.times['rollout'][-1] * 1e3:.1f} ms" for c in cases), flush=True)
    print(f"\nMPPI, K = {args.samples} samples x H = {args.horizon} steps, one iteration per "
          f"plan call; {phalanx.num_threads()} threads on "
          f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores); median of "
          f"{args.repeats} (load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"shared cores: noisy)")
    print_table(cases, args.samples, args.horizon)


if __name__ == "__main__":
    main()
