"""Policy training on batched simulator gradients: short-horizon analytic policy gradients with a
learned terminal value (SHAC, Xu et al., ICLR 2022), a PyTorch MLP policy trained by
back-propagating the reward through ``phalanx.torch.step``.

E environments are stepped together by ``phalanx.torch.step`` (a ``torch.autograd.Function``
whose backward is the simulator's adjoint ``phalanx.step_vjp``). The policy, an MLP of two tanh
layers, maps an observation to controls through tanh, scaled to ``model.actuator_ctrlrange``.
One training iteration unrolls a window of h steps from the environments' current states and
takes as actor loss the negative mean over the environments of

    (1 - gamma) sum_{t<h} gamma^t r_t + gamma^h V(s_h)

(the discounted return in units of a per-step reward, closed by the critic V); it back-propagates
that through the h steps, the policy and V, clips the gradient norm to 1 and takes an Adam step.
The states are then detached (truncated back-propagation) and the next window continues from
them. The critic, an MLP of the same shape, is regressed (a few full-batch Adam steps) on
TD(lambda) targets computed from the window's rewards and its own values. Every environment
restarts from a randomised initial state after ``episode`` steps (the restarts are staggered).
The learning rates decay linearly to a tenth. After every ``eval_every`` iterations the
deterministic policy runs one episode from a fixed start: its mean reward per step is the
learning curve.

Tasks (all in float64, one physics step of ``model.timestep`` = 10 ms per control step):

- ``cartpole``: examples/models/cartpole.xml (cart on a +-1.2 m rail, motor ctrl in [-1, 1] x
  20 N). Observation (x, cos theta, sin theta, xdot, thetadot) (velocities scaled), reward
  cos theta - 0.5 x^2 - 0.01 xdot^2 - 0.005 thetadot^2 - 0.01 u^2. Training starts: pole angle
  uniform in [0, 2 pi), small random cart position and velocities. Evaluation: 5 s from the
  hanging pole at rest (theta = pi); "upright" means |wrapped theta| < 0.3 rad over the last
  second.
- ``cheetah``: examples/models/half_cheetah_planar.xml (nq = nv = 9: root x, z, pitch, six
  hinges; nu = 6; feet in contact with the floor, ``model.lcp_solver = "pgs_stabilized"`` for
  contact gradients on the clamping set). Observation: qpos without the root's x, and qvel
  (scaled); reward qvel[0] (forward speed, m/s) - 0.1 |u|^2. Training starts: the resting pose
  with the joints perturbed by up to 0.1 rad. Evaluation: 3 s from the resting pose; reported
  as the mean forward speed.

    .venv/bin/python examples/policy_apg.py [--task both] [--iterations N] [--seed 0]
                                            [--out examples/out]

prints progress lines (window loss, evaluation, wall time), the evaluation before and after
training (cart-pole: whether it swung up and held; cheetah: mean forward speed), and writes
policy_apg.png (both learning curves) into --out.

Measured with the defaults (seed 0) on 2 CPU cores, torch and phalanx on one thread each:

- cart-pole, 1200 iterations (128 environments, h = 32), 117 s: the evaluation goes from -1.20
  (pole hanging) to +0.56; the pole is swung up and held, largest |angle| over the last second
  0.015 rad. The curve is not monotonic: it swings between -0.9 and +0.56 up to iteration 800
  and settles near +0.56 from iteration 850 as the learning rates decay.
- cheetah, 600 iterations (64 environments, h = 32), 40 s: the evaluation goes from +0.0001 to
  +2.52; mean forward speed 2.76 m/s over 3 s (8.3 m), untrained 0.0001 m/s; it runs upright
  (the torso's pitch stays within -0.30..+0.36 rad).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm
import torch

import phalanx
import phalanx.torch as pt
from _shared import wrap

MODELS = Path(__file__).resolve().parent / "models"
UPRIGHT = 0.3  # rad: |wrapped pole angle| below this counts as upright
F64 = torch.float64


class CartPole:
    """swing the pole up from hanging and balance it (hinge angle qpos[1], upright at 0)"""

    name = "cartpole"
    nobs = 5
    eval_seconds = 5.0
    defaults = dict(iterations=1200, envs=128, horizon=32, lr=2e-3, episode=300)

    def __init__(self):
        self.model = phalanx.load_model(MODELS / "cartpole.xml")

    def observe(self, q, v):
        return torch.stack([q[:, 0], torch.cos(q[:, 1]), torch.sin(q[:, 1]), 0.3 * v[:, 0],
                            0.1 * v[:, 1]], dim=1)

    def reward(self, q, v, u):
        return (torch.cos(q[:, 1]) - 0.5 * q[:, 0] ** 2 - 0.01 * v[:, 0] ** 2
                - 0.005 * v[:, 1] ** 2 - 0.01 * (u * u).sum(dim=1))

    def eval_start(self):
        return torch.tensor([[0.0, math.pi]], dtype=F64), torch.zeros(1, 2, dtype=F64)

    def random_starts(self, n, gen):
        r = 2 * torch.rand(n, 4, generator=gen, dtype=F64) - 1
        q = torch.stack([0.5 * r[:, 0], math.pi * (1 + r[:, 1])], dim=1)
        v = torch.stack([0.5 * r[:, 2], 2.0 * r[:, 3]], dim=1)
        return q, v

    def summary(self, qs, vs):
        last = int(round(1.0 / self.model.timestep))
        worst = float(np.abs(wrap(qs[-last:, 1])).max())
        return dict(last_second_max_angle=worst, upright=worst < UPRIGHT)


class Cheetah:
    """run forward (root slide x, qvel[0]) on the floor"""

    name = "cheetah"
    nobs = 17
    eval_seconds = 3.0
    defaults = dict(iterations=600, envs=64, horizon=32, lr=2e-3, episode=300)

    def __init__(self):
        self.model = phalanx.load_model(MODELS / "half_cheetah_planar.xml")
        self.model.lcp_solver = "pgs_stabilized"

    def observe(self, q, v):
        return torch.cat([q[:, 1:], 0.1 * v], dim=1)

    def reward(self, q, v, u):
        return v[:, 0] - 0.1 * (u * u).sum(dim=1)

    def eval_start(self):
        return torch.zeros(1, 9, dtype=F64), torch.zeros(1, 9, dtype=F64)

    def random_starts(self, n, gen):
        q = torch.zeros(n, 9, dtype=F64)
        q[:, 3:] = 0.1 * (2 * torch.rand(n, 6, generator=gen, dtype=F64) - 1)
        return q, torch.zeros(n, 9, dtype=F64)

    def summary(self, qs, vs):
        return dict(mean_speed=float(vs[:, 0].mean()), distance=float(qs[-1, 0]))


TASKS = {"cartpole": CartPole, "cheetah": Cheetah}


def mlp(inputs, hidden, outputs):
    """inputs -> tanh(hidden) -> tanh(hidden) -> outputs, float64"""
    return torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, outputs)).to(F64)


class Policy(torch.nn.Module):
    """observation -> controls within the actuators' ctrlrange (tanh scaled); the last layer
    starts small, so the untrained policy pushes gently"""

    def __init__(self, task, hidden: int):
        super().__init__()
        lo, hi = torch.tensor(task.model.actuator_ctrlrange, dtype=F64).T
        self.register_buffer("centre", (hi + lo) / 2)
        self.register_buffer("scale", (hi - lo) / 2)
        self.net = mlp(task.nobs, hidden, task.model.nu)
        with torch.no_grad():
            self.net[-1].weight.mul_(0.1)
            self.net[-1].bias.zero_()

    def forward(self, obs):
        return self.centre + self.scale * torch.tanh(self.net(obs))


def unroll(task, policy, q, v, h):
    """h differentiable steps under the policy: observations (h, E, nobs) before each step,
    rewards (h, E) after it, and the final state"""
    observations, rewards = [], []
    for _ in range(h):
        obs = task.observe(q, v)
        u = policy(obs)
        q, v = pt.step(task.model, q, v, u)
        observations.append(obs)
        rewards.append(task.reward(q, v, u))
    return torch.stack(observations), torch.stack(rewards), q, v


def window_loss(task, policy, critic, q, v, h, gamma):
    """the actor loss of an h-step window from (q, v): -mean over the environments of
    (1 - gamma) sum_t gamma^t r_t + gamma^h V(s_h); also the observations, rewards and final
    state"""
    obs, rewards, q, v = unroll(task, policy, q, v, h)
    discount = gamma ** torch.arange(h, dtype=F64)
    value = (1 - gamma) * (discount[:, None] * rewards).sum(dim=0)
    value = value + gamma**h * critic(task.observe(q, v))[:, 0]
    return -value.mean(), obs, rewards, q, v


@torch.no_grad()
def td_lambda_targets(critic, obs, rewards, last_obs, gamma, lam):
    """TD(lambda) targets (h, E) of the critic (values in units of a per-step reward)"""
    values = critic(torch.cat([obs[1:], last_obs[None]]))[..., 0]
    targets = torch.empty_like(rewards)
    ret = values[-1]
    for t in reversed(range(rewards.shape[0])):
        ret = (1 - gamma) * rewards[t] + gamma * ((1 - lam) * values[t] + lam * ret)
        targets[t] = ret
    return targets


def fit_critic(critic, optimiser, obs, targets, steps: int) -> float:
    """a few full-batch Adam steps of the critic on its mean squared error"""
    x, y = obs.reshape(-1, obs.shape[-1]), targets.reshape(-1)
    for _ in range(steps):
        optimiser.zero_grad()
        loss = ((critic(x)[:, 0] - y) ** 2).mean()
        loss.backward()
        optimiser.step()
    return float(loss.detach())


@torch.no_grad()
def evaluate(task, policy) -> tuple[float, np.ndarray, np.ndarray]:
    """the deterministic policy for task.eval_seconds from the fixed start: mean reward per
    step, and the states (T, nq), (T, nv) after each step"""
    q, v = task.eval_start()
    steps = int(round(task.eval_seconds / task.model.timestep))
    rewards, qs, vs = np.zeros(steps), np.zeros((steps, task.model.nq)), np.zeros((steps,
                                                                                   task.model.nv))
    for i in range(steps):
        u = policy(task.observe(q, v))
        q, v = pt.step(task.model, q, v, u)
        rewards[i], qs[i], vs[i] = float(task.reward(q, v, u)[0]), q[0].numpy(), v[0].numpy()
    return float(rewards.mean()), qs, vs


def train(task_name: str, iterations: int | None = None, *, seed: int = 0, envs: int | None = None,
          horizon: int | None = None, lr: float | None = None, episode: int | None = None,
          gamma: float = 0.99, lam: float = 0.95, critic_lr: float = 2e-3,
          critic_steps: int = 8, hidden: int = 64, eval_every: int = 50, log=print,
          rank: int = 0, world: int = 1, wrap=None) -> dict:
    """Train a policy on task_name ("cartpole" or "cheetah") by SHAC for ``iterations`` windows;
    None takes the task's default (Task.defaults). Returns the learning curve (``iterations``,
    ``returns``: evaluation mean reward per step), ``initial`` and ``final`` evaluations, the
    final evaluation episode's states (``qs``, ``vs``) and summary (cart-pole: ``upright``,
    ``last_second_max_angle``; cheetah: ``mean_speed``, ``distance``) and the untrained
    policy's summary (``initial_summary``), the wall time ``seconds`` and the ``policy``.

    Across processes (examples/policy_ddp.py): process ``rank`` of ``world`` steps the
    environments [rank E / world, (rank + 1) E / world) of the E the training would step alone
    (the same initial states and restarts: every process draws those of all E), and ``wrap``
    (e.g. DistributedDataParallel) wraps the policy and the critic so that their gradients
    are averaged over the processes."""
    task = TASKS[task_name]()
    cfg = dict(task.defaults)
    cfg.update({k: val for k, val in dict(iterations=iterations, envs=envs, horizon=horizon,
                                          lr=lr, episode=episode).items() if val is not None})
    if cfg["envs"] % world:
        raise ValueError(f"{cfg['envs']} environments do not split evenly over {world} "
                         f"processes")
    mine = slice(rank * cfg["envs"] // world, (rank + 1) * cfg["envs"] // world)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    policy, critic = Policy(task, hidden), mlp(task.nobs, hidden, 1)
    if wrap is not None:
        policy, critic = wrap(policy), wrap(critic)
    actor_opt = torch.optim.Adam(policy.parameters(), lr=cfg["lr"])
    critic_opt = torch.optim.Adam(critic.parameters(), lr=critic_lr)
    decay = [torch.optim.lr_scheduler.LambdaLR(o, lambda i: 1 - 0.9 * i / cfg["iterations"])
             for o in (actor_opt, critic_opt)]
    q, v = (x[mine] for x in task.random_starts(cfg["envs"], gen))
    age = torch.randint(0, cfg["episode"], (cfg["envs"],), generator=gen)
    initial, qs, vs = evaluate(task, policy)
    initial_summary = task.summary(qs, vs)
    its, returns = [0], [initial]
    start = time.perf_counter()
    for it in tqdm(range(1, cfg["iterations"] + 1), desc=task_name, disable=None):
        loss, obs, rewards, q, v = window_loss(task, policy, critic, q, v, cfg["horizon"], gamma)
        actor_opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        actor_opt.step()
        q, v = q.detach(), v.detach()
        targets = td_lambda_targets(critic, obs, rewards.detach(), task.observe(q, v), gamma, lam)
        critic_loss = fit_critic(critic, critic_opt, obs.detach(), targets, critic_steps)
        for d in decay:
            d.step()
        q, v, age = restart_finished(task, q, v, age + cfg["horizon"], cfg["episode"], gen,
                                     mine)
        if it % eval_every == 0 or it == cfg["iterations"]:
            its.append(it)
            returns.append(evaluate(task, policy)[0])
            if log:
                log(f"{task_name} iteration {it:4d}: window loss {loss.item():+.4f}  critic "
                    f"{critic_loss:.5f}  evaluation {returns[-1]:+.4f}  "
                    f"({time.perf_counter() - start:.1f} s)")
    final, qs, vs = evaluate(task, policy)
    return dict(task=task_name, iterations=np.array(its), returns=np.array(returns),
                initial=initial, final=final, qs=qs, vs=vs, summary=task.summary(qs, vs),
                initial_summary=initial_summary, seconds=time.perf_counter() - start,
                policy=policy)


def restart_finished(task, q, v, age, episode, gen, mine=slice(None)):
    """environments whose episode is over restart from random initial states: age holds the
    ages of all environments and q, v the states of those in ``mine``"""
    done = age >= episode
    if done.any():
        q, v, age = q.clone(), v.clone(), age.clone()
        starts = task.random_starts(int(done.sum()), gen)  # one per finished environment
        row = torch.cumsum(done, 0)[mine] - 1  # each environment's row of starts
        restart = done[mine]
        q[restart], v[restart] = (x[row[restart]] for x in starts)
        age[done] = 0
    return q, v, age


def plot(results, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8), squeeze=False)
    labels = {"cartpole": "mean reward (cos theta - penalties)",
              "cheetah": "mean reward (forward speed - effort)"}
    for ax, r in zip(axes[0], results):
        ax.plot(r["iterations"], r["returns"], marker=".")
        ax.set(xlabel="training iteration (window)", ylabel=labels[r["task"]],
               title=f"{r['task']}: evaluation of the deterministic policy")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def describe(r) -> str:
    s = r["summary"]
    if r["task"] == "cartpole":
        return (f"swung up and held: {s['upright']} (largest |angle| over the last second "
                f"{s['last_second_max_angle']:.3f} rad)")
    return (f"mean forward speed {s['mean_speed']:+.3f} m/s (untrained "
            f"{r['initial_summary']['mean_speed']:+.3f} m/s), {s['distance']:.2f} m in "
            f"{Cheetah.eval_seconds:g} s")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["cartpole", "cheetah", "both"], default="both")
    parser.add_argument("--iterations", type=int, default=None,
                        help="training windows (default: the task's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    phalanx.set_num_threads(1)
    tasks = ["cartpole", "cheetah"] if args.task == "both" else [args.task]
    results = []
    for name in tasks:
        r = train(name, args.iterations, seed=args.seed)
        print(f"{name}: evaluation {r['initial']:+.4f} -> {r['final']:+.4f} in "
              f"{r['iterations'][-1]} iterations ({r['seconds']:.1f} s); {describe(r)}")
        results.append(r)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(results, args.out / "policy_apg.png")
    print(f"wrote {args.out / 'policy_apg.png'}")
    return results


if __name__ == "__main__":
    main()
