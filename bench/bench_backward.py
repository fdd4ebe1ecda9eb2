"""Backward cost of a whole rollout: the humanoid, forward against forward + backward.

MuJoCo's humanoid.xml as it is (floor and self-collision as the model declares them, joint
limits on, PGS, Euler; with --contact-free, contacts and joint limits off: no constraint rows;
with --integrator implicitfast, that integrator), E
environments by T steps of random controls (fixed seed) from the standing
pose, on all CPU cores (OpenMP, --threads). In one process, for float32 and float64, each repeat
times:

  forward      phalanx.rollout without a tape
  fwd+tape     the same rollout recording a phalanx.Tape, with the default checkpoint spacing
               (ceil(sqrt(T)), on the CPU at most what a pack keeps in cache) and with a checkpoint every step (skipped, with the reason
               printed, when that tape would exceed --tape-limit-gib)
  backward     tape.backward with random adjoints of the whole trajectory (qpos and qvel), every
               gradient (initial state, controls, the model's parameters)
  backward of the state and controls
               the same on the default spacing's tape with grads=("qpos", "qvel", "ctrl"): what a
               policy or an open-loop optimisation asks for (the parameters' gradients skipped)

and prints the medians, the cost ratio (fwd+tape + backward) / forward (target <= 2.5, with
every gradient; also given for the state and controls alone) and the
tape's memory (tape.nbytes) for both spacings. The every-step size is computed before recording
it, from the sizes of two tiny tapes (tape memory is linear in the number of steps and
environments). Every rollout writes into the same preallocated trajectory buffers. Results go
to JSON in bench/results/. Timings on a machine whose cores are shared are noisy: the load
average before and after the run is written with them, and the ratio is also given from the
fastest repeat of each measurement and from the process's CPU time.

    .venv/bin/python bench/bench_backward.py [--envs 1024] [--steps 1000] [--repeats 5]
                                             [--dtype float32|float64|both] [--contact-free]
                                             [--integrator euler|implicitfast]
"""

import argparse
import os
import platform
import statistics
import time

import numpy as np
from tqdm import tqdm

from _common import HUMANOID, RESULTS, write_result

GIB = 2.0 ** 30
STOPPED = None  # the status bits that stop an environment, set once phalanx is imported


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    parser.add_argument("--tape-limit-gib", type=float, default=8.0,
                        help="skip the every-step tape when it would hold more than this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--contact-free", action="store_true",
                        help="contacts and joint limits off (the smooth dynamics alone)")
    parser.add_argument("--integrator", choices=["euler", "implicitfast"], default="euler")
    parser.add_argument("--out", default=None,
                        help="default bench/results/backward.json (backward_contact_free.json; "
                        "implicitfast: backward_implicitfast.json, ...)")
    args = parser.parse_args()
    if args.out is None:
        name = "backward_contact_free" if args.contact_free else "backward"
        if args.integrator != "euler":
            name += "_" + args.integrator
        args.out = os.path.join(RESULTS, name + ".json")
    return args


def every_step_bytes(phalanx, model, dtype, nenv, nstep):
    """tape.nbytes of an every-step tape of nenv x nstep, from tapes of 1 x 1 and 1 x 2 steps:
    per environment, one record and one control row per step plus a constant."""
    sizes = []
    for n in (1, 2):
        tape = phalanx.Tape(checkpoint_every=1)
        phalanx.rollout(model, model.qpos0[None].astype(dtype), np.zeros((1, model.nv), dtype),
                        np.zeros((1, n, model.nu), dtype), tape=tape)
        sizes.append(tape.nbytes)
    per_step = sizes[1] - sizes[0]
    return nenv * (nstep * per_step + sizes[0] - per_step)


class Case:
    """One scalar type: inputs, reused output buffers and adjoints, timings per repeat."""

    def __init__(self, phalanx, model, ctrl, dtype, seed, tape_limit):
        self.phalanx, self.model, self.dtype = phalanx, model, np.dtype(dtype)
        nenv, nstep, _ = ctrl.shape
        self.qpos = np.repeat(model.qpos0[None].astype(dtype), nenv, axis=0)
        self.qvel = np.zeros((nenv, model.nv), dtype)
        self.ctrl = np.ascontiguousarray(ctrl, dtype=dtype)
        self.out = (np.empty((nenv, nstep, model.nq), dtype),
                    np.empty((nenv, nstep, model.nv), dtype))
        rng = np.random.default_rng(seed + 1)
        self.adj_qpos = rng.standard_normal((nenv, nstep, model.nq)).astype(dtype)
        self.adj_qvel = rng.standard_normal((nenv, nstep, model.nv)).astype(dtype)
        self.every_step_bytes = every_step_bytes(phalanx, model, dtype, nenv, nstep)
        self.spacings = {"default": 0}
        self.skipped = None
        if self.every_step_bytes <= tape_limit:
            self.spacings["every_step"] = 1
        else:
            self.skipped = (f"a checkpoint every step would hold {self.every_step_bytes / GIB:.2f} "
                            f"GiB > --tape-limit-gib {tape_limit / GIB:g}")
        self.times = {"forward": []}
        for name in self.spacings:
            self.times[f"forward_tape_{name}"] = []
            self.times[f"backward_{name}"] = []
        self.times["backward_state_ctrl"] = []
        self.cpu = {k: [] for k in self.times}
        self.nbytes, self.every, self.status, self.stopped = {}, {}, 0, 0
        self.identical = None  # gradients of the two spacings bit for bit equal (first repeat)

    def timed(self, key, f, *args):
        # wall-clock seconds, and the process's CPU seconds (all threads): the latter is less
        # sensitive to other processes on shared cores, though it counts OpenMP spin-waits
        wall, cpu = time.perf_counter(), time.process_time()
        out = f(*args)
        self.times[key].append(time.perf_counter() - wall)
        self.cpu[key].append(time.process_time() - cpu)
        return out

    def rollout(self, key, tape=None):
        _, _, status = self.timed(key, lambda: self.phalanx.rollout(
            self.model, self.qpos, self.qvel, self.ctrl, out=self.out, tape=tape))
        self.status |= int(np.bitwise_or.reduce(status))
        self.stopped = int(np.count_nonzero(status & STOPPED))

    def warm_up(self):
        # compiles the model for this scalar type and touches the buffers
        n = min(4, self.ctrl.shape[0])
        tape = self.phalanx.Tape()
        self.phalanx.rollout(self.model, self.qpos[:n], self.qvel[:n],
                             np.ascontiguousarray(self.ctrl[:n, :10]), tape=tape)
        tape.backward(self.adj_qpos[:n, :10], self.adj_qvel[:n, :10])

    def repeat(self):
        self.rollout("forward")
        grads = {}
        for name, every in self.spacings.items():
            tape = self.phalanx.Tape(checkpoint_every=every)
            self.rollout(f"forward_tape_{name}", tape)
            g = self.timed(f"backward_{name}", tape.backward, self.adj_qpos, self.adj_qvel)
            if name == "default":
                self.timed("backward_state_ctrl", lambda: tape.backward(
                    self.adj_qpos, self.adj_qvel, grads=("qpos", "qvel", "ctrl")))
            self.nbytes[name], self.every[name] = tape.nbytes, tape.checkpoint_every
            if self.identical is None and len(self.spacings) > 1:
                grads[name] = {k: g[k] for k in ("qpos", "qvel", "ctrl")}
            del tape, g  # the every-step tape is GiBs: free it before the next one
        if grads:
            a, b = grads.values()
            self.identical = all(np.array_equal(a[k], b[k]) for k in a)

    def ratios(self, t):
        """(forward with tape + backward) / forward per spacing, from seconds t[key]"""
        return {name: (t[f"forward_tape_{name}"] + t[f"backward_{name}"]) / t["forward"]
                for name in self.spacings}

    def summary(self):
        med = {k: statistics.median(v) for k, v in self.times.items()}
        med_cpu = {k: statistics.median(v) for k, v in self.cpu.items()}
        res = {"median_seconds": med, "all_seconds": self.times,
               "median_cpu_seconds": med_cpu, "all_cpu_seconds": self.cpu,
               "checkpoint_every": self.every, "tape_bytes": self.nbytes,
               "every_step_tape_bytes_predicted": self.every_step_bytes,
               "every_step_skipped": self.skipped, "status_bits_seen": self.status,
               "stopped_envs": self.stopped, "gradients_identical_across_spacings": self.identical}
        res["cost_ratio"] = self.ratios(med)
        res["cost_ratio_state_ctrl"] = (med["forward_tape_default"]
                                        + med["backward_state_ctrl"]) / med["forward"]
        # the same from the fastest of the repeats, and from CPU time: other views of noisy runs
        res["cost_ratio_of_minimums"] = self.ratios({k: min(v) for k, v in self.times.items()})
        res["cost_ratio_cpu_time"] = self.ratios(med_cpu)
        res["backward_over_forward"] = {name: med[f"backward_{name}"] / med["forward"]
                                        for name in self.spacings}
        res["tape_recording_overhead"] = {
            name: med[f"forward_tape_{name}"] / med["forward"] - 1 for name in self.spacings}
        if "every_step" in self.nbytes:
            res["tape_bytes_every_step_over_default"] = (self.nbytes["every_step"]
                                                         / self.nbytes["default"])
        return res


def main():
    global STOPPED
    args = parse_args()
    # OpenMP reads its thread count when phalanx loads
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import phalanx

    STOPPED = phalanx.STATUS_NAN_STATE | phalanx.STATUS_NAN_CTRL | phalanx.STATUS_NAN_RESULT
    load_before = os.getloadavg()
    model = phalanx.load_model(HUMANOID)  # contacts and limits as declared, PGS
    if args.contact_free:
        model.contact = model.limit = False
    model.integrator = args.integrator
    setting = "contacts and joint limits off" if args.contact_free else "with contacts"
    if args.integrator != "euler":
        setting += ", " + args.integrator
    rng = np.random.default_rng(args.seed)
    ctrl = rng.uniform(-1.0, 1.0, size=(args.envs, args.steps, model.nu))
    dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    cases = {}
    for dt in dtypes:
        cases[dt] = Case(phalanx, model, ctrl, dt, args.seed, args.tape_limit_gib * GIB)
        cases[dt].warm_up()
        c = cases[dt]
        print(f"{dt}: a checkpoint every step would hold {c.every_step_bytes / GIB:.2f} GiB"
              + (f"; skipped: {c.skipped}" if c.skipped else ""), flush=True)

    for r in tqdm(range(args.repeats), desc="repeats", disable=None):
        for dt, c in cases.items():
            c.repeat()
            print(f"repeat {r + 1}/{args.repeats} {dt}: " + ", ".join(
                f"{k} {v[-1]:.2f} s" for k, v in c.times.items()), flush=True)

    result = {
        "benchmark": ("backward cost of a humanoid rollout with contacts and joint limits off"
                      if args.contact_free else
                      "backward cost of a humanoid rollout with contacts (floor, self-collision) "
                      "and joint limits"),
        "model": HUMANOID,
        "envs": args.envs,
        "steps": args.steps,
        "threads": args.threads,
        "repeats": args.repeats,
        "seed": args.seed,
        "integrator": args.integrator,
        "lcp_solver": model.lcp_solver,
        "pgs_sweeps": model.lcp_iterations,
        "machine": platform.processor() or platform.machine(),
        "load_average_before_after": [load_before[0], os.getloadavg()[0]],
        "target_cost_ratio": 2.5,
        "dtypes": {dt: c.summary() for dt, c in cases.items()},
    }

    print()
    print(f"backward cost, humanoid {setting}, {args.envs} envs x {args.steps} steps, "
          f"{args.threads} threads, median of {args.repeats} (load average "
          f"{result['load_average_before_after'][0]:.2f} -> "
          f"{result['load_average_before_after'][1]:.2f}; shared cores: noisy)")
    print(f"  {'':22s} {'forward':>9s} {'fwd+tape':>9s} {'backward':>9s} "
          f"{'(fwd+tape+bwd)/fwd':>19s} {'bwd/fwd':>8s} {'tape':>10s}   "
          f"ratio: fastest, CPU time")
    for dt, c in cases.items():
        s = result["dtypes"][dt]
        med = s["median_seconds"]
        for name in c.spacings:
            label = f"{dt} K={s['checkpoint_every'][name]}"
            print(f"  {label:22s} {med['forward']:8.2f}s {med[f'forward_tape_{name}']:8.2f}s "
                  f"{med[f'backward_{name}']:8.2f}s {s['cost_ratio'][name]:18.2f}x "
                  f"{s['backward_over_forward'][name]:7.2f}x "
                  f"{s['tape_bytes'][name] / 2 ** 20:7.0f} MiB   "
                  f"{s['cost_ratio_of_minimums'][name]:5.2f}x, {s['cost_ratio_cpu_time'][name]:.2f}x")
        print(f"  {dt} K={s['checkpoint_every']['default']}, gradients of the state and "
              f"controls alone: backward {med['backward_state_ctrl']:.2f}s, "
              f"(fwd+tape+bwd)/fwd {s['cost_ratio_state_ctrl']:.2f}x")
        if c.skipped:
            print(f"  {dt} every step: skipped ({c.skipped})")
        else:
            print(f"  {dt} tape memory: every step {s['tape_bytes']['every_step'] / GIB:.2f} GiB "
                  f"(predicted {s['every_step_tape_bytes_predicted'] / GIB:.2f}), default "
                  f"spacing {s['tape_bytes']['default'] / 2 ** 20:.0f} MiB "
                  f"({s['tape_bytes_every_step_over_default']:.1f}x less); gradients of both "
                  f"spacings bit-identical: {s['gradients_identical_across_spacings']}")
        if s["stopped_envs"]:
            print(f"  {dt}: {s['stopped_envs']} environment(s) stopped (NaN/inf); their "
                  f"backward is skipped, which flatters the ratio")
    print(f"  target: (fwd+tape+bwd)/fwd <= {result['target_cost_ratio']:g}")
    write_result(result, args.out)


if __name__ == "__main__":
    main()
