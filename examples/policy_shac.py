"""Policy learning on Phalanx's gradients with ``phalanx.learn``: SHAC (or its baseline APG) on
the cart-pole swing-up and dm_control's cheetah-run.

    .venv/bin/python examples/policy_shac.py                       # both tasks, SHAC
    .venv/bin/python examples/policy_shac.py --task cheetah --method apg --iterations 40

``phalanx.learn.SHAC`` (short-horizon actor-critic, Xu et al., ICLR 2022) steps --num-envs
environments of a differentiable task through ``phalanx.torch.step`` and back-propagates the
rewards of windows of 32 steps into a Gaussian policy, each window closed by a learned critic;
``--method apg`` back-propagates through whole episodes instead, with no critic (the analytic
policy gradient). The tasks are ``phalanx.learn.CartPoleSwingUp`` (swing the pole up from
hanging and balance it, 500 actions of 20 ms, reward up to 1 per action) and
``phalanx.learn.CheetahRun`` (dm_control's cheetah-run: the forward speed over 10 m/s clipped to
[0, 1], 1000 steps of 10 ms). Every --eval-every windows the acting policy (the mean of the
Gaussian of the actor's running average, ``SHACConfig.policy_average``) is evaluated: its mean
return over 16 episodes from a fixed draw of initial states.

Per task it prints that evaluation before and after training, with the env-steps and the
training's seconds (evaluations left out), and writes into --out policy_shac.png (the
evaluation return against env-steps and against seconds, one row per task) and
policy_shac_<task>.html, one episode of the trained policy in the 3-D viewer.

The default budgets (--iterations: 400 windows of the cart-pole, 900 of the cheetah) are
sized from the cost of one window of 64 environments on one idle core, 0.22 s for the
cart-pole and 0.24 s for the cheetah (most of it the critic's fit): some 1.5 min for the
cart-pole and 4 min for the cheetah, evaluations included. APG's default spends the same
env-steps as SHAC's. Torch and Phalanx run on OMP_NUM_THREADS threads (default 1);
examples/policy_ddp.py runs ``train`` over several processes.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import phalanx
import phalanx.learn as pl
import phalanx.torch as pt
import phalanx.viewer

TASKS = {"cartpole": pl.CartPoleSwingUp, "cheetah": pl.CheetahRun}
ITERATIONS = {"cartpole": 400, "cheetah": 900}  # SHAC's windows by default
OUT = Path(__file__).resolve().parent / "out"


def train(task_name: str, iterations: int | None = None, *, method: str = "shac",
          num_envs: int = 64, seed: int = 0, eval_every: int = 25, distributed=None,
          progress: bool = True) -> dict:
    """Train a policy on task_name ("cartpole" or "cheetah") by SHAC or APG for ``iterations``
    windows (None: the task's default). ``distributed`` (``phalanx.learn.TorchDistributed()``
    or a stand-in) splits the num_envs environments over its processes. Returns the task's
    name, the ``agent``, the ``history`` of SHAC.train and the evaluation return before
    (``initial``) and after (``final``) training."""
    task = TASKS[task_name]()
    cfg = pl.SHACConfig(num_envs=num_envs, seed=seed)
    if method == "shac":
        agent = pl.SHAC(task, cfg, distributed=distributed)
    elif method == "apg":
        if distributed is not None:
            raise ValueError("policy_shac.train: APG runs in one process")
        agent = pl.APG(task, cfg)
    else:
        raise ValueError(f"policy_shac.train: unknown method {method!r}")
    if iterations is None:  # the task's; for APG (windows of whole episodes) SHAC's env-steps
        iterations = ITERATIONS[task_name]
        if method == "apg":
            iterations = max(1, round(iterations * cfg.horizon / task.episode_steps))
    initial = agent.evaluate()
    bar = tqdm(total=iterations, desc=f"{method} {task_name}", unit="window",
               disable=None if progress else True)

    def report(history):
        bar.update(history["iteration"][-1] - bar.n)
        bar.set_postfix(evaluation=f"{history['returns'][-1]:.1f}")

    history = agent.train(iterations, eval_every=eval_every, callback=report)
    bar.close()
    return dict(task=task_name, method=method, agent=agent, history=history, initial=initial,
                final=history["returns"][-1])


@torch.no_grad()
def episode(agent, seed: int = 0) -> np.ndarray:
    """one episode of the trained policy (its mean) from one of the task's initial states:
    qpos after each action (episode_steps + 1, nq)"""
    task = agent.task
    q, v = task.initial_states(1, torch.Generator().manual_seed(seed))
    frames = [q[0].numpy().copy()]
    for _ in range(task.episode_steps):
        u = agent.act(q, v)
        for _ in range(task.frame_skip):
            q, v = pt.step(task.model, q, v, u)
        frames.append(q[0].numpy().copy())
    return np.stack(frames)


def plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(11, 3.6 * len(results)), squeeze=False)
    for row, r in zip(axes, results):
        h = r["history"]
        returns = [r["initial"], *h["returns"]]
        for ax, key, label in ((row[0], "env_steps", "env-steps"),
                               (row[1], "seconds", "training seconds (one process)")):
            ax.plot([0, *h[key]], returns, marker=".")
            ax.set(xlabel=label, ylabel="evaluation return")
            ax.grid(alpha=0.3)
        row[0].set_title(f"{r['task']}: {r['method'].upper()}, policy's mean")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["cartpole", "cheetah", "both"], default="both")
    parser.add_argument("--method", choices=["shac", "apg"], default="shac")
    parser.add_argument("--iterations", type=int, default=None,
                        help="training windows (default: the task's)")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    phalanx.set_num_threads(threads)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in ["cartpole", "cheetah"] if args.task == "both" else [args.task]:
        start = time.perf_counter()
        r = train(name, args.iterations, method=args.method, num_envs=args.num_envs,
                  seed=args.seed, eval_every=args.eval_every)
        h = r["history"]
        print(f"{name}: evaluation return {r['initial']:.1f} -> {r['final']:.1f} after "
              f"{h['iteration'][-1]} windows, {h['env_steps'][-1]:,} env-steps, "
              f"{h['seconds'][-1]:.1f} s of training ({time.perf_counter() - start:.1f} s "
              f"with the evaluations)")
        task = r["agent"].task
        path = args.out / f"policy_shac_{name}.html"
        phalanx.viewer.html(task.model, episode(r["agent"], args.seed), path,
                            dt=task.model.timestep * task.frame_skip, contacts=name == "cheetah",
                            title=f"{name}: the policy trained by {args.method.upper()}")
        print(f"wrote {path} (3-D replay of one episode)")
        results.append(r)
    plot(results, args.out / "policy_shac.png")
    print(f"wrote {args.out / 'policy_shac.png'}")
    return results


if __name__ == "__main__":
    main()
