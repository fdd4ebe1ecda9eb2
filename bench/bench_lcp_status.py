"""How often STATUS_LCP_NOT_CONVERGED is raised, and what finishing stalled steps costs.

MuJoCo's humanoid falls from its standing pose under controls drawn uniformly over the control
range at every step (projected Gauss-Seidel, 30 sweeps). For lcp_residual_limit at 1 mm/s, 1 cm/s
(the default) and 10 cm/s it counts the env-steps that end flagged and the environments flagged
at some step, in float32 and float64. Steps are taken one at a time (phalanx.step) so that each
step's bit is seen. Then the cost: the same rollout in float32 with the default limit against a
limit of 1e9 m/s (no step ever finished), alternating, median of the repeats.

    .venv/bin/python bench/bench_lcp_status.py [--envs 256] [--steps 600] [--repeats 5]
"""

import statistics
import time

import numpy as np
from tqdm import tqdm

import phalanx
from _common import HUMANOID, parse_args, write_result

LIMITS = (1e-3, 1e-2, 1e-1)


def flagged(model, ctrl, dtype):
    """(env-steps flagged, environments flagged at some step) of a fall under ctrl (E, T, nu)"""
    nenv = ctrl.shape[0]
    qpos = np.repeat(model.qpos0[None], nenv, axis=0).astype(dtype)
    qvel = np.zeros((nenv, model.nv), dtype)
    ctrl = ctrl.astype(dtype)
    steps = 0
    envs = np.zeros(nenv, bool)
    for t in range(ctrl.shape[1]):
        qpos, qvel, status = phalanx.step(model, qpos, qvel, ctrl[:, t])
        if (status & phalanx.STATUS_STOP_MASK).any():
            raise RuntimeError(f"an environment stopped at step {t}")
        bit = (status & phalanx.STATUS_LCP_NOT_CONVERGED) != 0
        steps += int(bit.sum())
        envs |= bit
    # the fall is a fall: the torsos end on the floor, from 1.3 m
    assert np.median(qpos[:, 2]) < 0.5
    return steps, int(envs.sum())


def rollout_seconds(model, ctrl, chunk):
    """seconds of a float32 rollout of ctrl from the standing pose, in chunks of steps"""
    nenv = ctrl.shape[0]
    qpos = np.repeat(model.qpos0[None], nenv, axis=0).astype(np.float32)
    qvel = np.zeros((nenv, model.nv), np.float32)
    start = time.perf_counter()
    for t0 in range(0, ctrl.shape[1], chunk):
        qs, vs, _ = phalanx.rollout(model, qpos, qvel, np.ascontiguousarray(ctrl[:, t0:t0 + chunk]))
        qpos, qvel = qs[:, -1].copy(), vs[:, -1].copy()
    return time.perf_counter() - start


def main():
    args = parse_args(__doc__.splitlines()[0], "lcp_status.json", envs=256, steps=600)
    model = phalanx.load_model(HUMANOID)
    default_limit = model.lcp_residual_limit
    rng = np.random.default_rng(0)
    ctrl = rng.uniform(-1.0, 1.0, size=(args.envs, args.steps, model.nu))
    env_steps = args.envs * args.steps

    rows = []
    for dtype in (np.float32, np.float64):
        for limit in LIMITS:
            model.lcp_residual_limit = limit
            steps, envs = flagged(model, ctrl, dtype)
            rows.append({"dtype": np.dtype(dtype).name, "limit": limit, "env_steps_flagged": steps,
                         "envs_flagged": envs})
            print(f"{np.dtype(dtype).name:8s} limit {limit:g} m/s: {steps} of {env_steps} "
                  f"env-steps flagged ({100 * steps / env_steps:.3f} %), {envs} of {args.envs} "
                  f"environments at some step", flush=True)

    ctrl32 = ctrl.astype(np.float32)
    times = {"default": [], "never_finished": []}
    for r in tqdm(range(args.repeats), desc="repeats", disable=None):
        for name, limit in (("default", default_limit), ("never_finished", 1e9)):
            model.lcp_residual_limit = limit
            times[name].append(rollout_seconds(model, ctrl32, args.chunk))
    median = {k: statistics.median(v) for k, v in times.items()}
    ratio = median["default"] / median["never_finished"]
    print(f"float32 rollout, median of {args.repeats}: limit {default_limit:g} m/s "
          f"{median['default']:.3f} s, never finished {median['never_finished']:.3f} s: "
          f"{ratio:.3f}x the time")
    model.lcp_residual_limit = default_limit

    write_result({
        "benchmark": "STATUS_LCP_NOT_CONVERGED in a humanoid fall under random controls",
        "model": HUMANOID, "envs": args.envs, "steps": args.steps, "threads": args.threads,
        "lcp_iterations": model.lcp_iterations, "lcp_max_iterations": model.lcp_max_iterations,
        "flagged": rows, "seconds_median": median, "cost_ratio": ratio,
    }, args.out)


if __name__ == "__main__":
    main()
