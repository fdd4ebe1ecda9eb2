"""Record, or compare against a record, every output of the core on the benchmark models.

A refactoring that must not change behaviour is checked bit for bit: run

    .venv/bin/python scripts/behaviour_snapshot.py save before.npz   # on the old code
    .venv/bin/python scripts/behaviour_snapshot.py check before.npz  # on the new code

`check` compares every array exactly (NaN equal to NaN) and exits non-zero naming the first
arrays that differ. The outputs: rollouts with contacts (states, status, per-step counts), the
taped backward pass at two checkpoint spacings, step_vjp and the one-step Jacobians with
parameters, the functional queries, trajectory costs and their gradients, and MPPI and CEM
plans, in float32 and float64, on cartpole, the planar half-cheetah, jump worm, catapult, the
system-identification scene with per-environment parameters, and MuJoCo's humanoid. Records are
specific to the machine's instruction set (SIMD width and FMA contraction change the rounding):
compare on the machine that saved them.
"""

import os
import sys

import numpy as np

import phalanx
import phalanx.control as control
import phalanx.costs as costs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "examples", "models")
HUMANOID = "/usr/share/mujoco/model/humanoid/humanoid.xml"
CASES = [
    ("cartpole", os.path.join(MODELS, "cartpole.xml"), 0),
    ("half_cheetah", os.path.join(MODELS, "half_cheetah_planar.xml"), 0),
    ("jump_worm", os.path.join(MODELS, "jump_worm.xml"), 0),
    ("catapult", os.path.join(MODELS, "catapult.xml"), 0),
    ("sysid", os.path.join(MODELS, "sysid_scene.xml"), 4),
    ("humanoid", HUMANOID, 0),
]
E, T = 4, 60


def states(model, rng):
    """E perturbed states about qpos0 (quaternions renormalised by the step)."""
    q = np.repeat(model.qpos0[None], E, axis=0) + 0.02 * rng.standard_normal((E, model.nq))
    v = 0.1 * rng.standard_normal((E, model.nv))
    return q, v


def record(out, prefix, arrays):
    for k, a in arrays.items():
        if isinstance(a, dict):
            record(out, f"{prefix}/{k}", a)
        elif a is not None:
            out[f"{prefix}/{k}"] = np.array(a)


def snapshot():
    out = {}
    for name, path, nbatch in CASES:
        model = phalanx.load_model(path)
        model.lcp_solver = "pgs_stabilized"
        if nbatch:
            masses = np.repeat(model.body_mass[None], nbatch, axis=0)
            masses[:, 1:] *= np.linspace(0.8, 1.2, nbatch)[:, None]
            model.set_parameter("body_mass", masses)
        lo, hi = model.actuator_ctrlrange.T
        lo, hi = np.where(lo < hi, lo, -1.0), np.where(lo < hi, hi, 1.0)
        for dtype in (np.float64, np.float32):
            tag = f"{name}/{np.dtype(dtype).name}"
            rng = np.random.default_rng(0)
            q, v = states(model, rng)
            u = rng.uniform(lo, hi, (E, T, model.nu))
            counts = np.zeros((E, T, phalanx.NUM_COUNTS), np.int32)
            tape = phalanx.Tape()
            qs, vs, st = phalanx.rollout(model, q, v, u, tape=tape, counts=counts, dtype=dtype)
            record(out, f"{tag}/rollout", {"qs": qs, "vs": vs, "status": st, "counts": counts})
            gq = rng.standard_normal(qs.shape)
            gv = rng.standard_normal(vs.shape)
            record(out, f"{tag}/backward", tape.backward(gq, gv))
            tape1 = phalanx.Tape(checkpoint_every=1)
            phalanx.rollout(model, q, v, u, tape=tape1, dtype=dtype)
            record(out, f"{tag}/backward_every", tape1.backward(gq, gv))
            # a state in contact: after the rollout
            q1, v1, u1 = qs[:, -1], vs[:, -1], u[:, -1]
            f = 0.1 * rng.standard_normal((E, model.nv))
            aq, av = rng.standard_normal((E, model.nq)), rng.standard_normal((E, model.nv))
            record(out, f"{tag}/step", dict(zip(
                ("qpos", "qvel", "status"), phalanx.step(model, q1, v1, u1, qfrc=f, dtype=dtype))))
            record(out, f"{tag}/vjp", phalanx.step_vjp(model, q1, v1, u1, aq, av, qfrc=f,
                                                       dtype=dtype))
            record(out, f"{tag}/vjp_aware", phalanx.step_vjp(
                model, q1, v1, u1, aq, av, dtype=dtype, complementarity_aware=True,
                bounce_correction=True))
            record(out, f"{tag}/jacobians", phalanx.step_jacobians(
                model, q1, v1, u1, qfrc=f, parameters=True, dtype=dtype))
            record(out, f"{tag}/jacobians_aware", phalanx.step_jacobians(
                model, q1, v1, u1, dtype=dtype, complementarity_aware=True))
            record(out, f"{tag}/queries", {
                "M": phalanx.mass_matrix(model, q1, dtype=dtype),
                "bias": phalanx.bias_forces(model, q1, v1, dtype=dtype),
                "qacc": phalanx.forward_dynamics(model, q1, v1, u1, dtype=dtype),
                "tau": phalanx.inverse_dynamics(model, q1, v1, v1, dtype=dtype),
                "kin": phalanx.kinematics(model, q1, v1, dtype=dtype),
            })
            if model.nu == 0:
                continue
            cost = (costs.Quadratic(model, qpos_weight=1.0, qvel_weight=0.1, ctrl_weight=0.01,
                                    terminal_weight=2.0, dt=model.timestep)
                    + costs.ComVelocity(model, target=[0.5, 0, 0], weight=0.3))
            record(out, f"{tag}/cost", dict(zip(("value", "grad"), cost.value_and_grad(
                qs.astype(dtype), vs.astype(dtype), u.astype(dtype)))))
            for kind in ("mppi", "cem"):
                if kind == "mppi":
                    planner = control.MPPI(model, horizon=12, num_samples=16, sigma=0.3,
                                           temperature=1.0, noise_smoothing=0.3, seed=1,
                                           cost=cost, num_problems=2, dtype=dtype)
                else:
                    planner = control.CEM(model, horizon=12, num_samples=16, num_elites=4,
                                          sigma=0.3, seed=1, cost=cost, num_problems=2,
                                          dtype=dtype)
                plan = planner.plan(q[:2], v[:2], iterations=2, full=True)
                record(out, f"{tag}/{kind}", {"plan": plan})
    return out


def main(argv):
    if len(argv) != 3 or argv[1] not in ("save", "check"):
        print(__doc__)
        return 2
    current = snapshot()
    if argv[1] == "save":
        np.savez_compressed(argv[2], **current)
        print(f"saved {len(current)} arrays to {argv[2]}")
        return 0
    saved = np.load(argv[2])
    differ = [k for k in saved.files if k not in current or not np.array_equal(
        saved[k], current[k], equal_nan=saved[k].dtype.kind == "f")]
    missing = [k for k in current if k not in saved.files]
    for k in differ[:20]:
        if k in current and saved[k].shape == current[k].shape:
            d = np.max(np.abs(saved[k].astype(float) - current[k].astype(float)))
            print(f"differs: {k} (largest difference {d:.3g})")
        else:
            print(f"differs: {k} (missing or another shape)")
    for k in missing[:20]:
        print(f"not in the record: {k}")
    print(f"{len(saved.files) - len(differ)} of {len(saved.files)} arrays bit-identical")
    return 1 if differ or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
