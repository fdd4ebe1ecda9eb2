"""The main job: a batched rollout of MuJoCo's humanoid on the CPU, printing env-steps/s.

Thousands of humanoids (contact-free for now) are stepped in lockstep with random controls by
one call per chunk of steps; the final heights show that each environment ran its own controls.

    .venv/bin/python examples/humanoid_rollout.py [--envs 4096] [--steps 1000] [--dtype float32]
"""

import argparse
import time

import numpy as np

import phalanx

HUMANOID = "/usr/share/mujoco/model/humanoid/humanoid.xml"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()

    model = phalanx.load_model(HUMANOID)
    print(f"{model!r}; ignored by the loader: {len(model.ignored)} kinds of element")
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(0)
    qpos = np.repeat(model.qpos0[None].astype(dtype), args.envs, axis=0)
    qvel = np.zeros((args.envs, model.nv), dtype=dtype)

    start = time.perf_counter()
    done = 0
    while done < args.steps:
        n = min(args.chunk, args.steps - done)
        ctrl = rng.uniform(-1, 1, size=(args.envs, n, model.nu)).astype(dtype)
        t0 = time.perf_counter()
        qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
        qpos, qvel = np.ascontiguousarray(qs[:, -1]), np.ascontiguousarray(vs[:, -1])
        done += n
        rate = args.envs * n / (time.perf_counter() - t0)
        print(f"  step {done:5d}/{args.steps}: {rate:,.0f} env-steps/s", flush=True)
    elapsed = time.perf_counter() - start

    z = qpos[:, 2]
    print(f"{args.envs} humanoids x {args.steps} steps ({args.dtype}, cpu) in {elapsed:.2f} s: "
          f"{args.envs * args.steps / elapsed:,.0f} env-steps/s")
    print(f"torso height after {args.steps * model.timestep:.1f} s: min {z.min():.2f} m, "
          f"max {z.max():.2f} m (no contact yet: the humanoids fall freely); "
          f"status bits set in {np.count_nonzero(status)} environments")


if __name__ == "__main__":
    main()
