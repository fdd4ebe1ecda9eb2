"""Humanoid with contacts: Phalanx float32 (projected Gauss-Seidel) against MuJoCo in one run.

MuJoCo's humanoid.xml as it is (floor and self-collision as the model declares them, joint
limits on), E environments by T steps of random controls from the model's standing pose, both CPU
cores: Phalanx through phalanx.rollout, MuJoCo through mujoco.rollout with one MjData per thread.
Besides env-steps/s (median of the repeats) it reports contacts per step, constraint rows, PGS
sweeps and the fraction of rows warm-started from the previous step. Results go to JSON.

    .venv/bin/python bench/bench_humanoid_contact.py [--envs 4096] [--steps 1000] [--repeats 3]
"""

import platform

import mujoco
import numpy as np

import phalanx
from _common import HUMANOID, parse_args, race, time_phalanx, write_result

def main():
    args = parse_args(__doc__.splitlines()[0], "humanoid_contact.json")

    mj_model = mujoco.MjModel.from_xml_path(HUMANOID)
    model = phalanx.load_model(HUMANOID)
    rng = np.random.default_rng(0)
    ctrl = rng.uniform(-1.0, 1.0, size=(args.envs, args.steps, model.nu))
    median, rate, stats, flags = race("humanoid", model, mj_model, ctrl, args)
    ncon, nefc, nwarm, overflow = stats["contacts"], stats["rows"], stats["warm_rows"], stats["overflow"]

    # Nimble's stabilised solver: exact re-solve on the clamping set, warm-started from the
    # previous step's set; its hit rate is the fraction of constrained steps the guess solved
    model.lcp_solver = "pgs_stabilized"
    n_stab = max(1, args.envs // 8)
    stab_time, stab_stats, _ = time_phalanx(model, ctrl[:n_stab], args.chunk)
    model.lcp_solver = "pgs"
    stab_rate = n_stab * args.steps / stab_time

    result = {
        "benchmark": "humanoid with contacts (floor and self-collision) and joint limits",
        "model": HUMANOID,
        "envs": args.envs,
        "steps": args.steps,
        "threads": args.threads,
        "repeats": args.repeats,
        "machine": platform.processor() or platform.machine(),
        "median_seconds": median,
        "env_steps_per_second": rate,
        "ratio_float32_vs_mujoco": rate["phalanx_float32"] / rate["mujoco"],
        "contacts_per_step": ncon,
        "lcp_rows_per_step": nefc,
        "pgs_sweeps": model.lcp_iterations,
        "warm_start_row_fraction": nwarm / nefc if nefc else 0.0,
        "contacts_over_capacity_per_step": overflow,
        "stabilized_env_steps_per_second": stab_rate,
        "stabilized_envs": n_stab,
        "clamping_set_warm_start_hit_rate": stab_stats["set_hit_rate"],
        "status_bits_seen": flags,
        "bytes_per_env_float32": phalanx.bytes_per_env(model, dtype=np.float32),
    }
    print()
    print(f"humanoid with contacts, {args.envs} envs x {args.steps} steps, {args.threads} threads, "
          f"median of {args.repeats}")
    for k in rate:
        print(f"  {k:16s} {rate[k]:>14,.0f} env-steps/s   ({median[k]:.2f} s)")
    print(f"  ratio float32 / MuJoCo: {result['ratio_float32_vs_mujoco']:.2f}x (target >= 3x)")
    print(f"  contacts per step {ncon:.2f}, LCP rows {nefc:.2f}, PGS sweeps "
          f"{model.lcp_iterations}, rows warm-started {100 * result['warm_start_row_fraction']:.1f}%")
    print(f"  pgs_stabilized ({n_stab} envs): {stab_rate:,.0f} env-steps/s, clamping-set warm start "
          f"hit rate {100 * stab_stats['set_hit_rate']:.1f}% (Nimble: > 95%)")
    write_result(result, args.out)


if __name__ == "__main__":
    main()
