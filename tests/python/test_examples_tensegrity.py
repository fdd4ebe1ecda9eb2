"""examples/tensegrity.py on small budgets: MuJoCo's data of the six-bar tensegrity, and the
identification of its cables (and, on the floor, its rods' mass and the floor's friction) by
back-propagation through 100-step intervals between the 10 Hz observations, and MPPI planned on
the identified model rolling the robot in MuJoCo. The tests check what the identification and
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
    # the free robot floats: its centre of mass stays where it was
    com = tg.centre_of_mass(train["qpos"])
    np.testing.assert_allclose(com, np.broadcast_to(com[:, :1], com.shape), atol=1e-12)


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
    # contacts are not Phalanx's hard ones, so the best fit is not exactly the truth: the
    # cables' stiffness and damping come within 20 % (measured 15 % and 8.5 %), the rod mass
    # moves toward the truth (14 -> 13.2 kg, truth 10), the fitted friction is lower than
    # MuJoCo's coefficient (soft contacts creep under static friction). The loss falls below
    # three times less than the guess's and as low as the truth's (measured 0.057 against
    # 0.062), and the test set's centre of mass after 5 s open-loop is twice as close as the
    # guess's (measured 0.078 m against 0.29 m; 0.078 m with the true parameters)
    data, r = floor
    assert r["data"] == {"trajectories": 2, "observations": 102, "env_steps": 20 * 100 * 100}
    start = np.abs(tg.GUESS / tg.TRUTH - 1)
    np.testing.assert_array_less(r["rel_error"][:2], 0.2)
    assert r["rel_error"][2] < start[2]
    loss = r["history"]["loss"]
    assert loss[-1] < loss[0] / 3 and loss[-1] < 1.05 * r["truth_loss"]
    test, guess = tg.evaluate(data, "floor", r["x"]), tg.evaluate(data, "floor", tg.GUESS)
    assert not (test["status"] & phalanx.STATUS_STOP_MASK).any()
    assert test["final"] < 0.5 * guess["final"]


def test_the_free_robots_fit_needs_the_datas_1_ms_step(tg):
    # why identify() does not start at a large timestep (the paper's progressive schedule):
    # at the true parameters the free robot's intervals fit MuJoCo's to rounding at 1 ms
    # (measured 7e-28 m^2), at 2 ms as badly as the 30-50 % off guess's at 1 ms (measured
    # 4.8e-4 against 8.4e-4), and at 4 ms the explicit step diverges (measured 4e7)
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
    assert 0.2 * guess < loss[0.002] < 5 * guess
    assert not loss[0.004] < 1.0


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
