"""Policy training from Python on batched gradients: analytic policy gradients (APG) through
Phalanx's step, with a PyTorch MLP policy, on the cart-pole swing-up and the half-cheetah-like
planar runner.

E environments are stepped together by ``phalanx.torch.step`` (a ``torch.autograd.Function``
whose backward is the simulator's adjoint). The policy maps an observation to controls through
tanh (the motors' range is [-1, 1]). Training unrolls windows of h steps from the environments'
current states, takes the loss -mean reward over the window, back-propagates it through the h
steps and the policy (short-horizon truncated backpropagation, as SHAC and APG do; no critic),
clips the gradient norm and takes an Adam step; the states are then detached and the next
window continues from them. Episodes restart from randomised initial states every
``episode`` steps. After every ``eval_every`` windows the deterministic policy is evaluated on a
fixed episode from a fixed start, which gives the learning curve.

Tasks:

- ``cartpole``: examples/models/cartpole.xml from hanging (angle pi, starts randomised by
  +-0.5 rad); reward cos(angle) - 0.1 x^2 - 0.01 (xdot^2 + thetadot^2) - 0.01 u^2; evaluated on
  5 s from exactly hanging: the return is the mean reward, and the pole counts as swung up when
  |angle| < 0.3 rad over the last second;
- ``cheetah``: examples/models/half_cheetah_planar.xml (9 dof, feet in contact with the floor,
  model.lcp_solver "pgs_stabilized" for exact contact gradients); reward the root's forward speed
  - 0.05 u^2; evaluated on 3 s: the mean forward speed.

    .venv/bin/python examples/policy_apg.py [--task both] [--iterations 300] [--out examples/out]

prints progress, the evaluation before and after training, and writes policy_apg.png (the
learning curves) into --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

import phalanx
import phalanx.torch as pt

MODELS = Path(__file__).resolve().parent / "models"


class Task:
    """what differs between the tasks: the model, observation, reward and starts"""

    def __init__(self, name):
        self.name = name
        if name == "cartpole":
            self.model = phalanx.load_model(MODELS / "cartpole.xml")
            self.episode, self.eval_steps, self.nobs = 300, 500, 5
            self.envs, self.window, self.lr = 128, 60, 2e-3
        elif name == "cheetah":
            self.model = phalanx.load_model(MODELS / "half_cheetah_planar.xml")
            self.model.lcp_solver = "pgs_stabilized"
            self.episode, self.eval_steps, self.nobs = 200, 300, 17
            self.envs, self.window, self.lr = 64, 32, 3e-3
        else:
            raise ValueError(f"unknown task {name!r}: cartpole or cheetah")
        self.q0 = torch.tensor(self.model.qpos0, dtype=torch.float64)
        if name == "cartpole":
            self.q0[1] = np.pi

    def observe(self, q, v):
        if self.name == "cartpole":
            return torch.stack([q[:, 0], torch.cos(q[:, 1]), torch.sin(q[:, 1]), v[:, 0],
                                v[:, 1]], dim=1)
        return torch.cat([q[:, 1:], v], dim=1)  # all but the forward position

    def reward(self, q, v, u):
        effort = (u * u).sum(dim=1)
        if self.name == "cartpole":
            return (torch.cos(q[:, 1]) - 0.1 * q[:, 0] ** 2 - 0.01 * (v * v).sum(dim=1)
                    - 0.01 * effort)
        return v[:, 0] - 0.05 * effort

    def starts(self, E, generator):
        q = self.q0.repeat(E, 1)
        noise = torch.rand(E, self.model.nq, generator=generator, dtype=torch.float64) - 0.5
        if self.name == "cartpole":
            q[:, 1] += noise[:, 1]
        else:
            q[:, 3:] += 0.2 * noise[:, 3:]
        return q, torch.zeros(E, self.model.nv, dtype=torch.float64)


def make_policy(task, hidden, seed):
    torch.manual_seed(seed)
    layers = torch.nn.Sequential(torch.nn.Linear(task.nobs, hidden), torch.nn.Tanh(),
                                 torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                                 torch.nn.Linear(hidden, task.model.nu), torch.nn.Tanh())
    return layers.double()


def window_loss(task, policy, q, v, h):
    """-mean reward over h steps from (q, v), and the states after them"""
    total = 0.0
    for _ in range(h):
        u = policy(task.observe(q, v))
        q, v = pt.step(task.model, q, v, u)
        total = total + task.reward(q, v, u).mean()
    return -total / h, q, v


@torch.no_grad()
def evaluate(task, policy):
    """the deterministic policy from the fixed start: mean reward and the trajectory"""
    q, v = task.q0[None].clone(), torch.zeros(1, task.model.nv, dtype=torch.float64)
    rewards, angles = [], []
    for _ in range(task.eval_steps):
        u = policy(task.observe(q, v))
        q, v = pt.step(task.model, q, v, u)
        rewards.append(float(task.reward(q, v, u)[0]))
        angles.append(float(q[0, 1]))
    return float(np.mean(rewards)), np.array(angles)


def swung_up(task, angles):
    """the cart-pole's pole within 0.3 rad of upright over the last second"""
    last = int(round(1.0 / task.model.timestep))
    wrapped = (angles[-last:] + np.pi) % (2 * np.pi) - np.pi
    return bool(np.all(np.abs(wrapped) < 0.3))


def train(task_name, iterations, *, envs=None, window=None, hidden=64, lr=None, clip=1.0,
          eval_every=10, seed=0, log=print) -> dict:
    """Train a policy on a task by APG; returns the learning curve (iterations, evaluation
    returns) and the final evaluation. envs, window and lr default to the task's (cart-pole
    128, 60, 2e-3; cheetah 64, 32, 3e-3)."""
    task = Task(task_name)
    envs, window, lr = envs or task.envs, window or task.window, lr or task.lr
    policy = make_policy(task, hidden, seed)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    q, v = task.starts(envs, gen)
    curve_it, curve = [0], [evaluate(task, policy)[0]]
    steps = 0
    start = time.perf_counter()
    for it in range(1, iterations + 1):
        if steps >= task.episode:
            q, v = task.starts(envs, gen)
            steps = 0
        loss, q, v = window_loss(task, policy, q, v, window)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), clip)
        opt.step()
        q, v = q.detach(), v.detach()
        steps += window
        if it % eval_every == 0 or it == iterations:
            curve_it.append(it)
            curve.append(evaluate(task, policy)[0])
            if log:
                log(f"{task_name} iteration {it:4d}: window loss {float(loss):+8.4f}  "
                    f"evaluation return {curve[-1]:+8.4f}  ({time.perf_counter() - start:.1f} s)")
    final, angles = evaluate(task, policy)
    return dict(task=task_name, iterations=np.array(curve_it), returns=np.array(curve),
                initial=curve[0], final=final, seconds=time.perf_counter() - start,
                swung_up=swung_up(task, angles) if task_name == "cartpole" else None,
                policy=policy, task_model=task.model)


def plot(results, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6))
    axes = np.atleast_1d(axes)
    labels = {"cartpole": "mean reward (cos angle - penalties)",
              "cheetah": "mean forward speed - effort (m/s)"}
    for ax, r in zip(axes, results):
        ax.plot(r["iterations"], r["returns"])
        ax.set(xlabel="training windows", ylabel=labels[r["task"]],
               title=f"APG through phalanx.torch.step: {r['task']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["cartpole", "cheetah", "both"], default="both")
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    tasks = ["cartpole", "cheetah"] if args.task == "both" else [args.task]
    results = [train(t, args.iterations) for t in tasks]
    for r in results:
        extra = f", swung up and held: {r['swung_up']}" if r["task"] == "cartpole" else ""
        print(f"{r['task']}: evaluation return {r['initial']:+.4f} -> {r['final']:+.4f} in "
              f"{args.iterations} windows ({r['seconds']:.1f} s){extra}")
    args.out.mkdir(parents=True, exist_ok=True)
    plot(results, args.out / "policy_apg.png")
    print(f"wrote {args.out / 'policy_apg.png'}")
    return results


if __name__ == "__main__":
    main()
