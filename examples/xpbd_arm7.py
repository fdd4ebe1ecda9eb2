"""Torque estimation, gravity compensation and spring identification on the bundled 7-link arm
through the XPBD solver's one-step Jacobians (after Liu et al., "Parameter Identification and
Motion Control for Articulated Rigid Body Robots Using Differentiable Position-based Dynamics",
sections IV-B, V-C and V-D, with a simulated arm in place of their Baxter).

The arm is examples/models/arm7.urdf with a motor on each of its seven hinges (MuJoCo's URDF
import, motors added with mujoco.MjSpec, then phalanx.from_mujoco). Three experiments:

1. Torque estimation. Ground truth: Phalanx's Featherstone solver at 1 ms drives the arm along
   smooth joint paths with a computed-torque tracking controller whose torques are held for
   10 ms; the joint angles and velocities are observed every 10 ms (optionally with Gaussian
   noise). The torques are then recovered from the observed motion alone with the XPBD model
   (10 ms steps of 10 substeps), from each observed state:
       min_u  sum_k lambda1 |q_k - q^_k|^2 + lambda2 |qdot_k - qdot^_k|^2
              + lambda3 sum_k |u_k - u_{k-1}|^2
   over a horizon of 1 step (one torque) or 3 steps (three torques, the first kept: the paper's
   MPC pattern), the paper's weights lambda = (1, 0.02, 0) for one step and (1, 0.02, 2e-7) for
   three. Every window of the trajectory is an environment of one batch, solved at once by
   Gauss-Newton: the window's predictions and their Jacobians in the torques come from
   phalanx.step_jacobians chained over the horizon; the torques start at gravity compensation.
2. Gravity compensation on 30 static poses: the torques that hold the arm still for one step
   (the same loss, lambda = (1, 0.02)), against RNEA's gravity torques from Pinocchio.
3. Spring identification: a spring of stiffness k on the shoulder-lift joint; the motor torques
   measured at 30 static poses (RNEA gravity plus the spring's torque) are applied to the XPBD
   model, and k is found by Gauss-Newton on the same static loss through the Jacobian of the
   step in jnt_stiffness, from a guess 60% off.

Why substeps: XPBD applies joint torques to the individual links, whose inertia is small, and
lets the joints pull the links back together. At 10 ms a link of arm7 turns by up to about
0.7 rad before the projection, and the step from rest under exact gravity compensation already
moves at about 13 rad/s; that error falls as the substep squared (0.04 rad/s at 10 substeps),
and the one-step fit of gravity-compensating torques converges from 2 substeps on.

    .venv/bin/python examples/xpbd_arm7.py [--seconds 2] [--noise] [--out examples/out]

prints each experiment's table beside the paper's figures and writes examples/out/xpbd_arm7.png
(estimated against true torques, gravity-compensation errors, the stiffness's descent).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import mujoco
import numpy as np

import phalanx

URDF = Path(__file__).resolve().parent / "models" / "arm7.urdf"
JOINTS = ("shoulder_pan", "shoulder_lift", "upper_arm_roll", "elbow", "forearm_roll",
          "wrist_pitch", "wrist_roll")  # Baxter's s0, s1, e0, e1, w0, w1, w2
DT, SUBSTEPS, TRUTH_DT = 0.01, 10, 0.001
LAMBDA = {1: (1.0, 0.02, 0.0), 3: (1.0, 0.02, 2e-7)}  # the paper's weights per horizon
NOISE = (1e-4, 1e-2)  # observation noise with --noise: joint angles (rad), velocities (rad/s)
SPRING_JOINT, SPRING_K, SPRING_GUESS = 1, 40.0, 16.0  # shoulder lift; N m / rad
# the paper's Table IV, best schemes (RMSE in N m): gravity-compensation start with angle and
# velocity loss (1 step), and the MPC of horizon 3, for s1, e0, e1
PAPER_RMSE = {"shoulder_lift": (1.764, 1.726), "upper_arm_roll": (1.192, 1.196),
              "elbow": (2.164, 2.128)}


def arm(solver: str = "featherstone", timestep: float = DT, substeps: int = SUBSTEPS,
        spring: float = 0.0) -> phalanx.Model:
    """arm7 with a motor (gear 1, unlimited) on every hinge, contacts off; ``spring`` N m / rad
    on the shoulder-lift joint (rest angle 0)"""
    spec = mujoco.MjSpec.from_file(str(URDF))
    for joint in spec.joints:
        joint.actfrclimited = mujoco.mjtLimited.mjLIMITED_FALSE
        motor = spec.add_actuator()
        motor.name, motor.target = joint.name, joint.name
        motor.trntype = mujoco.mjtTrn.mjTRN_JOINT
        motor.ctrllimited = False
        if joint.name == JOINTS[SPRING_JOINT]:
            joint.stiffness = [spring, 0.0, 0.0]
    model = phalanx.from_mujoco(spec.compile())
    model.timestep, model.contact = timestep, False
    if solver == "xpbd":
        model.solver, model.xpbd_substeps = "xpbd", substeps
    return model


def gravity(model: phalanx.Model, qpos: np.ndarray) -> np.ndarray:
    """the torques that balance gravity at rest (the bias forces at zero velocity)"""
    return phalanx.bias_forces(model, qpos, np.zeros_like(qpos))


def ground_truth(seconds: float, seed: int = 0) -> dict[str, np.ndarray]:
    """Featherstone at 1 ms tracking smooth joint paths with computed torque (held 10 ms):
    observed qpos, qvel (T + 1, 7) every 10 ms and the torques u (T, 7)"""
    model = arm(timestep=TRUTH_DT)
    rng = np.random.default_rng(seed)
    steps = int(round(seconds / DT))
    t = np.arange(steps + 1)[:, None] * DT
    amp, freq, phase = rng.uniform(0.3, 0.8, 7), rng.uniform(0.2, 0.6, 7), rng.uniform(0, 6.3, 7)
    centre = np.zeros(7)
    centre[3] = -1.0  # the elbow's range is [-2.6, 0.1]
    amp[3] = 0.5
    w = 2 * np.pi * freq
    path, rate = centre + amp * np.sin(w * t + phase), amp * w * np.cos(w * t + phase)
    kp, kd = 100.0, 20.0
    q, v = path[:1].copy(), rate[:1].copy()
    qs, vs, us = [q[0]], [v[0]], []
    for k in range(steps):
        accel = kp * (path[k] - q) + kd * (rate[k] - v)
        u = phalanx.bias_forces(model, q, v) + np.einsum("eij,ej->ei",
                                                         phalanx.mass_matrix(model, q), accel)
        q, v, status = phalanx.step(model, q, v, u, nstep=int(round(DT / TRUTH_DT)))
        phalanx.raise_if_stopped(status)
        qs.append(q[0])
        vs.append(v[0])
        us.append(u[0])
    return {"qpos": np.array(qs), "qvel": np.array(vs), "ctrl": np.array(us)}


def predict(model: phalanx.Model, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray):
    """H steps from (qpos, qvel) (E, n) under ctrl (E, H, nu): the states (E, H, 2n) and their
    Jacobian in the controls (E, H, 2n, H, nu), chained from the one-step Jacobians"""
    E, H, nu = ctrl.shape
    n = qpos.shape[1]
    states = np.zeros((E, H, 2 * n))
    jac = np.zeros((E, H, 2 * n, H, nu))
    q, v = qpos, qvel
    for k in range(H):
        J = phalanx.step_jacobians(model, q, v, ctrl[:, k])
        A = np.block([[J["dqpos_dqpos"], J["dqpos_dqvel"]], [J["dqvel_dqpos"], J["dqvel_dqvel"]]])
        B = np.concatenate([J["dqpos_dctrl"], J["dqvel_dctrl"]], axis=1)
        if k > 0:
            jac[:, k, :, :k] = np.einsum("eij,ejtu->eitu", A, jac[:, k - 1, :, :k])
        jac[:, k, :, k] = B
        q, v, status = phalanx.step(model, q, v, ctrl[:, k])
        phalanx.raise_if_stopped(status)
        states[:, k] = np.concatenate([q, v], axis=1)
    return states, jac


def gauss_newton_step(G: np.ndarray, r: np.ndarray) -> np.ndarray:
    """the least-squares step (G^T G)^-1 G^T r of each environment: G (E, m, n), r (E, m)"""
    return np.linalg.solve(np.einsum("eri,erj->eij", G, G), np.einsum("eri,er->ei", G, r)[..., None])[..., 0]


def estimate_torques(model: phalanx.Model, observed: dict, horizon: int, iters: int = 3,
                     weights=None) -> np.ndarray:
    """The torques of every observed step (T, nu), each the first of a window of ``horizon``
    steps fitted to the observations that follow it; all windows one batch, Gauss-Newton from
    gravity compensation"""
    lam1, lam2, lam3 = weights or LAMBDA[horizon]
    qpos, qvel = observed["qpos"], observed["qvel"]
    T = len(qpos) - 1 - (horizon - 1)
    n, nu = qpos.shape[1], model.nu
    target = np.stack([np.concatenate([qpos[k + 1:k + 1 + horizon], qvel[k + 1:k + 1 + horizon]],
                                      axis=1) for k in range(T)])  # (T, H, 2n)
    scale = np.sqrt(np.r_[np.full(n, lam1), np.full(n, lam2)])  # residual weights of a state
    smooth = np.zeros(((horizon - 1) * nu, horizon * nu))  # u_{k+1} - u_k within the window
    for k in range(horizon - 1):
        smooth[k * nu:(k + 1) * nu, k * nu:(k + 1) * nu] = -np.eye(nu)
        smooth[k * nu:(k + 1) * nu, (k + 1) * nu:(k + 2) * nu] = np.eye(nu)
    smooth *= np.sqrt(lam3)
    ctrl = np.repeat(gravity(model, qpos[:T])[:, None], horizon, axis=1)
    for _ in range(iters):
        states, jac = predict(model, qpos[:T], qvel[:T], ctrl)
        r = ((states - target) * scale).reshape(T, -1)
        G = (jac * scale[None, None, :, None, None]).reshape(T, -1, horizon * nu)
        u = ctrl.reshape(T, -1)
        r = np.concatenate([r, u @ smooth.T], axis=1)
        G = np.concatenate([G, np.broadcast_to(smooth, (T, *smooth.shape))], axis=1)
        ctrl = (u - gauss_newton_step(G, r)).reshape(T, horizon, nu)
    return ctrl[:, 0]


def static_poses(count: int = 30, seed: int = 1) -> np.ndarray:
    """random poses inside the joints' ranges (the elbow's is [-2.6, 0.1])"""
    rng = np.random.default_rng(seed)
    poses = rng.uniform(-1.5, 1.5, (count, 7))
    poses[:, 3] = rng.uniform(-2.4, -0.1, count)
    return poses


def hold_still(model: phalanx.Model, poses: np.ndarray, iters: int = 4):
    """the torques that keep each pose at rest through one step (the paper's static loss with
    lambda = (1, 0.02)), Gauss-Newton from zero; and the largest joint velocity they leave"""
    rest = np.zeros_like(poses)
    ctrl = np.zeros_like(poses)
    scale = np.sqrt(np.r_[np.full(7, LAMBDA[1][0]), np.full(7, LAMBDA[1][1])])
    for _ in range(iters):
        states, jac = predict(model, poses, rest, ctrl[:, None])
        r = (states[:, 0] - np.concatenate([poses, rest], 1)) * scale
        ctrl = ctrl - gauss_newton_step(jac[:, 0, :, 0] * scale[None, :, None], r)
    _, qvel, _ = phalanx.step(model, poses, rest, ctrl)
    return ctrl, float(np.abs(qvel).max())


def rnea_gravity(poses: np.ndarray) -> np.ndarray:
    """Pinocchio's RNEA at rest with zero acceleration: the gravity torques of arm7.urdf"""
    import pinocchio as pin

    model = pin.buildModelFromUrdf(str(URDF))
    data = model.createData()
    zero = np.zeros(model.nv)
    return np.array([pin.rnea(model, data, q, zero, zero) for q in poses])


def identify_stiffness(poses: np.ndarray, measured: np.ndarray, guess: float, iters: int = 4):
    """k of the shoulder-lift spring from the motor torques measured at static poses: Gauss-Newton
    on the static loss over all poses at once through d(state')/d jnt_stiffness; the history"""
    model = arm("xpbd", spring=guess)
    scale = np.sqrt(np.r_[np.full(7, LAMBDA[1][0]), np.full(7, LAMBDA[1][1])])
    zero = np.zeros_like(poses)
    stiffness = model.parameter("jnt_stiffness").copy()
    history = [guess]
    for _ in range(iters):
        model.set_parameter("jnt_stiffness", stiffness)
        q, v, status = phalanx.step(model, poses, zero, measured)
        phalanx.raise_if_stopped(status)
        J = phalanx.step_jacobians(model, poses, zero, measured, parameters=True)
        g = J["parameters"]["jnt_stiffness"][:, :, SPRING_JOINT] * scale  # (E, 2n)
        r = (np.concatenate([q - poses, v], 1)) * scale
        stiffness[SPRING_JOINT] -= float((g * r).sum() / (g * g).sum())
        history.append(float(stiffness[SPRING_JOINT]))
    return history


def rmse(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return np.sqrt(((estimate - truth) ** 2).mean(0))


def torque_estimation(seconds: float, noise: bool, seed: int = 0) -> dict:
    truth = ground_truth(seconds, seed)
    observed = dict(truth)
    if noise:
        rng = np.random.default_rng(seed + 100)
        observed["qpos"] = truth["qpos"] + rng.normal(0, NOISE[0], truth["qpos"].shape)
        observed["qvel"] = truth["qvel"] + rng.normal(0, NOISE[1], truth["qvel"].shape)
    model = arm("xpbd")
    out = {"truth": truth["ctrl"]}
    for horizon in (1, 3):
        begin = time.perf_counter()
        u = estimate_torques(model, observed, horizon)
        out[horizon] = {"ctrl": u, "rmse": rmse(u, truth["ctrl"][:len(u)]),
                        "seconds": time.perf_counter() - begin}
    return out


def plot(estimation: dict, gravity_error: dict, stiffness: list, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4, figsize=(20, 4.5))
    t = np.arange(len(estimation["truth"])) * DT
    for j, name in ((1, "shoulder_lift"), (3, "elbow")):
        (line,) = ax[0].plot(t, estimation["truth"][:, j], label=f"{name}: truth")
        ax[0].plot(t[:len(estimation[1]["ctrl"])], estimation[1]["ctrl"][:, j], "--",
                   color=line.get_color(), label=f"{name}: 1 step")
        ax[0].plot(t[:len(estimation[3]["ctrl"])], estimation[3]["ctrl"][:, j], ":",
                   color=line.get_color(), label=f"{name}: 3 steps")
    ax[0].set(xlabel="t (s)", ylabel="torque (N m)", title="estimated torques")
    ax[0].legend(fontsize=7)
    x = np.arange(7)
    ax[1].bar(x - 0.2, estimation[1]["rmse"], 0.4, label="1 step")
    ax[1].bar(x + 0.2, estimation[3]["rmse"], 0.4, label="3 steps")
    ax[1].set(xticks=x, ylabel="RMSE (N m)", title="torque RMSE per joint")
    ax[1].set_xticklabels(JOINTS, rotation=45, fontsize=7)
    ax[1].legend(fontsize=8)
    for substeps, err in gravity_error.items():
        ax[2].semilogy(x, np.abs(err).max(0) + 1e-12, "o-", label=f"{substeps} substeps")
    ax[2].set(xticks=x, ylabel="max |error| (N m)", title="gravity compensation against RNEA")
    ax[2].set_xticklabels(JOINTS, rotation=45, fontsize=7)
    ax[2].legend(fontsize=8)
    ax[3].plot(stiffness, "o-", label="estimate")
    ax[3].axhline(SPRING_K, color="k", ls=":", label="truth")
    ax[3].set(xlabel="Gauss-Newton iteration", ylabel="k (N m / rad)",
              title="shoulder-lift spring stiffness")
    ax[3].legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "xpbd_arm7.png", dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--noise", action="store_true",
                        help=f"observe angles and velocities with noise of {NOISE}")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = parser.parse_args()

    print(f"1. torque estimation: {args.seconds:g} s observed every {DT * 1e3:g} ms"
          f"{' with noise' if args.noise else ''}; XPBD {DT * 1e3:g} ms steps of {SUBSTEPS} "
          "substeps")
    est = torque_estimation(args.seconds, args.noise)
    print(f"  {'joint':16s} {'range (N m)':>12s} {'1 step':>8s} {'3 steps':>8s}   paper (Baxter)")
    for j, name in enumerate(JOINTS):
        paper = PAPER_RMSE.get(name)
        print(f"  {name:16s} {np.abs(est['truth'][:, j]).max():12.2f} {est[1]['rmse'][j]:8.4f} "
              f"{est[3]['rmse'][j]:8.4f}   " + (f"{paper[0]:.3f} {paper[1]:.3f}" if paper else ""))
    print(f"  (solved in {est[1]['seconds']:.1f} s and {est[3]['seconds']:.1f} s)")

    poses = static_poses()
    reference = rnea_gravity(poses)
    print("\n2. gravity compensation on 30 static poses against Pinocchio's RNEA (N m)")
    errors = {}
    for substeps in (2, 5, 10, 20):
        model = arm("xpbd", substeps=substeps)
        held, moving = hold_still(model, poses)
        errors[substeps] = held - reference
        _, drift, _ = phalanx.step(model, poses, 0 * poses, reference)
        print(f"  {substeps:2d} substeps: max |error| per joint "
              + " ".join(f"{e:.4f}" for e in np.abs(errors[substeps]).max(0))
              + f"  (|qvel'| left {moving:.0e} rad/s; under RNEA's torques "
              f"{np.abs(drift).max():.2g} rad/s)")
    print(f"  torques: mean |RNEA| per joint "
          + " ".join(f"{e:.3f}" for e in np.abs(reference).mean(0)))

    print(f"\n3. spring identification: k = {SPRING_K:g} N m/rad on {JOINTS[SPRING_JOINT]}, "
          f"guess {SPRING_GUESS:g}")
    measured = reference.copy()
    measured[:, SPRING_JOINT] += SPRING_K * poses[:, SPRING_JOINT]  # the motor holds the spring
    history = identify_stiffness(poses, measured, SPRING_GUESS)
    print("  Gauss-Newton: " + " -> ".join(f"{k:.4f}" for k in history)
          + f"  ({abs(history[-1] / SPRING_K - 1):.2%} off)")
    plot(est, errors, history, Path(args.out))


if __name__ == "__main__":
    main()
