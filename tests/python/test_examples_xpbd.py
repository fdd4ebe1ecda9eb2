"""The XPBD examples on small budgets: examples/xpbd_design.py (a double pendulum's link lengths
designed through the XPBD solver's gradients). The tests check the gradients the design descends
and what the descent achieves, not only that it runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import load_example


@pytest.fixture(scope="module")
def xd():
    return load_example("xpbd_design")


@pytest.fixture(scope="module")
def model(xd, tmp_path_factory):
    return xd.load_model(tmp_path_factory.mktemp("xpbd_design") / "xpbd_design.xml")


def test_loss_gradient_in_the_lengths_matches_central_differences(xd, model):
    # 0.5 s of the controlled rollout: the lengths reach the step through body_pos, body_ipos and
    # body_inertia, and the controller through the end effector; its gradient against central
    # differences of the whole loss
    lengths = torch.tensor([2.72, 0.31], dtype=torch.float64, requires_grad=True)
    loss, _, _, _ = xd.simulate(model, lengths, seconds=0.5)
    (grad,) = torch.autograd.grad(loss, lengths)
    h = 1e-6
    with torch.no_grad():
        fd = []
        for i in range(2):
            e = torch.zeros(2, dtype=torch.float64)
            e[i] = h
            plus = xd.simulate(model, lengths + e, seconds=0.5)[0]
            minus = xd.simulate(model, lengths - e, seconds=0.5)[0]
            fd.append(float(plus - minus) / (2 * h))
    np.testing.assert_allclose(grad.numpy(), fd, rtol=1e-5)


def test_descent_from_the_scan_approaches_the_papers_design(xd, model):
    # from the scan's best point of the grid (2.70, 0.35) the descent moves the second link
    # towards the paper's 0.31 m and lowers the loss (15.9 there; the full run reaches 9.3 at
    # (2.68, 0.30)); the start (3.0, 0.1) lies beyond the ridge, with a loss above 70
    start_loss = float(xd.simulate(model, torch.tensor(xd.START, dtype=torch.float64))[0])
    run = xd.design(model, (2.70, 0.35), iters=12, log=None)
    loss = run["history"]["loss"]
    l1, l2 = run["lengths"]
    assert start_loss > 70
    assert loss[0] > 15 and min(loss) < 12
    assert abs(l1 - 2.70) < 0.03 and 0.29 < l2 < 0.335
