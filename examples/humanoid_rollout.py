"""Raw throughput: a batched rollout of MuJoCo's humanoid on the CPU, printing env-steps/s.

Thousands of humanoids are stepped in lockstep with random controls, with hard contact against
the floor and between body parts and joint limits (one boxed LCP per environment, projected
Gauss-Seidel), one call per chunk of steps. The final heights show that the humanoids fell and
lie on the floor, each after its own controls.

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
    counts = np.zeros((args.envs, args.chunk, phalanx.NUM_COUNTS), np.int32)
    contacts = rows = 0.0

    start = time.perf_counter()
    done = 0
    while done < args.steps:
        n = min(args.chunk, args.steps - done)
        ctrl = rng.uniform(-1, 1, size=(args.envs, n, model.nu)).astype(dtype)
        t0 = time.perf_counter()
        qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl, counts=counts[:, :n])
        qpos, qvel = np.ascontiguousarray(qs[:, -1]), np.ascontiguousarray(vs[:, -1])
        done += n
        rate = args.envs * n / (time.perf_counter() - t0)
        contacts = counts[:, :n, phalanx.COUNT_CONTACTS].mean()
        rows = counts[:, :n, phalanx.COUNT_ROWS].mean()
        print(f"  step {done:5d}/{args.steps}: {rate:,.0f} env-steps/s, "
              f"{contacts:.1f} contacts and {rows:.1f} LCP rows per env", flush=True)
    elapsed = time.perf_counter() - start

    z = qpos[:, 2]
    print(f"{args.envs} humanoids x {args.steps} steps ({args.dtype}, cpu, contacts on) in "
          f"{elapsed:.2f} s: {args.envs * args.steps / elapsed:,.0f} env-steps/s")
    print(f"torso height after {args.steps * model.timestep:.1f} s: min {z.min():.2f} m, "
          f"max {z.max():.2f} m (standing height 1.4 m, lying about 0.1-0.3 m)")
    stop = phalanx.STATUS_NAN_STATE | phalanx.STATUS_NAN_CTRL | phalanx.STATUS_NAN_RESULT
    print(f"environments with non-finite state: {np.count_nonzero(status & stop)}; with an LCP "
          f"residual above {model.lcp_residual_limit:g} m/s at some step: "
          f"{np.count_nonzero(status & phalanx.STATUS_LCP_NOT_CONVERGED)}")


if __name__ == "__main__":
    main()
