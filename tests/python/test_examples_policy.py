"""examples/policy_shac.py and examples/policy_ddp.py: policies trained by phalanx.learn's SHAC
through the example's ``train`` on a small budget, and the training over two processes under
torchrun against the same training over two threads.

Measured on the development machine (one thread, 64 environments, windows of 32 steps; the
evaluation return is the mean of the acting policy, the actor's running average, over 16
episodes, from the example's ``train`` with these budgets), seeds 0, 1, 2:

- cart-pole swing-up, 250 windows: from 289.2, 9.5, 99.1 to 457.7, 337.6, 454.6, gains of
  168.5, 328.1 and 355.5 (the pole swung up and mostly held); about 54 s of training each.
  The curve between differs from machine to machine (torch's CPU kernels round by the
  instruction set): on one, seed 0 reached 456.4 by 200 windows, on another 343.1.
- cheetah-run, 50 windows: from 58.7, 21.2, 1.2 to 433.5, 242.2, 378.2, gains of 374.8, 220.9
  and 377.0; about 12 s of training each.

The tests run seed 0; the thresholds on the gains (100 and 150) keep a margin below the smallest
gain of the three seeds.
"""

from __future__ import annotations

import pytest
import torch

import phalanx
import phalanx.learn as pl
from conftest import load_example

CARTPOLE_ITERATIONS, CARTPOLE_GAIN = 250, 100.0
CHEETAH_ITERATIONS, CHEETAH_GAIN = 50, 150.0
NUM_ENVS, HORIZON = 64, 32


@pytest.fixture(scope="module")
def shac():
    torch.set_num_threads(1)
    phalanx.set_num_threads(1)
    return load_example("policy_shac")


def test_cartpole_shac_swings_the_pole_up(shac):
    r = shac.train("cartpole", CARTPOLE_ITERATIONS, eval_every=CARTPOLE_ITERATIONS,
                   progress=False)
    h = r["history"]
    assert h["iteration"] == [CARTPOLE_ITERATIONS]
    assert h["env_steps"] == [CARTPOLE_ITERATIONS * NUM_ENVS * HORIZON]
    # the hanging pole earns about 0.3 per action of the 500 from its swings, one swung up and
    # held about 1
    assert r["final"] > r["initial"] + CARTPOLE_GAIN, (r["initial"], r["final"])
    assert r["final"] > 300


def test_cheetah_shac_runs_forward(shac):
    r = shac.train("cheetah", CHEETAH_ITERATIONS, eval_every=CHEETAH_ITERATIONS,
                   progress=False)
    # the untrained policy barely moves the cheetah: a return under 60 of the 1000 possible
    assert r["initial"] < 100
    assert r["final"] > r["initial"] + CHEETAH_GAIN, (r["initial"], r["final"])


def test_training_over_two_processes_equals_two_threads(shac, tmp_path):
    """examples/policy_ddp.py under torchrun with two processes (gloo), 8 cheetah environments
    (with contacts) each: both ranks end with the same actor, critic and observation
    statistics, which moved from the untrained ones, and which are those of the example's
    train over two phalanx.testing.ThreadCollective members in threads, the in-process
    stand-in for TorchDistributed (gloo adds the two ranks' gradients in rank order, as it
    does), up to rounding"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from phalanx.testing import ThreadCollective, run_in_threads

    iterations = 4
    examples = Path(__file__).resolve().parents[2] / "examples"
    torchrun = Path(sys.executable).with_name("torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(examples), *filter(None, [os.environ.get("PYTHONPATH")])]))
    args = ["--task", "cheetah", "--iterations", str(iterations), "--num-envs", "16",
            "--eval-every", str(iterations), "--out", str(tmp_path)]
    run = subprocess.run([str(torchrun), "--nproc_per_node=2", "--master_port=29517",
                          str(examples / "policy_ddp.py"), *args], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "cheetah over 2 processes" in run.stdout
    ranks = [torch.load(tmp_path / f"policy_ddp_cheetah_rank{r}.pt", weights_only=False)
             for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]

    group = ThreadCollective.group(2)
    threads = run_in_threads(
        [lambda m=m: shac.train("cheetah", iterations, num_envs=16, eval_every=iterations,
                                distributed=m, progress=False) for m in group], group)
    untrained = pl.SHAC(pl.CheetahRun(), pl.SHACConfig(num_envs=16))
    for module in ("actor", "policy", "critic", "norm"):
        expected = getattr(threads[0]["agent"], module).state_dict()
        before = getattr(untrained, module).state_dict()
        assert all(torch.equal(ranks[0][module][k], ranks[1][module][k]) for k in expected)
        assert any((expected[k] - before[k]).abs().max() > 1e-3 for k in expected), module
        for name, value in expected.items():
            torch.testing.assert_close(ranks[0][module][name], value, rtol=1e-9, atol=1e-12)
    assert ranks[0]["returns"] == pytest.approx(threads[0]["history"]["returns"], rel=1e-9)
