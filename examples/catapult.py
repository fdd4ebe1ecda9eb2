"""Catapult: optimise an arm's open-loop torques so that the ball it bats hits a target at a time.

The trajectory-optimisation example of Nimble (Werling et al., RSS 2021) on
examples/models/catapult.xml: a three-link arm hanging from a mount swings to bat a free ball off
a pedestal. The torques of its three motors over the whole horizon (ctrl in [-1, 1], one row per
step of 2 ms, as piecewise-linear knots) are the decision variables; the loss is

    L = |p_ball(t_target) - p_target|^2 + effort * mean(ctrl^2)

and its gradient comes from one checkpointed rollout (phalanx.Tape) and one backward pass per
iteration, through the contacts between arm, ball, pedestal and floor (the stabilised PGS solver,
so the gradient is that of the LCP on its clamping set). Adam updates the knots, which are
clipped to the control range after each step. The best iterate (lowest loss) is the result.

The initial swing (all motors at -1) bats the ball nearly flat: it lands at t = 0.35 s. For the
default target, (1.2, 0, 0.35) m at t = 0.3 s, the ball is still in flight at the target time
and plain gradients loft it onto the target. A later target, ``--target 1.4 0 0.35
--target-time 0.4``, starts with the ball rolling on the floor at the target time: the floor's
contact holds its height, the gradient has no component that lifts it, and plain gradients stall
with a miss of 30 cm; ``--complementarity-aware`` (Nimble's loss-driven classification of the
contact rows) lets the loss open that contact and reaches 0.2 cm after about 200 iterations.

    .venv/bin/python examples/catapult.py [--iters 150] [--out examples/out]

prints the loss and the miss distance per iteration and writes examples/out/catapult.png (loss
curve, ball path before and after against the target, the optimised torques).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import phalanx
import phalanx.viewer
from _shared import Adam, interpolation, plot_controls

MODEL = Path(__file__).resolve().parent / "models" / "catapult.xml"
BALL = slice(3, 6)  # the ball's position in qpos (after the three hinges)
ARM = slice(0, 3)  # shoulder, elbow and wrist angles
MOUNT, LINK = np.array([0.0, 1.1]), 0.3  # (x, z) of the shoulder and the links' length (m)


def load_model() -> phalanx.Model:
    """the catapult with the stabilised PGS solver (exact LCP gradients on the clamping set)"""
    model = phalanx.load_model(MODEL)
    model.lcp_solver = "pgs_stabilized"
    return model


def optimize(iters: int = 150, *, steps: int = 300, target_time: float = 0.3,
             target=(1.2, 0.0, 0.35), effort: float = 1e-3, knots: int = 31, lr: float = 0.02,
             init=(-1.0, -1.0, -1.0), complementarity_aware: bool = False,
             log=print) -> dict:
    """Adam on the knots of the arm's torques for ``iters`` iterations.

    The ball should be at ``target`` (m) at ``target_time`` (s) of a horizon of ``steps`` steps;
    ``init`` is the constant control the optimisation starts from (the default, all motors at
    -1, swings the straight arm through the ball and sends it nearly horizontally, so that it
    lands at t = 0.35 s). ``complementarity_aware`` selects Nimble's complementarity-aware
    gradients through the contacts (phalanx.Tape.backward). Returns a dict: ``loss`` and
    ``miss`` (the distance |p_ball - p_target| in m) per iteration, before its update, then
    after the last; ``best`` (index of the lowest loss), ``ctrl`` (steps, nu) of the best
    iterate and ``ctrl_init``, ``ball`` and ``ball_init`` (steps, 3) its ball path and the
    initial one, ``arm`` (steps, 3) its joint angles, ``target``, ``target_step`` (the rollout
    row of the target time), ``time`` (s of the horizon per step), ``seconds`` (wall clock)
    and ``status`` (OR of the rollouts' status bits).
    """
    model = load_model()
    dt = model.timestep
    k = int(round(target_time / dt)) - 1  # rollout row k holds the state after step k + 1
    if not 0 <= k < steps:
        raise ValueError(f"target_time {target_time} s is outside the horizon of {steps} steps")
    target = np.asarray(target, dtype=np.float64)
    B = interpolation(steps, knots)
    u = np.tile(np.asarray(init, dtype=np.float64), (B.shape[1], 1))  # (knots, nu)
    qpos0 = model.qpos0[None].astype(np.float64)
    qvel0 = np.zeros((1, model.nv))
    adam = Adam(lr)
    tape = phalanx.Tape()
    status = 0

    def evaluate(u, grad: bool):
        ctrl = B @ u
        qs, _, st = phalanx.rollout(model, qpos0, qvel0, ctrl[None], tape=tape if grad else None)
        phalanx.raise_if_stopped(st, "catapult rollout")
        miss = qs[0, k, BALL] - target
        loss = miss @ miss + effort * np.mean(ctrl**2)
        if not grad:
            return loss, miss, qs[0], st[0], None
        adj_qpos = np.zeros_like(qs)
        adj_qpos[0, k, BALL] = 2 * miss
        g = tape.backward(adj_qpos, None, complementarity_aware=complementarity_aware)["ctrl"][0]
        g += effort * 2 * ctrl / ctrl.size
        return loss, miss, qs[0], st[0], B.T @ g

    losses, misses = [], []
    best_u, best_loss = u, np.inf
    start = time.perf_counter()
    for it in tqdm(range(iters + 1), desc="catapult", disable=None):
        last = it == iters
        loss, miss, qs, st, grad = evaluate(u, grad=not last)
        status |= int(st)
        losses.append(float(loss))
        misses.append(float(np.linalg.norm(miss)))
        if it == 0:
            qs_init, ctrl_init = qs, B @ u
        if loss < best_loss:
            best_loss, best_u, best_qs = loss, u, qs
        if log and (it % 10 == 0 or last):
            log(f"iter {it:4d}  loss {loss:.5f}  miss {misses[-1] * 100:6.2f} cm  "
                f"ball at t={target_time:.2f} s: {np.round(qs[k, BALL], 3)}")
        if not last:
            u = np.clip(adam.step(u, grad), -1.0, 1.0)
    seconds = time.perf_counter() - start
    return {
        "loss": np.array(losses), "miss": np.array(misses), "best": int(np.argmin(losses)),
        "ctrl": B @ best_u, "ctrl_init": ctrl_init, "ball": best_qs[:, BALL],
        "ball_init": qs_init[:, BALL], "arm": best_qs[:, ARM],
        "target": target, "target_step": k, "time": dt * np.arange(1, steps + 1),
        "qpos": best_qs,
        "seconds": seconds, "status": status,
    }


def arm_points(angles: np.ndarray) -> np.ndarray:
    """(x, z) of the shoulder, elbow, wrist and tip for the joint angles (3,): each hinge turns
    about +y, so a link's direction is (-sin, -cos) of the sum of the angles up to it"""
    phi = np.cumsum(angles)
    links = LINK * np.stack([-np.sin(phi), -np.cos(phi)], axis=1)
    return MOUNT + np.concatenate([np.zeros((1, 2)), np.cumsum(links, axis=0)])


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state
    from matplotlib.patches import Rectangle

    fig = Figure(figsize=(16, 4.6))
    ax = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.7, 1]})
    ax[0].semilogy(result["loss"], label="loss")
    ax[0].semilogy(np.array(result["miss"]) ** 2, "--", label="miss distance$^2$")
    ax[0].set(xlabel="iteration", ylabel="m$^2$", title="loss")
    ax[0].legend()

    k, target, t = result["target_step"], result["target"], result["time"]
    a = ax[1]
    a.add_patch(Rectangle((0.25, 0.0), 0.1, 0.2, color="0.75"))  # the pedestal
    a.axhline(0, color="k", lw=0.8)
    for i in range(0, k + 1, max(1, int(round(0.02 / (t[1] - t[0]))))):  # the arm every 20 ms
        p = arm_points(result["arm"][i])
        a.plot(p[:, 0], p[:, 1], "-", color="0.55", lw=1, alpha=0.25 + 0.75 * i / k)
    for key, style, label in [("ball_init", ":", "ball, initial controls"),
                              ("ball", "-", "ball, optimised")]:
        b = result[key]
        (line,) = a.plot(b[:, 0], b[:, 2], style, lw=2, label=label)
        a.plot(b[k, 0], b[k, 2], "o", color=line.get_color(), markersize=7)
    a.plot(target[0], target[2], "r*", markersize=15, label="target", zorder=0)
    a.plot([], [], "-", color="0.55", label="arm every 20 ms (optimised)")
    a.set(xlabel="x (m)", ylabel="z (m)", aspect="equal", xlim=(-0.6, 2.7), ylim=(-0.05, 1.2),
          title=f"ball path; dots at the target time t = {t[k]:.2f} s")
    a.legend(fontsize=8, loc="upper right")

    plot_controls(ax[2], t, result["ctrl"], result["ctrl_init"], ["shoulder", "elbow", "wrist"])
    ax[2].axvline(t[k], color="r", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=150)
    parser.add_argument("--steps", type=int, default=300, help="horizon in steps of 2 ms")
    parser.add_argument("--target", type=float, nargs=3, default=(1.2, 0.0, 0.35),
                        metavar=("X", "Y", "Z"), help="m")
    parser.add_argument("--target-time", type=float, default=0.3, help="s")
    parser.add_argument("--knots", type=int, default=31, help="control knots per motor")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--effort", type=float, default=1e-3)
    parser.add_argument("--complementarity-aware", action="store_true",
                        help="Nimble's complementarity-aware contact gradients")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()

    r = optimize(args.iters, steps=args.steps, target_time=args.target_time,
                 target=args.target, effort=args.effort, knots=args.knots, lr=args.lr,
                 complementarity_aware=args.complementarity_aware)
    b = r["best"]
    print(f"loss {r['loss'][0]:.4f} -> {r['loss'][b]:.5f} (iteration {b}); miss distance "
          f"{r['miss'][0] * 100:.1f} cm -> {r['miss'][b] * 100:.2f} cm; "
          f"{args.iters} iterations in {r['seconds']:.1f} s")
    if r["status"]:
        print(f"status bits seen: {r['status']:#x}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "catapult.png"
    plot(r, path)
    phalanx.viewer.html(load_model(), r["qpos"], args.out / "catapult.html", contacts=True,
                        title="catapult")
    print(f"wrote {path} and catapult.html (3-D replay)")


if __name__ == "__main__":
    main()
