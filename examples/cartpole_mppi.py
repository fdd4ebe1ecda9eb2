"""Cart-pole swing-up by receding-horizon MPPI on the batched backend (phalanx.control).

The pole starts hanging (hinge angle pi) with the cart at rest; the controller must swing it up
to upright (angle 0) and hold it there, with the motor limited to [-1, 1] x 20 N and the cart to
+-1.2 m of rail. Every control step (10 ms) MPPI re-plans from the simulator's state: K sampled
control sequences over the horizon are rolled out in one batched ``phalanx.rollout`` call, their
costs weighted, the plan improved and its first row applied to a ``phalanx.Simulator``; then the
plan is shifted one step (warm start). The first step runs a few extra iterations.

    .venv/bin/python examples/cartpole_mppi.py [--seconds 6] [--samples 256] [--out examples/out]

prints progress, the time to upright and the largest |angle| over the last seconds, the wall
time per planning iteration, and writes cartpole_mppi.png (angle, cart position and control
against time) into --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import phalanx
import phalanx.control
import phalanx.costs
import phalanx.viewer
from _shared import wrap

MODEL = Path(__file__).resolve().parent / "models" / "cartpole.xml"
UPRIGHT = 0.2  # rad: |wrapped angle| below this counts as upright


def make_cost(model) -> phalanx.costs.Cost:
    """(1 - cos angle) on the hinge (wraps), the cart near the centre, mild velocity and
    control penalties, integrated over the horizon, plus a terminal state term"""
    return phalanx.costs.Quadratic(
        model, qpos_weight=[0.5, 5.0], qvel_weight=[0.05, 0.02], ctrl_weight=0.05,
        angle_coords=[1], terminal_weight=10.0, dt=model.timestep)


def swing_up(seconds: float = 6.0, *, horizon: int = 80, samples: int = 256, sigma: float = 0.3,
             temperature: float = 1.0, noise_smoothing: float = 0.5, first_iterations: int = 5,
             seed: int = 0, log=print) -> dict:
    """Run the closed loop for ``seconds`` of simulated time from the hanging pole; returns the
    time series (t, angle (wrapped), x, ctrl), the planner's wall time per iteration and the
    summary numbers."""
    model = phalanx.load_model(MODEL)
    planner = phalanx.control.MPPI(model, horizon, samples, sigma, temperature,
                                   noise_smoothing=noise_smoothing, seed=seed,
                                   cost=make_cost(model))
    sim = phalanx.Simulator(model, 1)
    sim.reset(qpos=[0.0, np.pi])
    steps = int(round(seconds / model.timestep))
    t, angle, x, ctrl = (np.zeros(steps) for _ in range(4))
    qpos = np.zeros((steps, model.nq))
    iterations, plan_time = 0, 0.0
    for i in range(steps):
        n = first_iterations if i == 0 else 1
        start = time.perf_counter()
        u = planner.plan(sim.qpos, sim.qvel, iterations=n)
        plan_time += time.perf_counter() - start
        iterations += n
        sim.step(u)
        planner.shift()
        t[i], angle[i], x[i], ctrl[i] = sim.time[0], wrap(sim.qpos[0, 1]), sim.qpos[0, 0], u[0, 0]
        qpos[i] = sim.qpos[0]
        if log and (i + 1) % 50 == 0:
            log(f"t = {t[i]:4.2f} s  angle {angle[i]:+6.3f} rad  x {x[i]:+6.3f} m  "
                f"ctrl {u[0, 0]:+5.2f}  best sample cost {planner.last_costs.min():8.3f}")
    upright = np.abs(angle) < UPRIGHT
    first = int(np.argmax(upright)) if upright.any() else None
    hold = np.flatnonzero(~upright)  # the last step that was not upright
    result = dict(t=t, angle=angle, x=x, ctrl=ctrl, qpos=qpos, iterations=iterations,
                  seconds_per_iteration=plan_time / iterations,
                  time_to_upright=None if first is None else float(t[first]),
                  upright_since=float(t[hold[-1] + 1]) if hold.size and hold[-1] + 1 < steps
                  else (float(t[0]) if not hold.size else None),
                  final_max_angle=float(np.abs(angle[t > t[-1] - 2.0]).max()),
                  max_abs_x=float(np.abs(x).max()))
    return result


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = result["t"]
    fig, axes = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
    axes[0].plot(t, result["angle"])
    for s in (-UPRIGHT, UPRIGHT):
        axes[0].axhline(s, color="gray", ls=":", lw=0.8)
    axes[0].set(ylabel="pole angle (rad, wrapped)", title="cart-pole swing-up by MPPI")
    axes[1].plot(t, result["x"])
    axes[1].set(ylabel="cart x (m)")
    axes[2].step(t, result["ctrl"], where="post")
    axes[2].set(ylabel="ctrl (x 20 N)", xlabel="t (s)", ylim=(-1.05, 1.05))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--horizon", type=int, default=80, help="planning steps of 10 ms")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--sigma", type=float, default=0.3)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    r = swing_up(args.seconds, horizon=args.horizon, samples=args.samples, sigma=args.sigma,
                 temperature=args.temperature, seed=args.seed)
    wall = time.perf_counter() - start
    def when(x):
        return "never" if x is None else f"t = {x:.2f} s"

    print(f"upright (|angle| < {UPRIGHT}) first at {when(r['time_to_upright'])}, "
          f"continuously since {when(r['upright_since'])}; max |angle| over the last 2 s "
          f"{r['final_max_angle']:.3f} rad; max |x| {r['max_abs_x']:.2f} m")
    print(f"{r['iterations']} planning iterations of {args.samples} x {args.horizon} steps: "
          f"{1e3 * r['seconds_per_iteration']:.1f} ms each ({phalanx.num_threads()} threads); "
          f"total wall time {wall:.1f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "cartpole_mppi.png"
    plot(r, path)
    phalanx.viewer.html(MODEL, r["qpos"], args.out / "cartpole_mppi.html",
                        title="cart-pole swing-up by MPPI")
    print(f"wrote {path} and cartpole_mppi.html (3-D replay)")
    return r


if __name__ == "__main__":
    main()
