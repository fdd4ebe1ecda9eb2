"""Shared fixtures of the Python tests."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import phalanx

if importlib.util.find_spec("mujoco"):
    import mujoco

    # MuJoCo's warnings (e.g. deprecated attributes in Gymnasium's models) as Python warnings,
    # listed by pytest, instead of lines in a MUJOCO_LOG.TXT in the working directory
    mujoco.set_mju_user_warning(lambda msg: warnings.warn(f"MuJoCo: {msg}", RuntimeWarning))

# the humanoid of MuJoCo's distribution (Debian package mujoco)
HUMANOID = Path("/usr/share/mujoco/model/humanoid/humanoid.xml")


@pytest.fixture
def rng() -> np.random.Generator:
    """a fixed seed, so that a failure reproduces"""
    return np.random.default_rng(20240601)


@pytest.fixture
def humanoid():
    """the humanoid (nq 28, nv 27, nu 21: a free joint and 21 hinges) without contacts and joint
    limits (the smooth dynamics these tests check), loaded afresh so that a test may change its
    options"""
    model = phalanx.load_model(HUMANOID)  # installed by scripts/setup.sh (libmujoco-samples)
    model.contact = model.limit = False
    return model


SPHERE_AND_PENDULUM = """<mujoco><option timestep='0.002'/><worldbody>
  <geom name='floor' type='plane' size='10 10 .1' friction='0.6'/>
  <body pos='0 0 0.0995'><freejoint/><geom type='sphere' size='.1' mass='1.3'
    friction='0.5'/></body>
  <body pos='2 0 1'><joint name='hinge' type='hinge' axis='0 1 0' damping='0.05'/>
    <geom type='capsule' fromto='0 0 0 0.4 0 0' size='0.03' mass='0.7' contype='0'
      conaffinity='0'/></body>
</worldbody><actuator><general joint='hinge' gear='1.5' gaintype='affine' gainprm='1 0.2 -0.1'
  biastype='affine' biasprm='0.05 -0.5 -0.05'/></actuator><tendon><fixed stiffness='0.5'
  damping='0.05' springlength='-0.1 0.1'><joint joint='hinge' coef='0.8'/></fixed></tendon></mujoco>"""


@pytest.fixture
def sphere_and_pendulum(tmp_path):
    """a sphere that slides on the floor (one contact) beside a pendulum driven by an actuator
    with affine gain and bias (a servo-like general actuator) and held by a fixed tendon's
    spring, with the stabilised PGS solver at a tight tolerance: the scene of the gradient
    tests"""
    path = tmp_path / "sphere_and_pendulum.xml"
    path.write_text(SPHERE_AND_PENDULUM)
    model = phalanx.load_model(path)
    model.lcp_solver = "pgs_stabilized"
    model.lcp_tolerance = 1e-9
    return model


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str):
    """the module examples/<name>.py (the examples directory is not a package; its shared
    helpers, examples/_shared.py, are found through sys.path as when an example runs)"""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"phalanx_example_{name}",
                                                  EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
