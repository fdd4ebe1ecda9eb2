"""PPO from skrl on Phalanx's standard tasks, beside the same PPO on MuJoCo's environments.

    .venv/bin/python examples/ppo.py                     # cheetah-run and HalfCheetah, 1 seed
    .venv/bin/python examples/ppo.py --tasks gymnasium/Hopper-v5 --seeds 0 1 2 --steps 2000000

For each task and seed, the same PPO (skrl's, with the same networks, hyperparameters, seed,
number of environments and budget of env-steps) trains on two vector environments of the task:
Phalanx's (``phalanx.envs.make``, all environments stepped by one call to the kernels) and the
reference Gymnasium builds on MuJoCo (``gymnasium.make_vec``: Gymnasium's own v5 environments,
and dm_control's tasks through shimmy). Both reset an environment within the step that ends
its episode (AutoresetMode.SAME_STEP), as skrl expects. Every finished training episode's
return is logged against the env-steps and wall-clock seconds spent so far; the plot
(examples/out/ppo_<task>.png) shows the mean and spread over seeds of the return of the
episodes finished in each tenth of the budget, and examples/out/ppo.json holds the curves.

Why skrl: its PPO trains on any ``gymnasium.vector.VectorEnv`` through one wrapper, so both
backends go through identical training code with no adapter of ours; it runs in torch, batched
over the environments, and has what batched-simulation PPO needs (GAE, running normalisation of
observations and values, a KL-adaptive learning rate, bootstrapping at time limits).
rsl-rl-lib needs an environment class of its own per backend, and Stable-Baselines3's VecEnv
interface wraps environments one by one rather than a batch.

The two backends differ in their physics (Phalanx's contacts are hard; MuJoCo's are soft), so
their returns need not agree; the wall-clock columns compare the whole training loop, network
updates included, on this machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from skrl.agents.torch import ExperimentCfg
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed

import phalanx.envs

TASKS = ["dm_control/cheetah-run", "gymnasium/HalfCheetah-v5"]
OUT = Path(__file__).resolve().parent / "out"


def reference_env(task: str, num_envs: int):
    """Gymnasium's vector environment of the task on MuJoCo"""
    suite, _, name = task.partition("/")
    options = dict(num_envs=num_envs, vectorization_mode="sync",
                   vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    if suite == "gymnasium":
        return gymnasium.make_vec(name, **options)
    import shimmy  # noqa: F401  (registers dm_control's tasks with Gymnasium)

    from phalanx.testing import dm_control_on_this_mujoco

    dm_control_on_this_mujoco()
    return gymnasium.make_vec(f"dm_control/{name}-v0",
                              wrappers=[gymnasium.wrappers.FlattenObservation], **options)


class Curve(gymnasium.vector.VectorWrapper):
    """logs (env-steps, seconds, return) of every finished episode (SAME_STEP autoreset)"""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.points: list[tuple[int, float, float]] = []
        self.steps = 0
        self.start = time.perf_counter()
        self.returns = np.zeros(self.num_envs)

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self.steps += self.num_envs
        self.returns += reward
        seconds = time.perf_counter() - self.start
        for e in np.flatnonzero(terminated | truncated):
            self.points.append((self.steps, seconds, float(self.returns[e])))
            self.returns[e] = 0.0
        return obs, reward, terminated, truncated, info


def train(task: str, backend: str, seed: int, steps: int, num_envs: int,
          progress: bool = True) -> dict:
    """PPO on one backend's vector environment of the task; returns its learning curve"""
    set_seed(seed)
    if backend == "phalanx":
        raw = phalanx.envs.make(task, num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        raw = reference_env(task, num_envs)
    curve = Curve(raw)
    env = wrap_env(curve, wrapper="gymnasium")
    rollouts = 32
    cfg = PPO_CFG(rollouts=rollouts, learning_epochs=5, mini_batches=4, discount_factor=0.99,
                  gae_lambda=0.95, learning_rate=3e-4, learning_rate_scheduler=KLAdaptiveLR,
                  learning_rate_scheduler_kwargs={"kl_threshold": 0.008},
                  observation_preprocessor=RunningStandardScaler,
                  observation_preprocessor_kwargs={"size": env.observation_space,
                                                   "device": env.device},
                  value_preprocessor=RunningStandardScaler,
                  value_preprocessor_kwargs={"size": 1, "device": env.device},
                  grad_norm_clip=1.0, ratio_clip=0.2, value_clip=0.2, entropy_loss_scale=0.0,
                  value_loss_scale=1.0, time_limit_bootstrap=True,
                  experiment=ExperimentCfg(write_interval=0, checkpoint_interval=0))
    models = {"policy": Policy(env.observation_space, env.action_space, env.device),
              "value": Value(env.observation_space, env.action_space, env.device)}
    agent = PPO(models=models, memory=RandomMemory(memory_size=rollouts, num_envs=num_envs,
                                                   device=env.device),
                observation_space=env.observation_space, action_space=env.action_space,
                device=env.device, cfg=cfg)
    trainer = SequentialTrainer(env=env, agents=agent,
                                cfg={"timesteps": steps // num_envs, "headless": True,
                                     "disable_progressbar": not progress,
                                     "close_environment_at_exit": False})
    curve.start = time.perf_counter()
    trainer.train()
    env.close()
    points = np.array(curve.points).reshape(-1, 3)
    return {"task": task, "backend": backend, "seed": seed, "num_envs": num_envs,
            "env_steps": points[:, 0].tolist(), "seconds": points[:, 1].tolist(),
            "returns": points[:, 2].tolist(), "total_seconds": time.perf_counter() - curve.start}


def _mlp(inputs: int, outputs: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(inputs, 256), torch.nn.ELU(),
                               torch.nn.Linear(256, 128), torch.nn.ELU(),
                               torch.nn.Linear(128, outputs))


class Policy(GaussianMixin, Model):
    """a Gaussian policy: the mean from an MLP, a learned state-independent log std"""

    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space,
                       device=device)
        GaussianMixin.__init__(self, clip_actions=True, reduction="sum")
        self.net = _mlp(self.num_observations, self.num_actions)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {"log_std": self.log_std}


class Value(DeterministicMixin, Model):
    """the state-value function: an MLP"""

    def __init__(self, observation_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, action_space=action_space,
                       device=device)
        DeterministicMixin.__init__(self)
        self.net = _mlp(self.num_observations, 1)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def binned(runs: list[dict], key: str, bins: int = 10):
    """(x centres, mean, min, max over runs) of the mean return of each run's episodes in each
    of `bins` equal spans of x (env-steps or seconds)"""
    end = max(max(r[key], default=0) for r in runs)
    edges = np.linspace(0, end, bins + 1)
    per_run = []
    for r in runs:
        x, y = np.asarray(r[key]), np.asarray(r["returns"])
        i = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
        per_run.append([y[i == b].mean() if (i == b).any() else np.nan for b in range(bins)])
    per_run = np.array(per_run)
    with warnings.catch_warnings():  # bins where no run finished an episode stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return ((edges[:-1] + edges[1:]) / 2, np.nanmean(per_run, 0), np.nanmin(per_run, 0),
                np.nanmax(per_run, 0))


def plot(task: str, results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for backend, label in (("phalanx", "Phalanx"), ("mujoco", "MuJoCo (Gymnasium)")):
        runs = [r for r in results if r["backend"] == backend]
        if not runs:
            continue
        for ax, key in zip(axes, ("env_steps", "seconds")):
            x, mean, low, high = binned(runs, key)
            seen = ~np.isnan(mean)  # spans in which episodes ended (they end together at
            x, mean, low, high = x[seen], mean[seen], low[seen], high[seen]  # time limits)
            (line,) = ax.plot(x, mean, marker=".", label=f"{label}, {len(runs)} seed(s)")
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2)
    axes[0].set(xlabel="env-steps", ylabel="training episode return", title=f"{task}: PPO")
    axes[1].set(xlabel="wall-clock seconds (both cores)", title="against time")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary(runs: list[dict]) -> str:
    final = [np.mean(r["returns"][-max(1, len(r["returns"]) // 10):]) for r in runs]
    seconds = [r["total_seconds"] for r in runs]
    return (f"final return {np.mean(final):8.1f} (seeds {', '.join(f'{f:.1f}' for f in final)}), "
            f"{np.median(seconds):7.1f} s")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="phalanx.envs.task_names()")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="env-steps per run")
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--backends", nargs="+", default=["phalanx", "mujoco"],
                        choices=["phalanx", "mujoco"])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for task in args.tasks:
        runs = [train(task, backend, seed, args.steps, args.envs, progress=not args.quiet)
                for backend in args.backends for seed in args.seeds]
        for backend in args.backends:
            mine = [r for r in runs if r["backend"] == backend]
            print(f"{task:28s} {backend:8s} {summary(mine)}")
        path = args.out / f"ppo_{task.replace('/', '_')}.png"
        plot(task, runs, path)
        print(f"wrote {path}")
        results += runs
    (args.out / "ppo.json").write_text(json.dumps(results))
    return results

if __name__ == "__main__":
    main()
