"""examples/tensegrity.py on small budgets: MuJoCo's data of the six-bar tensegrity, and the
identification of its cables (and, on the floor, its rods' mass and the floor's friction) by
back-propagation through 100-step intervals between the 10 Hz observations, and MPPI planned on
Phalanx's model rolling the robot in MuJoCo. The tests check what the identification and
the planner achieve, not only that they run."""

from __future__ import annotations

import numpy as np
import pytest

import phalanx

from conftest import load_example


@pytest.fixture(scope="module")
def tg():
    return load_example("tensegrity")


def test_the_data_are_mujocos_trajectories_at_10_hz(tg):
    # 10 / 2 / 10 trajectories of 5 s, 51 observations each; the observations are the states
    # MuJoCo passes through (the first at rest, the motors' activations following the commands)
    data = tg.generate("free", seconds=1.0)
    assert {k: v["ctrl"].shape[0] for k, v in data.items()} == tg.SPLITS
    train = data["train"]
    assert train["qpos"].shape == (10, 11, 42) and train["ctrl"].shape == (10, 10, 24)
    np.testing.assert_array_equal(train["qvel"][:, 0], 0)
    assert np.abs(train["act"][:, 1:]).max() > 0.5
    # the free robot floats: its centre of mass moves by millimetres only (measured up to
    # 2.9 mm in 1 s). It would stay put but for implicitfast, whose damping slope keeps only
    # the pairs of dofs within one rod (MuJoCo's D has M's sparsity), so the implicit share of
    # a cable's damping acts on each rod alone and the net force of the cables is not zero
    com = tg.centre_of_mass(train["qpos"])
    drift = np.linalg.norm(com - com[:, :1], axis=-1)
    assert 1e-5 < drift.max() < 5e-3


def test_free_robot_stiffness_and_damping_are_identified(tg):
    # two training trajectories (100 intervals), 40 iterations from stiffness 50 % high and
    # damping 40 % low: both end within 5 % of the truth (measured 2.4 % and 4.3 %), the loss
    # down by 1e3 (measured 5e-4), and the test set's rods follow MuJoCo's over 5 s open-loop
    # four times closer than from the guess (measured ten)
    data = tg.generate("free")
    r = tg.identify(data, "free", 40, tg.GUESS, trajectories=2, log=None)
    np.testing.assert_array_less(r["rel_error"][:2], 0.05)
    np.testing.assert_array_equal(r["x"][2:], tg.TRUTH[2:])
    assert r["history"]["loss"][-1] < 1e-3 * r["history"]["loss"][0]
    test, guess = tg.evaluate(data, "free", r["x"]), tg.evaluate(data, "free", tg.GUESS)
    assert test["rod_error"] < 0.25 * guess["rod_error"]


@pytest.fixture(scope="module")
def floor(tg):
    """the floor variant's data and its identification on two training trajectories, 20
    iterations from GUESS"""
    data = tg.generate("floor")
    return data, tg.identify(data, "floor", 20, tg.GUESS, trajectories=2, log=None)


def test_on_the_floor_the_identification_fits_mujocos_motion(tg, floor):
    # two training trajectories, 20 iterations from every parameter 30-50 % off. MuJoCo's soft
    # contacts are not Phalanx's hard ones (and MuJoCo's implicitfast at 1 ms softens them
    # further: test_tensegrity.py), so the best fit is not exactly the truth: the cables'
    # stiffness and damping come within 25 % (measured 12 % and 20 %), the rod mass moves
    # toward the truth (measured 3 % off, from 40 %), the fitted friction is lower than
    # MuJoCo's coefficient (soft contacts creep under static friction). The loss falls by a
    # third to below the truth's (measured 0.184 -> 0.123 against 0.152), and the test set's
    # centre of mass after 5 s open-loop is closer than the guess's by 40 % (measured 0.159 m
    # against 0.293 m; 0.137 m with the true parameters)
    data, r = floor
    assert r["data"] == {"trajectories": 2, "observations": 102, "env_steps": 20 * 100 * 100}
    start = np.abs(tg.GUESS / tg.TRUTH - 1)
    np.testing.assert_array_less(r["rel_error"][:2], 0.25)
    assert r["rel_error"][2] < start[2] / 3
    loss = r["history"]["loss"]
    assert loss[-1] < 0.75 * loss[0] and loss[-1] < r["truth_loss"]
    test, guess = tg.evaluate(data, "floor", r["x"]), tg.evaluate(data, "floor", tg.GUESS)
    assert not (test["status"] & phalanx.STATUS_STOP_MASK).any()
    assert test["final"] < 0.6 * guess["final"]


def test_coarser_steps_fit_the_free_robot_worse(tg):
    # the paper's progressive schedule (a large timestep first, halved on plateaus) is
    # identify(timestep=...), off by default: at the true parameters the free robot's
    # intervals fit MuJoCo's to rounding at the data's 1 ms (measured 5e-28 m^2), and at 2 and
    # 4 ms within a fifth of the 30-50 % off guess's loss at 1 ms (measured 4.9e-6 and 2.3e-5
    # against 8.3e-4), but the parameters that fit the coarse steps are biased: started at
    # 4 ms and halved on 1 % plateaus over 10 iterations, 60 iterations on two trajectories end
    # 7 % off (24 % from 8 ms), against 0.24 % at 1 ms throughout
    data = tg.generate("free", seconds=1.0)
    seg = tg.segments({k: v[:2] for k, v in data["train"].items()})
    model = tg.phalanx_model("free")
    loss = {}
    for dt in (0.001, 0.002, 0.004):
        model.timestep = dt
        loss[dt] = tg.segment_loss(model, seg, tg.TRUTH)[0]
    model.timestep = 0.001
    guess = tg.segment_loss(model, seg, np.where([1, 1, 0, 0], tg.GUESS, tg.TRUTH))[0]
    assert loss[0.001] < 1e-20
    assert 1e-8 < loss[0.002] < loss[0.004] < 0.2 * guess
    # the schedule's mechanics: with every iteration's fall (about a third here) counted as a
    # stall, 4 ms is halved after each second iteration at a step, down to 1 ms; env steps
    # count the steps taken
    r = tg.identify(data, "free", 8, tg.GUESS, trajectories=1, timestep=0.004, plateau=1,
                    stall=0.9, log=None)
    assert r["history"]["timestep"] == [0.004] * 2 + [0.002] * 2 + [0.001] * 4
    assert r["data"]["env_steps"] == 10 * (2 * 25 + 2 * 50 + 4 * 100)


def test_mppis_cost_scores_progress_at_each_command_interval(tg):
    # the planner holds each of its ten rows for 100 steps (hold=100); the cost of a sample is
    # minus the centre of mass's mean progress along +x at the ends of the ten intervals, plus
    # 0.5 times its mean distance from the x axis through the origin given, plus the stretch
    # weight times the largest excess of a cable over STRETCHED (every 10 ms)
    model = tg.phalanx_model("floor")
    tg.set_parameters(model, tg.TRUTH)
    rng = np.random.default_rng(1)
    ctrl = np.repeat(rng.uniform(-1, 1, (3, 10, model.nu)), 100, axis=1)
    q0 = model.qpos0
    qs, vs, *_ = phalanx.rollout(model, np.tile(q0, (3, 1)), np.zeros((3, model.nv)), ctrl,
                                 act=np.zeros((3, model.na)))
    origin = np.array([0.3, -0.2])
    com = tg.centre_of_mass(qs[:, 99::100])[..., :2] - origin
    expected = (0.5 * np.abs(com[..., 1]) - com[..., 0]).mean(-1)
    cost = tg.RollCost(model, origin, lateral=0.5, stretch=0.0)
    np.testing.assert_allclose(cost(qs, vs, ctrl), expected, rtol=1e-12)
    assert np.ptp(expected) > 1e-3  # the commands make a difference
    length = np.stack([phalanx.kinematics(model, qs[m, 9::10], vs[m, 9::10])["ten_length"]
                       for m in range(3)])
    limit = np.quantile(length, 0.99)  # a limit these rollouts exceed
    excess = np.maximum(length - limit, 0).max(axis=(1, 2))
    assert excess.min() > 0
    stretched = tg.RollCost(model, origin, lateral=0.5, stretch=10.0, limit=limit)
    np.testing.assert_allclose(stretched(qs, vs, ctrl), expected + 10.0 * excess, rtol=1e-12)


def test_mppi_planned_on_phalanx_rolls_the_robot_in_mujoco(tg):
    # a small budget (2 s, 40 samples, 2 iterations per 0.1 s command, the paper's 1 s
    # horizon) planned on Phalanx's floor model with the true parameters and executed in
    # MuJoCo: the robot rolls along +x at more than 0.1 m/s (measured 0.21 m/s; 0.25 m/s with
    # seed 1) without MuJoCo's step failing. Random commands of the same range shuffle it by
    # about 0.12 m in 5 s in no chosen direction (test_tensegrity.py), 0.024 m/s: the
    # threshold is four times that, along the direction asked for.
    r = tg.roll(tg.TRUTH, seconds=2.0, samples=40, iterations=2, seed=0)
    assert r["diverged"] is None
    assert r["speed"] > 0.1
