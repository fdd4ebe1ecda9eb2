"""The benchmark a GPU owner runs first: Phalanx on CUDA in float32 over batch sizes from 1k to
64k environments, beside MuJoCo Warp and MJX on the same GPU when they are installed.

MuJoCo's humanoid (contacts and joint limits on), each environment dropped from its initial
pose with random joint speeds and random controls held over the run (fixed seed). For each
batch size E:

1. rollout with contacts: E x T steps in chunks of --chunk steps (the trajectories come back
   to the host after each chunk, and that copy is part of the time), env-steps/s;
2. forward + backward: a taped rollout of --grad-steps steps and tape.backward, env-steps/s of
   the pair and its time over the forward rollout's;
3. one MPPI iteration: one problem with E samples over a horizon of --horizon steps and a
   quadratic cost, seconds per iteration and sample-steps/s.

References, the same model, E and steps, each only when its package is installed and sees the
GPU: MuJoCo Warp (`mujoco_warp`: put_model, put_data with nworld = E, mjw.step captured in a CUDA
graph, one launch per step) and MJX (`mujoco.mjx`: jax.jit of jax.vmap(mjx.step) over a
lax.scan of the steps). Their published figures for scale: MuJoCo Warp 3.97 M humanoid
steps/s at 8192 worlds on an RTX 6000 Blackwell, MJX 0.95 M on an A100.

Every figure is the median of --repeats runs after a warm-up run. Without a GPU the script says
so and exits 0. A build with PHX_CUDA_EMULATION has a CUDA device that runs on the CPU:
--emulated runs the script on it (tiny sizes) to check it, its timings are the CPU's.

    .venv/bin/python bench/bench_gpu.py [--envs 1024 4096 16384 65536] [--steps 1000]
                                        [--repeats 3] [--emulated]

Results go to bench/results/gpu.json.
"""

import argparse
import os
import sys

import numpy as np

import _common as common
from _common import HUMANOID, RESULTS, write_result
PUBLISHED = {"MuJoCo Warp": "3.97 M steps/s, humanoid, 8192 worlds, RTX 6000 Blackwell",
             "MJX": "0.95 M steps/s, humanoid, A100"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=100)
    parser.add_argument("--grad-steps", type=int, default=100)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--emulated", action="store_true",
                        help="run on an emulated CUDA device (PHX_CUDA_EMULATION build)")
    parser.add_argument("--no-references", action="store_true")
    parser.add_argument("--out", default=os.path.join(RESULTS, "gpu.json"))
    return parser.parse_args(argv)


def median_seconds(f, repeats):
    """after a warm-up call (allocation, compilation, graph capture)"""
    return common.median_seconds(f, repeats, warmup=True)


def start_state(nq, nv, nu, qpos0, nenv, seed):
    """the initial pose with random joint speeds, and random controls (float32)"""
    rng = np.random.default_rng(seed)
    qpos = np.repeat(qpos0[None], nenv, axis=0).astype(np.float32)
    qvel = rng.uniform(-0.5, 0.5, (nenv, nv)).astype(np.float32)
    ctrl = rng.uniform(-0.4, 0.4, (nenv, nu)).astype(np.float32)
    return qpos, qvel, ctrl


def phalanx_runs(phalanx, model, nenv, args):
    """env-steps/s of the rollout and of forward + backward, the backward's cost over the
    forward, and one MPPI iteration's seconds"""
    from phalanx import control, costs

    qpos, qvel, ctrl = start_state(model.nq, model.nv, model.nu, model.qpos0, nenv, args.seed)
    chunk = min(args.chunk, args.steps)
    ctrls = np.ascontiguousarray(np.repeat(ctrl[:, None], chunk, axis=1))
    out = (np.empty((nenv, chunk, model.nq), np.float32),
           np.empty((nenv, chunk, model.nv), np.float32))

    def rollout():
        q, v = qpos, qvel
        for _ in range(args.steps // chunk):
            qs, vs, status = phalanx.rollout(model, q, v, ctrls, out=out, device="cuda")
            q, v = qs[:, -1].copy(), vs[:, -1].copy()
        phalanx.raise_if_stopped(status, "rollout")

    steps = args.steps // chunk * chunk
    result = {"rollout_env_steps_per_s": nenv * steps / median_seconds(rollout, args.repeats)}

    T = args.grad_steps
    grad_ctrl = np.ascontiguousarray(np.repeat(ctrl[:, None], T, axis=1))
    rng = np.random.default_rng(args.seed + 1)
    adj = (rng.standard_normal((nenv, T, model.nq)).astype(np.float32),
           rng.standard_normal((nenv, T, model.nv)).astype(np.float32))
    forward = median_seconds(
        lambda: phalanx.rollout(model, qpos, qvel, grad_ctrl, device="cuda"), args.repeats)

    def forward_backward():
        tape = phalanx.Tape()
        phalanx.rollout(model, qpos, qvel, grad_ctrl, tape=tape, device="cuda")
        tape.backward(*adj)
    both = median_seconds(forward_backward, args.repeats)
    result["forward_backward_env_steps_per_s"] = nenv * T / both
    result["backward_over_forward"] = both / forward

    cost = costs.Quadratic(model, qpos_target=model.qpos0, qpos_weight=1.0, qvel_weight=0.01,
                           ctrl_weight=0.01)
    planner = control.MPPI(model, args.horizon, nenv, 0.3, 0.5, cost=cost, dtype=np.float32,
                           device="cuda")
    seconds = median_seconds(lambda: planner.plan(qpos[:1], qvel[:1]), args.repeats)
    result["mppi_iteration_s"] = seconds
    result["mppi_sample_steps_per_s"] = nenv * args.horizon / seconds
    return result


def mujoco_warp_run(mj_model, nenv, args):
    """env-steps/s of MuJoCo Warp stepping nworld = nenv, one captured graph launch per step"""
    import mujoco
    import mujoco_warp as mjw
    import warp as wp

    wp.init()
    qpos, qvel, ctrl = start_state(mj_model.nq, mj_model.nv, mj_model.nu, mj_model.qpos0, nenv,
                                   args.seed)
    m = mjw.put_model(mj_model)
    d = mjw.put_data(mj_model, mujoco.MjData(mj_model), nworld=nenv)
    d.qpos.assign(qpos)
    d.qvel.assign(qvel)
    d.ctrl.assign(ctrl)
    with wp.ScopedCapture() as capture:
        mjw.step(m, d)

    def run():
        for _ in range(args.steps):
            wp.capture_launch(capture.graph)
        wp.synchronize()
    return nenv * args.steps / median_seconds(run, args.repeats)


def mjx_run(mj_model, nenv, args):
    """env-steps/s of MJX: jax.vmap(mjx.step) scanned over the steps under jax.jit"""
    import jax
    from mujoco import mjx

    if jax.default_backend() != "gpu":
        raise RuntimeError(f"JAX runs on {jax.default_backend()}, not the GPU")
    qpos, qvel, ctrl = start_state(mj_model.nq, mj_model.nv, mj_model.nu, mj_model.qpos0, nenv,
                                   args.seed)
    mx = mjx.put_model(mj_model)
    d0 = mjx.make_data(mx)
    batch = jax.vmap(lambda q, v, u: d0.replace(qpos=q, qvel=v, ctrl=u))(qpos, qvel, ctrl)
    step = jax.vmap(lambda d: mjx.step(mx, d))

    @jax.jit
    def run(d):
        return jax.lax.scan(lambda d, _: (step(d), None), d, None, length=args.steps)[0]
    return nenv * args.steps / median_seconds(
        lambda: jax.block_until_ready(run(batch)), args.repeats)


def main(argv=None):
    args = parse_args(argv)
    import phalanx

    if not phalanx.cuda_available():
        print("bench_gpu: no CUDA device is visible (or this build has no CUDA backend); "
              "nothing to measure on this machine.")
        return 0
    if phalanx.cuda_emulated() and not args.emulated:
        print("bench_gpu: this build's CUDA device is the CPU emulation (PHX_CUDA_EMULATION); "
              "its timings are not a GPU's. --emulated runs the script on it anyway.")
        return 0
    model = phalanx.load_model(HUMANOID)
    result = {"benchmark": "GPU throughput", "model": "humanoid", "dtype": "float32",
              "steps": args.steps, "emulated": phalanx.cuda_emulated(), "sizes": {}}
    references = {}
    if not args.no_references:
        import mujoco
        mj_model = mujoco.MjModel.from_xml_path(HUMANOID)
        references = {"MuJoCo Warp": mujoco_warp_run, "MJX": mjx_run}
    per_env = phalanx._phalanx.bytes_per_env_float32(model, device="cuda")
    print(f"humanoid, float32, {args.steps} steps, {per_env / 1e6:.2f} MB of device memory per "
          "environment (state and step scratch)" + (" (emulated device)"
                                                      if phalanx.cuda_emulated() else ""))
    for nenv in args.envs:
        try:
            row = phalanx_runs(phalanx, model, nenv, args)
        except RuntimeError as e:  # a batch beyond the device's memory: the next may fit
            print(f"  E = {nenv:6d}: not measured ({e}; {nenv * per_env / 1e9:.1f} GB of state "
                  "and scratch alone)")
            result["sizes"][str(nenv)] = {"not_measured": str(e)}
            continue
        print(f"  E = {nenv:6d}: rollout {row['rollout_env_steps_per_s'] / 1e6:8.3f} M env-steps/s"
              f"   fwd+bwd {row['forward_backward_env_steps_per_s'] / 1e6:8.3f} M"
              f" ({row['backward_over_forward']:.2f} x fwd)"
              f"   MPPI iteration {row['mppi_iteration_s'] * 1e3:8.2f} ms")
        for name, run in references.items():
            try:
                rate = run(mj_model, nenv, args)
            except Exception as e:  # not installed, no GPU for it, or an API it changed
                print(f"    {name}: not measured ({type(e).__name__}: {e})")
                row[name] = {"not_measured": f"{type(e).__name__}: {e}"}
                continue
            row[name] = rate
            print(f"    {name:12s} {rate / 1e6:8.3f} M env-steps/s; Phalanx "
                  f"{row['rollout_env_steps_per_s'] / rate:.2f} x (published: {PUBLISHED[name]})")
        result["sizes"][str(nenv)] = row
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
