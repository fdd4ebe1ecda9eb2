"""Nimble's Table III on one CPU core: time for the one-step Jacobians, analytic against
finite differences, with the paper's figures beside ours.

For each model at a state in contact, the time of phalanx.step_jacobians (all of dq'/dq, dq'/dqd,
dqd'/dq, dqd'/dqd, dqd'/dtau and the ctrl blocks, from the adjoints; tau is the generalized force
phalanx.step adds, qfrc) against finite differences of phalanx.step, two ways:
- "central": phalanx.step_jacobians_fd computing all those blocks at once from shared
  perturbations, 2 (nq + 2 nv + nu) perturbed states in one batched phalanx.step call (and
  Ridders' extrapolation the same way);
- "per Jacobian": Table III's protocol. The paper times each of the five Jacobians by its own
  central differences (Nimble's finiteDifference*Jacobian functions, each perturbing its input
  and stepping) and sums the five: here step_jacobians_fd(wrt=...) once per Jacobian, each 2 n
  perturbed states of its input in one batch.
The paper's analytic time is that of its Jacobians from the snapshot its forward step kept; ours
includes the replay of the step (step_jacobians starts from the state), so the per-Jacobian
ratio is still the stricter of the two on the analytic side. On the humanoid, MuJoCo's own
finite-difference derivatives (mujoco.mjd_transitionFD, centred) run in the same script.
Medians of --repeats timed calls, all the calls of a model timed in alternating rounds (a shared
machine's speed can change during a run); the worst entry-wise difference to central
differences is printed too.

    .venv/bin/python bench/bench_jacobians.py [--repeats 20]

Werling et al. (RSS 2021), Table III, analytic vs central differences (per Jacobian, summed) on
one core: Atlas (33 dof, 12 contacts) 8.53 ms vs 749 ms (87.8x); Half Cheetah (9 dof, 2
contacts) 0.395 vs 8.64 ms; Jump-Worm (5 dof) 0.256 vs 3.82 ms; Catapult (5 dof) 0.265 vs
4.36 ms.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the paper; before phalanx loads

import argparse
import statistics
import time

import mujoco
import numpy as np

import phalanx
from _common import HUMANOID, RESULTS, write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "examples", "models")

# name, path, paper (analytic ms, central-difference ms) or None, seconds to settle first
CASES = [
    ("cartpole", os.path.join(MODELS, "cartpole.xml"), None, 0.0),
    ("half_cheetah", os.path.join(MODELS, "half_cheetah_planar.xml"), (0.395, 8.64), 0.0),
    ("jump_worm", os.path.join(MODELS, "jump_worm.xml"), (0.256, 3.82), 0.0),
    ("catapult", os.path.join(MODELS, "catapult.xml"), (0.265, 4.36), 0.0),
    ("humanoid", HUMANOID, (8.53, 749.0), 0.25),
]


def median_ms(*fs, repeats, rounds=5):
    """Median milliseconds of each of fs over `repeats` calls, timed in `rounds` turns (a few
    calls of f1, then of f2, ..., again): a change of the machine's speed during the run (a
    shared host) weighs on all of them alike, and each is timed in steady state, its data in
    cache as in a loop."""
    times = [[] for _ in fs]
    per_round = max(1, -(-repeats // rounds))
    for _ in range(rounds):
        for f, t in zip(fs, times):
            f()  # warm up (compiles the model on first use, fills the caches)
            for _ in range(per_round):
                start = time.perf_counter()
                f()
                t.append(1e3 * (time.perf_counter() - start))
    return [statistics.median(t) for t in times]


def state_in_contact(model, settle):
    """qpos0 at rest, or for the humanoid dropped on its back from 0.3 m, `settle` seconds later:
    0.25 s is just after landing, 10 contacts with no rows tied or at a class boundary (longer
    settling leaves it resting with tied rows, where the Jacobian is not defined and finite
    differences mix the classes on either side)."""
    qpos = model.qpos0[None].copy()
    qvel = np.zeros((1, model.nv))
    if settle > 0:
        qpos[0, 2] = 0.3
        qpos[0, 3:7] = [np.cos(np.pi / 4), 0.0, np.sin(np.pi / 4), 0.0]  # lying on its back
        n = int(settle / model.timestep)
        qs, vs, _ = phalanx.rollout(model, qpos, qvel, np.zeros((1, n, model.nu)))
        qpos, qvel = qs[:, -1].copy(), vs[:, -1].copy()
    return qpos, qvel, np.zeros((1, model.nu))


# Table III's five Jacobians: (output block, the input its finite differences perturb)
TABLE3 = [("dqpos_dqpos", "qpos"), ("dqvel_dqpos", "qpos"), ("dqpos_dqvel", "qvel"),
          ("dqvel_dqvel", "qvel"), ("dqvel_dqfrc", "qfrc")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=os.path.join(RESULTS, "jacobians.json"))
    args = parser.parse_args()
    rows = []
    print(f"one-step Jacobians, one core, median of {args.repeats}")
    print(f"  {'model':<13} {'nv':>3} {'ncon':>4} {'analytic':>10} {'central':>10} {'ridders':>10}"
          f" {'speedup':>8} {'per Jac.':>10} {'speedup':>8} {'paper':>8}"
          f"  max |analytic - central| / max |central|")
    for name, path, paper, settle in CASES:
        model = phalanx.load_model(path)
        model.lcp_solver = "pgs_stabilized"
        q, v, u = state_in_contact(model, settle)
        counts = np.empty((1, 1, phalanx.NUM_COUNTS), np.int32)
        phalanx.rollout(model, q, v, u[:, None], counts=counts)
        ncon = int(counts[0, 0, phalanx.COUNT_CONTACTS])
        per_jacobian = [lambda wrt=wrt: phalanx.step_jacobians_fd(model, q, v, u, wrt=wrt)
                        for _, wrt in TABLE3]
        t_an, t_cd, *t_jac = median_ms(lambda: phalanx.step_jacobians(model, q, v, u),
                                       lambda: phalanx.step_jacobians_fd(model, q, v, u),
                                       *per_jacobian, repeats=args.repeats)
        t_rd, = median_ms(lambda: phalanx.step_jacobians_fd(model, q, v, u, method="ridders"),
                          repeats=max(3, args.repeats // 5), rounds=1)
        jac = phalanx.step_jacobians(model, q, v, u)
        ref = phalanx.step_jacobians_fd(model, q, v, u)
        scale = max(np.abs(r).max() for r in ref.values())
        err = max(np.abs(jac[k] - r).max() for k, r in ref.items()) / scale
        # the five per-Jacobian calls give the same blocks as the shared one (central
        # differences of independent environments)
        for (block, wrt), f in zip(TABLE3, per_jacobian):
            assert np.array_equal(f()[block], ref[block]), (name, block)
        t_pj = sum(t_jac)
        speed, speed_pj = t_cd / t_an, t_pj / t_an
        paper_speed = f"{paper[1] / paper[0]:.1f}x" if paper else "-"
        print(f"  {name:<13} {model.nv:>3} {ncon:>4} {t_an:>8.3f}ms {t_cd:>8.3f}ms {t_rd:>8.3f}ms"
              f" {speed:>7.1f}x {t_pj:>8.3f}ms {speed_pj:>7.1f}x {paper_speed:>8}  {err:.1e}")
        rows.append({"model": name, "nv": model.nv, "contacts": ncon, "analytic_ms": t_an,
                     "central_ms": t_cd, "ridders_ms": t_rd, "speedup": speed,
                     "central_per_jacobian_ms": dict(zip([b for b, _ in TABLE3], t_jac)),
                     "speedup_per_jacobian": speed_pj,
                     "paper_ms": paper, "rel_diff_central": err})
        if name == "humanoid":
            mj = mujoco.MjModel.from_xml_path(path)
            d = mujoco.MjData(mj)
            d.qpos[:], d.qvel[:] = q[0], v[0]
            A = np.zeros((2 * mj.nv + mj.na, 2 * mj.nv + mj.na))
            B = np.zeros((2 * mj.nv + mj.na, mj.nu))
            t_an2, t_mj = median_ms(
                lambda: phalanx.step_jacobians(model, q, v, u),
                lambda: mujoco.mjd_transitionFD(mj, d, 1e-6, 1, A, B, None, None),
                repeats=args.repeats)
            print(f"  {'':<13} MuJoCo mjd_transitionFD (centred): {t_mj:.3f} ms, "
                  f"{t_mj / t_an2:.2f}x the analytic time ({t_an2:.3f} ms, timed in rounds with it)")
            rows[-1]["mujoco_transitionFD_ms"] = t_mj
    write_result({"threads": 1, "repeats": args.repeats, "models": rows}, args.out)


if __name__ == "__main__":
    main()
