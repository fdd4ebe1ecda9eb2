"""MuJoCo's humanoid standing by MPPI under random pushes: the main job of Phalanx.

The humanoid (/usr/share/mujoco/model/humanoid/humanoid.xml, 27 dof, 21 torque motors, contacts
with the floor and between body parts) starts standing with its feet on the floor and zero
torques, so without control it buckles and falls within a second. Every control step (5 ms)
``phalanx.control.MPPI`` re-plans from the simulator's state: K sampled torque sequences of H
steps are drawn, rolled out and costed in one kernel launch over all samples (the cost terms of
``phalanx.costs`` accumulate inside the rollouts), weighted, and the plan's first row is applied
to a ``phalanx.Simulator``; the plan is then shifted one step (warm start). Every
``--push-every`` seconds the torso is pushed: a horizontal velocity change of ``--push`` m/s in a
random direction.

The cost keeps the head at standing height, the torso upright, the centre of mass over the
origin and still, the joints near the standing pose, and the torques small:

    BodyHeight(head, 1.5 m) + BodyUpright(torso) + ComPosition(xy = 0) + ComVelocity(xy = 0)
    + Quadratic(joints -> standing pose, joint velocities, torques)

    .venv/bin/python examples/humanoid_mppi.py [--seconds 10] [--samples 128] [--horizon 120]
                                               [--push 0.5] [--out examples/out]

prints the head height and the planner's throughput as it goes, then the lowest head height,
whether the humanoid stayed up (head above 1.1 m throughout; it stands at about 1.5 m), the wall
time per planning iteration and the sampled env-steps per second, and writes humanoid_mppi.png
(head height, centre of mass and the pushes against time) into --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import phalanx
import phalanx.control
import phalanx.costs as costs
import phalanx.viewer

HUMANOID = Path("/usr/share/mujoco/model/humanoid/humanoid.xml")
STANDING_HEAD = 1.5  # m: the head's height standing on the floor
FALLEN_HEAD = 1.1  # m: below this head height the humanoid has fallen


def standing_pose(model) -> np.ndarray:
    """qpos0 lowered onto the floor (the model's reference pose floats 0.2 m above it)"""
    q = np.array(model.qpos0, dtype=np.float64)
    q[2] -= 0.2
    return q


def make_cost(model) -> costs.Cost:
    """the standing cost (weights per second of the horizon, terminal weights once)"""
    dt = model.timestep
    q0 = standing_pose(model)
    joints = np.r_[np.zeros(7), np.ones(model.nq - 7)]
    joint_vel = np.r_[np.zeros(6), np.full(model.nv - 6, 0.01)]
    return (costs.BodyHeight(model, "head", STANDING_HEAD, weight=1000 * dt, terminal_weight=10)
            + costs.BodyUpright(model, "torso", weight=50 * dt, terminal_weight=5)
            + costs.ComPosition(model, [0.0, 0.0], axes="xy", weight=50 * dt)
            + costs.ComVelocity(model, [0.0, 0.0], axes="xy", weight=5 * dt, terminal_weight=1)
            + costs.Quadratic(model, qpos_target=q0, qpos_weight=joints, qvel_weight=joint_vel,
                              ctrl_weight=0.1, dt=dt))


def stand(seconds: float = 10.0, *, samples: int = 128, horizon: int = 120, sigma: float = 0.2,
          temperature: float = 0.05, noise_smoothing: float = 0.9, push: float = 0.5,
          push_every: float = 2.0, seed: int = 0, log=print) -> dict:
    """Run the closed loop for ``seconds`` of simulated time; returns the time series (t, head
    height, centre of mass xy, push times) and the summary numbers."""
    model = phalanx.load_model(HUMANOID)
    head = model.body_id("head")
    dtype = np.float32
    planner = phalanx.control.MPPI(model, horizon, samples, sigma, temperature,
                                   noise_smoothing=noise_smoothing, seed=seed,
                                   cost=make_cost(model), dtype=dtype)
    sim = phalanx.Simulator(model, 1, dtype=dtype)
    sim.reset(qpos=standing_pose(model)[None])
    steps = int(round(seconds / model.timestep))
    push_steps = int(round(push_every / model.timestep))
    rng = np.random.default_rng(seed)
    t, head_z = np.zeros(steps), np.zeros(steps)
    com_xy = np.zeros((steps, 2))
    qpos = np.zeros((steps, model.nq))
    pushes = []
    plan_time = 0.0
    for i in range(steps):
        if push > 0 and i > 0 and i % push_steps == 0:
            direction = rng.normal(size=2)
            sim.qvel[0, :2] += push * direction / np.linalg.norm(direction)
            pushes.append(i * model.timestep)
        start = time.perf_counter()
        u = planner.plan(sim.qpos, sim.qvel, iterations=3 if i == 0 else 1)
        plan_time += time.perf_counter() - start
        sim.step(u)
        planner.shift()
        body = phalanx.kinematics(model, sim.qpos)
        t[i], head_z[i], com_xy[i] = sim.time[0], body["xpos"][0, head, 2], body["com"][0, :2]
        qpos[i] = sim.qpos[0]
        if log and (i + 1) % 200 == 0:
            log(f"t = {t[i]:5.2f} s  head {head_z[i]:.3f} m  centre of mass ({com_xy[i, 0]:+.3f}, "
                f"{com_xy[i, 1]:+.3f}) m  "
                f"best sample cost {planner.last_costs.min():8.3f}  "
                f"{plan_time / (i + 1) * 1e3:6.1f} ms per iteration")
    iterations = steps + 2
    per_iteration = plan_time / iterations
    return dict(t=t, head=head_z, com_xy=com_xy, pushes=pushes, qpos=qpos,
                stayed_up=bool(head_z.min() > FALLEN_HEAD), min_head=float(head_z.min()),
        seconds_per_iteration=per_iteration,
        env_steps_per_second=samples * horizon / per_iteration, samples=samples,
        horizon=horizon)


def plot(result: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = result["t"]
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    axes[0].plot(t, result["head"])
    axes[0].axhline(FALLEN_HEAD, color="red", ls=":", lw=0.8)
    axes[0].set(ylabel="head height (m)",
                title=f"humanoid standing by MPPI ({result['samples']} samples x "
                      f"{result['horizon']} steps), pushes marked")
    axes[1].plot(t, result["com_xy"][:, 0], label="x")
    axes[1].plot(t, result["com_xy"][:, 1], label="y")
    axes[1].set(ylabel="centre of mass (m)", xlabel="t (s)")
    axes[1].legend()
    for ax in axes:
        for p in result["pushes"]:
            ax.axvline(p, color="orange", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--horizon", type=int, default=120, help="planning steps of 5 ms")
    parser.add_argument("--push", type=float, default=0.5, help="push size (m/s); 0: none")
    parser.add_argument("--push-every", type=float, default=2.0, help="seconds between pushes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    print(f"humanoid standing by MPPI: {args.samples} samples x {args.horizon} steps per "
          f"iteration, {phalanx.num_threads()} threads; pushes of {args.push} m/s every "
          f"{args.push_every} s")
    result = stand(args.seconds, samples=args.samples, horizon=args.horizon, push=args.push,
                   push_every=args.push_every, seed=args.seed)
    print(f"lowest head height {result['min_head']:.3f} m: "
          f"{'stayed up' if result['stayed_up'] else 'FELL'} through {len(result['pushes'])} "
          f"pushes in {args.seconds:g} s")
    print(f"planning: {result['seconds_per_iteration'] * 1e3:.1f} ms per iteration, "
          f"{result['env_steps_per_second']:,.0f} sampled env-steps/s (humanoid with contacts)")
    args.out.mkdir(parents=True, exist_ok=True)
    plot(result, args.out / "humanoid_mppi.png")
    phalanx.viewer.html(HUMANOID, result["qpos"], args.out / "humanoid_mppi.html",
                        contacts=True, title="humanoid standing by MPPI")
    print(f"wrote {args.out / 'humanoid_mppi.png'} and humanoid_mppi.html (3-D replay)")
    return result


if __name__ == "__main__":
    main()
