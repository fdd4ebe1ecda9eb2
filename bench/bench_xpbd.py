"""XPBD against Featherstone on the same model, side by side in one process: throughput, accuracy
at equal wall time, and the cost of the backward pass.

Models: the bundled 7-link arm (examples/models/arm7.urdf) and MuJoCo's humanoid, contacts off,
and the humanoid dropped on the floor with contacts (throughput and backward cost only: a fall
is chaotic, so its errors against a reference measure that, not the solvers). Where the XPBD
solver refuses a model, the reason is printed and the model skipped. E
environments start from the model's initial pose with random joint velocities (fixed seed) and
random controls when the model has actuators; both cores (OpenMP).

1. Throughput: phalanx.rollout of E x T steps, env-steps/s of each solver (XPBD with its default
   iterations, at 1 and 4 substeps), medians of --repeats.
2. Accuracy at equal wall time: 0.5 s of simulated time against Featherstone at a 1024 times
   finer step (the reference); Featherstone at dt to dt/64 and XPBD at dt with 1, 2, 4, 8
   substeps; for each run the wall time per simulated second and the largest joint-angle
   error at the end. The humanoid's also with joint limits off and gentle inputs (speeds and
   controls within +-0.1): at full scale its joints reach their limits, which the two solvers
   model differently (XPBD's are hard), and without limits it tumbles chaotically. Then, for each XPBD run, Featherstone's error at the same wall time
   (interpolated in log-log between its runs; where XPBD costs more than Featherstone's finest
   run, that run's error bounds it) and the ratio of the errors.
3. Backward cost: a taped rollout plus tape.backward over the plain rollout, each solver.

    .venv/bin/python bench/bench_xpbd.py [--envs 1024] [--steps 500] [--repeats 3]
                                         [--dtype float64] [--models humanoid ...]

Results go to bench/results/xpbd.json.
"""

import argparse
import os

import numpy as np

from _common import HUMANOID, RESULTS, median_seconds, write_result

ARM7 = os.path.join(os.path.dirname(__file__), "..", "examples", "models", "arm7.urdf")
SECONDS = 0.5
REFERENCE_REFINEMENT = 1024
FEATHERSTONE_REFINEMENTS = (1, 2, 4, 8, 16, 32, 64)
XPBD_SUBSTEPS = (1, 2, 4, 8)
MODELS = ("arm7", "humanoid", "humanoid on the floor")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--accuracy-envs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="+", choices=MODELS,
                        help="only these models (default: all)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "xpbd.json"))
    return parser.parse_args()


def configure(phalanx, path, solver, timestep=None, substeps=1, contact=False, limit=True):
    model = phalanx.load_model(path)
    model.contact, model.limit = contact, limit
    if timestep is not None:
        model.timestep = timestep
    if solver == "xpbd":
        model.solver, model.xpbd_substeps = "xpbd", substeps
    return model


def inputs(model, nenv, nstep, dtype, seed, scale=1.0):
    """the initial pose, joint speeds and held controls uniform in +-scale (rad/s, ctrl units)"""
    rng = np.random.default_rng(seed)
    qpos = np.repeat(model.qpos0[None], nenv, axis=0).astype(dtype)
    qvel = rng.uniform(-scale, scale, (nenv, model.nv)).astype(dtype)
    ctrl = rng.uniform(-scale, scale, (nenv, 1, model.nu)).repeat(nstep, axis=1).astype(dtype)
    return qpos, qvel, ctrl


def rollout_checked(phalanx, model, qpos, qvel, ctrl, tape=None):
    q, v, status = phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    phalanx.raise_if_stopped(status, "rollout")
    return q, v


def throughput(phalanx, path, args, contact):
    out = {}
    for name, solver, substeps in (("featherstone", "featherstone", 1),
                                   ("xpbd, 1 substep", "xpbd", 1), ("xpbd, 4 substeps", "xpbd", 4)):
        model = configure(phalanx, path, solver, substeps=substeps, contact=contact)
        qpos, qvel, ctrl = inputs(model, args.envs, args.steps, args.dtype, args.seed)
        rollout_checked(phalanx, model, qpos[:4], qvel[:4], ctrl[:4, :10])  # warm up
        t = median_seconds(lambda: rollout_checked(phalanx, model, qpos, qvel, ctrl),
                           args.repeats)
        out[name] = args.envs * args.steps / t
    return out


def accuracy(phalanx, path, args, limit, scale):
    base = phalanx.load_model(path).timestep
    nstep = int(round(SECONDS / base))

    def run(solver, refinement, substeps=1, repeats=args.repeats):
        model = configure(phalanx, path, solver, base / refinement, substeps, limit=limit)
        qpos, qvel, ctrl = inputs(model, args.accuracy_envs, nstep * refinement, np.float64,
                                  args.seed, scale)
        q = None

        def go():
            nonlocal q
            q = rollout_checked(phalanx, model, qpos, qvel, ctrl)[0][:, -1]
        return median_seconds(go, repeats) / SECONDS, q

    _, reference = run("featherstone", REFERENCE_REFINEMENT, repeats=1)
    runs = {"featherstone": [], "xpbd": []}
    for k in FEATHERSTONE_REFINEMENTS:
        cost, q = run("featherstone", k)
        runs["featherstone"].append((f"dt/{k}", cost, float(np.abs(q - reference).max())))
    for k in XPBD_SUBSTEPS:
        cost, q = run("xpbd", 1, substeps=k)
        runs["xpbd"].append((f"{k} substeps", cost, float(np.abs(q - reference).max())))
    cost_f = np.log([c for _, c, _ in runs["featherstone"]])
    err_f = np.log([e for _, _, e in runs["featherstone"]])
    order = np.argsort(cost_f)
    matched = []
    for label, cost, err in runs["xpbd"]:
        at = float(np.exp(np.interp(np.log(cost), cost_f[order], err_f[order])))
        inside = bool(cost_f.min() <= np.log(cost) <= cost_f.max())
        matched.append((label, err, at, err / at, inside))
    return {"runs": runs, "matched": matched}


def backward_cost(phalanx, path, args, contact):
    out = {}
    for solver in ("featherstone", "xpbd"):
        model = configure(phalanx, path, solver, contact=contact)
        qpos, qvel, ctrl = inputs(model, args.envs, args.steps, args.dtype, args.seed)
        rng = np.random.default_rng(args.seed + 1)
        adj = (rng.standard_normal((args.envs, args.steps, model.nq)).astype(args.dtype),
               rng.standard_normal((args.envs, args.steps, model.nv)).astype(args.dtype))
        forward = median_seconds(lambda: rollout_checked(phalanx, model, qpos, qvel, ctrl),
                                 args.repeats)

        def both():
            tape = phalanx.Tape()
            rollout_checked(phalanx, model, qpos, qvel, ctrl, tape)
            tape.backward(*adj)
        out[solver] = median_seconds(both, args.repeats) / forward
    return out


def main():
    args = parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read when phalanx loads
    import phalanx

    result = {"benchmark": "XPBD against Featherstone", "envs": args.envs, "steps": args.steps,
              "dtype": args.dtype, "threads": args.threads, "repeats": args.repeats,
              "models": {}}
    # accuracy runs: (joint limits, scale of the speeds and controls). The humanoid's also
    # gentle and without limits: at full scale its motors drive joints to their limits within
    # the run, where the solvers differ by design (XPBD's limits are hard, the LCP's soft), and
    # without limits it tumbles chaotically
    for name, path, contact, runs in (("arm7", ARM7, False, ((True, 1.0),)),
                                      ("humanoid", HUMANOID, False, ((True, 1.0), (False, 0.1))),
                                      ("humanoid on the floor", HUMANOID, True, ())):
        if args.models and name not in args.models:
            continue
        try:  # the model is checked against what the XPBD solver simulates when it steps
            model = configure(phalanx, path, "xpbd", contact=contact)
            phalanx.step(model, model.qpos0[None], np.zeros((1, model.nv)), np.zeros((1, model.nu)))
        except (RuntimeError, ValueError) as e:
            print(f"\n{name}: the XPBD solver refuses this model: {e}")
            result["models"][name] = {"refused": str(e)}
            continue
        print(f"\n{name}: {args.envs} envs x {args.steps} steps, {args.dtype}, "
              f"{args.threads} threads")
        rates = throughput(phalanx, path, args, contact)
        for solver, rate in rates.items():
            print(f"  {solver:18s} {rate / 1e6:7.3f} M env-steps/s   "
                  f"{rate / rates['featherstone']:.2f} x Featherstone")
        ratios = backward_cost(phalanx, path, args, contact)
        for solver, ratio in ratios.items():
            print(f"  forward + backward over forward, {solver}: {ratio:.2f}")
        result["models"][name] = {"env_steps_per_second": rates, "backward_over_forward": ratios}
        for limit, scale in runs:
            acc = accuracy(phalanx, path, args, limit, scale)
            print(f"  accuracy over {SECONDS:g} s against Featherstone at "
                  f"dt/{REFERENCE_REFINEMENT} ({args.accuracy_envs} envs, joint limits "
                  f"{'on' if limit else 'off'}, speeds and controls within +-{scale:g}): "
                  f"wall s per simulated s, max |q error| (rad)")
            for solver, runs in acc["runs"].items():
                print(f"    {solver:13s} " + "   ".join(f"{label}: {cost:.3g} s, {err:.2e}"
                                                        for label, cost, err in runs))
            for label, err, at, ratio, inside in acc["matched"]:
                print(f"    xpbd {label:11s} error {err:.2e}; Featherstone at equal wall time "
                      + (f"{at:.2e}: {ratio:.3g} x" if inside else
                         f"below {at:.2e} (its finest run costs less): over {ratio:.3g} x"))
            result["models"][name][f"accuracy, limits {'on' if limit else 'off'}, "
                                   f"scale {scale:g}"] = acc
    write_result(result, args.out)


if __name__ == "__main__":
    main()
