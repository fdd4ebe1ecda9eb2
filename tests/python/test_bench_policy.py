"""bench/bench_policy.py, SHAC against PPO: the figures it reads off the curves (PPO's final
return, the time SHAC takes to reach it, SHAC's stability) on curves whose answers are known."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_policy.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_policy", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ppo_final_is_the_last_tenth_of_its_episodes(bench):
    steps = np.arange(1, 101) * 1000.0
    run = {"task": "t", "env_steps": steps.tolist(), "returns": (steps / 1000).tolist()}
    # the episodes at 90k..100k env-steps: returns 90..100
    assert bench.ppo_final(run) == pytest.approx(95.0)
    with pytest.raises(ValueError, match="ended no episode"):
        bench.ppo_final({"task": "t", "env_steps": [], "returns": []})


def test_seconds_to_reach_and_stability(bench):
    run = {"seconds": [1.0, 2.0, 3.0, 4.0, 5.0], "returns": [10.0, 50.0, 95.0, 80.0, 100.0]}
    assert bench.seconds_to_reach(run, 90.0) == 3.0
    assert bench.seconds_to_reach(run, 101.0) == float("inf")
    # reaches 90 % of its final 100 at 3 s, never below 70 after
    assert bench.stable(run)
    run["returns"][3] = 60.0
    assert not bench.stable(run)
    # a drop before first reaching 90 % does not count
    assert bench.stable({"returns": [50.0, 10.0, 90.0, 100.0]})
    assert not bench.stable({"returns": [5.0, -1.0]})  # no positive final return to hold


def test_summary_compares_medians(bench, capsys):
    ppo = [{"method": "ppo", "task": "t", "env_steps": [10.0, 100.0], "returns": [0.0, 40.0],
            "seconds": [1.0, 30.0]} for _ in range(3)]
    shac = [{"method": "shac", "task": "t", "returns": [10.0, 45.0, 50.0],
             "seconds": [2.0, 5.0 + s, 9.0]} for s in range(3)]
    out = bench.summary("t", ppo + shac)
    assert out["ppo_final"] == [40.0] * 3
    assert out["shac_seconds_to_ppo_final"] == [5.0, 6.0, 7.0]
    np.testing.assert_allclose(out["time_ratio"], [5 / 30, 6 / 30, 7 / 30])
    assert out["shac_stable"] == [True] * 3
    assert "of PPO's training time" in capsys.readouterr().out


def test_task_settings_reach_shac(bench):
    """the paper's settings, then the task's own (TASKS), then the command line's horizon"""
    ant = bench.shac_config("ant", 3, 32)
    assert (ant.horizon, ant.num_envs, ant.seed, ant.actor_lr) == (8, 32, 3, 2e-3)
    assert ant.state_grad_clip == 10.0
    cheetah = bench.shac_config("cheetah-run", 0, 64)
    assert (cheetah.horizon, cheetah.actor_lr, cheetah.critic_lr) == (32, 1e-3, 2e-3)
    assert bench.shac_config("ant", 0, 64, horizon=16).horizon == 16


def test_kept_runs_are_the_other_methods_of_the_same_settings(bench, tmp_path):
    """--keep takes the runs of the method not rerun from the results file, per seed, and
    refuses a file whose runs of it had other settings or lack a seed"""
    import argparse
    import json

    runs = [{"task": "ant", "method": m, "seed": s, "returns": [s + (m == "ppo") * 10.0]}
            for s in (0, 1, 2) for m in ("shac", "ppo")]
    settings = {"num_envs": 64, "ppo_steps": 500, "shac_iterations": 9, "eval_every": 3,
                "horizon": None}
    path = tmp_path / "policy_ant.json"
    path.write_text(json.dumps({"settings": settings, "runs": runs}))
    args = argparse.Namespace(**dict(settings, shac_iterations=20, methods=["shac"],
                                     seeds=[2, 0]))
    kept = bench.kept_runs(path, args)
    assert [(r["method"], r["seed"], r["returns"]) for r in kept] == [
        ("ppo", 2, [12.0]), ("ppo", 0, [10.0])]
    with pytest.raises(SystemExit, match="ppo_steps=500"):
        bench.kept_runs(path, argparse.Namespace(**dict(vars(args), ppo_steps=501)))
    with pytest.raises(SystemExit, match="no ppo run of seed 3"):
        bench.kept_runs(path, argparse.Namespace(**dict(vars(args), seeds=[3])))
    with pytest.raises(SystemExit, match="no earlier results"):
        bench.kept_runs(tmp_path / "none.json", args)
    # rerunning PPO keeps SHAC's runs, which depend on SHAC's settings
    with pytest.raises(SystemExit, match="shac_iterations=9"):
        bench.kept_runs(path, argparse.Namespace(**dict(vars(args), methods=["ppo"])))
