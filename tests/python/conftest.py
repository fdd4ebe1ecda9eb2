"""Shared fixtures of the Python tests."""

from __future__ import annotations

import importlib.util
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
