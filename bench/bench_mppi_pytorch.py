"""Phalanx's MPPI against pytorch_mppi on MuJoCo: the cart-pole swing-up, side by side.

The target of the issue: equal or lower closed-loop cost than ``pytorch_mppi`` (PyPI
``pytorch-mppi``) driven by MuJoCo (``mujoco.rollout``) as its dynamics, at 10x less time per
planning iteration. Both planners get the same task and the same settings:

- the model examples/models/cartpole.xml (dt 10 ms, motor limited to [-1, 1]); the pole starts
  hanging (angle pi), the cart at rest; every control step each planner runs one planning
  iteration from its own plant's state, and its first control is applied to that plant
  (pytorch_mppi: a MuJoCo MjData stepped by mj_step; Phalanx: a phalanx.Simulator), for
  --seconds of simulated time; the plan is shifted one step after each control step;
- K samples (--samples) of horizon H (--horizon), noise standard deviation sigma 0.3 (white),
  temperature lambda 1.0, controls clipped to [-1, 1], an all-zero initial plan, float64;
- the cost of examples/cartpole_mppi.py (``make_cost``): the running cost
  dt (0.5 x^2 + 5 * 2 (1 - cos theta) + 0.05 xdot^2 + 0.02 thetadot^2 + 0.05 u^2) on the state
  after each step and its control, plus 10 x the state terms on the horizon's last state
  (pytorch_mppi's ``terminal_state_cost``). The torch version written here is checked against
  ``make_cost`` on random trajectories before the run.

pytorch_mppi calls its dynamics once per horizon step with all K states (K, 4) and actions
(K, 1); the wrapper here writes them into MuJoCo full physics states [time, qpos, qvel] and makes
one ``mujoco.rollout.Rollout.rollout(..., nstep=1)`` call per step on a persistent thread pool
of --threads MjData (preallocated buffers). torch runs on one thread: its tensors are (K, 4), and
with two intra-op threads on two busy cores each small op waited milliseconds for the second.
torch and phalanx share the process's OpenMP runtime; Phalanx keeps its own thread count, so
torch's (1) does not reach it. The closed loops run in lockstep (one control
step of each planner in turn), so that all see the same load from other processes.

Differences between the two algorithms (pytorch_mppi 0.9 defaults, not tuned):
- pytorch_mppi adds the perturbation cost lambda * sum_t u_t^T Sigma^-1 eps_t to every
  sample's cost (its noise_sigma is the covariance, here sigma^2 * I); Phalanx does not;
- pytorch_mppi's first command shifts before planning and fills the plan's new last row with
  u_init = 0; Phalanx shifts after applying and repeats the last row;
- Phalanx's sample 0 is the unperturbed plan (include_nominal); pytorch_mppi samples all K
  (sample_null_action off); u_per_command 1 and one iteration per control step for both.
The Phalanx row "noise smoothing 0.5" (time-correlated noise, the setting of the example) is
shown for information; the target is judged on the white-noise row (the same sampling).

Reported per planner: the median wall time of one planning iteration, the closed-loop cost (the
running cost summed over the executed trajectory), whether and when the pole got upright
(|angle| < 0.2 rad) and whether it stayed upright over the last second, and the time ratio.

    .venv/bin/python bench/bench_mppi_pytorch.py [--seconds 5] [--samples 256] [--horizon 80]
                                                 [--threads 2] [--seed 0] [--quick]

``--quick``: 3 s of closed loop (about 15 s). The default run takes about 30 s, K = 1024 with
H = 64 about a minute.

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

import mujoco
import mujoco.rollout
import numpy as np
import torch
from pytorch_mppi import MPPI as TorchMPPI

import phalanx
import phalanx.control

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import cartpole_mppi  # noqa: E402  (the model, make_cost and the example's settings)

SIGMA, TEMPERATURE = 0.3, 1.0  # the example's noise standard deviation and lambda
QPOS_W, QVEL_W, CTRL_W, TERMINAL = (0.5, 5.0), (0.05, 0.02), 0.05, 10.0  # make_cost's
UPRIGHT = cartpole_mppi.UPRIGHT  # rad
TARGET_SPEEDUP = 10.0


# --- the cost, in torch ------------------------------------------------------------------------


def state_cost(s: torch.Tensor) -> torch.Tensor:
    """the state terms of make_cost, s (..., 4) = (x, theta, xdot, thetadot) -> (...)"""
    return (QPOS_W[0] * s[..., 0] ** 2 + QPOS_W[1] * 2.0 * (1.0 - torch.cos(s[..., 1]))
            + QVEL_W[0] * s[..., 2] ** 2 + QVEL_W[1] * s[..., 3] ** 2)


def running_cost(s: torch.Tensor, u: torch.Tensor, dt: float) -> torch.Tensor:
    """dt (state terms + control term) of the state after a step and its control"""
    return dt * (state_cost(s) + CTRL_W * (u * u).sum(dim=-1))


def check_cost(model, dt, seed):
    """the torch cost equals make_cost on random trajectories (raises otherwise)"""
    rng = np.random.default_rng(seed)
    qs, vs, u = rng.normal(size=(8, 6, 2)), rng.normal(size=(8, 6, 2)), rng.normal(size=(8, 6, 1))
    reference = cartpole_mppi.make_cost(model)(qs, vs, u)
    s = torch.from_numpy(np.concatenate([qs, vs], axis=-1))
    mine = running_cost(s, torch.from_numpy(u), dt).sum(dim=1) + TERMINAL * state_cost(s[:, -1])
    if not np.allclose(mine.numpy(), reference, rtol=1e-10, atol=1e-12):
        raise RuntimeError("bench_mppi_pytorch: the torch cost differs from "
                           "cartpole_mppi.make_cost; update the weights here")


# --- the two closed loops ----------------------------------------------------------------------


class MujocoDynamics:
    """pytorch_mppi's dynamics(state (K, nq + nv), action (K, nu)) -> next state, by one
    mujoco.rollout step of all K states on a persistent thread pool"""

    def __init__(self, mj, num_samples, threads):
        spec = mujoco.mjtState
        self.mj = mj
        self.nqv = mj.nq + mj.nv
        self.offset = mujoco.mj_stateSize(mj, spec.mjSTATE_TIME)  # [time, qpos, qvel, ...]
        size = mujoco.mj_stateSize(mj, spec.mjSTATE_FULLPHYSICS)
        self.initial = np.zeros((num_samples, size))
        self.out = np.empty((num_samples, 1, size))
        self.datas = [mujoco.MjData(mj) for _ in range(max(threads, 1))]
        self.pool = mujoco.rollout.Rollout(nthread=threads)
        self.seconds = 0.0  # wall time spent in the calls

    def __call__(self, state, action):
        start = time.perf_counter()
        k = state.shape[0]
        self.initial[:k, self.offset:self.offset + self.nqv] = state.numpy()
        self.pool.rollout(self.mj, self.datas, self.initial[:k], action.numpy()[:, None],
                          nstep=1, state=self.out[:k])
        nxt = torch.from_numpy(self.out[:k, 0, self.offset:self.offset + self.nqv].copy())
        self.seconds += time.perf_counter() - start
        return nxt

    def close(self):
        self.pool.close()


class Loop:
    """One planner controlling its plant (``plan`` and ``apply``, in the subclasses): the
    executed states and controls, and the wall time of every planning iteration."""

    name = ""

    def __init__(self, steps):
        self.states, self.ctrls, self.times = np.zeros((steps, 4)), np.zeros((steps, 1)), []

    def step(self, i):
        """control step i: plan (timed), apply the first control to the plant"""
        start = time.perf_counter()
        u = self.plan()
        self.times.append(time.perf_counter() - start)
        self.states[i], self.ctrls[i] = self.apply(u), u

    def summary(self, dt) -> dict:
        angle = np.abs(cartpole_mppi.wrap(self.states[:, 1]))
        up = angle < UPRIGHT
        last_second = max(1, int(round(1.0 / dt)))
        cost = running_cost(torch.from_numpy(self.states), torch.from_numpy(self.ctrls), dt)
        return dict(name=self.name, ms=1e3 * statistics.median(self.times),
                    fastest_ms=1e3 * min(self.times),
                    cost=float(cost.sum()),
                    upright_at=float((np.argmax(up) + 1) * dt) if up.any() else None,
                    held=bool(up[-last_second:].all()))


class TorchLoop(Loop):
    """pytorch_mppi with MuJoCo as its dynamics; its plant is a MuJoCo MjData"""

    name = "pytorch_mppi + mujoco.rollout"

    def __init__(self, steps, K, H, threads, seed):
        super().__init__(steps)
        torch.manual_seed(seed)
        self.mj = mujoco.MjModel.from_xml_path(str(cartpole_mppi.MODEL))
        self.dynamics = MujocoDynamics(self.mj, K, threads)
        dt, f64 = self.mj.opt.timestep, torch.float64
        self.planner = TorchMPPI(
            self.dynamics, lambda s, u: running_cost(s, u, dt), nx=self.mj.nq + self.mj.nv,
            noise_sigma=SIGMA ** 2 * torch.eye(self.mj.nu, dtype=f64), num_samples=K,
            horizon=H, lambda_=TEMPERATURE,
            terminal_state_cost=lambda states, actions: TERMINAL * state_cost(states[..., -1, :]),
            u_min=torch.full((self.mj.nu,), -1.0, dtype=f64),
            u_max=torch.full((self.mj.nu,), 1.0, dtype=f64),
            U_init=torch.zeros((H, self.mj.nu), dtype=f64))
        self.data = mujoco.MjData(self.mj)
        self.data.qpos[:] = [0.0, np.pi]

    def plan(self):
        state = torch.from_numpy(np.concatenate([self.data.qpos, self.data.qvel]))
        return self.planner.command(state).numpy().reshape(self.mj.nu)

    def apply(self, u):
        self.data.ctrl[:] = u
        mujoco.mj_step(self.mj, self.data)
        return np.concatenate([self.data.qpos, self.data.qvel])


class PhalanxLoop(Loop):
    """phalanx.control.MPPI; its plant is a phalanx.Simulator"""

    def __init__(self, steps, K, H, seed, smoothing):
        super().__init__(steps)
        model = phalanx.load_model(cartpole_mppi.MODEL)
        self.planner = phalanx.control.MPPI(model, H, K, SIGMA, TEMPERATURE, seed=seed,
                                            cost=cartpole_mppi.make_cost(model),
                                            noise_smoothing=smoothing)
        self.sim = phalanx.Simulator(model, 1)
        self.sim.reset(qpos=[0.0, np.pi])
        noise = "white noise" if smoothing == 0 else f"noise smoothing {smoothing:g}"
        self.name = f"phalanx.control.MPPI, {noise}"

    def plan(self):
        return self.planner.plan(self.sim.qpos, self.sim.qvel)[0]

    def apply(self, u):
        self.sim.step(u[None])
        self.planner.shift()
        return np.concatenate([self.sim.qpos[0], self.sim.qvel[0]])


# --- the run -----------------------------------------------------------------------------------


def use_threads(threads):
    """torch on one thread (its tensors are (K, 4): intra-op threads would only synchronise),
    Phalanx and the mujoco.rollout pool on ``threads``"""
    torch.set_num_threads(1)
    phalanx.set_num_threads(threads)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="simulated closed-loop time")
    parser.add_argument("--samples", type=int, default=256, help="K (the example's 256)")
    parser.add_argument("--horizon", type=int, default=80, help="H (the example's 80)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads of phalanx and of the mujoco.rollout pool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 s of closed loop")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 3.0
    return args


def print_table(rows, fair):
    ref = rows[0]
    print(f"\n{'planner':42s} {'ms/iter':>8s} {'speedup':>8s} {'(fastest)':>17s} "
          f"{'closed-loop cost':>17s} {'upright at':>11s} {'held (last 1 s)':>16s}")
    for r in rows:
        up = "never" if r["upright_at"] is None else f"{r['upright_at']:.2f} s"
        fastest = f"{r['fastest_ms']:.2f} ms {ref['fastest_ms'] / r['fastest_ms']:.1f}x"
        print(f"{r['name']:42s} {r['ms']:8.2f} {ref['ms'] / r['ms']:7.1f}x {fastest:>17s} "
              f"{r['cost']:17.2f} {up:>11s} {'yes' if r['held'] else 'no':>16s}")
    speedup = ref["ms"] / fair["ms"]
    met = fair["cost"] <= ref["cost"] and speedup >= TARGET_SPEEDUP
    print(f"\ntarget (closed-loop cost <= pytorch_mppi's at >= {TARGET_SPEEDUP:g}x less time per "
          f"iteration), judged on '{fair['name']}': {'MET' if met else 'NOT met'} (cost "
          f"{fair['cost']:.2f} vs {ref['cost']:.2f}, {speedup:.1f}x less time)")


def main(argv=None):
    args = parse_args(argv)
    use_threads(args.threads)
    model = phalanx.load_model(cartpole_mppi.MODEL)
    dt = model.timestep
    check_cost(model, dt, args.seed)
    steps = int(round(args.seconds / dt))
    K, H = args.samples, args.horizon
    load_before, start = os.getloadavg()[0], time.perf_counter()
    torch_loop = TorchLoop(steps, K, H, args.threads, args.seed)
    loops = [torch_loop, PhalanxLoop(steps, K, H, args.seed, 0.0),
             PhalanxLoop(steps, K, H, args.seed, 0.5)]
    for i in range(steps):
        for loop in loops:
            loop.step(i)
        if (i + 1) % 100 == 0:
            print(f"t = {(i + 1) * dt:4.2f} s, pole angles: " + ", ".join(
                f"{cartpole_mppi.wrap(loop.states[i, 1]):+.2f} rad" for loop in loops),
                flush=True)
    torch_loop.dynamics.close()
    print(f"\ncart-pole swing-up, {args.seconds:g} s closed loop ({steps} control steps, one "
          f"planning iteration each), K = {K}, H = {H}, sigma {SIGMA}, lambda {TEMPERATURE}; "
          f"{args.threads} threads (phalanx, mujoco.rollout; torch 1) on "
          f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores); median of "
          f"{steps} iterations; wall {time.perf_counter() - start:.0f} s (load average "
          f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}; shared cores: noisy)")
    rows = [loop.summary(dt) for loop in loops]
    print_table(rows, rows[1])
    print(f"pytorch_mppi spent {100 * torch_loop.dynamics.seconds / sum(torch_loop.times):.0f} % "
          f"of its planning time in the MuJoCo dynamics (the wrapper's {H} mujoco.rollout "
          f"calls per iteration)")
    return rows


if __name__ == "__main__":
    main()
