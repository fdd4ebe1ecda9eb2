"""Scaling of phalanx.distributed from one process to two on one machine.

MuJoCo's humanoid with contacts (floor, self-collision, joint limits), E environments by T steps
of random controls from the standing pose in float32, each rollout closed by a cost evaluated on
the shards (phalanx.costs: head height and effort), so that only the costs come back. In one
script, each repeat times:

  process 1 thread    phalanx.rollout in this process on one OpenMP thread (the work of one shard)
  process 2 threads   the same on both cores (OpenMP): the single-process way to use the machine
  1 shard             a ShardedBatch of one Ray actor with one CPU
  2 shards            a ShardedBatch of two Ray actors with one CPU each (half the environments
                      each)

and one MPPI iteration (K samples of horizon H, built-in cost) by phalanx.control.MPPI on one
thread and by phalanx.distributed.MPPI over two shards. It prints the medians, env-steps/s, the
parallel efficiency of two shards (throughput of 2 shards / (2 x that of 1 shard)) and the
ratio of 2 shards to the single process on both cores. Results go to JSON in bench/results/.

    .venv/bin/python bench/bench_distributed.py [--envs 512] [--steps 500] [--repeats 5]
"""

import argparse
import os
import platform
import statistics
import time

import numpy as np
from tqdm import tqdm
import ray

import phalanx
import phalanx.distributed as pd
from _common import HUMANOID, RESULTS, write_result


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=512)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--samples", type=int, default=256, help="MPPI samples per iteration")
    parser.add_argument("--horizon", type=int, default=100, help="MPPI horizon (steps)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "distributed.json"))
    return parser.parse_args()


def timed(run):
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main():
    args = parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    model = phalanx.load_model(HUMANOID)
    E, T = args.envs, args.steps
    rng = np.random.default_rng(0)
    ctrl = rng.uniform(-0.4, 0.4, (E, T, model.nu)).astype(np.float32)
    qpos = np.repeat(model.qpos0[None], E, 0).astype(np.float32)
    qvel = np.zeros((E, model.nv), np.float32)
    cost = 2.0 * phalanx.costs.BodyHeight(model, "head", 1.4) + phalanx.costs.Quadratic(
        model, ctrl_weight=0.01)
    # half a CPU each in Ray's accounting, so that both batches live at once on two cores (they
    # are timed one after the other), and one OpenMP thread per shard
    one, two = (pd.ShardedBatch(HUMANOID, E, n, dtype=np.float32, cpus_per_shard=0.5,
                                threads_per_shard=1) for n in (1, 2))

    def local(threads):
        def run():
            phalanx.set_num_threads(threads)
            qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl)
            cost(qs, vs, ctrl)
        return run

    cases = {"process 1 thread": local(1), "process 2 threads": local(2),
             "1 shard": lambda: one.rollout(qpos, qvel, ctrl, cost=cost),
             "2 shards": lambda: two.rollout(qpos, qvel, ctrl, cost=cost)}
    # one MPPI iteration from a standing pose, in this process and over the two shards
    options = dict(horizon=args.horizon, num_samples=args.samples, sigma=0.3, temperature=1.0,
                   cost=cost, dtype=np.float32)
    planners = {"MPPI process 1 thread": phalanx.control.MPPI(model, **options),
                "MPPI 2 shards": pd.MPPI(two, **options)}
    q0, v0 = model.qpos0.astype(np.float32), np.zeros(model.nv, np.float32)
    for name, planner in planners.items():
        cases[name] = (lambda p, threads: lambda: (phalanx.set_num_threads(threads),
                                                   p.plan(q0, v0)))(planner, 1)
    cases["2 shards"]()  # warm up: the actors' first calls compile the model
    cases["MPPI 2 shards"]()
    cases["1 shard"]()
    times = {name: [] for name in cases}
    for _ in tqdm(range(args.repeats), desc="repeats", disable=None):  # interleaved, so that drifts of the machine hit all alike
        for name, run in cases.items():
            times[name].append(timed(run))
    phalanx.set_num_threads(os.cpu_count())
    median = {name: statistics.median(t) for name, t in times.items()}
    rate = {name: E * T / median[name] for name in cases if not name.startswith("MPPI")}
    efficiency = rate["2 shards"] / (2 * rate["1 shard"])
    print(f"humanoid with contacts, float32, {E} environments x {T} steps, median of "
          f"{args.repeats}")
    for name in rate:
        print(f"  {name:18s} {median[name]:7.3f} s  {rate[name]:10.0f} env-steps/s")
    print(f"  two shards against one: {rate['2 shards'] / rate['1 shard']:.2f}x "
          f"(efficiency {efficiency:.2f}); against one process on both cores: "
          f"{rate['2 shards'] / rate['process 2 threads']:.2f}x")
    print(f"MPPI iteration, {args.samples} samples x {args.horizon} steps: one thread "
          f"{median['MPPI process 1 thread']:.3f} s, two shards {median['MPPI 2 shards']:.3f} s "
          f"({median['MPPI process 1 thread'] / median['MPPI 2 shards']:.2f}x)")
    write_result({"benchmark": "phalanx.distributed scaling, one machine", "model": HUMANOID,
                  "dtype": "float32", "envs": E, "steps": T, "repeats": args.repeats,
                  "machine": platform.machine(), "cpus": os.cpu_count(),
                  "seconds": times, "median_seconds": median, "env_steps_per_s": rate,
                  "efficiency_two_shards": efficiency,
                  "mppi": {"samples": args.samples, "horizon": args.horizon}}, args.out)
    one.close()
    two.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
