"""Concurrent use from Python threads: the kernels run without the GIL, two threads stepping two
models or one shared model get what they would get one after the other, and two threads in
one stateful object (a Simulator, a planner, a Tape) get a clear error instead of a race."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import phalanx
import phalanx.control
import phalanx.costs
from phalanx.testing import run_in_threads
from conftest import HUMANOID


def run_threads(*jobs):
    """run the jobs in threads at once; their results, re-raising the first error"""
    return run_in_threads(jobs)


def falling(model, seed, E=16, T=300):
    """a rollout job of the humanoid with contacts: random controls of this seed"""
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(model.actuator_ctrlrange).reshape(-1, 2).T
    qpos = np.repeat(model.qpos0[None], E, 0)
    qvel = rng.uniform(-0.5, 0.5, (E, model.nv))
    ctrl = rng.uniform(lo, hi, (E, T, model.nu))
    return lambda: phalanx.rollout(model, qpos, qvel, ctrl)


@pytest.mark.parametrize("shared", [False, True])
def test_two_threads_step_like_one_after_the_other(shared):
    """two threads rolling out at once, on two models or on one model shared, with its
    parameters per environment: each result equals the same call run alone, bit for bit"""
    a = phalanx.load_model(HUMANOID)
    b = a if shared else phalanx.load_model(HUMANOID)
    a.set_parameter("body_mass", a.parameter("body_mass") * np.linspace(0.8, 1.2, 16)[:, None])
    jobs = [falling(a, 1), falling(b, 2)]
    alone = [job() for job in jobs]
    for _ in range(3):
        together = run_threads(*jobs)
        for x, y in zip(together, alone):
            for u, v in zip(x, y):
                np.testing.assert_array_equal(u, v)


def test_the_gil_is_released_while_kernels_run():
    """While one thread runs a long rollout, Python code in another keeps running: the main
    thread counts its own loop turns during the rollout (a held GIL would allow none until the
    rollout returned, or one per switch interval at most)."""
    model = phalanx.load_model(HUMANOID)
    job = falling(model, 3, E=64, T=2000)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (job(), done.set()))
    turns = 0
    worker.start()
    while not done.is_set():
        turns += 1
        time.sleep(0.001)
    worker.join()
    assert turns > 50


def held_elsewhere(obj_call, holder):
    """call holder() in a thread that keeps the object busy, then obj_call() here while it
    does: the error it raises"""
    started = threading.Event()

    def busy():
        started.set()
        holder()

    worker = threading.Thread(target=busy)
    worker.start()
    started.wait()
    time.sleep(0.2)  # the holder is inside its call (a rollout of seconds)
    try:
        with pytest.raises(RuntimeError, match="in use by another thread") as caught:
            obj_call()
    finally:
        worker.join()
    return caught


def test_one_simulator_from_two_threads_is_an_error():
    sim = phalanx.Simulator(HUMANOID, 64)
    ctrl = np.zeros((64, 3000, sim.model.nu))
    caught = held_elsewhere(lambda: sim.step(), lambda: sim.rollout(ctrl))
    assert "phalanx.Simulator" in str(caught.value)
    sim.step()  # free again once the other thread is done


def test_one_planner_or_tape_from_two_threads_is_an_error():
    model = phalanx.load_model(HUMANOID)
    mppi = phalanx.control.MPPI(model, horizon=1000, num_samples=128, sigma=0.2, temperature=1.0,
                                cost=phalanx.costs.BodyHeight(model, "head", 1.4))
    q, v = model.qpos0, np.zeros(model.nv)
    held_elsewhere(lambda: mppi.plan(q, v), lambda: mppi.plan(q, v))
    tape = phalanx.Tape()
    qpos, qvel = np.repeat(model.qpos0[None], 64, 0), np.zeros((64, model.nv))
    ctrl = np.zeros((64, 2000, model.nu))
    held_elsewhere(lambda: phalanx.rollout(model, qpos, qvel, ctrl[:, :5], tape=tape),
                   lambda: phalanx.rollout(model, qpos, qvel, ctrl, tape=tape))
