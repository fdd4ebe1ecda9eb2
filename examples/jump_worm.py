"""Jump worm: optimise a planar worm's open-loop torques so that it jumps as high as it can.

The trajectory-optimisation example of Nimble (Werling et al., RSS 2021) on
examples/models/jump_worm.xml: three capsule segments lying flat on the floor, joined by two
motorised hinges (ctrl in [-1, 1], gear 30 N m); the worm can only leave the ground by whipping
its segments against the floor. The motors act for the first 0.6 s (piecewise-linear knots);
the rollout then coasts for 0.6 s with zero torque, so that a jump launched late still reaches
its peak inside the rollout. The torques maximise the peak height of the centre of mass:

    L = -smoothmax_t z_com(t) + effort * mean(ctrl^2),
    smoothmax_t z = tau log sum_t exp(z(t) / tau)     (tau = 1 cm: close to the maximum, but
                                                       every step near the peak gets a gradient)

Gradients come from one checkpointed rollout (phalanx.Tape) and its backward pass per iteration,
through the contacts with the floor and the joint limits (stabilised PGS). Adam updates the
knots; the control limits are kept by clipping the knots to [-1, 1] after every update (a
projected gradient step). The best iterate (lowest loss) is the result.

The loss scores the simulated height, not a ballistic prediction from the centre of mass's
velocity (z + vz^2 / 2g): at the joint speeds the optimiser finds (the head turning at 60 rad/s
and more, 0.13 rad per 2 ms step) a joint-limit impact in flight can cost the centre of mass
metres per second, because the semi-implicit Euler step applies the centripetal bias force of the
pre-impact velocities for the whole step (as MuJoCo's Euler does), and an optimiser rewarded for
the prediction learns to exploit that.

    .venv/bin/python examples/jump_worm.py [--iters 150] [--out examples/out]

prints the loss and the peak height per iteration and writes examples/out/jump_worm.png (loss
curve, centre-of-mass height over time before and after, snapshots of the optimised jump and the
torques).
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

MODEL = Path(__file__).resolve().parent / "models" / "jump_worm.xml"
Z0 = 0.0395  # the head's height at qpos = 0 (the worm lying flat on the floor)
SEG = 0.3  # segment length (m); the segments have equal masses
RADIUS = 0.04  # the capsules' radius
ENDS = (0.04, 0.26)  # the capsules' end-sphere centres along each segment


def load_model() -> phalanx.Model:
    """the worm with the stabilised PGS solver (exact LCP gradients on the clamping set)"""
    model = phalanx.load_model(MODEL)
    model.lcp_solver = "pgs_stabilized"
    return model


def segment_angles(q: np.ndarray) -> np.ndarray:
    """(..., 3) pitch of head, mid and tail: the root hinge plus the hinges up to each segment.
    q (..., 5) is (rootx, rootz, rooty, neck, waist)."""
    return np.cumsum(q[..., 2:5], axis=-1)


def com_height(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre-of-mass height (...,) of the worm at q (..., 5) and its gradient dz/dq (..., 5).

    A hinge about +y turns a segment's axis (1, 0, 0) into (cos phi, 0, -sin phi); segment i
    starts where segment i - 1 ends, and its centre of mass lies at its middle, so
    z_com = z_head - (0.75 sin phi1 + 0.45 sin phi2 + 0.15 sin phi3) / 3 for 0.3 m segments.
    """
    phi = segment_angles(q)
    w = np.array([2.5, 1.5, 0.5]) * SEG / 3  # lever of each pitch on the mean height
    z = Z0 + q[..., 1] - np.sum(w * np.sin(phi), axis=-1)
    dphi = -w * np.cos(phi)  # dz/dphi_i; phi_i depends on the hinges 2 .. 2 + i
    grad = np.zeros(q.shape)
    grad[..., 1] = 1.0
    grad[..., 2:5] = np.cumsum(dphi[..., ::-1], axis=-1)[..., ::-1]
    return z, grad


def outline(q: np.ndarray) -> np.ndarray:
    """(x, z) of the head's origin, the two hinges and the tail's end for q (5,)"""
    phi = segment_angles(q)
    links = SEG * np.stack([np.cos(phi), -np.sin(phi)], axis=1)
    start = np.array([q[0], Z0 + q[1]])
    return start + np.concatenate([np.zeros((1, 2)), np.cumsum(links, axis=0)])


def clearance(q: np.ndarray) -> np.ndarray:
    """height of the worm's lowest surface point above the floor (...,) at q (..., 5)"""
    phi = segment_angles(q)
    z_joint = Z0 + q[..., 1:2] - SEG * np.concatenate(
        [np.zeros(q.shape[:-1] + (1,)), np.cumsum(np.sin(phi), axis=-1)[..., :2]], axis=-1)
    ends = [z_joint - s * np.sin(phi) for s in ENDS]
    return np.minimum(*ends).min(axis=-1) - RADIUS


def optimize(iters: int = 150, *, starts: int = 8, steps: int = 300, coast: float = 0.6,
             effort: float = 0.02, knots: int = 31, lr: float = 0.05, tau: float = 0.01,
             init_scale: float = 0.1, seed: int = 0, complementarity_aware: bool = False,
             log=print) -> dict:
    """Adam on the knots of the worm's two torques for ``iters`` iterations, from ``starts``
    random initial guesses at once (one environment each, one batched rollout per iteration).

    The motors act for ``steps`` steps; the rollout then continues for ``coast`` seconds with
    zero torque, so that a jump launched late still reaches its peak inside the rollout. The
    controls start as small random knots (normal, standard deviation ``init_scale``, ``seed``).
    Jumping through contacts has many local optima; the starts find different ones and the
    best is the result. Returns a dict: ``loss`` and ``peak`` (the highest centre of mass of
    the rollout, m) per iteration and start (iters + 1, starts), before the iteration's update,
    then after the last; ``start`` (the start with the lowest loss) and ``best`` (its best
    iteration); its ``ctrl`` (rows, nu) there and ``ctrl_init``, zero in the coasting rows;
    ``qpos`` and ``qpos_init`` (rows, 5) their trajectories; ``com`` and ``com_init`` their
    centre-of-mass heights; ``best_peaks`` (starts,) the peak of each start's best iterate;
    ``rest_com`` (the height lying flat); ``steps``, ``time`` (s of each row), ``seconds``
    (wall clock) and ``status`` (OR of the rollouts' status bits).
    """
    model = load_model()
    E = starts
    extra = int(round(coast / model.timestep))
    B = np.concatenate([interpolation(steps, knots), np.zeros((extra, min(knots, steps)))])
    rng = np.random.default_rng(seed)
    u = np.clip(rng.normal(0.0, init_scale, (E, B.shape[1], model.nu)), -1, 1)
    qpos0 = np.repeat(model.qpos0[None].astype(np.float64), E, axis=0)
    qvel0 = np.zeros((E, model.nv))
    adam = Adam(lr)  # element-wise, so the starts do not interact
    tape = phalanx.Tape()
    status = 0

    def evaluate(u, grad: bool):
        ctrl = np.einsum("tk,eku->etu", B, u)
        qs, _, st = phalanx.rollout(model, qpos0, qvel0, ctrl, tape=tape if grad else None)
        phalanx.raise_if_stopped(st, "jump_worm rollout")
        z, dz = com_height(qs)  # (E, rows), (E, rows, 5)
        top = z.max(axis=1, keepdims=True)
        soft = np.exp((z - top) / tau)
        total = soft.sum(axis=1, keepdims=True)
        loss = -(top + tau * np.log(total))[:, 0] + effort * np.mean(ctrl[:, :steps] ** 2,
                                                                      axis=(1, 2))
        if not grad:
            return loss, qs, z, ctrl, st, None
        adj_qpos = -(soft / total)[..., None] * dz  # d loss / d qpos(t), per start
        g = tape.backward(adj_qpos, None, complementarity_aware=complementarity_aware)["ctrl"]
        g[:, :steps] += effort * 2 * ctrl[:, :steps] / ctrl[0, :steps].size
        return loss, qs, z, ctrl, st, np.einsum("tk,etu->eku", B, g)

    losses, peaks = [], []
    best_loss = np.full(E, np.inf)
    best_it = np.zeros(E, dtype=int)
    best_peaks = np.zeros(E)
    keep = {}
    start = time.perf_counter()
    for it in tqdm(range(iters + 1), desc="jumping worm", disable=None):
        last = it == iters
        loss, qs, z, ctrl, st, grad = evaluate(u, grad=not last)
        status |= int(np.bitwise_or.reduce(st))
        losses.append(loss)
        peaks.append(z.max(axis=1))
        if it == 0:
            keep["init"] = (ctrl, qs, z)
        better = loss < best_loss
        best_loss = np.where(better, loss, best_loss)
        best_it = np.where(better, it, best_it)
        best_peaks = np.where(better, peaks[-1], best_peaks)
        if better.any():
            e = int(np.argmin(best_loss))
            if better[e]:
                keep["best"] = (e, ctrl[e], qs[e], z[e])
        if log and (it % 10 == 0 or last):
            log(f"iter {it:4d}  loss: best {loss.min():8.4f}, mean {loss.mean():8.4f}  peak "
                f"height of the centre of mass: best {peaks[-1].max():.3f} m, "
                f"mean {peaks[-1].mean():.3f} m")
        if not last:
            u = np.clip(adam.step(u, grad), -1.0, 1.0)
    seconds = time.perf_counter() - start
    e, ctrl, qs, z = keep["best"]
    ctrl0, qs0, z0 = keep["init"]
    return {
        "loss": np.array(losses), "peak": np.array(peaks), "start": e, "best": int(best_it[e]),
        "best_peaks": best_peaks, "ctrl": ctrl, "qpos": qs, "com": z, "ctrl_init": ctrl0[e],
        "qpos_init": qs0[e], "com_init": z0[e], "rest_com": float(com_height(model.qpos0)[0]),
        "steps": steps, "time": model.timestep * np.arange(1, steps + extra + 1),
        "seconds": seconds, "status": status,
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    fig = Figure(figsize=(19, 4.4))
    ax = fig.subplots(1, 4, gridspec_kw={"width_ratios": [1, 1, 1.5, 1]})
    e = result["start"]
    ax[0].plot(result["loss"], color="0.8", lw=0.8)
    ax[0].plot(result["loss"][:, e], label=f"loss, start {e} (the best)")
    ax[0].plot(-result["peak"][:, e], "--", label="-(peak height), same start")
    ax[0].set(xlabel="iteration", ylabel="m", title="loss (grey: the other starts)")
    ax[0].legend(fontsize=8)

    t = result["time"]
    ax[1].plot(t, result["com_init"], ":", label="initial controls")
    ax[1].plot(t, result["com"], label="optimised")
    ax[1].plot(t, np.maximum(clearance(result["qpos"]), 0), "--", lw=1,
               label="optimised: lowest point")
    ax[1].axhline(result["rest_com"], color="k", lw=0.8, label="lying flat")
    ax[1].axvspan(t[result["steps"] - 1], t[-1], color="0.9", label="coasting (no torque)")
    ax[1].set(xlabel="t (s)", ylabel="m", title="centre-of-mass height")
    ax[1].legend(fontsize=8)

    q = result["qpos"]
    k = int(np.argmax(result["com"]))
    frames = np.unique(np.r_[np.linspace(0, k, 9).astype(int), k])
    for n, i in enumerate(frames):
        p = outline(q[i])
        ax[2].plot(p[:, 0], p[:, 1], "-o", markersize=2.5, lw=2.5,
                   color=matplotlib.colormaps["viridis"](n / max(1, len(frames) - 1)),
                   label=f"t = {t[i]:.2f} s" if n in (0, len(frames) - 1) else None)
    ax[2].axhline(0, color="k", lw=0.8)
    ax[2].set(xlabel="x (m)", ylabel="z (m)", aspect="equal",
              title="optimised jump up to its peak (segment axes)")
    ax[2].legend(fontsize=8)

    plot_controls(ax[3], t, result["ctrl"], result["ctrl_init"], ["neck", "waist"])
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=150)
    parser.add_argument("--starts", type=int, default=8,
                        help="random initial guesses optimised at once (a batch)")
    parser.add_argument("--steps", type=int, default=300,
                        help="steps of 2 ms with the motors on (then --coast s without)")
    parser.add_argument("--coast", type=float, default=0.6, help="s")
    parser.add_argument("--knots", type=int, default=31, help="control knots per motor")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--effort", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--complementarity-aware", action="store_true",
                        help="Nimble's complementarity-aware contact gradients")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()

    r = optimize(args.iters, starts=args.starts, steps=args.steps, coast=args.coast,
                 effort=args.effort, knots=args.knots, lr=args.lr, seed=args.seed,
                 complementarity_aware=args.complementarity_aware)
    e, b = r["start"], r["best"]
    k = int(np.argmax(r["com"]))
    print(f"best start {e}: loss {r['loss'][0, e]:.4f} -> {r['loss'][b, e]:.4f} (iteration {b});"
          f" peak centre-of-mass height {r['peak'][0, e]:.3f} m -> {r['peak'][b, e]:.3f} m at "
          f"t = {r['time'][k]:.3f} s (lying flat: {r['rest_com']:.4f} m), lowest point then "
          f"{clearance(r['qpos'][k]):.3f} m above the floor")
    print(f"peaks of the {args.starts} starts: {np.round(np.sort(r['best_peaks'])[::-1], 2)} m;"
          f" {args.iters} iterations in {r['seconds']:.1f} s")
    if r["status"]:
        print(f"status bits seen: {r['status']:#x} (16: an LCP residual above "
              "model.lcp_residual_limit at some step)")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "jump_worm.png"
    plot(r, path)
    # the initial controls' motion beside the optimised one
    phalanx.viewer.html(load_model(), np.stack([r["qpos_init"], r["qpos"]]),
                        args.out / "jump_worm.html", title="jump worm: initial, optimised")
    print(f"wrote {path} and jump_worm.html (3-D replay: initial and optimised controls)")


if __name__ == "__main__":
    main()
