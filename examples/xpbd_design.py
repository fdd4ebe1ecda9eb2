"""Designing a double pendulum's link lengths through the XPBD solver's gradients (after Liu et
al., "Parameter Identification and Motion Control for Articulated Rigid Body Robots Using
Differentiable Position-based Dynamics", section V-B).

A double pendulum moves in the horizontal plane (hinges about the vertical, so gravity exerts no
torque): two uniform rods of 1 kg, lengths l1 and l2. Its end effector should follow a circle of
radius 0.3 m centred 2.7 m from the pivot, once every 2 s, under a stiffness controller

    tau = J(q)^T (K (p_des - p_ee) + D (pdot_des - pdot_ee)),   K = 60, D = 6,

and the design minimises, over 2 s from rest at the bottom of the circle,

    L = sum_t |p_ee(t) - p_des(t)| + lambda sum_t (q(t) - q(t - 1)) . tau(t),   lambda = 25,

the tracking error and the work of the motors, from rest stretched along x (the end effector at
(l1 + l2, 0); the circle starts at (3, 0)). The links' lengths enter the model as body_pos
(where link 2 hangs from link 1), body_ipos (each rod's middle) and body_inertia (a thin rod's
m l^2 / 12 across it); the controller, the end
effector and its Jacobian are written in torch, and phalanx.torch.step takes the XPBD step
(model.solver = "xpbd", 10 ms steps) with its gradients in the state, the torques and those
parameters. Adam on (l1, l2) from the paper's start (3.0, 0.1).

The paper does not state where its circle lies or how long it runs; here the circle is centred
where a link 1 of 2.7 m ends, so that the design (2.7, 0.3) follows it by turning its second
joint alone, as the paper's optimum does.

The loss is not convex in the lengths: designs whose elbow turns a full circle with the target
sit in a narrow valley, and a ridge (where the elbow stops turning and swings back instead)
separates it from the paper's start. Descent from (3.0, 0.1) alone stays on the far side of
that ridge, where the end effector swings along a short arc; so the design is found in two stages, a coarse scan of the
lengths (forward rollouts only, a 7 x 5 grid 0.1 m apart) and then Adam on the gradients from
the scan's best point. Both are reported: the plain descent from the paper's start and the
scan-then-refine design.

    .venv/bin/python examples/xpbd_design.py [--iters 60] [--out examples/out]

prints the scan, the descents and a table beside the paper's figures, and writes
examples/out/xpbd_design.png (the loss over the scanned lengths with both descents' paths, the
losses against iteration, the end effector's paths).
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

MODEL = """<mujoco><compiler angle='radian'/>
<option timestep='0.01' gravity='0 0 -9.81'><flag contact='disable'/></option>
<worldbody>
  <body name='link1'><joint name='shoulder' type='hinge' axis='0 0 1'/>
    <geom type='capsule' fromto='0 0 0 3 0 0' size='0.02' mass='1'/>
    <body name='link2' pos='3 0 0'><joint name='elbow' type='hinge' axis='0 0 1'/>
      <geom type='capsule' fromto='0 0 0 0.1 0 0' size='0.02' mass='1'/></body></body>
</worldbody>
<actuator><motor joint='shoulder'/><motor joint='elbow'/></actuator></mujoco>"""
MASS, AXIAL = 1.0, 2e-4  # each rod's mass (kg) and moment about its own axis (kg m^2)

K, D, LAMBDA = 60.0, 6.0, 25.0
RADIUS, CENTRE, PERIOD = 0.3, 2.7, 2.0  # the circle: (x, y) = (CENTRE, 0) + RADIUS (cos, sin)
SECONDS = 2.0
START = (3.0, 0.1)  # the paper's initial design (m)
PAPER = {"start": (3.0, 0.1, 51.716, 1.475), "optimum": (2.7026, 0.3074, 14.448, 0.368)}


def load_model(path: Path) -> phalanx.Model:
    path.write_text(MODEL)
    model = phalanx.load_model(path)
    model.solver = "xpbd"
    return model


def geometry(model: phalanx.Model, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
    """body_pos, body_ipos and body_inertia for the link lengths (l1, l2): link 2 at (l1, 0, 0)
    in link 1, each rod's centre of mass at its middle, its moments those of a thin rod across
    it (the principal frames are the file's, the rods' axes their third axes)"""
    zero = torch.zeros((), dtype=lengths.dtype)
    world = torch.zeros(3, dtype=lengths.dtype)
    middle = [torch.stack([lengths[i] / 2, zero, zero]) for i in range(2)]
    across = [MASS * lengths[i] ** 2 / 12 for i in range(2)]
    axial = torch.full((), AXIAL, dtype=lengths.dtype)
    return {
        "body_pos": torch.stack([world, world, torch.stack([lengths[0], zero, zero])]),
        "body_ipos": torch.stack([world, middle[0], middle[1]]),
        "body_inertia": torch.stack([world] + [torch.stack([a, a, axial]) for a in across]),
    }


def end_effector(q: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor):
    """(x, y) of the end effector, its velocity and the Jacobian d p / d q (hinges about z: a
    link of length l at angle a reaches l (cos a, sin a))"""
    l1, l2 = lengths[0], lengths[1]
    a1, a12 = q[..., 0], q[..., 0] + q[..., 1]
    s1, c1, s12, c12 = torch.sin(a1), torch.cos(a1), torch.sin(a12), torch.cos(a12)
    p = torch.stack([l1 * c1 + l2 * c12, l1 * s1 + l2 * s12], -1)
    J = torch.stack([torch.stack([-l1 * s1 - l2 * s12, -l2 * s12], -1),
                     torch.stack([l1 * c1 + l2 * c12, l2 * c12], -1)], -2)  # (.., 2, 2)
    pdot = (J @ v.unsqueeze(-1)).squeeze(-1)
    return p, pdot, J


def desired(t: float, dtype=torch.float64):
    w = 2 * math.pi / PERIOD
    p = torch.tensor([CENTRE + RADIUS * math.cos(w * t), RADIUS * math.sin(w * t)], dtype=dtype)
    pdot = torch.tensor([-RADIUS * w * math.sin(w * t), RADIUS * w * math.cos(w * t)], dtype=dtype)
    return p, pdot


def simulate(model: phalanx.Model, lengths: torch.Tensor, seconds: float = SECONDS):
    """the controlled rollout from rest, stretched along x: the loss, its tracking and work
    terms, and the end effector's path (T + 1, 2)"""
    params = geometry(model, lengths)
    steps = int(round(seconds / model.timestep))
    q = torch.zeros((1, 2), dtype=lengths.dtype)
    v = torch.zeros((1, 2), dtype=lengths.dtype)
    tracking = work = torch.zeros((), dtype=lengths.dtype)
    path = []
    for k in range(steps):
        p, pdot, J = end_effector(q, v, lengths)
        p_des, pdot_des = desired(k * model.timestep)
        tau = (J.transpose(-1, -2) @ (K * (p_des - p) + D * (pdot_des - pdot)).unsqueeze(-1))
        tau = tau.squeeze(-1)
        path.append(p.detach()[0].numpy())
        q_next, v = pt.step(model, q, v, tau, params)
        work = work + ((q_next - q) * tau).sum()
        q = q_next
        p, _, _ = end_effector(q, v, lengths)
        p_des, _ = desired((k + 1) * model.timestep)
        tracking = tracking + torch.linalg.norm(p - p_des)
    path.append(p.detach()[0].numpy())
    return tracking + LAMBDA * work, tracking, work, np.array(path)


SCAN = (np.linspace(2.5, 3.1, 7), np.linspace(0.05, 0.45, 5))  # l1, l2 (m), 0.1 m apart


def scan(model: phalanx.Model, grid=SCAN) -> np.ndarray:
    """the loss at every design of the grid (len(l1), len(l2)), forward rollouts only"""
    with torch.no_grad():
        return np.array([[float(simulate(model, torch.tensor([a, b], dtype=torch.float64))[0])
                          for b in grid[1]] for a in grid[0]])


def design(model: phalanx.Model, start, iters: int, lr: float = 0.01, log=print) -> dict:
    """Adam on the lengths (their logarithms) from ``start``: the history and the best design"""
    log_l = torch.tensor(np.log(start), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([log_l], lr=lr)
    history = {"loss": [], "lengths": []}
    begin = time.perf_counter()
    for it in tqdm(range(iters), desc="design", disable=None):
        opt.zero_grad()
        lengths = torch.exp(log_l)
        loss, tracking, work, _ = simulate(model, lengths)
        loss.backward()
        history["loss"].append(float(loss.detach()))
        history["lengths"].append(lengths.detach().numpy().copy())
        if log and (it % 10 == 0 or it == iters - 1):
            l1, l2 = history["lengths"][-1]
            log(f"  {it:4d}  loss {float(loss.detach()):8.3f}  tracking {float(tracking.detach()):7.3f}"
                f"  work {float(work.detach()):7.3f} J  l1 {l1:.4f} m  l2 {l2:.4f} m")
        opt.step()
    best = int(np.argmin(history["loss"]))
    return {"history": history, "lengths": history["lengths"][best],
            "seconds": time.perf_counter() - begin}


def plot(model: phalanx.Model, grid_loss: np.ndarray, runs: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    l1, l2 = SCAN
    mesh = ax[0].pcolormesh(l2, l1, grid_loss, shading="nearest", cmap="viridis")
    fig.colorbar(mesh, ax=ax[0], label="loss")
    for name, run in runs.items():
        path = np.array(run["history"]["lengths"])
        ax[0].plot(path[:, 1], path[:, 0], ".-", ms=2, label=name)
    ax[0].plot(PAPER["optimum"][1], PAPER["optimum"][0], "r*", ms=10, label="paper's optimum")
    ax[0].set(xlabel="l2 (m)", ylabel="l1 (m)", title="loss over the scanned designs")
    ax[0].legend(fontsize=8)
    for name, run in runs.items():
        ax[1].plot(run["history"]["loss"], label=name)
    ax[1].set(xlabel="Adam iteration", ylabel="loss", title="descent")
    ax[1].legend(fontsize=8)
    w = np.linspace(0, 2 * math.pi, 100)
    ax[2].plot(CENTRE + RADIUS * np.cos(w), RADIUS * np.sin(w), "k:", label="desired")
    designs = {"start": START} | {name: run["lengths"] for name, run in runs.items()}
    for name, l in designs.items():
        _, _, _, path = simulate(model, torch.tensor(l, dtype=torch.float64))
        ax[2].plot(path[:, 0], path[:, 1], label=f"{name} ({l[0]:.2f}, {l[1]:.2f})")
    ax[2].set(xlabel="x (m)", ylabel="y (m)", title="end effector", aspect="equal")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "xpbd_design.png", dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = load_model(out / "xpbd_design.xml")
    print(f"descent from the paper's start {START}:")
    runs = {"descent from the start": design(model, START, args.iters)}
    begin = time.perf_counter()
    grid_loss = scan(model)
    i, j = np.unravel_index(np.argmin(grid_loss), grid_loss.shape)
    best = (SCAN[0][i], SCAN[1][j])
    print(f"\nscan of {grid_loss.size} designs in {time.perf_counter() - begin:.1f} s "
          f"(rows l1, columns l2 = {np.round(SCAN[1], 2)}):")
    for a, row in zip(SCAN[0], grid_loss):
        print(f"  l1 {a:.2f}  " + " ".join(f"{x:7.1f}" for x in row))
    print(f"best scanned design ({best[0]:.2f}, {best[1]:.2f}); descent from there:")
    runs["scan, then descent"] = design(model, best, args.iters)
    print(f"\n  {'':26s} {'l1 (m)':>8s} {'l2 (m)':>8s} {'loss':>9s} {'work (J)':>9s}")
    designs = {"start": START} | {name: run["lengths"] for name, run in runs.items()}
    for name, l in designs.items():
        loss, _, work, _ = simulate(model, torch.tensor(l, dtype=torch.float64))
        print(f"  {name:26s} {l[0]:8.4f} {l[1]:8.4f} {float(loss):9.3f} {float(work):9.3f}")
    for name, (a, b, loss, work) in PAPER.items():
        print(f"  {'paper: ' + name:26s} {a:8.4f} {b:8.4f} {loss:9.3f} {work:9.3f}")
    for name, run in runs.items():
        print(f"  ({name}: {len(run['history']['loss'])} iterations in {run['seconds']:.1f} s)")
    plot(model, grid_loss, runs, out)


if __name__ == "__main__":
    main()
