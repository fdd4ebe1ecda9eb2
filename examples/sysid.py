"""System identification: recover masses, joint damping and friction from measured trajectories.

The scene, examples/models/sysid_scene.xml, has a puck that slides on the floor (three slide
joints, pushed by two motors; one contact whose friction rows are at their bound whenever it
moves) beside a damped double pendulum driven by two motors. "Measured" trajectories are
rolled out with the model's own (true) parameters from several environments, each with its
own initial state and its own random piecewise-linear controls, optionally with Gaussian
measurement noise. The identification starts from wrong guesses of six parameters

    the masses of the puck and of the two pendulum links (body_mass),
    the damping of the two hinges (dof_damping),
    the puck's sliding friction coefficient (geom_friction, first column),

and minimises the mean squared trajectory error

    L = 1 / (E T) sum_e sum_t |qpos_e,t(params) - qpos_e,t(measured)|^2

by gradient descent (Adam on the logarithms of the parameters, which keeps them positive and
evens out their scales). One iteration is one rollout of all environments recorded on a
phalanx.Tape and one tape.backward, whose per-environment parameter gradients are summed over
the environments (the parameters are shared by all of them). The contacts use the stabilised
PGS solver, so the gradients through the sliding contact are exact (they match central
differences of the loss to about 8 digits).

    .venv/bin/python examples/sysid.py [--iters 400] [--noise 0.001] [--out examples/out]

prints the loss and the estimates during the descent, then a table of recovered against true
values with their relative errors, and writes examples/out/sysid.png (loss and relative errors
per iteration, one measured trajectory against the initial guess and the identified model).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import phalanx
from _shared import Adam, interpolation

MODEL = Path(__file__).resolve().parent / "models" / "sysid_scene.xml"

# (label, parameter, entity kind, entity name, column): the identified parameters; column
# selects the sliding coefficient of geom_friction (its other columns, torsional and rolling
# friction, are not modelled)
PARAMETERS = [
    ("puck mass (kg)", "body_mass", "body", "puck", None),
    ("upper link mass (kg)", "body_mass", "body", "upper", None),
    ("lower link mass (kg)", "body_mass", "body", "lower", None),
    ("shoulder damping (N m s)", "dof_damping", "joint", "shoulder", None),
    ("elbow damping (N m s)", "dof_damping", "joint", "elbow", None),
    ("puck friction", "geom_friction", "geom", "puck", 0),
]
# the initial guess as a multiple of the true value, parameter by parameter
GUESS = (0.6, 1.6, 0.6, 2.5, 0.4, 1.75)


def load_model() -> phalanx.Model:
    """the scene with the stabilised PGS solver (exact LCP gradients on the clamping set)"""
    model = phalanx.load_model(MODEL)
    model.lcp_solver = "pgs_stabilized"
    return model


def parameter_index(model: phalanx.Model) -> list[tuple[str, tuple[int, ...]]]:
    """(parameter name, index into its (n,) or (n, 3) array) of each entry of PARAMETERS"""
    out = []
    for _, name, kind, entity, column in PARAMETERS:
        if kind == "joint":  # a hinge or slide has one dof
            i = int(model.jnt_dofadr[model.joint_names.index(entity)])
        else:
            i = getattr(model, f"{kind}_names").index(entity)
        out.append((name, (i,) if column is None else (i, column)))
    return out


def experiments(model: phalanx.Model, envs: int, steps: int, knots: int,
                rng: np.random.Generator):
    """initial states (E, nq), (E, nv) and controls (E, T, nu) of the measured runs: the puck
    starts at the origin with a random horizontal velocity, the pendulum at random angles at
    rest; every motor follows its own random piecewise-linear control with ``knots`` knots"""
    qpos = np.repeat(model.qpos0[None], envs, axis=0)
    qvel = np.zeros((envs, model.nv))
    hinges = [model.jnt_qposadr[model.joint_names.index(j)] for j in ("shoulder", "elbow")]
    slides = [model.jnt_dofadr[model.joint_names.index(j)] for j in ("puck_x", "puck_y")]
    qpos[:, hinges] = rng.uniform(-1.0, 1.0, (envs, 2))
    qvel[:, slides] = rng.uniform(-1.0, 1.0, (envs, 2))
    B = interpolation(steps, knots)
    ctrl = np.einsum("tk,ekn->etn", B, rng.uniform(-1.0, 1.0, (envs, knots, model.nu)))
    return qpos, qvel, np.ascontiguousarray(ctrl)


def identify(iters: int = 400, *, envs: int = 8, steps: int = 300, knots: int = 16,
             lr: float = 0.1, noise: float = 0.001, guess=GUESS, seed: int = 0,
             log=print) -> dict:
    """Identify the parameters of PARAMETERS from ``envs`` measured trajectories of ``steps``
    steps (5 ms each) with ``iters`` Adam steps of size ``lr`` on their logarithms.

    ``noise`` is the standard deviation of the Gaussian noise added to the measured qpos (m for
    the puck, rad for the hinges); ``guess`` the initial values as multiples of the true ones.
    Returns a dict: ``labels``, ``truth``, ``guess``, ``estimate`` (the values of the last
    iterate) and ``rel_error`` (|estimate / truth - 1|), per parameter; ``loss`` (iters + 1,)
    and ``values`` (iters + 1, nparam) per iteration, before its update, then after the last;
    ``loss_truth`` (the loss of the true parameters: the noise floor); ``measured``,
    ``initial``, ``final`` (E, T, nq) the measured trajectories and the rollouts of the guess
    and of the estimate; ``time`` (T,) s; ``seconds`` (wall clock of the descent);
    ``status`` (OR of all rollouts' status bits).
    """
    model = load_model()
    index = parameter_index(model)
    fields = {name: model.parameter(name).copy() for name, _ in index}  # the true fields
    truth = np.array([fields[name][i] for name, i in index])
    rng = np.random.default_rng(seed)
    qpos0, qvel0, ctrl = experiments(model, envs, steps, knots, rng)

    def set_values(values):
        for name, field in fields.items():
            field = field.copy()
            for (n, i), v in zip(index, values):
                if n == name:
                    field[i] = v
            model.set_parameter(name, field)

    tape = phalanx.Tape()
    status = 0

    def run(values, record=False):
        nonlocal status
        set_values(values)
        qs, _, st = phalanx.rollout(model, qpos0, qvel0, ctrl, tape=tape if record else None)
        phalanx.raise_if_stopped(st, "sysid rollout")
        status |= int(np.bitwise_or.reduce(st))
        return qs

    measured = run(truth)
    measured = measured + noise * rng.standard_normal(measured.shape)
    scale = 1.0 / (envs * steps)

    def loss_and_grad(values, grad=True):
        qs = run(values, record=grad)
        r = qs - measured
        loss = scale * float(np.sum(r * r))
        if not grad:
            return loss, None
        g = tape.backward(2 * scale * r, None)
        # per-environment gradients, summed: the parameters are shared by all environments
        return loss, np.array([g[name][(slice(None), *i)].sum() for name, i in index])

    loss_truth, _ = loss_and_grad(truth, grad=False)
    values = truth * np.asarray(guess, dtype=np.float64)
    initial = run(values)
    x = np.log(values)
    adam = Adam(lr, eps=1e-12)
    losses, history = [], []
    labels = [p[0] for p in PARAMETERS]
    start = time.perf_counter()
    for it in tqdm(range(iters + 1), desc="identification", disable=None):
        values = np.exp(x)
        last = it == iters
        loss, g = loss_and_grad(values, grad=not last)
        losses.append(loss)
        history.append(values)
        if log and (it % 25 == 0 or last):
            err = np.abs(values / truth - 1)
            log(f"iter {it:4d}  loss {loss:.3e}  max rel. error {err.max():7.2%}  "
                + "  ".join(f"{v:.4g}" for v in values))
        if not last:
            x = adam.step(x, g * values)  # dL/dlog(p) = p dL/dp
    seconds = time.perf_counter() - start
    estimate = np.exp(x)
    return {
        "labels": labels, "truth": truth, "guess": truth * np.asarray(guess, dtype=np.float64),
        "estimate": estimate, "rel_error": np.abs(estimate / truth - 1),
        "loss": np.array(losses), "values": np.array(history), "loss_truth": loss_truth,
        "measured": measured, "initial": initial, "final": run(estimate),
        "time": model.timestep * np.arange(1, steps + 1), "seconds": seconds,
        "status": status, "noise": noise,
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4, figsize=(19, 4.4))
    ax[0].semilogy(result["loss"], label="loss")
    if result["loss_truth"] > 0:
        ax[0].axhline(result["loss_truth"], color="k", ls=":", lw=1,
                      label="loss of the true parameters (noise)")
    ax[0].set(xlabel="iteration", ylabel="mean squared qpos error", title="loss")
    ax[0].legend(fontsize=8)

    err = np.abs(result["values"] / result["truth"] - 1)
    for j, label in enumerate(result["labels"]):
        ax[1].semilogy(np.maximum(err[:, j], 1e-7), label=label)
    ax[1].set(xlabel="iteration", ylabel="|estimate / truth - 1|",
              title="relative error of the parameters")
    ax[1].legend(fontsize=8)

    t, e = result["time"], 0
    for a, coords in [(ax[2], [(0, "puck x"), (1, "puck y")]),
                      (ax[3], [(3, "shoulder"), (4, "elbow")])]:
        for c, (k, name) in enumerate(coords):
            color = f"C{c}"
            a.plot(t[::3], result["measured"][e, ::3, k], ".", color="k", markersize=2.5,
                   label="measured" if c == 0 else None)
            a.plot(t, result["initial"][e, :, k], ":", color=color, lw=1.5,
                   label=f"{name}, initial guess")
            a.plot(t, result["final"][e, :, k], "-", color=color, lw=1.5,
                   label=f"{name}, identified")
        a.legend(fontsize=8)
    ax[2].set(xlabel="t (s)", ylabel="position (m)", title=f"puck (environment {e})")
    ax[3].set(xlabel="t (s)", ylabel="angle (rad)", title=f"pendulum (environment {e})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--noise", type=float, default=0.001,
                        help="std of the measurement noise on qpos (m, rad)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()

    result = identify(args.iters, envs=args.envs, steps=args.steps, lr=args.lr,
                      noise=args.noise, seed=args.seed)
    print(f"\n{args.iters} iterations on {args.envs} environments x {args.steps} steps in "
          f"{result['seconds']:.1f} s; loss {result['loss'][0]:.3e} -> {result['loss'][-1]:.3e} "
          f"(true parameters: {result['loss_truth']:.3e})")
    print(f"{'parameter':26s} {'true':>8s} {'guess':>8s} {'recovered':>10s} {'rel. error':>10s}")
    for label, t, g, v, e in zip(result["labels"], result["truth"], result["guess"],
                                 result["estimate"], result["rel_error"]):
        print(f"{label:26s} {t:8.4f} {g:8.4f} {v:10.4f} {e:10.3%}")
    if result["status"]:
        print(f"status bits set during the rollouts: {result['status']:#x}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "sysid.png"
    plot(result, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
