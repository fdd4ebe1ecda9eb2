"""SHAC against PPO on Phalanx's standard tasks: return against env-steps and wall-clock time.

    .venv/bin/python bench/bench_policy.py                  # cheetah-run, seeds 0 1 2
    .venv/bin/python bench/bench_policy.py --tasks cheetah-run ant \
        --ppo-steps 5000000 --shac-iterations 2000

For each task and seed, one after the other on the whole machine:

- PPO from skrl (examples/ppo.py's ``train``: its networks and settings) on
  ``phalanx.envs.make`` of the task (dm_control's cheetah-run and humanoid walk, Gymnasium's
  Ant-v5); its curve is the return of every training episode as it ends (the stochastic
  policy, as skrl trains it).
- SHAC (``phalanx.learn.SHAC``: the paper's settings of ``SHACConfig`` but for the task's own
  in ``TASKS``) on the same task as a differentiable one (``phalanx.learn.CheetahRun``,
  ``HumanoidWalk``, ``Ant``: the suite's model, initial states, reward and observations in
  torch); its curve is the acting policy's (the Polyak average of the actor, its mean) mean
  return over ``eval_envs`` episodes every ``--eval-every`` windows.

Both use the same number of environments (``--num-envs``); wall-clock time is the training's
(SHAC's evaluations are left out of it, as the episodes PPO's curve reads come with its
training). Printed per task, with the figures over seeds as median [min, max]:

- PPO's final return: the mean return of the training episodes of the last tenth of its
  budget (per seed), and its training time;
- SHAC's final return (its last evaluation) and the time it took to first reach PPO's final
  return (median over PPO's seeds), against PPO's training time: the target is at most a third;
- SHAC's stability: after its evaluation first reaches 90 % of its final return it never drops
  below 70 % of it (per seed).

The curves go to bench/results/policy_<task>.json and the plot (mean and spread over seeds,
against env-steps and against seconds) to bench/results/policy_<task>.png. With ``--keep``, the
runs of the method left out of ``--methods`` are taken from that file instead of run again (PPO's
take most of the time and do not change with SHAC's settings):

    .venv/bin/python bench/bench_policy.py --methods shac --keep --ppo-steps 5000000 ...
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import phalanx.learn as pl

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
# each task: the differentiable one SHAC trains on, phalanx.envs' name of the same task, and
# SHACConfig's settings for it where they differ from the paper's, whose simulator has soft
# contacts. Through hard contacts the gradients are rougher: cheetah-run's actor learns at half
# the paper's rate, and Ant's windows are 8 steps, not 32 (its feet make and break contact many
# times in 32 steps, and the gradient through a window that long is dominated by those
# switches: norms in the thousands, most windows outliers); even over 8 steps a few Ants'
# gradients can grow to 1e6 and more (seed 2 from its 400th window, which then collapsed), so
# each environment's share is clipped to 10 times the median (state_grad_clip)
TASKS = {"cheetah-run": (pl.CheetahRun, "dm_control/cheetah-run", {"actor_lr": 1e-3}),
         "humanoid-walk": (lambda: pl.HumanoidWalk("walk"), "dm_control/humanoid-walk",
                           {"horizon": 8}),
         "ant": (pl.Ant, "gymnasium/Ant-v5", {"horizon": 8, "state_grad_clip": 10.0})}


@functools.cache
def _ppo_module():
    """examples/ppo.py, the PPO of the standard-tasks example (its training and curve bins)"""
    spec = importlib.util.spec_from_file_location("phalanx_example_ppo",
                                                  ROOT.parent / "examples" / "ppo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_ppo(task: str, seed: int, steps: int, num_envs: int) -> dict:
    """PPO's learning curve on Phalanx's environment of the task"""
    run = _ppo_module().train(TASKS[task][1], "phalanx", seed, steps, num_envs,
                              progress=False)
    run["method"] = "ppo"
    return run


def shac_config(task: str, seed: int, num_envs: int, horizon: int | None = None):
    """the task's SHACConfig: the paper's, the task's own settings, then the command line's"""
    settings = dict(TASKS[task][2], num_envs=num_envs, seed=seed)
    if horizon is not None:
        settings["horizon"] = horizon
    return pl.SHACConfig(**settings)


def run_shac(task: str, seed: int, iterations: int, num_envs: int, eval_every: int,
             horizon: int | None = None) -> dict:
    """SHAC's learning curve on the task as a differentiable one"""
    cfg = shac_config(task, seed, num_envs, horizon)
    agent = pl.SHAC(TASKS[task][0](), cfg)
    start = time.perf_counter()
    history = agent.train(iterations, eval_every=eval_every)
    return {"task": task, "method": "shac", "seed": seed, "num_envs": num_envs,
            "horizon": cfg.horizon, "env_steps": history["env_steps"],
            "seconds": history["seconds"], "returns": history["returns"],
            "skipped": history["skipped"],
            "total_seconds": time.perf_counter() - start}


# the settings a method's runs depend on, which --keep checks against those of the file
RUN_SETTINGS = {"ppo": ("num_envs", "ppo_steps"),
                "shac": ("num_envs", "shac_iterations", "eval_every", "horizon")}


def kept_runs(path: Path, args) -> list[dict]:
    """the runs in the results file path of the methods not in args.methods, for args.seeds;
    an error if the file lacks one or ran them with other settings"""
    if not path.exists():
        raise SystemExit(f"bench_policy --keep: no earlier results in {path}")
    old = json.loads(path.read_text())
    kept = []
    for method in sorted(set(RUN_SETTINGS) - set(args.methods)):
        differ = [k for k in RUN_SETTINGS[method] if old["settings"][k] != getattr(args, k)]
        if differ:
            raise SystemExit(f"bench_policy --keep: {path} ran {method} with other settings: "
                             + ", ".join(f"{k}={old['settings'][k]}" for k in differ))
        for seed in args.seeds:
            run = [r for r in old["runs"] if (r["method"], r["seed"]) == (method, seed)]
            if not run:
                raise SystemExit(f"bench_policy --keep: {path} has no {method} run of seed "
                                 f"{seed}")
            kept.append(run[0])
    return kept


def ppo_final(run: dict) -> float:
    """the mean return of the training episodes that ended in the last tenth of the budget"""
    steps, returns = np.asarray(run["env_steps"]), np.asarray(run["returns"])
    if steps.size == 0:
        raise ValueError(f"bench_policy: PPO's budget ended no episode of {run['task']}: give "
                         "--ppo-steps at least num_envs times the episode's length")
    last = steps >= 0.9 * steps.max()
    return float(returns[last].mean())


def seconds_to_reach(run: dict, level: float) -> float:
    """the training seconds at SHAC's first evaluation at or above level (inf: never)"""
    for seconds, value in zip(run["seconds"], run["returns"]):
        if value >= level:
            return float(seconds)
    return float("inf")


def stable(run: dict) -> bool:
    """after first reaching 90 % of its final return, never below 70 % of it"""
    returns = np.asarray(run["returns"])
    final = returns[-1]
    if final <= 0:
        return False
    first = int(np.argmax(returns >= 0.9 * final))
    return bool(returns[first:].min() >= 0.7 * final)


def _spread(values) -> str:
    v = np.asarray(values, dtype=float)
    return f"{np.median(v):.4g} [{v.min():.4g}, {v.max():.4g}]"


def summary(task: str, runs: list[dict]) -> dict:
    """the figures of the module docstring, printed and returned"""
    ppo = [r for r in runs if r["method"] == "ppo"]
    shac = [r for r in runs if r["method"] == "shac"]
    out: dict = {"task": task}
    if ppo:
        out["ppo_final"] = [ppo_final(r) for r in ppo]
        out["ppo_seconds"] = [r["seconds"][-1] for r in ppo]
        print(f"{task}: PPO final return {_spread(out['ppo_final'])} after "
              f"{_spread(out['ppo_seconds'])} s ({len(ppo)} seeds)")
    if shac:
        out["shac_final"] = [r["returns"][-1] for r in shac]
        out["shac_seconds"] = [r["seconds"][-1] for r in shac]
        out["shac_stable"] = [stable(r) for r in shac]
        print(f"{task}: SHAC final return {_spread(out['shac_final'])} after "
              f"{_spread(out['shac_seconds'])} s ({len(shac)} seeds); stable on "
              f"{sum(out['shac_stable'])} of {len(shac)} seeds")
    if ppo and shac:
        level = float(np.median(out["ppo_final"]))
        reach = [seconds_to_reach(r, level) for r in shac]
        ratio = [s / float(np.median(out["ppo_seconds"])) for s in reach]
        out["shac_seconds_to_ppo_final"], out["time_ratio"] = reach, ratio
        print(f"{task}: SHAC reaches PPO's final return {level:.4g} after {_spread(reach)} s: "
              f"{_spread(ratio)} of PPO's training time (target <= 1/3)")
    return out


def plot(task: str, runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for method, label in (("shac", "SHAC (phalanx.learn)"), ("ppo", "PPO (skrl)")):
        chosen = [r for r in runs if r["method"] == method]
        if not chosen:
            continue
        for ax, key in zip(axes, ("env_steps", "seconds")):
            x, mean, low, high = _ppo_module().binned(chosen, key, bins=20)
            seen = ~np.isnan(mean)  # spans in which a curve has a point
            x, mean, low, high = x[seen], mean[seen], low[seen], high[seen]
            (line,) = ax.plot(x, mean, marker=".", label=f"{label}, {len(chosen)} seeds")
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2)
    for ax, xlabel in zip(axes, ("env-steps", "training wall-clock (s)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{TASKS[task][1]} on Phalanx: mean and range over seeds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["cheetah-run"], choices=sorted(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--ppo-steps", type=int, default=2_000_000)
    parser.add_argument("--shac-iterations", type=int, default=1000)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--horizon", type=int, default=None,
                        help="SHAC's steps per window (default: the task's, see TASKS)")
    parser.add_argument("--methods", nargs="+", default=["shac", "ppo"],
                        choices=["shac", "ppo"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true",
                        help="take the other method's runs from the results file in --out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the simulator's threads run the environments
    for task in args.tasks:
        path = args.out / f"policy_{task}.json"
        kept = kept_runs(path, args) if args.keep else []
        runs = []
        for seed in args.seeds:
            if "shac" in args.methods:
                runs.append(run_shac(task, seed, args.shac_iterations, args.num_envs,
                                     args.eval_every, args.horizon))
            if "ppo" in args.methods:
                runs.append(run_ppo(task, seed, args.ppo_steps, args.num_envs))
            for run in runs[-len(args.methods):]:
                print(f"{task} seed {seed} {run['method']}: last return "
                      f"{run['returns'][-1]:.4g} after {run['seconds'][-1]:.0f} s", flush=True)
        runs += kept
        figures = summary(task, runs)
        args.out.mkdir(parents=True, exist_ok=True)
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        settings["methods"] = sorted({r["method"] for r in runs})
        path.write_text(json.dumps({"settings": settings, "summary": figures, "runs": runs},
                                   indent=1))
        plot(task, runs, args.out / f"policy_{task}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
