"""Phalanx's MPPI against pytorch_mppi on MuJoCo: the cart-pole swing-up, side by side.

Issue 5's target: equal or lower cost than `pytorch_mppi` (PyPI `pytorch-mppi`) driven by MuJoCo
(`mujoco.rollout`) as its dynamics, at 10x less time per planning iteration. Both planners get the
same task and the same settings:

- model examples/models/cartpole.xml (dt 10 ms, motor limited to [-1, 1]); the pole starts
  hanging (angle pi), the cart at rest; each planner controls its own plant (pytorch_mppi a
  MuJoCo MjData stepped by mj_step, Phalanx a phalanx.Simulator) for --seconds;
- K samples (--samples, default 256), horizon H (--horizon, 80), noise sigma 0.3, temperature
  lambda 1.0, one planning iteration per control step, the plan shifted after each step;
- the running cost of examples/cartpole_mppi.py on the state after each step and its control,
  dt (0.5 x^2 + 5 * 2 (1 - cos theta) + 0.05 xdot^2 + 0.02 thetadot^2 + 0.05 u^2), plus 10x the
  state terms on the horizon's last state (pytorch_mppi's terminal_state_cost).

pytorch_mppi calls its dynamics once per horizon step on all K states: here one
`mujoco.rollout.rollout(..., nstep=1)` call per step over two MjData threads. Its algorithm
differs from Phalanx's in two documented ways: it adds the perturbation cost lambda u^T Sigma^-1
eps to each sample's cost, and its noise is white; Phalanx runs once with white noise (the same
sampling) and once with the time-correlated noise its example uses (noise_smoothing 0.5).

Reported per planner: the median wall time of one planning iteration, the closed-loop cost (the
running cost summed over the executed trajectory), whether and when the pole got upright
(|angle| < 0.2 rad) and stayed there for the last second, and the time ratio.

    .venv/bin/python bench/bench_mppi_pytorch.py [--seconds 4] [--samples 256] [--horizon 80]

Measured on the development machine (2 cores, another job running part of the time), 4 s:
pytorch_mppi 41.4 ms per iteration, closed-loop cost 24.08, upright at 1.74 s and held;
Phalanx 3.99 ms (10.4x less), cost 17.10, upright at 1.31 s (white noise) and 4.01 ms, cost
15.97, upright at 1.22 s (noise smoothing 0.5). The target is met, by a small margin in time.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import mujoco
import mujoco.rollout
import numpy as np
import torch
from pytorch_mppi import MPPI as TorchMPPI

import phalanx
import phalanx.control as control
import phalanx.costs as costs

MODEL = Path(__file__).resolve().parents[1] / "examples" / "models" / "cartpole.xml"
QPOS_W, QVEL_W, CTRL_W, TERMINAL = np.array([0.5, 5.0]), np.array([0.05, 0.02]), 0.05, 10.0
SIGMA, LAMBDA, UPRIGHT = 0.3, 1.0, 0.2


def state_cost(q, v):
    """the state terms of the cost, q (..., 2) and v (..., 2) -> (...)"""
    angle = 2.0 * (1.0 - np.cos(q[..., 1]))
    return QPOS_W[0] * q[..., 0] ** 2 + QPOS_W[1] * angle + (v * v) @ QVEL_W


def running_cost(q, v, u, dt):
    return dt * (state_cost(q, v) + CTRL_W * (u * u).sum(axis=-1))


def wrap(a):
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


def summary(name, qs, us, times, dt):
    angle = np.abs(wrap(qs[:, 1]))
    up = angle < UPRIGHT
    last = int(round(1.0 / dt))
    first = float(np.argmax(up) * dt) if up.any() else None
    return dict(name=name, ms=1e3 * float(np.median(times)),
                cost=float(running_cost(qs[:, :2], qs[:, 2:], us, dt).sum()),
                upright_at=first, held=bool(up[-last:].all()))


def run_pytorch_mppi(steps, K, H, threads):
    """pytorch_mppi with MuJoCo as its dynamics; its plant is MuJoCo"""
    mj = mujoco.MjModel.from_xml_path(str(MODEL))
    dt = mj.opt.timestep
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nstate = mujoco.mj_stateSize(mj, spec)
    datas = [mujoco.MjData(mj) for _ in range(threads)]
    template = np.zeros(nstate)

    def dynamics(state, action):
        s = state.numpy()
        init = np.repeat(template[None], len(s), axis=0)
        init[:, 1:1 + mj.nq] = s[:, :mj.nq]
        init[:, 1 + mj.nq:1 + mj.nq + mj.nv] = s[:, mj.nq:]
        out, _ = mujoco.rollout.rollout(mj, datas, init, action.numpy()[:, None, :], nstep=1,
                                        persistent_pool=True)
        nxt = out[:, 0, 1:1 + mj.nq + mj.nv]
        return torch.from_numpy(np.ascontiguousarray(nxt))

    def cost(state, action):
        s, u = state.numpy(), action.numpy()
        return torch.from_numpy(running_cost(s[:, :2], s[:, 2:], u, dt))

    def terminal(states, actions):
        s = states.numpy()[..., -1, :]
        return torch.from_numpy(TERMINAL * state_cost(s[..., :2], s[..., 2:])).reshape(-1)

    planner = TorchMPPI(dynamics, cost, 4, torch.eye(1, dtype=torch.float64) * SIGMA ** 2,
                        num_samples=K, horizon=H, lambda_=LAMBDA, terminal_state_cost=terminal,
                        u_min=torch.tensor([-1.0], dtype=torch.float64),
                        u_max=torch.tensor([1.0], dtype=torch.float64))
    d = mujoco.MjData(mj)
    d.qpos[:] = [0.0, np.pi]
    qs, us, times = np.zeros((steps, 4)), np.zeros((steps, 1)), []
    for i in range(steps):
        state = torch.tensor(np.r_[d.qpos, d.qvel], dtype=torch.float64)
        start = time.perf_counter()
        u = planner.command(state).numpy().reshape(1)
        times.append(time.perf_counter() - start)
        d.ctrl[:] = u
        mujoco.mj_step(mj, d)
        qs[i], us[i] = np.r_[d.qpos, d.qvel], u
    return summary("pytorch_mppi + mujoco.rollout", qs, us, times, dt)


def run_phalanx(steps, K, H, smoothing):
    model = phalanx.load_model(MODEL)
    dt = model.timestep
    cost = costs.Quadratic(model, qpos_weight=QPOS_W, qvel_weight=QVEL_W, ctrl_weight=CTRL_W,
                           angle_coords=[1], terminal_weight=TERMINAL, dt=dt)
    planner = control.MPPI(model, H, K, SIGMA, LAMBDA, noise_smoothing=smoothing, seed=0,
                           cost=cost)
    sim = phalanx.Simulator(model, 1)
    sim.reset(qpos=[0.0, np.pi])
    qs, us, times = np.zeros((steps, 4)), np.zeros((steps, 1)), []
    for i in range(steps):
        start = time.perf_counter()
        u = planner.plan(sim.qpos, sim.qvel)
        times.append(time.perf_counter() - start)
        sim.step(u)
        planner.shift()
        qs[i], us[i] = np.r_[sim.qpos[0], sim.qvel[0]], u[0]
    noise = "white noise" if smoothing == 0 else f"noise smoothing {smoothing:g}"
    return summary(f"phalanx.control.MPPI, {noise}", qs, us, times, dt)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--horizon", type=int, default=80)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    phalanx.set_num_threads(args.threads)
    steps = int(round(args.seconds / 0.01))
    print(f"cart-pole swing-up, {args.seconds:g} s closed loop, K = {args.samples}, "
          f"H = {args.horizon}, sigma {SIGMA}, lambda {LAMBDA}; {args.threads} threads on "
          f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)")
    rows = [run_pytorch_mppi(steps, args.samples, args.horizon, args.threads),
            run_phalanx(steps, args.samples, args.horizon, 0.0),
            run_phalanx(steps, args.samples, args.horizon, 0.5)]
    ref = rows[0]
    print(f"\n{'planner':42s} {'ms/iter':>8s} {'speedup':>8s} {'cost':>8s} {'upright at':>11s} "
          f"{'held':>5s}")
    for r in rows:
        up = "never" if r["upright_at"] is None else f"{r['upright_at']:.2f} s"
        print(f"{r['name']:42s} {r['ms']:8.2f} {ref['ms'] / r['ms']:7.1f}x {r['cost']:8.2f} "
              f"{up:>11s} {str(r['held']):>5s}")
    for r in rows[1:]:
        met = r["cost"] <= ref["cost"] and ref["ms"] / r["ms"] >= 10
        print(f"target (cost <= pytorch_mppi's at >= 10x less time per iteration), "
              f"{r['name']}: {'met' if met else 'NOT met'}")
    return rows


if __name__ == "__main__":
    main()
