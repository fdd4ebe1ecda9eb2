"""Policy learning from Phalanx's batched gradients: SHAC and APG on ``phalanx.torch``.

SHAC (Xu et al., "Accelerated Policy Learning with Parallel Differentiable Simulation", ICLR
2022) trains a policy by back-propagating rewards through the simulator over short windows of h
steps of N environments, each window closed by a learned critic:

    actor loss = -1 / (N h) sum_i [ sum_{t<h} gamma^t r_t^i + gamma^h V'(s_h^i) ]

(V' the target critic; within a window an episode that ends contributes its return up to its
end, and its value only when it was truncated, not terminated). The states are detached
between windows. After each actor step the critic V is regressed on TD(lambda) targets of the
window (from V''s values), in minibatches, and the target critic follows it by Polyak
averaging, V' <- alpha V' + (1 - alpha) V. Gradients are clipped by norm, and a window whose
actor gradient is far larger than the recent ones is not applied (``SHAC.outlier``). Learning
rates decay linearly, observations are normalised by running statistics, and the policy is a
Gaussian whose samples (reparameterised, so the gradient flows through them) are squashed by
tanh into the actuators' control ranges. The policy that acts (``act``, ``evaluate``) is the
mean of a Polyak average of the actor's parameters over the windows (``policy_average``): the
actor itself moves with every window's gradient, and on cheetah-run (seed 0, 2000 windows) one
in ten of its evaluations fell to 0.4-0.8 of those around it and recovered at the next, where
the average's, in the same run, stayed above 0.88 of its final return once they had reached
0.9 of it. Each environment's first episode is truncated at a random age, so that every window
holds a few episodes' starts (``stagger_resets``): with all episodes in step, the start from
rest is trained in one window of every episode_steps / h, and between those the policy can
forget it (measured on cheetah-run: after 1000 windows the deterministic policy, which ran at
800, stood still from rest while its training episodes, mostly under way, still ran).

APG, the baseline, is the same loop with the window the whole episode and no critic: the
gradient of each episode's return.

A task is differentiable: its observations and rewards are torch functions of the state,

    class Task:
        model: phalanx.Model
        frame_skip: int          # physics steps per action
        episode_steps: int       # actions per episode (then truncated)
        def observe(self, qpos, qvel, ctrl) -> (E, d)
        def reward(self, qpos, qvel, ctrl, previous) -> (E,)
        def terminated(self, qpos, qvel) -> (E,) bool    # optional: episodes that end early
        def initial_states(self, n, generator) -> (qpos (n, nq), qvel (n, nv))

in float64 (the dtype Phalanx's gradients are checked in). ``observe`` is given the controls held
at the state (the last action's, zero after a reset), ``reward`` the step's controls and the
state it started from, ``previous`` = (qpos, qvel). ``CartPoleSwingUp``, ``CheetahRun``,
``HumanoidWalk`` and ``Ant`` are such tasks, the middle two dm_control's (``tolerance`` is the
suite's reward shaping in torch), the last Gymnasium's.

    import phalanx.learn as pl
    agent = pl.SHAC(pl.CartPoleSwingUp(), pl.SHACConfig(num_envs=64))
    history = agent.train(300)               # evaluation returns against env-steps and time
    u = agent.act(qpos, qvel)                # the acting policy's mean controls
"""

from __future__ import annotations

import collections
import copy
import functools
import math
import statistics
import threading
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

import phalanx

from . import torch as pt

F64 = torch.float64
_BUILD_LOCK = threading.Lock()


@dataclass
class SHACConfig:
    """SHAC's settings; the defaults are the paper's (its Table 4) where they do not depend on
    the task"""

    num_envs: int = 64
    horizon: int = 32  # h, steps per window
    gamma: float = 0.99
    lam: float = 0.95  # TD(lambda)
    actor_lr: float = 2e-3
    critic_lr: float = 2e-3
    final_lr: float = 1e-5  # the learning rates decay linearly to this over the training
    betas: tuple[float, float] = (0.7, 0.95)  # Adam's
    grad_norm: float = 1.0  # clip of the actor's and the critic's gradient norms
    # a window whose actor gradient norm (before clipping) exceeds this multiple of the median
    # of the last outlier_window windows' norms is not applied (0: every window is)
    outlier_factor: float = 10.0
    outlier_window: int = 100
    # within a window, the gradient reaching each environment's state after a step is scaled
    # down to at most this multiple of the median over the environments (0: never; 10 keeps
    # a few Ants' gradients, grown to 1e6 and more, from taking over the window's)
    state_grad_clip: float = 0.0
    critic_iterations: int = 16  # passes over the window's samples per window
    critic_minibatches: int = 4
    target_alpha: float = 0.2  # Polyak weight of the target critic's old parameters
    # Polyak weight of the acting policy's old parameters, per window applied, at most; after
    # n windows it is (1 + n) / (10 + n) if less, so that a short training is not averaged
    # with the untrained actor (module docstring; 0: the actor itself acts, as in the paper)
    policy_average: float = 0.99
    actor_hidden: tuple[int, ...] = (128, 64, 32)  # the paper's for cheetah and ant
    critic_hidden: tuple[int, ...] = (64, 64)
    init_log_std: float = -1.0  # of the policy's Gaussian
    normalize_obs: bool = True
    reward_scale: float = 1.0
    eval_envs: int = 16  # episodes per evaluation
    # first episodes truncated at ages drawn uniformly over the episode (module docstring)
    stagger_resets: bool = True
    seed: int = 0


def mlp(inputs: int, hidden: tuple[int, ...], outputs: int) -> torch.nn.Sequential:
    """inputs -> ELU(hidden...) -> outputs (layer-normalised hidden layers, as SHAC's)"""
    layers: list[torch.nn.Module] = []
    for width in hidden:
        layers += [torch.nn.Linear(inputs, width), torch.nn.LayerNorm(width), torch.nn.ELU()]
        inputs = width
    layers.append(torch.nn.Linear(inputs, outputs))
    return torch.nn.Sequential(*layers).to(F64)


class RunningNorm(torch.nn.Module):
    """observations normalised by the mean and variance of all those seen in ``update``"""

    def __init__(self, size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(size, dtype=F64))
        self.register_buffer("var", torch.ones(size, dtype=F64))
        self.register_buffer("count", torch.tensor(0.0, dtype=F64))
        self.eps = eps

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """merge the batch x (n, size) into the statistics (Chan et al.'s parallel update)"""
        x = x.reshape(-1, self.mean.numel())
        n = x.shape[0]
        mean, var = x.mean(dim=0), x.var(dim=0, unbiased=False)
        total = self.count + n
        delta = mean - self.mean
        self.var.copy_((self.var * self.count + var * n + delta**2 * self.count * n / total)
                       / total)
        self.mean.add_(delta * n / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / torch.sqrt(self.var + self.eps)


class Actor(torch.nn.Module):
    """observation -> controls in the actuators' ctrlrange: centre + half-range tanh(a), a the
    MLP's mean plus, when sampling, its learned standard deviation times a standard normal"""

    def __init__(self, model: phalanx.Model, nobs: int, hidden, init_log_std: float) -> None:
        super().__init__()
        lo, hi = torch.tensor(model.actuator_ctrlrange, dtype=F64).reshape(-1, 2).T
        limited = torch.tensor(model.actuator_ctrllimited, dtype=torch.bool).reshape(-1)
        lo, hi = torch.where(limited, lo, -1.0), torch.where(limited, hi, 1.0)
        self.register_buffer("centre", (hi + lo) / 2)
        self.register_buffer("radius", (hi - lo) / 2)
        self.net = mlp(nobs, hidden, model.nu)
        self.log_std = torch.nn.Parameter(torch.full((model.nu,), init_log_std, dtype=F64))

    def forward(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        a = self.net(obs)
        if noise is not None:
            a = a + torch.exp(self.log_std) * noise
        return self.centre + self.radius * torch.tanh(a)


@torch.no_grad()
def polyak(average: torch.nn.Module, module: torch.nn.Module, alpha: float) -> None:
    """average's parameters <- alpha average's + (1 - alpha) module's"""
    for p_average, p in zip(average.parameters(), module.parameters()):
        p_average.mul_(alpha).add_((1 - alpha) * p)


@torch.no_grad()
def clip_rows_to_median(grad: torch.Tensor, factor: float) -> torch.Tensor:
    """grad (E, n) with every row longer than factor times the median length of the nonzero
    rows scaled down to that length. A backward hook on the states of a window: where an
    environment's dynamics are locally chaotic (hard contacts in a near-singular pose, a
    tumble), the product of the steps' Jacobians grows by orders of magnitude within a few
    steps, and that one environment's gradient would outweigh the others' in the mean;
    clipping the whole window's gradient norm afterwards keeps its direction"""
    norms = grad.norm(dim=1)
    nonzero = norms[norms > 0]
    if nonzero.numel() == 0:
        return grad
    bound = factor * nonzero.median()
    return grad * torch.clamp(bound / norms.clamp_min(torch.finfo(grad.dtype).tiny),
                              max=1.0)[:, None]


@torch.no_grad()
def td_lambda_targets(rewards, next_values, terminated, done, last_value, gamma: float,
                      lam: float) -> torch.Tensor:
    """TD(lambda) targets (h, E) of a window: G_t = r_t + gamma m_t [(1 - lam c_t) V_{t+1} +
    lam c_t G_{t+1}], with V_{t+1} = next_values[t] the value of the state after step t (before
    any reset), m_t = 0 where step t terminated the episode (no value after it), and c_t = 0
    where step t ended the episode or is the window's last (the recursion does not cross an
    episode's end; there the value closes it). last_value is unused when every window ends in
    next_values; it is the bootstrap of the last step, next_values[-1]."""
    h = rewards.shape[0]
    targets = torch.empty_like(rewards)
    following = last_value
    for t in reversed(range(h)):
        cont = torch.zeros_like(rewards[t]) if t == h - 1 else (~done[t]).to(rewards.dtype)
        alive = (~terminated[t]).to(rewards.dtype)
        following = rewards[t] + gamma * alive * ((1 - lam * cont) * next_values[t]
                                                  + lam * cont * following)
        targets[t] = following
    return targets


class SHAC:
    """Short-horizon actor-critic on a differentiable task (module docstring); ``critic=False``
    with a horizon of the whole episode is APG.

    ``distributed`` (e.g. ``TorchDistributed()``) trains over several processes: each steps
    num_envs / world of the environments, drawn from its own generator (seed * world + rank),
    and the actor's and the critic's gradients are averaged over the processes after every
    backward pass, as are the observation statistics; the networks start equal (seeded by
    ``seed``) and so stay equal."""

    def __init__(self, task, config: SHACConfig | None = None, *, critic: bool = True,
                 distributed=None) -> None:
        self.task, self.cfg = task, config or SHACConfig()
        cfg = self.cfg
        self.distributed = distributed
        rank, world = (0, 1) if distributed is None else (distributed.rank, distributed.world)
        if cfg.num_envs % world:
            raise ValueError(f"phalanx.learn.SHAC: {cfg.num_envs} environments do not split "
                             f"evenly over {world} processes")
        # the networks: the same in every process, drawn from torch's global generator, so
        # built under a lock (agents of threads would otherwise interleave their draws)
        with _BUILD_LOCK:
            torch.manual_seed(cfg.seed)
            # the environments' draws: their own in each process
            self.generator = torch.Generator().manual_seed(cfg.seed * world + rank)
            q, v = task.initial_states(1, torch.Generator().manual_seed(cfg.seed))
            nobs = task.observe(q, v, torch.zeros(1, task.model.nu, dtype=F64)).shape[1]
            self.norm = RunningNorm(nobs) if cfg.normalize_obs else None
            self.actor = Actor(task.model, nobs, cfg.actor_hidden, cfg.init_log_std)
            self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr,
                                              betas=cfg.betas)
            # the policy that acts: the actor's running average, or the actor itself
            self.policy = self.actor
            if cfg.policy_average > 0:
                self.policy = copy.deepcopy(self.actor).requires_grad_(False)
            self.critic = mlp(nobs, cfg.critic_hidden, 1) if critic else None
            if self.critic is not None:
                self.target = copy.deepcopy(self.critic).requires_grad_(False)
                self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr,
                                                   betas=cfg.betas)
        self.q, self.v = task.initial_states(cfg.num_envs // world, self.generator)
        n = self.q.shape[0]
        self.age = torch.zeros(n, dtype=torch.long)  # steps into each episode
        if cfg.stagger_resets:
            self.age = torch.randint(0, task.episode_steps, (n,), generator=self.generator)
        self.u = torch.zeros(n, task.model.nu, dtype=F64)  # the controls held
        self.env_steps = 0
        self.grad_norms: collections.deque = collections.deque(maxlen=cfg.outlier_window)
        self.skipped = 0  # windows whose actor step was not applied
        self.applied = 0  # and those whose was

    # --- the policy ----------------------------------------------------------------------

    def _obs(self, q, v, u):
        obs = self.task.observe(q, v, u)
        return obs if self.norm is None else self.norm(obs)

    @torch.no_grad()
    def act(self, qpos: torch.Tensor, qvel: torch.Tensor,
            ctrl: torch.Tensor | None = None) -> torch.Tensor:
        """the acting policy's mean controls (E, nu) at the states, the controls held there
        ctrl (default zero, as after a reset)"""
        if ctrl is None:
            ctrl = torch.zeros(qpos.shape[0], self.task.model.nu, dtype=F64)
        return self.policy(self._obs(qpos, qvel, ctrl))

    def _step(self, q, v, u):
        for _ in range(getattr(self.task, "frame_skip", 1)):
            q, v = pt.step(self.task.model, q, v, u)
        return q, v

    def _terminated(self, q, v):
        fn = getattr(self.task, "terminated", None)
        with torch.no_grad():
            ended = torch.zeros(q.shape[0], dtype=torch.bool) if fn is None else fn(q, v)
            return ended | ~(torch.isfinite(q).all(dim=1) & torch.isfinite(v).all(dim=1))

    def _gather(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.distributed is None else self.distributed.gather(x)

    def _average(self, module: torch.nn.Module) -> None:
        if self.distributed is not None:
            self.distributed.average([p for p in module.parameters() if p.grad is not None])

    # --- one window ----------------------------------------------------------------------

    def window(self):
        """unroll h steps from the current states, the actor loss and what the critic fits:
        (loss, observations (h, E, d), rewards (h, E), next values (h, E), terminated (h, E),
        done (h, E))"""
        cfg, task = self.cfg, self.task
        h = cfg.horizon
        q, v, held = self.q, self.v, self.u
        if self.norm is not None:
            self.norm.update(self._gather(task.observe(q, v, held)))
        n = q.shape[0]
        ret = torch.zeros(n, dtype=F64)  # each episode's discounted reward in the window
        discount = torch.ones(n, dtype=F64)
        loss = torch.zeros((), dtype=F64)
        obs_t, rew_t, next_t, term_t, done_t = [], [], [], [], []
        for t in range(h):
            obs = self._obs(q, v, held)
            noise = torch.randn(n, task.model.nu, generator=self.generator, dtype=F64)
            u = self.actor(obs, noise)
            previous = (q, v)
            q, v = self._step(q, v, u)
            if cfg.state_grad_clip > 0 and q.requires_grad:
                clip = functools.partial(clip_rows_to_median, factor=cfg.state_grad_clip)
                q.register_hook(clip)
                v.register_hook(clip)
            r = cfg.reward_scale * task.reward(q, v, u, previous)
            self.age += 1
            terminated = self._terminated(q, v)
            done = terminated | (self.age >= task.episode_steps)
            # a non-finite state ends its episode without its reward
            r = torch.where(terminated & ~torch.isfinite(r), torch.zeros_like(r), r)
            ret = ret + discount * r
            if self.critic is not None:
                next_obs = self._obs(torch.nan_to_num(q), torch.nan_to_num(v), u)
                value = self.target(next_obs)[:, 0]
            else:
                value = torch.zeros(n, dtype=F64)
            value = torch.where(terminated, torch.zeros_like(value), value)
            closes = done | (t == h - 1)
            loss = loss - torch.where(closes, ret + cfg.gamma * discount * value,
                                      torch.zeros_like(ret)).sum()
            obs_t.append(obs.detach())
            rew_t.append(r.detach())
            next_t.append(value.detach())
            term_t.append(terminated)
            done_t.append(done)
            discount = torch.where(done, torch.ones_like(discount), discount * cfg.gamma)
            ret = torch.where(done, torch.zeros_like(ret), ret)
            held = torch.where(done[:, None], torch.zeros_like(u), u)
            if done.any():  # those episodes restart (their states carry no gradient)
                starts = task.initial_states(int(done.sum()), self.generator)
                q, v = q.clone(), v.clone()
                q[done], v[done] = starts
                self.age[done] = 0
        self.q, self.v, self.u = q.detach(), v.detach(), held.detach()
        self.env_steps += h * n * (1 if self.distributed is None else self.distributed.world)
        return (loss / (h * n), torch.stack(obs_t), torch.stack(rew_t), torch.stack(next_t),
                torch.stack(term_t), torch.stack(done_t))

    def fit_critic(self, obs, targets) -> float:
        """critic_iterations passes of minibatch regression on the targets; the mean loss of
        the last pass"""
        cfg = self.cfg
        x, y = obs.reshape(-1, obs.shape[-1]), targets.reshape(-1)
        size = math.ceil(x.shape[0] / cfg.critic_minibatches)
        for _ in range(cfg.critic_iterations):
            order = torch.randperm(x.shape[0], generator=self.generator)
            total = 0.0
            for b in range(cfg.critic_minibatches):
                idx = order[b * size:(b + 1) * size]
                self.critic_opt.zero_grad()
                loss = ((self.critic(x[idx])[:, 0] - y[idx]) ** 2).mean()
                loss.backward()
                self._average(self.critic)
                torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_norm)
                self.critic_opt.step()
                total += float(loss.detach())
        return total / cfg.critic_minibatches

    def update_target(self) -> None:
        """V' <- alpha V' + (1 - alpha) V"""
        polyak(self.target, self.critic, self.cfg.target_alpha)

    def iteration(self, fraction: float = 0.0) -> dict:
        """one window, an actor step and the critic's fit; fraction of the training done sets
        the learning rates"""
        cfg = self.cfg
        for opt, lr in ((self.actor_opt, cfg.actor_lr),
                        (getattr(self, "critic_opt", None), cfg.critic_lr)):
            if opt is not None:
                for group in opt.param_groups:
                    group["lr"] = lr + (cfg.final_lr - lr) * fraction
        loss, obs, rewards, next_values, terminated, done = self.window()
        self.actor_opt.zero_grad()
        loss.backward()
        self._average(self.actor)
        grad = float(torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_norm))
        outlier = self.outlier(grad)
        if math.isfinite(grad):
            self.grad_norms.append(grad)
        if outlier:
            self.skipped += 1
        else:
            self.actor_opt.step()
            self.applied += 1
            if self.policy is not self.actor:
                weight = min(cfg.policy_average, (1 + self.applied) / (10 + self.applied))
                polyak(self.policy, self.actor, weight)
        critic_loss = float("nan")
        if self.critic is not None:
            targets = td_lambda_targets(rewards, next_values, terminated, done,
                                        next_values[-1], cfg.gamma, cfg.lam)
            critic_loss = self.fit_critic(obs, targets)
            self.update_target()
        return dict(actor_loss=float(loss.detach()), grad_norm=grad, critic_loss=critic_loss,
                    skipped=outlier)

    def outlier(self, grad_norm: float) -> bool:
        """whether an actor gradient of this norm (before clipping) is not applied: it is not
        finite, or it exceeds outlier_factor times the median norm of the last windows (once
        a tenth of outlier_window have been seen). Clipping alone would still step the whole
        clip length along such a gradient, which comes from a few environments whose dynamics
        are locally chaotic (a tumble, a contact that switches) rather than from the return's
        slope; the median follows a drift of the norms, and a lasting rise is applied once it
        has become the median."""
        if not math.isfinite(grad_norm):
            return True
        cfg = self.cfg
        if cfg.outlier_factor <= 0 or len(self.grad_norms) < max(1, cfg.outlier_window // 10):
            return False
        return grad_norm > cfg.outlier_factor * statistics.median(self.grad_norms)

    @torch.no_grad()
    def evaluate(self, episodes: int | None = None, seed: int = 12345) -> float:
        """the acting policy's (its mean's) undiscounted return, averaged over episodes from
        the task's initial states (a fixed draw)"""
        task = self.task
        n = episodes or self.cfg.eval_envs
        q0, v0 = task.initial_states(n, torch.Generator().manual_seed(seed))
        q, v = q0, v0
        total = torch.zeros(n, dtype=F64)
        alive = torch.ones(n, dtype=torch.bool)
        u = torch.zeros(n, task.model.nu, dtype=F64)
        for _ in range(task.episode_steps):
            u = self.act(q, v, u)
            previous = (q, v)
            q, v = self._step(q, v, u)
            r = task.reward(q, v, u, previous)
            total += torch.where(alive, torch.nan_to_num(r), torch.zeros_like(r))
            alive &= ~self._terminated(q, v)
            if not alive.any():
                break
            # an episode that diverged has ended; its state waits at its start (the
            # simulator stops on a non-finite state)
            finite = (torch.isfinite(q).all(dim=1) & torch.isfinite(v).all(dim=1))[:, None]
            q, v = torch.where(finite, q, q0), torch.where(finite, v, v0)
        return float(total.mean())

    def train(self, iterations: int, *, eval_every: int = 25, callback=None) -> dict:
        """iterations windows; every eval_every (and at the end) an evaluation. Returns the
        history: iteration, env_steps, seconds (training only), evaluation return, and the
        last actor and critic losses; callback(history) after each evaluation"""
        history = dict(iteration=[], env_steps=[], seconds=[], returns=[], actor_loss=[],
                       critic_loss=[], skipped=[])
        elapsed = 0.0
        for it in range(1, iterations + 1):
            start = time.perf_counter()
            stats = self.iteration((it - 1) / max(iterations, 1))
            elapsed += time.perf_counter() - start
            if it % eval_every == 0 or it == iterations:
                for key, value in (("iteration", it), ("env_steps", self.env_steps),
                                   ("seconds", elapsed), ("returns", self.evaluate()),
                                   ("actor_loss", stats["actor_loss"]),
                                   ("critic_loss", stats["critic_loss"]),
                                   ("skipped", self.skipped)):
                    history[key].append(value)
                if callback is not None:
                    callback(history)
        return history


class TorchDistributed:
    """SHAC's data parallelism over the processes of a torch.distributed group (the default:
    the whole world), which must be initialised: gradients averaged by an all-reduce of their
    concatenation, observations gathered by an all-gather"""

    def __init__(self, group=None) -> None:
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)

    def average(self, parameters: list[torch.nn.Parameter]) -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in parameters])
        self.dist.all_reduce(flat, group=self.group)
        flat /= self.world
        _scatter(flat, parameters)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(self.world)]
        self.dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts)


def _scatter(flat: torch.Tensor, parameters) -> None:
    """the parameters' gradients from their concatenation"""
    offset = 0
    for p in parameters:
        p.grad.copy_(flat[offset:offset + p.numel()].reshape(p.shape))
        offset += p.numel()


def APG(task, config: SHACConfig | None = None) -> SHAC:
    """the full-horizon analytic policy gradient: SHAC's loop with windows of whole episodes
    and no critic"""
    return SHAC(task, replace(config or SHACConfig(), horizon=task.episode_steps,
                              stagger_resets=False), critic=False)


class CartPoleSwingUp:
    """phalanx.envs.cartpole's swing-up as a differentiable task: the pole starts hanging
    (angle pi, position and angle noise U(-0.05, 0.05), at rest), reward (1 + cos angle) / 2
    - 0.01 u^2 per action, 2 physics steps of 10 ms per action, 500 actions per episode;
    observations (x, cos angle, sin angle, x velocity, angular velocity)"""

    frame_skip = 2
    episode_steps = 500

    def __init__(self, path=None) -> None:
        from .envs import example_model_path

        self.model = phalanx.load_model(example_model_path("cartpole.xml") if path is None
                                        else path)

    def observe(self, q, v, u=None):
        return torch.stack([q[:, 0], torch.cos(q[:, 1]), torch.sin(q[:, 1]), v[:, 0], v[:, 1]],
                           dim=1)

    def reward(self, q, v, u, previous=None):
        return 0.5 * (1 + torch.cos(q[:, 1])) - 0.01 * u[:, 0] ** 2

    def initial_states(self, n, generator):
        noise = 0.05 * (2 * torch.rand(n, 2, generator=generator, dtype=F64) - 1)
        q = torch.tensor([0.0, math.pi], dtype=F64) + noise
        return q, torch.zeros(n, 2, dtype=F64)


class CheetahRun:
    """dm_control's cheetah-run as a differentiable task: phalanx.envs.make's model, initial
    states (limited joints uniform in their ranges, then 200 steps to settle) and reward, the
    centre of mass's forward speed over 10 m/s clipped to [0, 1] (phalanx.torch.kinematics);
    observations qpos without the root's x, and qvel; 1000 steps of 10 ms. ``lcp_solver``
    (e.g. "pgs_stabilized", whose contact gradients are exact on the clamping set) replaces the
    model's."""

    frame_skip = 1
    episode_steps = 1000
    speed = 10.0

    def __init__(self, lcp_solver: str | None = None) -> None:
        from ._dm_control_tasks import Cheetah

        self.suite_task = Cheetah("run")
        self.model = self.suite_task.load()
        self.suite_task.bind(self.model)
        if lcp_solver is not None:
            self.model.lcp_solver = lcp_solver

    def observe(self, q, v, u=None):
        return torch.cat([q[:, 1:], v], dim=1)

    def reward(self, q, v, u, previous=None):
        speed = pt.kinematics(self.model, q, v)["com_vel"][:, 0]
        return torch.clamp(speed / self.speed, 0.0, 1.0)

    def initial_states(self, n, generator):
        return _suite_initial_states(self.suite_task, n, generator)


def tolerance(x: torch.Tensor, bounds=(0.0, 0.0), margin: float = 0.0,
              sigmoid: str = "gaussian", value_at_margin: float = 0.1) -> torch.Tensor:
    """dm_control's rewards.tolerance in torch: 1 where x lies in bounds, falling off outside
    them by the sigmoid ("gaussian", "linear" or "quadratic") of the distance over margin,
    value_at_margin at one margin away (margin 0: 0 outside); differentiable where it is
    smooth"""
    lower, upper = bounds
    inside = (x >= lower) & (x <= upper)
    if margin == 0:
        return inside.to(x.dtype)
    # the distance outside the bounds, zero inside (so that no infinite bound reaches the
    # sigmoid, whose gradient there would be inf * 0)
    d = torch.where(x < lower, lower - x,
                    torch.where(x > upper, x - upper, torch.zeros_like(x))) / margin
    if sigmoid == "gaussian":
        scale = math.sqrt(-2 * math.log(value_at_margin))
        value = torch.exp(-0.5 * (d * scale) ** 2)
    elif sigmoid == "linear":
        scaled = d * (1 - value_at_margin)
        value = torch.where(scaled.abs() < 1, 1 - scaled, torch.zeros_like(scaled))
    elif sigmoid == "quadratic":
        scaled = d * math.sqrt(1 - value_at_margin)
        value = torch.where(scaled.abs() < 1, 1 - scaled * scaled, torch.zeros_like(scaled))
    else:
        raise ValueError(f"phalanx.learn.tolerance: unknown sigmoid {sigmoid!r}")
    return torch.where(inside, torch.ones_like(value), value)


class HumanoidWalk:
    """dm_control's humanoid walk (``task="stand"``, ``"walk"`` or ``"run"``) as a
    differentiable task: phalanx.envs.make's model, initial states (random contact-free
    configurations) and reward, the suite's product of the head's height, the torso's
    uprightness, small controls and the centre of mass's horizontal speed (1 or 10 m/s; stand:
    stillness), each through ``tolerance`` and ``phalanx.torch.kinematics``; its observations;
    1000 actions of 25 ms (5 physics steps each). ``lcp_solver`` replaces the model's."""

    frame_skip = 5
    episode_steps = 1000

    def __init__(self, task: str = "walk", lcp_solver: str | None = None) -> None:
        from ._dm_control_tasks import Humanoid

        self.suite_task = Humanoid(task)
        self.model = self.suite_task.load()
        self.suite_task.bind(self.model)
        if lcp_solver is not None:
            self.model.lcp_solver = lcp_solver
        t = self.suite_task
        self.frame_skip = t.frame_skip
        self.episode_steps = t.max_episode_steps

    def observe(self, q, v, u=None):
        t = self.suite_task
        k = pt.kinematics(self.model, q, v)
        torso, frame = k["xpos"][:, t.torso], k["xmat"][:, t.torso]
        limbs = [torch.einsum("ei,eij->ej", k["xpos"][:, b] - torso, frame)
                 for b in t.extremities]
        return torch.cat([q[:, 7:], k["xpos"][:, t.head, 2:3], *limbs, frame[:, 2, :],
                          k["com_vel"], v], dim=1)

    def reward(self, q, v, u, previous=None):
        t = self.suite_task
        k = pt.kinematics(self.model, q, v)
        standing = tolerance(k["xpos"][:, t.head, 2], bounds=(t.stand_height, math.inf),
                             margin=t.stand_height / 4)
        upright = tolerance(k["xmat"][:, t.torso, 2, t.up], bounds=(0.9, math.inf),
                            sigmoid="linear", margin=1.9, value_at_margin=0)
        small_control = tolerance(u, margin=1, value_at_margin=0,
                                  sigmoid="quadratic").mean(dim=1)
        small_control = (4 + small_control) / 5
        horizontal = k["com_vel"][:, :2]
        if t.move_speed == 0:
            still = tolerance(horizontal, margin=2).mean(dim=1)
            return small_control * standing * upright * still
        speed = torch.sqrt((horizontal * horizontal).sum(dim=1))
        move = tolerance(speed, bounds=(t.move_speed, math.inf), margin=t.move_speed,
                         value_at_margin=0, sigmoid="linear")
        return small_control * standing * upright * (5 * move + 1) / 6

    def initial_states(self, n, generator):
        return _suite_initial_states(self.suite_task, n, generator)


class Ant:
    """Gymnasium's Ant-v5 as a differentiable task: phalanx.envs.make's model, initial states,
    termination (a state that is not finite, or the torso's height outside [0.2, 1]) and
    reward, the torso's displacement along x over the step's duration, plus 1 while healthy,
    less 0.5 |u|^2 and 5e-4 times the squared contact wrenches on the bodies (cfrc_ext,
    clipped to [-1, 1]); its observations, qpos without x and y, qvel, and those wrenches;
    1000 actions of 50 ms (5 physics steps each). The contact wrenches are Phalanx's at the
    state with the controls held (phalanx.contacts and phalanx.body_report, as
    ``phalanx.envs`` computes them) and carry no gradient: the reward's gradient is that of its
    other terms, and the policy's observations of them are inputs, not functions of the
    state."""

    def __init__(self) -> None:
        from ._gymnasium_tasks import Ant as SuiteAnt

        self.suite_task = SuiteAnt()
        self.model = self.suite_task.load()
        self.suite_task.bind(self.model)
        t = self.suite_task
        self.frame_skip, self.episode_steps = t.frame_skip, t.max_episode_steps
        self._last: tuple | None = None

    def contact_wrenches(self, q, v, u) -> torch.Tensor:
        """the clipped cfrc_ext (E, nbody, 6) at the states with the controls held, without
        gradient (the last states' are kept)"""
        q, v, u = (x.detach() for x in (q, v, u))
        last = self._last
        if last is not None and all(a.shape == b.shape and torch.equal(a, b)
                                    for a, b in zip(last[0], (q, v, u))):
            return last[1]
        qn, vn, un = (x.numpy() for x in (q, v, u))
        found = phalanx.contacts(self.model, qn, vn, un, dtype="float64")
        cfrc = phalanx.body_report(self.model, qn, vn, found, dtype="float64")["cfrc_ext"]
        wrenches = torch.from_numpy(np.clip(cfrc, *self.suite_task.contact_force_range))
        self._last = ((q.clone(), v.clone(), u.clone()), wrenches)
        return wrenches

    def observe(self, q, v, u):
        n = q.shape[0]
        return torch.cat([q[:, 2:], v, self.contact_wrenches(q, v, u)[:, 1:].reshape(n, -1)],
                         dim=1)

    def healthy(self, q, v) -> torch.Tensor:
        low, high = self.suite_task.healthy_z_range
        finite = torch.isfinite(q).all(dim=1) & torch.isfinite(v).all(dim=1)
        return finite & (q[:, 2] >= low) & (q[:, 2] <= high)

    def reward(self, q, v, u, previous):
        t = self.suite_task
        dt = self.model.timestep * self.frame_skip
        forward = t.forward_reward_weight * (q[:, 0] - previous[0][:, 0]) / dt
        contact = t.contact_cost_weight * (self.contact_wrenches(q, v, u) ** 2).sum(dim=(1, 2))
        healthy = t.healthy_reward * self.healthy(q, v).to(F64)
        return forward + healthy - t.ctrl_cost_weight * (u * u).sum(dim=1) - contact

    def terminated(self, q, v):
        return ~self.healthy(q, v)

    def initial_states(self, n, generator):
        return _suite_initial_states(self.suite_task, n, generator)


def _suite_initial_states(suite_task, n, generator):
    """n initial states of a phalanx.envs task (its initial_state), seeded from the generator"""
    from types import SimpleNamespace

    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
    env = SimpleNamespace(np_random=np.random.default_rng(seed), num_envs=n,
                          reset_ids=np.arange(n), sim=SimpleNamespace(dtype=np.float64))
    q, v = suite_task.initial_state(env, n)[:2]
    return torch.from_numpy(q), torch.from_numpy(v)
