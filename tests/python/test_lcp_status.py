"""STATUS_LCP_NOT_CONVERGED means a contact problem the solver could not solve: an ordinary
humanoid fall leaves it clear in every environment, a sphere squeezed between two surfaces
(a problem without a solution) sets it, and its limit is an option with checked values."""

from __future__ import annotations

import numpy as np
import pytest

import phalanx
from conftest import HUMANOID

NOT_CONVERGED = phalanx.STATUS_LCP_NOT_CONVERGED


def fall(model, dtype, controls: str, envs: int = 128, steps: int = 600) -> np.ndarray:
    """status of `envs` humanoids falling from perturbed standing poses for `steps` steps, with
    zero controls or smooth random ones (an Ornstein-Uhlenbeck process of deviation 0.3 and a
    time constant of 20 steps, clipped to the control range)"""
    rng = np.random.default_rng(2)
    qpos = np.repeat(model.qpos0[None], envs, axis=0)
    qpos[:, 7:] += rng.uniform(-0.1, 0.1, (envs, model.nq - 7))
    qvel = rng.normal(0, 0.3, (envs, model.nv))
    ctrl = np.zeros((envs, steps, model.nu))
    if controls == "smooth":
        u = np.zeros((envs, model.nu))
        for t in range(steps):
            u = 0.95 * u + 0.3 * np.sqrt(1 - 0.95**2) * rng.normal(size=u.shape)
            ctrl[:, t] = np.clip(u, -1, 1)
    qs, vs, status = phalanx.rollout(model, qpos.astype(dtype), qvel.astype(dtype),
                                     ctrl.astype(dtype))
    # the fall is a fall: the torsos end on the floor, from 1.3 m
    assert np.median(qs[:, -1, 2]) < 0.5
    return status


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("controls", ["zero", "smooth"])
def test_an_ordinary_humanoid_fall_leaves_the_bit_clear(dtype, controls):
    """128 humanoids x 600 steps: impacts of hands, elbows and feet, then lying still on many
    redundant contacts. At impacts, thirty sweeps of projected Gauss-Seidel stall above the
    default limit (1 cm/s; under random controls, in every environment at some step); the exact
    re-solve and the damped sweeps that follow a stalled step bring every step under it."""
    model = phalanx.load_model(HUMANOID)
    assert model.lcp_residual_limit == 0.01
    status = fall(model, dtype, controls)
    assert not (status & phalanx.STATUS_STOP_MASK).any()
    flagged = np.flatnonzero(status & NOT_CONVERGED)
    assert flagged.size == 0, f"environments {flagged} left above {model.lcp_residual_limit} m/s"


SQUEEZE = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 .1"/>
    {ceiling}
    <body pos="0 0 {z}">
      <freejoint/>
      <geom type="sphere" size=".1" mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sphere_squeezed_between_two_surfaces_sets_the_bit(tmp_path, dtype):
    """A sphere of radius 0.1 m between a floor and a ceiling 0.18 m apart penetrates both by
    1 cm: Baumgarte asks both contacts to separate at erp (depth - slop) / dt = 0.9 m/s, in
    opposite directions, which no impulses can do. Every step of every environment is flagged.
    The same sphere resting on the floor alone, or dropped onto it, is not."""
    ceiling = '<geom name="ceiling" type="plane" size="1 1 .1" pos="0 0 .18" euler="180 0 0"/>'
    cases = {"squeezed": (ceiling, 0.09), "resting": ("", 0.0995), "dropped": ("", 0.5)}
    envs, steps = 4, 300
    for name, (geom, z) in cases.items():
        path = tmp_path / f"{name}.xml"
        path.write_text(SQUEEZE.format(ceiling=geom, z=z))
        model = phalanx.load_model(str(path))
        qpos = np.repeat(model.qpos0[None], envs, axis=0).astype(dtype)
        qpos[:, :2] = np.linspace(-0.3, 0.3, envs)[:, None]
        qvel = np.zeros((envs, model.nv), dtype)
        ctrl = np.zeros((envs, 1, model.nu), dtype)
        for t in range(steps):
            qpos, qvel, status = phalanx.step(model, qpos, qvel, ctrl[:, 0])
            flagged = (status & NOT_CONVERGED) != 0
            if name == "squeezed":
                assert flagged.all(), f"step {t}"
            else:
                assert not flagged.any(), f"{name}, step {t}"
        if name == "dropped":  # it did land and rests on the floor
            np.testing.assert_allclose(qpos[:, 2], 0.1, atol=2e-3)
            assert np.abs(qvel).max() < 1e-2


def test_the_limit_and_the_sweep_budget_are_checked_options():
    model = phalanx.load_model(HUMANOID)
    assert (model.lcp_iterations, model.lcp_max_iterations) == (30, 500)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="lcp_residual_limit must be > 0"):
            model.lcp_residual_limit = bad
    with pytest.raises(ValueError, match="lcp_max_iterations must be >= 0"):
        model.lcp_max_iterations = -1
    model.lcp_residual_limit = 0.05
    model.lcp_max_iterations = 0
    assert (model.lcp_residual_limit, model.lcp_max_iterations) == (0.05, 0)
