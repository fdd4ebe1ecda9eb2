"""The examples examples/sysid.py (system identification through rollout gradients) and
examples/drone_takeoff.py (Nimble's drone: plain gradients stall at a resting contact,
complementarity-aware gradients escape), run with small budgets; the tests check what they
find, not only that they run."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import load_example


@pytest.fixture(scope="module")
def sysid():
    return load_example("sysid")


@pytest.fixture(scope="module")
def drone():
    return load_example("drone_takeoff")


def test_sysid_recovers_masses_damping_and_friction(sysid):
    # 4 environments x 150 steps with 1 mm / 1 mrad measurement noise, 200 Adam steps: the six
    # parameters start 40-150 % off and end within 1 % of the truth (measured: at most 0.12 %),
    # at the loss of the true parameters (the noise floor)
    r = sysid.identify(200, envs=4, steps=150, noise=0.001, log=None)
    assert r["status"] == 0
    start = np.abs(r["guess"] / r["truth"] - 1)
    assert start.min() >= 0.4 and start.max() >= 1.0
    np.testing.assert_array_less(r["rel_error"], 0.01)
    assert r["loss"][-1] <= 1.05 * r["loss_truth"]
    assert r["loss"][-1] < 1e-4 * r["loss"][0]
    # the identified model reproduces the measured trajectories to about the noise
    rms = np.sqrt(np.mean((r["final"] - r["measured"]) ** 2))
    assert rms < 1.1 * r["noise"]


def test_sysid_without_noise_is_exact(sysid):
    # noise-free measurements: the minimum is the truth itself; 200 Adam steps reach it to
    # 5e-4 (measured: 5e-5) with the loss down by 1e8 (measured: 5e-10)
    r = sysid.identify(200, envs=3, steps=120, noise=0.0, log=None)
    np.testing.assert_array_less(r["rel_error"], 5e-4)
    assert r["loss"][-1] < 1e-8 * r["loss"][0]


def test_drone_plain_gradient_stalls_at_rest(drone):
    # resting on the floor (thrust 2 N against 9.81 N), the contact is clamping: the plain
    # gradient of the final height with respect to the thrust is zero up to round-off, so SGD
    # never moves the thrust and the loss stays exactly where it started
    r = drone.takeoff(30, aware=False, log=None)
    assert r["status"] == 0
    assert r["loss"][0] == pytest.approx(1.0)  # z(T) = 0, target 1 m
    assert np.all(r["loss"] == r["loss"][0])
    assert r["grad_norm"].max() < 1e-12
    assert r["liftoff"] is None
    np.testing.assert_array_equal(r["ctrl"], r["ctrl_init"])


def test_drone_complementarity_aware_gradient_escapes(drone):
    # the same SGD step size with complementarity-aware gradients: the first gradient is the
    # free-flight one, dL/dctrl_t = 2 (z(T) - target) gear / m dt^2 (T - t), the drone lifts off
    # and the loss falls by more than a factor 1e6 within 100 iterations (measured: 3e-16)
    steps, dt, gear, mass, target = 500, 0.01, 20.0, 1.0, 1.0
    r = drone.takeoff(100, aware=True, steps=steps, target=target, log=None)
    assert r["status"] == 0
    free_flight = -2 * target * gear / mass * dt**2 * (steps - np.arange(steps))
    np.testing.assert_allclose(r["grad_init"], free_flight, rtol=1e-9, atol=1e-12)
    assert r["liftoff"] is not None and r["liftoff"] < 60
    assert r["loss"][-1] < 1e-6 * r["loss"][0]
    assert abs(r["height"][-1] - target) < 1e-3
    # the plain run with the same step size, for contrast, does not move at all
    plain = drone.takeoff(100, aware=False, steps=steps, target=target, log=None)
    assert plain["loss"][-1] == plain["loss"][0]
