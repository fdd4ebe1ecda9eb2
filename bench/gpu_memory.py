"""Global-memory bytes per env-step of the GPU kernels, and the memory roofline they imply.

Runs here, without a GPU: the CPU backend runs the same kernel bodies as the CUDA backend, over
scratch split as the CUDA backend splits it (phalanx._phalanx.scratch_trace records how much of
it each environment writes). On MuJoCo's humanoid in float32, dropped from its initial pose with
random joint speeds and controls (contacts and limits on, as bench_gpu.py), for each kernel:

  scratch given    the scratch one environment's thread owns (KB)
  scratch written  how much of it the kernel writes over a launch of --steps steps (KB)
  local written    of that, the fixed storage: the reals sized by the model's counts alone
                   (the workspace of the stages of fixed structure and their adjoints) and what
                   a rollout holds for its launch (the state, the contacts), which the CUDA
                   backend keeps in the thread's local memory
  rows written     and the arrays sized by the model's capacities that the CUDA backend lays
                   out interleaved across a warp's environments in the kernels that step
                   forward, in the step's vjp, which replays the step, and in the taped
                   rollout's reverse kernel, which recomputes and replays steps (the constraint
                   rows J and Y, the LCP's matrix, vectors and friction links, the sweeps'
                   scratch, the exact solvers' storage and the LCP adjoint's factorisation, the
                   previous step's rows, the adjoint's adj_J, and all that the tape's slots
                   keep); the rest (the adjoint's capacity-sized vectors and the contacts'
                   adjoints) is the thread's own block of global memory. The rollout holds
                   the state and the contacts in fixed storage of its scratch (traced as
                   local), read from the batch's arrays before a launch's steps and written
                   back after; on CUDA it runs as a launch per step beside a detection stage
                   (the narrowphase), so the model below adds per step the state read, the
                   contacts and their rows' warm start (the rollout's mean counts) read and
                   written, and the contacts the detection found read. The kernels that take
                   one step (the step, its vjp) step the batch's state and contacts in place:
                   those are not traced, and the model counts only the step's input and output
  bytes/env-step   the DRAM traffic of one env-step under this model of it: every written
                   scratch number is written once and read back once per step (a lower bound:
                   the LCP's iterations read their rows many times), plus the step's own
                   input and output (ctrl read; qpos, qvel written). A thread's working set
                   (tens of KB) times the threads resident on an SM is far beyond its L1 and
                   the GPU's L2, so the traffic goes to DRAM. Where an environment's scratch is
                   one contiguous block, a warp's 32 loads of one number touch 32 distant
                   32-byte sectors, so every 4-byte float moves 32 bytes (x8); local memory is
                   interleaved word by word across a warp's threads, and the rows are laid out
                   so, so there the warp's loads coalesce (x1). Three layouts: every array in
                   per-environment blocks (the layout before local memory), the backend's
                   (local memory for the fixed reals, the rows interleaved, blocks for the
                   rest), and the environment index fastest everywhere (the bound were every
                   capacity-sized array interleaved).
  capacity         environments whose state and step scratch fit in 40 GB
                   (phalanx._phalanx.bytes_per_env_float32): the scratch is sized for the
                   model's capacities (nconmax contacts, their dense LCP rows), not for what a
                   step writes.
  roofline         env-steps/s <= DRAM bandwidth / (bytes per env-step): an upper bound from
                   memory traffic alone (compute and latency bound it further), on an A100
                   (1.56 TB/s, MJX's published 0.95 M humanoid steps/s) and an RTX 6000
                   Blackwell (1.79 TB/s, MuJoCo Warp's 3.97 M at 8192 worlds).

Kernels: the rollout (one env-step per step), its detection stage (phalanx.contacts without
forces, from each state it passes through: the same kinematics, geom frames and narrowphase,
the contacts written to its scratch as the stage writes them for the step; the roofline adds it
to the rollout's),
the taped rollout's reverse pass (per step of the tape, on top of the forward), and the step
(phalanx.step) and its vector-Jacobian product (phalanx.step_vjp), one step per launch, from
each state the rollout passes through; of the kernels launched from each state, the state with
the median bytes per env-step in the backend's layout is shown. A launch of
many steps counts every entry any of its steps wrote, so a path a step rarely takes (the
exact finish of sweeps that stalled, which writes the exact solvers' storage) weighs in the
rollout's figure as if every step took it; one step per launch weighs it by how often it
runs.

    .venv/bin/python bench/gpu_memory.py [--envs 8] [--steps 100]

Results go to bench/results/gpu_memory.json.
"""

import argparse
import os

import numpy as np

import phalanx
from _common import HUMANOID, RESULTS, write_result

# DRAM bandwidth (bytes/s) and the published humanoid throughput measured on the GPU
GPUS = {"A100 (40 GB)": (1.555e12, "MJX", 0.95e6),
        "RTX 6000 Blackwell": (1.792e12, "MuJoCo Warp", 3.97e6)}
SECTOR = 32  # bytes a DRAM transaction moves at the least
PER_ENV = SECTOR // 4  # bytes moved per 4-byte word by a warp's loads from 32 distant blocks
BACKEND = (1, 1, PER_ENV)  # traffic()'s factors in the backend's layout


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(RESULTS, "gpu_memory.json"))
    return parser.parse_args(argv)


def traced(run):
    """run() with the scratch trace on: (entries given, entries written), each as (reals,
    ints, fixed reals, interleaved reals, interleaved ints, fixed ints)"""
    trace = phalanx._phalanx.scratch_trace
    trace(True)
    try:
        run()
    finally:
        t = trace(False)
    parts = ("reals", "ints", "fixed", "rows", "irows", "ifixed")
    return tuple(tuple(t[f"{kind}_{part}"] for part in parts) for kind in ("given", "written"))


def kernel_rows(model, nenv, nstep, seed):
    """per kernel: scratch bytes given and written, of those written the ones in local memory
    and the interleaved rows, and the step's own input and output bytes"""
    rng = np.random.default_rng(seed)
    f = np.float32
    qpos = np.repeat(model.qpos0[None], nenv, axis=0).astype(f)
    qvel = rng.uniform(-0.5, 0.5, (nenv, model.nv)).astype(f)
    ctrl = np.repeat(rng.uniform(-0.4, 0.4, (nenv, 1, model.nu)), nstep, axis=1).astype(f)
    real = np.dtype(f).itemsize
    io = real * (model.nu + model.nq + model.nv)
    adj = (np.ones((nenv, nstep, model.nq), f), np.ones((nenv, nstep, model.nv), f))
    tape = phalanx.Tape()
    runs = {
        "rollout": lambda: phalanx.rollout(model, qpos, qvel, ctrl),
        "rollout reverse (Tape.backward)": None,
    }
    rows = {}
    for name, run in runs.items():
        if run is None:  # the reverse pass, traced alone after an untraced taped forward
            phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
            run = lambda: tape.backward(*adj)  # noqa: E731
        rows[name] = kernel_row(*traced(run), real, io)
    # the step and its vector-Jacobian product from each state of the rollout, one launch each
    # (the vjp reads the state, controls and two adjoints, and writes four gradients)
    counts = np.zeros((nenv, nstep, phalanx.NUM_COUNTS), np.int32)
    qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl, counts=counts)
    # The rollout's launches of stages: per step its state read again, and its contacts and
    # their rows' warm start read in and written back, and the contacts the detection stage
    # found read (the detection's row counts their writing)
    ncon = counts[..., phalanx.COUNT_CONTACTS].mean()
    nefc = counts[..., phalanx.COUNT_ROWS].mean()
    contact = 13 * real + 3 * 4  # pos, frame, dist; the geoms and the key
    row = real + 2 * 4  # impulse; key and class
    rows["rollout"]["io"] += (real * (model.nq + model.nv) + 2 * (ncon * contact + nefc * row)
                              + ncon * contact)
    # the detection stage of each step: its kinematics, geom frames and the contacts it writes,
    # from each state (the narrowphase query runs the same functions, its contacts in scratch)
    rows["detection stage (median state)"] = median_state(
        lambda k: phalanx.contacts(model, qs[:, k], forces=False, dtype=np.float32), nstep,
        real, real * model.nq)
    rows["step (median state)"] = median_state(
        lambda k: phalanx.step(model, qs[:, k], vs[:, k], ctrl[:, k]), nstep, real, io)
    io_vjp = real * (3 * model.nq + 4 * model.nv + 2 * model.nu)
    rows["step_vjp reverse (median state)"] = median_state(
        lambda k: phalanx.step_vjp(model, qs[:, k], vs[:, k], ctrl[:, k], adj[0][:, k],
                                   adj[1][:, k]), nstep, real, io_vjp)
    return rows


def median_state(launch, nstep, real, io):
    """a kernel launched once from each state k of a rollout (launch(k)): the row of the state
    with the median bytes per env-step in the backend's layout, with how many states' launches
    wrote scratch outside local memory and the interleaved rows"""
    states = [kernel_row(*traced(lambda: launch(k)), real, io) for k in range(nstep)]
    states.sort(key=lambda row: traffic(row, *BACKEND))
    elsewhere = sum(row["written"] > row["local"] + row["rows"] for row in states)
    return dict(states[nstep // 2], states=nstep, states_elsewhere=elsewhere)


def kernel_row(given, written, real, io):
    """a kernel's bytes from its traced entries (traced) and its input and output bytes"""
    return {"given": given[0] * real + given[1] * 4,
            "written": written[0] * real + written[1] * 4,
            "local": written[2] * real + written[5] * 4,
            "rows": written[3] * real + written[4] * 4, "io": io}


def traffic(row, local, rows, elsewhere):
    """bytes per env-step: written scratch out and back in, scaled by the sector amplification
    of where it lives (local memory's, the interleaved rows', the rest's), plus the step's input
    and output"""
    rest = row["written"] - row["local"] - row["rows"]
    return 2 * (row["local"] * local + row["rows"] * rows + rest * elsewhere) + row["io"]


def main(argv=None):
    args = parse_args(argv)
    model = phalanx.load_model(HUMANOID)
    rows = kernel_rows(model, args.envs, args.steps, args.seed)
    layouts = {"per-env blocks": (PER_ENV, PER_ENV, PER_ENV),
               "local, rows interleaved, blocks (the backend's)": BACKEND,
               "env index fastest": (1, 1, 1)}
    result = {"benchmark": "GPU memory traffic", "model": "humanoid", "dtype": "float32",
              "envs": args.envs, "steps": args.steps, "kernels": {}}
    print(f"humanoid, float32, {args.envs} environments x {args.steps} steps (the CPU backend "
          "runs the GPU's kernel bodies)")
    print(f"{'kernel':32s} {'given KB':>9s} {'written KB':>10s} {'local KB':>8s} "
          f"{'rows KB':>7s}   bytes/env-step by layout")
    for name, row in rows.items():
        per_layout = {layout: traffic(row, *a) for layout, a in layouts.items()}
        result["kernels"][name] = {"scratch_given_bytes": row["given"],
                                   "scratch_written_bytes": row["written"],
                                   "local_written_bytes": row["local"],
                                   "rows_written_bytes": row["rows"],
                                   "io_bytes": row["io"], "bytes_per_env_step": per_layout}
        shown = ", ".join(f"{layout}: {b / 1e3:.0f} KB" for layout, b in per_layout.items())
        print(f"{name:32s} {row['given'] / 1e3:9.1f} {row['written'] / 1e3:10.1f} "
              f"{row['local'] / 1e3:8.1f} {row['rows'] / 1e3:7.1f}   {shown}")
        if "states" in row:
            result["kernels"][name]["states_writing_elsewhere"] = row["states_elsewhere"]
            print(f"{'':32s} of the {row['states']} states, {row['states_elsewhere']} wrote "
                  "scratch outside local memory and the interleaved rows")
    per_env = phalanx._phalanx.bytes_per_env_float32(model)
    result["bytes_per_env"] = per_env
    result["envs_in_40GB"] = int(40e9 // per_env)
    print(f"\nstate and step scratch per environment: {per_env / 1e6:.2f} MB, "
          f"{int(40e9 // per_env)} environments in 40 GB")
    print("\nroofline of the rollout, its steps and their detection stages (env-steps/s from DRAM "
          "traffic alone; an upper bound):")
    result["roofline"] = {}
    kernels = result["kernels"]
    steps = kernels["rollout"]["bytes_per_env_step"]
    detection = kernels["detection stage (median state)"]["bytes_per_env_step"]
    rollout = {layout: b + detection[layout] for layout, b in steps.items()}
    step = result["kernels"]["step (median state)"]["bytes_per_env_step"]
    backend = list(layouts)[1]
    for gpu, (bandwidth, reference, published) in GPUS.items():
        bounds = {layout: bandwidth / b for layout, b in rollout.items()}
        result["roofline"][gpu] = {"bandwidth_bytes_per_s": bandwidth, "bounds": bounds,
                                   "median_step_bound": bandwidth / step[backend],
                                   "reference": reference, "published": published}
        shown = ", ".join(f"{layout}: {v / 1e6:.2f} M" for layout, v in bounds.items())
        print(f"  {gpu:20s} {shown}; {reference} published {published / 1e6:.2f} M")
        print(f"  {'':20s} the median step's traffic, the backend's layout: "
              f"{bandwidth / step[backend] / 1e6:.2f} M")
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
