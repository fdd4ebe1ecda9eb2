"""Drone take-off: plain contact gradients stall at a resting contact, complementarity-aware ones
escape.

Nimble's drone example (Werling et al., RSS 2021) on examples/models/drone.xml: a 1 kg box on a
vertical slide joint whose motor gives a thrust of 20 N * ctrl (ctrl in [0, 1]; hovering takes
0.4905) rests on the floor. The thrust of every one of 500 steps (10 ms each) is optimised by
plain gradient descent (SGD: ctrl <- clip(ctrl - lr * dL/dctrl, 0, 1)) on

    L = (z(T) - z_target)^2,

the squared distance of the drone's height at the end of the horizon to a target height, from
a constant thrust that leaves the drone resting on the floor. Each iteration is one rollout on a
phalanx.Tape and one tape.backward, with the stabilised PGS solver.

At rest the contact is clamping: the normal impulse carries what the thrust does not, so a
small change of the thrust changes the impulse and not the motion, and the plain gradient
(differentiating the LCP on the classification it found) is zero; SGD never moves. Nimble's
complementarity-aware gradient (tape.backward(..., complementarity_aware=True)) also
differentiates the loss-driven classification, in which the contact the loss wants to open is
separating, keeps the larger of the two, and gets the free-flight gradient
dz(T)/dctrl_t = gear / m * dt^2 * (T - t): the thrust grows until the drone lifts off, after
which there is no contact and both gradients agree.

    .venv/bin/python examples/drone_takeoff.py [--iters 200] [--lr 0.005] [--out examples/out]

prints the loss of both runs during the descent and writes examples/out/drone_takeoff.png (both
loss curves on one plot, the heights and the thrusts before and after).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import phalanx

MODEL = Path(__file__).resolve().parent / "models" / "drone.xml"


def load_model() -> phalanx.Model:
    """the drone with the stabilised PGS solver (exact LCP gradients on the clamping set)"""
    model = phalanx.load_model(MODEL)
    model.lcp_solver = "pgs_stabilized"
    return model


def takeoff(iters: int = 200, aware: bool = False, *, steps: int = 500, target: float = 1.0,
            init: float = 0.1, lr: float = 0.005, log=print) -> dict:
    """SGD with step size ``lr`` on the thrust controls (steps, 1) for ``iters`` iterations,
    from the constant control ``init`` (0.1: 2 N against a weight of 9.81 N, so the drone
    rests on the floor), towards height ``target`` (m) after ``steps`` steps. ``aware`` selects
    Nimble's complementarity-aware gradients.

    Returns a dict: ``loss``, ``height`` (z(T), m) and ``grad_norm`` (|dL/dctrl|) per
    iteration, before its update, then after the last (``grad_norm`` of the last is that of
    the final iterate too); ``liftoff`` (the first iteration whose rollout leaves the floor,
    z above 1 mm at some step, or None); ``ctrl`` and ``ctrl_init`` (steps,) the final and
    initial thrust controls; ``z`` and ``z_init`` (steps,) the heights of their rollouts;
    ``grad_init`` (steps,) the first gradient; ``time`` (steps,) s; ``hover`` (the control
    that balances the weight); ``seconds`` (wall clock) and ``status`` (OR of status bits).
    """
    model = load_model()
    dt = model.timestep
    qpos0 = np.zeros((1, model.nq))
    qvel0 = np.zeros((1, model.nv))
    lo, hi = model.actuator_ctrlrange[0]
    u = np.full((1, steps, 1), float(init))
    tape = phalanx.Tape()
    status = 0
    losses, heights, norms = [], [], []
    liftoff = None
    start = time.perf_counter()
    for it in tqdm(range(iters + 1), desc="drone take-off", disable=None):
        qs, _, st = phalanx.rollout(model, qpos0, qvel0, u, tape=tape)
        phalanx.raise_if_stopped(st, "drone rollout")
        status |= int(st[0])
        z = qs[0, :, 0]
        err = z[-1] - target
        adj = np.zeros_like(qs)
        adj[0, -1, 0] = 2 * err
        g = tape.backward(adj, None, complementarity_aware=aware)["ctrl"]
        losses.append(err * err)
        heights.append(z[-1])
        norms.append(float(np.linalg.norm(g)))
        if it == 0:
            z_init, ctrl_init, grad_init = z.copy(), u[0, :, 0].copy(), g[0, :, 0].copy()
        if liftoff is None and z.max() > 1e-3:
            liftoff = it
        if log and (it % 20 == 0 or it == iters):
            log(f"{'aware' if aware else 'plain'}  iter {it:4d}  loss {losses[-1]:.4e}  "
                f"z(T) {z[-1]:8.4f} m  |dL/dctrl| {norms[-1]:.3e}  "
                f"mean thrust {u.mean():.4f}")
        if it < iters:
            u = np.clip(u - lr * g, lo, hi)
    seconds = time.perf_counter() - start
    gear = float(model.actuator_gear[0])
    weight = model.body_mass.sum() * -model.gravity[2]
    return {
        "loss": np.array(losses), "height": np.array(heights), "grad_norm": np.array(norms),
        "liftoff": liftoff, "ctrl": u[0, :, 0], "ctrl_init": ctrl_init, "z": z,
        "z_init": z_init, "grad_init": grad_init, "time": dt * np.arange(1, steps + 1),
        "hover": weight / gear, "target": target, "aware": aware, "seconds": seconds,
        "status": status,
    }


def plot(plain: dict, aware: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.4))
    floor = 1e-30  # the aware loss reaches round-off (about 1e-28)
    for r, label, color in [(plain, "plain gradient", "C3"),
                            (aware, "complementarity-aware gradient", "C0")]:
        ax[0].semilogy(np.maximum(r["loss"], floor), color=color, lw=2, label=label)
    if aware["liftoff"] is not None:
        ax[0].axvline(aware["liftoff"], color="C0", ls=":", lw=1,
                      label=f"aware: first leaves the floor (iteration {aware['liftoff']})")
    ax[0].set(xlabel="iteration", ylabel="$(z(T) - z_{target})^2$ (m$^2$)",
              title="loss, SGD with the same step size")
    ax[0].legend(fontsize=8)

    t = plain["time"]
    ax[1].plot(t, plain["z_init"], "k:", label="initial thrust (both)")
    ax[1].plot(t, plain["z"], color="C3", lw=2, ls="--", label="plain, after optimisation")
    ax[1].plot(t, aware["z"], color="C0", lw=2, label="aware, after optimisation")
    ax[1].axhline(plain["target"], color="g", lw=0.8, label="target height at T")
    ax[1].set(xlabel="t (s)", ylabel="z (m)", title="height of the drone")
    ax[1].legend(fontsize=8)

    ax[2].plot(t, plain["ctrl_init"], "k:", label="initial (both)")
    ax[2].plot(t, plain["ctrl"], color="C3", lw=2, ls="--", label="plain, after optimisation")
    ax[2].plot(t, aware["ctrl"], color="C0", lw=2, label="aware, after optimisation")
    ax[2].axhline(plain["hover"], color="0.5", lw=0.8, label="hover thrust")
    ax[2].set(xlabel="t (s)", ylabel="ctrl (thrust / 20 N)", ylim=(-0.02, 1.02),
              title="thrust")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.005)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--target", type=float, default=1.0, help="target height (m)")
    parser.add_argument("--init", type=float, default=0.1, help="initial thrust control")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()

    results = {}
    for aware in (False, True):
        results[aware] = takeoff(args.iters, aware, steps=args.steps, target=args.target,
                                 init=args.init, lr=args.lr)
    print()
    for aware, r in results.items():
        name = "complementarity-aware" if aware else "plain"
        lift = ("never leaves the floor" if r["liftoff"] is None
                else f"first leaves the floor at iteration {r['liftoff']}")
        print(f"{name:22s}: loss {r['loss'][0]:.4g} -> {r['loss'][-1]:.4g}, z(T) "
              f"{r['height'][0]:.4f} -> {r['height'][-1]:.4f} m, first |dL/dctrl| "
              f"{r['grad_norm'][0]:.3g}; {lift} ({r['seconds']:.2f} s)")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "drone_takeoff.png"
    plot(results[False], results[True], path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
