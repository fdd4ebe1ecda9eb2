"""examples/policy_apg.py: policies trained by analytic policy gradients through
phalanx.torch.step, on a small budget, and the window loss's gradient against central
differences.

Measured on the development machine: the cart-pole's evaluation return goes from -0.85 to a best
of about +0.2 within 150 windows (about 9 s), the half-cheetah's forward speed from -0.04 to a
best above 1.3 m/s within 60 windows (about 3 s).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import load_example


@pytest.fixture(scope="module")
def apg():
    torch.set_num_threads(1)
    return load_example("policy_apg")


def test_window_loss_gradient_matches_central_differences(apg):
    task = apg.Task("cartpole")
    policy = apg.make_policy(task, 16, seed=3)
    q, v = task.starts(4, torch.Generator().manual_seed(0))
    params = list(policy.parameters())
    loss, _, _ = apg.window_loss(task, policy, q, v, 5)
    grads = torch.autograd.grad(loss, params)
    rng = np.random.default_rng(1)
    direction = [torch.from_numpy(rng.standard_normal(p.shape)) for p in params]
    analytic = sum(float((g * d).sum()) for g, d in zip(grads, direction))
    h = 1e-6

    def shifted(sign):
        with torch.no_grad():
            for p, d in zip(params, direction):
                p += sign * h * d
            value = float(apg.window_loss(task, policy, q, v, 5)[0])
            for p, d in zip(params, direction):
                p -= sign * h * d
        return value

    numeric = (shifted(1) - shifted(-1)) / (2 * h)
    assert analytic == pytest.approx(numeric, rel=1e-6)


def test_cartpole_policy_improves(apg):
    r = apg.train("cartpole", 150, log=None)
    assert r["initial"] < -0.8  # the untrained policy leaves the pole hanging
    assert r["returns"].max() > r["initial"] + 0.8


def test_cheetah_policy_runs_forward(apg):
    r = apg.train("cheetah", 60, log=None)
    assert abs(r["initial"]) < 0.1  # the untrained policy does not move
    assert r["returns"].max() > 1.0  # m/s forward, less the effort term
    assert r["final"] > 0.5
