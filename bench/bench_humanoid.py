"""Contact-free humanoid throughput: Phalanx (float32, float64) against MuJoCo in one run.

MuJoCo's humanoid.xml with contacts and joint limits disabled in both simulators (the smooth
dynamics alone; bench_humanoid_contact.py times them with contacts), E environments by T steps of
random controls, both CPU cores: Phalanx through phalanx.rollout, MuJoCo through mujoco.rollout
with one MjData per thread. Rollouts run in chunks of steps so the recorded trajectories stay small; every run is
repeated and the median is reported. Results are printed and written as JSON.

    .venv/bin/python bench/bench_humanoid.py [--envs 4096] [--steps 1000] [--repeats 3]
"""

import platform
import statistics
import time

import mujoco
import numpy as np
from tqdm import tqdm

import phalanx
from _common import HUMANOID, parse_args, time_mujoco, write_result

def random_controls(rng, nenv, nstep, nu):
    return rng.uniform(-1.0, 1.0, size=(nenv, nstep, nu))


def time_phalanx(model, qpos0, ctrl, chunk, dtype):
    nenv = ctrl.shape[0]
    qpos = np.repeat(qpos0[None].astype(dtype), nenv, axis=0)
    qvel = np.zeros((nenv, model.nv), dtype=dtype)
    ctrl = ctrl.astype(dtype)
    # trajectory buffers reused across chunks, as mujoco.rollout's state= below
    out = (np.empty((nenv, chunk, model.nq), dtype), np.empty((nenv, chunk, model.nv), dtype))
    start = time.perf_counter()
    for t0 in range(0, ctrl.shape[1], chunk):
        c = np.ascontiguousarray(ctrl[:, t0:t0 + chunk])
        n = c.shape[1]
        buffers = out if n == chunk else None
        qs, vs, status = phalanx.rollout(model, qpos, qvel, c, out=buffers)
        qpos, qvel = qs[:, n - 1].copy(), vs[:, n - 1].copy()
    elapsed = time.perf_counter() - start
    if np.any(status):
        raise RuntimeError(f"phalanx status bits set in {np.count_nonzero(status)} environments")
    return elapsed


def main():
    args = parse_args(__doc__.splitlines()[0], "humanoid_contact_free.json")

    mj_model = mujoco.MjModel.from_xml_path(HUMANOID)
    mj_model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    mj_model.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
    model = phalanx.load_model(HUMANOID)
    model.contact = model.limit = False
    rng = np.random.default_rng(0)
    ctrl = random_controls(rng, args.envs, args.steps, model.nu)
    env_steps = args.envs * args.steps

    runs = {"phalanx_float32": [], "phalanx_float64": [], "mujoco": []}
    phalanx.pack_stats()  # start the count of SIMD passes over environments
    for r in tqdm(range(args.repeats), desc="repeats", disable=None):
        runs["phalanx_float32"].append(time_phalanx(model, model.qpos0, ctrl, args.chunk, np.float32))
        runs["phalanx_float64"].append(time_phalanx(model, model.qpos0, ctrl, args.chunk, np.float64))
        runs["mujoco"].append(time_mujoco(mj_model, ctrl, args.chunk, args.threads))
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{k} {env_steps / v[-1]:,.0f} env-steps/s" for k, v in runs.items()), flush=True)

    packs = phalanx.pack_stats()
    median = {k: statistics.median(v) for k, v in runs.items()}
    rate = {k: env_steps / v for k, v in median.items()}
    result = {
        "benchmark": "humanoid contact-free rollout (contacts and joint limits disabled)",
        "model": HUMANOID,
        "envs": args.envs,
        "steps": args.steps,
        "threads": args.threads,
        "repeats": args.repeats,
        "machine": platform.processor() or platform.machine(),
        "median_seconds": median,
        "env_steps_per_second": rate,
        "ratio_float32_vs_mujoco": rate["phalanx_float32"] / rate["mujoco"],
        "ratio_float64_vs_mujoco": rate["phalanx_float64"] / rate["mujoco"],
        # steps of packs of environments on SIMD lanes, and those that fell back to one
        # environment at a time (lanes that branched apart)
        "simd_pack_steps": packs["passes"],
        "simd_pack_fallbacks": packs["fallbacks"],
        "bytes_per_env": {
            "float32": phalanx.bytes_per_env(model, dtype=np.float32),
            "float64": phalanx.bytes_per_env(model, dtype=np.float64),
        },
    }
    print()
    print(f"humanoid, contacts and limits off, {args.envs} envs x {args.steps} steps, "
          f"{args.threads} threads, median of {args.repeats}")
    for k in runs:
        print(f"  {k:16s} {rate[k]:>14,.0f} env-steps/s   ({median[k]:.2f} s)")
    print(f"  ratio float32 / MuJoCo: {result['ratio_float32_vs_mujoco']:.2f}x (target >= 4x)")
    print(f"  ratio float64 / MuJoCo: {result['ratio_float64_vs_mujoco']:.2f}x")
    print(f"  SIMD pack steps: {packs['passes']:,}, of which fell back to one environment at a "
          f"time: {packs['fallbacks']:,}")
    print(f"  device memory per env: {result['bytes_per_env']['float32']} B (float32), "
          f"{result['bytes_per_env']['float64']} B (float64)")
    write_result(result, args.out)


if __name__ == "__main__":
    main()
