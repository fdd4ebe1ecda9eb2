"""Smooth dynamics against Pinocchio on URDF robots: the bundled 7-dof arm and arms, legged
trees and humanoids of example-robot-data (their fixed-base models, as both libraries load a
URDF).

Conventions bridged here: Pinocchio numbers joints in its own order (mapped by joint name), a
continuous joint has q = (cos, sin) of our angle, Pinocchio's ABA and RNEA leave out joint
damping (added to or taken from its torques here), and its armature and gravity are set from
the Phalanx model. Fixed joints are merged by both. Joint friction and mimic tags, which the
loader refuses, are stripped from a copy of the file (see strip_unsupported). With those, for
q, qvel, ctrl and qacc:
  mass_matrix       = crba(q)
  bias_forces       = nonLinearEffects(q, qvel)
  forward_dynamics  = aba(q, qvel, actuation(ctrl) + passive(q, qvel))
  inverse_dynamics  = rnea(q, qvel, qacc) - passive(q, qvel)
Tolerance: norm-relative per environment, ||phalanx_e - pinocchio_e|| <= 1e-10
||pinocchio_e|| (phalanx.testing.assert_close).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import phalanx
from phalanx.testing import (
    JOINT_HINGE,
    JOINT_SLIDE,
    actuator_force,
    assert_close,
    example_robot_data_dir,
    random_ctrl,
    random_state,
)

import pinocchio as pin  # noqa: E402  (PyPI pin, installed by scripts/setup.sh)

RTOL = 1e-10
NENV = 6
EXAMPLE_MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"


ROBOTS = example_robot_data_dir()


def robot(name: str, sub: str):
    return pytest.param(ROBOTS / sub if ROBOTS else None, id=name)


URDFS = [
    pytest.param(EXAMPLE_MODELS / "arm7.urdf", id="arm7"),
    robot("ur5", "ur_description/urdf/ur5_robot.urdf"),
    robot("ur10", "ur_description/urdf/ur10_robot.urdf"),
    robot("so100", "so_arm_description/urdf/so100.urdf"),
    robot("finger_edu", "finger_edu_description/robots/finger_edu.urdf"),
    robot("double_pendulum_continuous",
          "double_pendulum_description/urdf/double_pendulum_continuous.urdf"),
    # trees: legs and arms off a fixed trunk
    robot("a1", "a1_description/urdf/a1.urdf"),
    robot("simple_humanoid", "simple_humanoid_description/urdf/simple_humanoid_classical.urdf"),
    robot("g1", "g1_description/urdf/g1_29dof_with_hand_rev_1_0.urdf"),
    # with joint friction or mimic joints, which the loader refuses; stripped (see Pair)
    robot("panda", "panda_description/urdf/panda.urdf"),
    robot("z1", "z1_description/urdf/z1.urdf"),
    robot("xarm7", "xarm_description/urdf/xarm7.urdf"),
    robot("talos_left_arm", "talos_data/robots/talos_left_arm.urdf"),
    robot("talos_reduced", "talos_data/robots/talos_reduced.urdf"),
    robot("baxter", "baxter_description/urdf/baxter.urdf"),
]


def strip_unsupported(path: Path, out_dir: Path) -> Path:
    """A copy of a URDF without what the loader refuses and Pinocchio's dynamics do not use:
    dry friction (<dynamics friction>) and <mimic> (Pinocchio's default URDF parser treats a
    mimic joint as an independent joint). The copy lives elsewhere, so its package:// mesh URLs
    become absolute paths into example-robot-data."""
    tree = ET.parse(path)
    changed = False
    for joint in tree.iter("joint"):
        for dynamics in joint.iter("dynamics"):
            changed |= dynamics.attrib.pop("friction", None) is not None
        for mimic in joint.findall("mimic"):
            joint.remove(mimic)
            changed = True
    if not changed:
        return path
    package = example_robot_data_dir().parent  # robots/ lies in the package's folder
    for mesh in tree.iter("mesh"):
        url = mesh.get("filename", "")
        if url.startswith("package://"):
            name, _, rest = url[len("package://"):].lstrip("/").partition("/")
            assert name == "example-robot-data", url
            mesh.set("filename", str(package / rest))
    out = out_dir / path.name
    tree.write(out)
    return out


class Pair:
    """One URDF loaded by Phalanx and by Pinocchio, with the maps between their coordinates."""

    def __init__(self, path: Path | None, tmp_dir: Path):
        if path is None:
            pytest.fail("example-robot-data is not installed (scripts/requirements.txt)")
        if not path.exists():
            pytest.fail(f"{path} is missing")
        path = strip_unsupported(path, tmp_dir)
        self.model = m = phalanx.load_model(path)
        m.contact = False  # rigid-body dynamics only (collision cylinders are not implemented)
        self.pin = p = pin.buildModelFromUrdf(str(path))
        assert p.nv == m.nv
        # per Phalanx joint: (qpos address, Pinocchio q address, Pinocchio nq); and the Pinocchio
        # dof of each Phalanx dof
        self.joints = []
        self.dof = np.empty(m.nv, dtype=int)
        for j, name in enumerate(m.joint_names):
            assert m.jnt_type[j] in (JOINT_HINGE, JOINT_SLIDE), name
            jid = p.getJointId(name)
            assert jid < p.njoints, f"Pinocchio has no joint {name}"
            joint = p.joints[jid]
            self.joints.append((m.jnt_qposadr[j], joint.idx_q, joint.nq))
            self.dof[m.jnt_dofadr[j]] = joint.idx_v
        assert sorted(self.dof) == list(range(m.nv))
        armature = np.zeros(m.nv)
        armature[self.dof] = m.dof_armature
        p.armature = armature
        p.gravity = pin.Motion(np.asarray(m.gravity, dtype=float), np.zeros(3))
        self.data = p.createData()

    def q(self, qpos: np.ndarray) -> np.ndarray:
        """Pinocchio's q of one Phalanx qpos"""
        q = np.empty(self.pin.nq)
        for qa, iq, nq in self.joints:
            q[iq : iq + nq] = qpos[qa] if nq == 1 else (np.cos(qpos[qa]), np.sin(qpos[qa]))
        return q

    def to_pin(self, x: np.ndarray) -> np.ndarray:
        """a dof vector in Pinocchio's order"""
        y = np.empty(self.pin.nv)
        y[self.dof] = x
        return y

    def from_pin(self, y: np.ndarray) -> np.ndarray:
        """a dof vector in Phalanx's order"""
        return np.asarray(y)[self.dof]

    def passive(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """joint damping and springs, -damping qvel - stiffness (qpos - qpos_spring), which
        Pinocchio leaves out"""
        m = self.model
        f = -m.dof_damping * qvel
        for j in range(m.njnt):
            qa, da = m.jnt_qposadr[j], m.jnt_dofadr[j]
            f[da] -= m.jnt_stiffness[j] * (qpos[qa] - m.qpos_spring[qa])
        return f


@pytest.fixture(scope="module", params=URDFS)
def pair(request, tmp_path_factory) -> Pair:
    return Pair(request.param, tmp_path_factory.mktemp("urdf"))


@pytest.fixture
def state(pair, rng):
    """random joint angles about qpos0 (1 rad), velocities and controls"""
    qpos, qvel = random_state(pair.model, NENV, rng, qpos_scale=1.0)
    return qpos, qvel, random_ctrl(pair.model, (NENV,), rng)


def test_mass_matrix(pair, state):
    qpos, _, _ = state
    expected = []
    for q in qpos:
        M = pin.crba(pair.pin, pair.data, pair.q(q))
        M = np.triu(M) + np.triu(M, 1).T  # some releases fill the upper triangle only
        expected.append(M[np.ix_(pair.dof, pair.dof)])
    assert_close(phalanx.mass_matrix(pair.model, qpos), np.array(expected), RTOL, "crba")


def test_bias_forces(pair, state):
    qpos, qvel, _ = state
    expected = [
        pair.from_pin(pin.nonLinearEffects(pair.pin, pair.data, pair.q(q), pair.to_pin(v)))
        for q, v in zip(qpos, qvel)
    ]
    assert_close(phalanx.bias_forces(pair.model, qpos, qvel), np.array(expected), RTOL,
                 "nonLinearEffects")


def test_forward_dynamics(pair, state):
    qpos, qvel, ctrl = state
    tau = actuator_force(pair.model, ctrl)
    expected = [
        pair.from_pin(pin.aba(pair.pin, pair.data, pair.q(q), pair.to_pin(v),
                              pair.to_pin(t + pair.passive(q, v))))
        for q, v, t in zip(qpos, qvel, tau)
    ]
    assert_close(phalanx.forward_dynamics(pair.model, qpos, qvel, ctrl), np.array(expected), RTOL,
                 "aba")


def test_inverse_dynamics(pair, state, rng):
    qpos, qvel, _ = state
    qacc = 10 * rng.standard_normal((NENV, pair.model.nv))
    expected = [
        pair.from_pin(pin.rnea(pair.pin, pair.data, pair.q(q), pair.to_pin(v), pair.to_pin(a)))
        - pair.passive(q, v)
        for q, v, a in zip(qpos, qvel, qacc)
    ]
    assert_close(phalanx.inverse_dynamics(pair.model, qpos, qvel, qacc), np.array(expected), RTOL,
                 "rnea")
