"""A six-bar tensegrity robot identified from MuJoCo's trajectories by back-propagation through
time (after Wang et al., "A Recurrent Differentiable Engine for Modeling Tensegrity Robots
Trainable with Low-Frequency Data", ICRA 2022).

The robot is examples/models/tensegrity.xml: six 10 kg rods and 24 cables that only pull, each
cable a spatial tendon driven by a motor that sets its rest length. MuJoCo (its own soft
contacts, 1 kHz, the file's implicitfast integrator, which Phalanx runs too) running that file
is the ground truth, as in the paper. Two variants:

- free: no floor and no gravity, the robot floating and flexing under its motors; its internal
  motion depends on the cables' stiffness and damping over the rods' mass only, so stiffness and
  damping are identified with the mass known;
- floor: gravity and the floor with friction; stiffness, damping, rod mass and the floor's
  friction coefficient are identified.

Data (generate): 10 training, 2 validation and 10 test trajectories of 5 s per variant, each
from the robot at rest under random motor commands held for 0.1 s, observed at 10 Hz: qpos, qvel
and the motors' activations every 100 steps. Identification (identify): every observation
interval of the training trajectories is one environment of one batched Phalanx rollout of 100
steps from the observed state, recorded on a phalanx.Tape; the loss is the squared error of the
rods' positions and orientations at the next observation, and tape.backward gives its gradient
with respect to the parameters (summed over the environments). Adam on the parameters'
logarithms with the gradient norm clipped. Evaluation (evaluate): the test trajectories rolled
out open-loop for the whole 5 s from their initial states, the centre of mass against MuJoCo's.

Control transfer (roll, --mpc): MPPI from phalanx.control planned on the identified floor model
and executed in MuJoCo rolls the robot along +x, replanning every 0.1 s from MuJoCo's state
with the paper's 40 samples, 5 iterations and 1 s horizon of ten commands held 0.1 s each;
compared with the same planner on the initial guess and on random parameters.

    .venv/bin/python examples/tensegrity.py [--variant free|floor|both] [--iters 150]
        [--mpc] [--mpc-seconds 5] [--mpc-seeds 1] [--out examples/out]

prints the descent and a table of identified against true parameters, the test-set error, the
rolling speeds, and writes examples/out/tensegrity_<variant>.png (loss, parameter errors, a
test trajectory, the rolling paths).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import mujoco
import numpy as np
from tqdm import tqdm

import phalanx
import phalanx.control as control
from _shared import Adam

MODEL = Path(__file__).resolve().parent / "models" / "tensegrity.xml"
K, D, L0, SCALE, MASS, FRICTION = 10000.0, 1000.0, 0.95, 0.075, 10.0, 1.0  # the file's values
STEP = 0.001  # the file's timestep (1 kHz)
OBSERVE = 100  # steps between observations (10 Hz at 1 kHz)
SPLITS = {"train": 10, "validation": 2, "test": 10}
HALF_LENGTH = 0.842  # a rod's half length: weighs orientation errors as end displacements


def mujoco_model(variant: str) -> mujoco.MjModel:
    """the ground truth: the model file, without floor contact and gravity for "free" """
    mj = mujoco.MjModel.from_xml_path(str(MODEL))
    if variant == "free":
        mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
        mj.opt.gravity[:] = 0
    return mj


def phalanx_model(variant: str) -> phalanx.Model:
    """the same model for Phalanx (contacts by the stabilised solver, exact gradients on the
    clamping set)"""
    model = phalanx.from_mujoco(mujoco_model(variant))
    model.lcp_solver = "pgs_stabilized"
    return model


def generate(variant: str, seconds: float = 5.0, seed: int = 0) -> dict:
    """{split: {"ctrl" (n, I, nu), "qpos" (n, I + 1, nq), "qvel" (n, I + 1, nv), "act"
    (n, I + 1, na)}} from MuJoCo, I = seconds * 10 intervals, the commands uniform in [-1, 1]"""
    mj = mujoco_model(variant)
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(seed)
    intervals = int(round(seconds * 1000 / OBSERVE))
    data = {}
    for split, n in SPLITS.items():
        ctrl = rng.uniform(-1, 1, (n, intervals, mj.nu))
        rec = {k: np.zeros((n, intervals + 1, size)) for k, size in
               (("qpos", mj.nq), ("qvel", mj.nv), ("act", mj.na))}
        for i in range(n):
            mujoco.mj_resetData(mj, d)
            for j in range(intervals + 1):
                rec["qpos"][i, j], rec["qvel"][i, j], rec["act"][i, j] = d.qpos, d.qvel, d.act
                if j == intervals:
                    break
                d.ctrl[:] = ctrl[i, j]
                for _ in range(OBSERVE):
                    mujoco.mj_step(mj, d)
        data[split] = {"ctrl": ctrl, **rec}
    return data


# ---- the parameters ----

NAMES = ("stiffness (N/m)", "damping (N s/m)", "rod mass (kg)", "floor friction")
TRUTH = np.array([K, D, MASS, FRICTION])


def set_parameters(model: phalanx.Model, x: np.ndarray) -> None:
    """the model's cables, rods and floor from x = (k, d, m, mu)"""
    k, d, m, mu = x
    gain = np.array(model.actuator_gainprm)
    bias = np.array(model.actuator_biasprm)
    gain[:, 0] = k * SCALE
    bias[:, :3] = [k * L0, -k, -d]
    mass = np.array(model.body_mass)
    mass[1:] = m
    friction = np.array(model.geom_friction)
    friction[0, 0] = mu  # the floor (geom 0); the rods' coefficient stays below it
    friction[1:, 0] = np.minimum(friction[1:, 0], 0.5 * mu)
    for name, value in (("actuator_gainprm", gain), ("actuator_biasprm", bias),
                        ("body_mass", mass), ("geom_friction", friction)):
        model.set_parameter(name, value)


def chain_rule(grads: dict) -> np.ndarray:
    """dL/d(k, d, m, mu) from the tape's per-environment parameter gradients"""
    gain = grads["actuator_gainprm"].sum(0)
    bias = grads["actuator_biasprm"].sum(0)
    return np.array([(gain[:, 0] * SCALE + bias[:, 0] * L0 - bias[:, 1]).sum(),
                     -bias[:, 2].sum(), grads["body_mass"].sum(0)[1:].sum(),
                     grads["geom_friction"].sum(0)[0, 0]])


# ---- identification ----

def pose_error(qpos: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """per environment the squared error of the rods' positions and (scaled) orientations,
    and its gradient with respect to qpos"""
    w = np.tile(np.r_[np.ones(3), np.full(4, HALF_LENGTH**2)], 6)
    diff = qpos - target
    return (w * diff * diff).sum(-1), 2 * w * diff


def segments(split: dict) -> tuple[np.ndarray, ...]:
    """every observation interval of a split as one environment: (qpos, qvel, act, ctrl, qpos
    at the next observation)"""
    n, intervals = split["ctrl"].shape[:2]

    def flat(x):
        return x.reshape(n * intervals, -1)

    return (flat(split["qpos"][:, :-1]), flat(split["qvel"][:, :-1]), flat(split["act"][:, :-1]),
            flat(split["ctrl"]), flat(split["qpos"][:, 1:]))


def segment_loss(model: phalanx.Model, seg: tuple, x: np.ndarray, tape=None):
    """mean pose error at the end of every interval with parameters x, and the rollout's
    status; with a tape, also dL/d(qpos after each step) for its backward pass. An interval
    is OBSERVE steps of 1 ms, or as many of model.timestep as fill the same 0.1 s."""
    q0, v0, a0, u, target = seg
    set_parameters(model, x)
    ctrl = np.repeat(u[:, None], int(round(OBSERVE * STEP / model.timestep)), axis=1)
    qs, _, _, status = phalanx.rollout(model, q0, v0, ctrl, act=a0, tape=tape)
    err, grad = pose_error(qs[:, -1], target)
    adj = None
    if tape is not None:
        adj = np.zeros_like(qs)
        adj[:, -1] = grad / len(err)
    return err.mean(), status, adj


def identify(data: dict, variant: str, iters: int, guess: np.ndarray, lr: float = 0.1,
             clip: float = 1.0, trajectories: int | None = None, timestep: float = STEP,
             plateau: int = 10, stall: float = 0.01, log=print) -> dict:
    """Adam on log(x) from x = guess, its step decaying from lr to lr / 10, on the first
    `trajectories` training trajectories (None: all); the free variant keeps the mass and
    friction at the truth (its motion does not depend on them). Returns the estimates, losses,
    the data used and the wall time.

    The paper's progressive schedule: the rollouts start at `timestep` (the data's 1 ms by
    default), which is halved, down to 1 ms, whenever the loss has fallen by less than the
    fraction `stall` over `plateau` iterations (history["timestep"] records it per
    iteration). It does not help here: the coarse steps' best fit is biased (the damping
    most). Measured on two free training trajectories, 60 iterations from GUESS: at 1 ms
    throughout the worst parameter ends 0.24 % off; started at 4 ms (halved on 1 % plateaus
    over 10 iterations) 7 % off, at 8 ms 24 % off."""
    model = phalanx_model(variant)
    free = variant == "free"
    active = np.array([True, True, not free, not free])
    x = np.where(active, guess, TRUTH).astype(float)
    chosen = {k: v[:trajectories] for k, v in data["train"].items()}
    train, val = segments(chosen), segments(data["validation"])
    adam = Adam(lr)
    history = {"loss": [], "validation": [], "x": [x.copy()], "timestep": []}
    model.timestep, since = timestep, 0  # since: iterations at this timestep
    start = time.perf_counter()
    for it in tqdm(range(iters), desc="tensegrity", disable=None):
        tape = phalanx.Tape(checkpoint_every=10)
        loss, status, adj = segment_loss(model, train, x, tape)
        phalanx.raise_if_stopped(status, "rollout")
        grads = tape.backward(adj, None)
        g = chain_rule(grads) * x * active  # d loss / d log x
        norm = np.linalg.norm(g)
        if norm > clip * loss:  # clip relative to the loss, scale-free
            g *= clip * loss / norm
        adam.lr = lr * 0.1 ** (it / max(iters - 1, 1))
        x = np.where(active, np.exp(adam.step(np.log(x), g / max(loss, 1e-300))), x)
        history["loss"].append(loss)
        history["x"].append(x.copy())
        history["timestep"].append(model.timestep)
        since += 1
        if (model.timestep > STEP and since > plateau
                and history["loss"][-1] > (1 - stall) * history["loss"][-1 - plateau]):
            model.timestep, since = max(model.timestep / 2, STEP), 0
        if it % 10 == 0 or it == iters - 1:
            history["validation"].append((it, segment_loss(model, val, x)[0]))
            if log:
                log(f"  {it:4d}  loss {loss:.3e}  " + "  ".join(
                    f"{v:.4g}" for v, a in zip(x, active) if a))
    seconds = time.perf_counter() - start
    model.timestep = STEP
    truth_loss = segment_loss(model, train, TRUTH)[0]
    n, intervals = chosen["ctrl"].shape[:2]
    steps = sum(int(round(OBSERVE * STEP / dt)) for dt in history["timestep"])
    used = {"trajectories": n, "observations": n * (intervals + 1),
            "env_steps": n * intervals * steps}
    return {"x": x, "active": active, "history": history, "truth_loss": truth_loss,
            "seconds": seconds, "rel_error": np.abs(x / TRUTH - 1), "data": used}


def evaluate(data: dict, variant: str, x: np.ndarray) -> dict:
    """the test trajectories open-loop over their whole length with parameters x: the centre
    of mass (the rods' mean position) against MuJoCo's at every observation"""
    model = phalanx_model(variant)
    set_parameters(model, x)
    test = data["test"]
    ctrl = np.repeat(test["ctrl"], OBSERVE, axis=1)
    qs, _, _, status = phalanx.rollout(model, test["qpos"][:, 0], test["qvel"][:, 0], ctrl,
                                       act=test["act"][:, 0])
    observed = qs[:, OBSERVE - 1::OBSERVE]
    com = centre_of_mass(observed)
    truth = centre_of_mass(test["qpos"][:, 1:])
    err = np.linalg.norm(com - truth, axis=-1)
    # the rods' positions: what the free variant's motion changes (its centre of mass stays)
    rods = np.linalg.norm(rod_positions(observed) - rod_positions(test["qpos"][:, 1:]),
                          axis=-1).mean(-1)
    return {"com_error": err, "final": float(err[:, -1].mean()), "status": status, "com": com,
            "truth": truth, "rod_error": float(rods[:, -1].mean())}


def rod_positions(qpos: np.ndarray) -> np.ndarray:
    """the rods' centres (..., 6, 3): qpos is six free joints, position then quaternion"""
    return qpos.reshape(*qpos.shape[:-1], 6, 7)[..., :3]


def centre_of_mass(qpos: np.ndarray) -> np.ndarray:
    """the rods' mean position (their masses are equal), (..., 3)"""
    return rod_positions(qpos).mean(-2)


# ---- control transfer ----

DIRECTION = np.array([1.0, 0.0])  # the rolling direction on the floor, +x
STRETCHED = 1.15  # m, a cable's length beyond any seen under random commands (at most 1.1)


class RollCost:
    """MPPI's cost of the sampled trajectories (qs, vs, ctrl), each command held OBSERVE steps
    (the robot's 0.1 s control interval): at the end of each interval the centre of mass's
    position along DIRECTION counts against its distance from the line along DIRECTION
    through `origin` (times `lateral`), averaged over the intervals. A cable stretched beyond
    `limit` adds `stretch` times its excess (the largest along the rollout, every 10 ms):
    cables do not collide, so a rod can swing through the net and tangle it, which MuJoCo's
    stepping does not survive."""

    def __init__(self, model: phalanx.Model, origin: np.ndarray, lateral: float = 0.5,
                 stretch: float = 10.0, limit: float = STRETCHED):
        self.model, self.origin = model, np.asarray(origin)[:2]
        self.lateral, self.stretch, self.limit = lateral, stretch, limit

    def __call__(self, qs, vs, ctrl) -> np.ndarray:
        M = len(qs)
        com = centre_of_mass(qs[:, OBSERVE - 1::OBSERVE])[..., :2] - self.origin
        along = com @ DIRECTION
        across = np.abs(com @ np.array([-DIRECTION[1], DIRECTION[0]]))
        q, v = qs[:, 9::10], vs[:, 9::10]
        length = phalanx.kinematics(self.model, q.reshape(-1, q.shape[-1]),
                                    v.reshape(-1, v.shape[-1]))["ten_length"]
        excess = np.maximum(length.reshape(M, -1) - self.limit, 0).max(-1)
        return (self.lateral * across - along).mean(-1) + self.stretch * excess


def roll(x: np.ndarray, seconds: float = 5.0, samples: int = 40, knots: int = 10,
         iterations: int = 5, sigma: float = 1.0, temperature: float = 0.02,
         lateral: float = 0.5, seed: int = 0, ctrlrange=None) -> dict:
    """MPPI (phalanx.control) planned on Phalanx's floor model with parameters x and executed
    in MuJoCo: every 0.1 s, from MuJoCo's state, `iterations` planning iterations of `samples`
    samples over `knots` commands held 0.1 s each (hold=OBSERVE; the paper's 40 samples, 1 s
    horizon and 5 iterations by default), then the first command applied in MuJoCo for 100
    steps; `ctrlrange` (lo, hi) narrows the commands (default the motors' [-1, 1]).
    Returns the centre of mass's path (up to seconds * 10 + 1 points, 2), its speed along
    DIRECTION over the whole `seconds` (m/s), the wall time, and `diverged`: the time (s) at
    which MuJoCo's step blew up, which ends the run, or None.

    MuJoCo runs the model file's implicitfast integrator. With Euler, the cables' damping
    (1000 N s/m on a rod end's effective mass of 2.5 kg, d h / m about 1.6 per cable, four
    at an end) sits close to explicit Euler's bound of 2, and commands at the ends of the
    range, where MPPI's clipped samples often sit, made it diverge: measured over 5 s,
    commands held 0.1 s, 10 runs each, -1 or +1 diverged in 5 runs with Euler and in none
    with implicitfast."""
    model = phalanx_model("floor")
    set_parameters(model, x)
    mj = mujoco_model("floor")
    d = mujoco.MjData(mj)
    path = [centre_of_mass(d.qpos)[:2]]
    mppi = control.MPPI(model, horizon=knots, num_samples=samples, sigma=sigma,
                        temperature=temperature, cost=RollCost(model, path[0], lateral),
                        hold=OBSERVE, seed=seed, ctrlrange=ctrlrange)
    start, diverged = time.perf_counter(), None
    for i in range(int(round(seconds * 1000 / OBSERVE))):
        d.ctrl[:] = mppi.plan(d.qpos, d.qvel, iterations, act=d.act)
        for _ in range(OBSERVE):
            mujoco.mj_step(mj, d)
        if d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number or not np.isfinite(d.qpos).all():
            diverged = (i + 1) * OBSERVE / 1000  # MuJoCo's step blew up (and reset)
            break
        mppi.shift()
        path.append(centre_of_mass(d.qpos)[:2])
    path = np.array(path)
    return {"path": path, "speed": float((path[-1] - path[0]) @ DIRECTION / seconds),
            "seconds": time.perf_counter() - start, "diverged": diverged}


def report(variant: str, result: dict, test: dict, test_guess: dict, log=print) -> None:
    used = result["data"]
    log(f"\n{variant}: identified in {result['seconds']:.1f} s from {used['trajectories']} "
        f"training trajectories ({used['observations']} observations at 10 Hz), "
        f"{len(result['history']['loss'])} iterations, {used['env_steps']:.3g} env-steps "
        f"rolled out")
    log(f"  {'parameter':18s} {'truth':>10s} {'guess':>10s} {'identified':>12s} {'error':>8s}")
    for name, t, g, v, a in zip(NAMES, TRUTH, result["history"]["x"][0], result["x"],
                                result["active"]):
        if a:
            log(f"  {name:18s} {t:10.4g} {g:10.4g} {v:12.6g} {abs(v / t - 1):8.2%}")
    log(f"  training loss {result['history']['loss'][-1]:.3e} (at the truth "
        f"{result['truth_loss']:.3e})")
    log(f"  test set after 5 s open-loop: centre-of-mass error {test['final']:.3e} m, rod "
        f"position error {test['rod_error']:.3e} m (initial guess {test_guess['final']:.3e} m, "
        f"{test_guess['rod_error']:.3e} m)")


def report_control(rolls: dict, log=print) -> None:
    """the rolling speeds along DIRECTION of MPPI planned on each model (a list of runs, one per
    planner seed), executed in MuJoCo"""
    log("\nMPPI planned on Phalanx, executed in MuJoCo, rolling along +x:")
    for name, runs in rolls.items():
        for seed, r in enumerate(runs):
            end = r["path"][-1] - r["path"][0]
            note = f", MuJoCo diverged at {r['diverged']:.1f} s" if r["diverged"] else ""
            log(f"  {name:12s} seed {seed}  {r['speed']:6.3f} m/s  (ends at x {end[0]:5.2f} m, "
                f"y {end[1]:5.2f} m; {r['seconds']:.0f} s{note})")
        if len(runs) > 1:
            speeds = [r["speed"] for r in runs]
            log(f"  {name:12s} mean    {np.mean(speeds):6.3f} m/s over {len(runs)} seeds "
                f"(min {min(speeds):.3f}, max {max(speeds):.3f})")


def plot(variant: str, result: dict, test: dict, out: Path, rolls: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 4 if rolls else 3, figsize=(20 if rolls else 15, 4))
    ax[0].semilogy(result["history"]["loss"], label="training")
    it, val = zip(*result["history"]["validation"])
    ax[0].semilogy(it, val, "o-", label="validation")
    ax[0].axhline(result["truth_loss"], color="k", ls=":", label="at the truth")
    ax[0].set(xlabel="iteration", ylabel="pose error (m^2)", title="loss")
    ax[0].legend()
    xs = np.array(result["history"]["x"])
    for j, name in enumerate(NAMES):
        if result["active"][j]:
            ax[1].semilogy(np.abs(xs[:, j] / TRUTH[j] - 1) + 1e-12, label=name)
    ax[1].set(xlabel="iteration", ylabel="|x / truth - 1|", title="parameters")
    ax[1].legend(fontsize=8)
    t = np.arange(1, test["com"].shape[1] + 1) * OBSERVE / 1000
    for k, label in enumerate("xyz"):
        (line,) = ax[2].plot(t, test["truth"][0, :, k], label=f"MuJoCo {label}")
        ax[2].plot(t, test["com"][0, :, k], "--", color=line.get_color(),
                   label=f"identified {label}")
    ax[2].set(xlabel="t (s)", ylabel="centre of mass (m)", title="a test trajectory")
    ax[2].legend(fontsize=8)
    for name, runs in (rolls or {}).items():
        r = runs[0]
        ax[3].plot(*r["path"].T, label=f"{name} ({r['speed']:.2f} m/s)")
    if rolls:
        ax[3].plot(0, 0, "ko")
        ax[3].set(xlabel="x (m)", ylabel="y (m)", title="rolling along +x: MPPI in MuJoCo",
                  aspect="equal")
        ax[3].legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"tensegrity_{variant}.png", dpi=100)
    plt.close(fig)


# the initial guess: every parameter off by 30 to 50 %
GUESS = TRUTH * np.array([1.5, 0.6, 1.4, 0.7])
# random parameters to plan on for comparison: factors log-uniform in [1/3, 3]
RANDOM = TRUTH * np.exp(np.random.default_rng(0).uniform(np.log(1 / 3), np.log(3), 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=("free", "floor", "both"), default="both")
    parser.add_argument("--iters", type=int, default=150)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    parser.add_argument("--mpc", action="store_true",
                        help="then roll the robot with MPPI planned on the identified floor "
                             "model, the initial guess and random parameters, in MuJoCo")
    parser.add_argument("--mpc-seconds", type=float, default=5.0)
    parser.add_argument("--mpc-seeds", type=int, default=1,
                        help="planner seeds per model (the speeds vary from seed to seed)")
    args = parser.parse_args()
    for variant in ("free", "floor") if args.variant == "both" else (args.variant,):
        t = time.perf_counter()
        data = generate(variant)
        print(f"{variant}: MuJoCo data in {time.perf_counter() - t:.1f} s "
              f"({sum(SPLITS.values())} trajectories of 5 s)")
        result = identify(data, variant, args.iters, GUESS)
        test = evaluate(data, variant, result["x"])
        guess = evaluate(data, variant, np.where(result["active"], GUESS, TRUTH))
        report(variant, result, test, guess)
        rolls = None
        if args.mpc and variant == "floor":
            rolls = {name: [roll(x, args.mpc_seconds, seed=seed) for seed in range(args.mpc_seeds)]
                     for name, x in
                     (("identified", result["x"]), ("guess", GUESS), ("random", RANDOM))}
            report_control(rolls)
        plot(variant, result, test, Path(args.out), rolls)


if __name__ == "__main__":
    main()
