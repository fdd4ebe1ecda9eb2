"""The test systems of Nimble (Werling et al., RSS 2021, Table III) as MJCF models in
examples/models: half_cheetah_planar, jump_worm and catapult.

Each model is checked against MuJoCo (the same file through its Python bindings) and for the
resting pose it is written to start from:
  - both libraries read the same coordinates (nq, nv, nu) and the same joint-space inertia, at
    qpos0 and at random configurations within the joint ranges (contacts and limits off, the
    smooth dynamics; tolerance 1e-10 norm-relative as in test_dynamics_mujoco.py);
  - with contacts on (Phalanx's "pgs_stabilized" solver), one second without control from
    qpos0 at rest stays at rest, with the number of contacts the model's header comment
    states at every step and no status bit;
  - MuJoCo's soft contacts, stepped for the same second, rest at the same height within 5 mm
    and on the same number of contacts.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import phalanx
from phalanx.testing import JOINT_FREE, JOINT_HINGE, JOINT_SLIDE, assert_close, random_state

import mujoco  # noqa: E402

EXAMPLE_MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"

# name: (nq, nv, nu), contacts at rest, (joint whose z coordinate is the height compared with
# MuJoCo, offset of z in that joint's qpos)
MODELS = {
    "half_cheetah_planar": ((9, 9, 6), 2, ("rootz", 0)),
    "jump_worm": ((5, 5, 2), 6, ("rootz", 0)),
    "catapult": ((10, 9, 3), 1, ("ball", 2)),
}
NRANDOM = 5  # random configurations besides qpos0


def path_of(name: str) -> Path:
    return EXAMPLE_MODELS / f"{name}.xml"


def height_index(model: phalanx.Model, name: str) -> int:
    joint, offset = MODELS[name][2]
    return int(model.jnt_qposadr[model.joint_id(joint)]) + offset


def mujoco_mass_matrix(mj: mujoco.MjModel, qpos: np.ndarray) -> np.ndarray:
    """MuJoCo's qM at qpos, dense (nv, nv)"""
    d = mujoco.MjData(mj)
    d.qpos[:] = qpos
    mujoco.mj_forward(mj, d)
    M = np.zeros((mj.nv, mj.nv))
    if hasattr(d, "qM"):  # MuJoCo 3: mj_fullM(m, dst, qM)
        mujoco.mj_fullM(mj, M, d.qM)
    else:  # MuJoCo 4: mj_fullM(m, d, dst)
        mujoco.mj_fullM(mj, d, M)
    return M


def valid_configurations(model: phalanx.Model, n: int, rng: np.random.Generator) -> np.ndarray:
    """n random qpos near qpos0 (unit quaternions), hinges and slides clipped to their ranges"""
    qpos, _ = random_state(model, n, rng, qpos_scale=0.5)
    for j, kind in enumerate(model.jnt_type):
        if kind in (JOINT_HINGE, JOINT_SLIDE) and model.jnt_limited[j]:
            a = model.jnt_qposadr[j]
            qpos[:, a] = np.clip(qpos[:, a], *model.jnt_range[j])
    return qpos


@pytest.mark.parametrize("name", list(MODELS))
def test_header_states_dofs_and_contacts(name):
    # the header comment of each file is what users read: it must state the dof count and the
    # number of contacts at rest that the tests below check
    text = path_of(name).read_text()
    header = text[text.index("<!--") : text.index("-->")]
    (nq, nv, nu), ncon, _ = MODELS[name]
    assert re.search(rf"\b{nv} dofs \(nq = {nq}, nv = {nv}, nu = {nu}\)", header), header
    stated = re.search(r"Expected contacts\s+at rest:\s+(\d+)", header)
    assert stated is not None and int(stated.group(1)) == ncon, header


@pytest.mark.parametrize("name", list(MODELS))
def test_mass_matrix_matches_mujoco(name, rng):
    model = phalanx.load_model(path_of(name))
    model.contact = model.limit = False
    mj = mujoco.MjModel.from_xml_path(str(path_of(name)))
    assert (model.nq, model.nv, model.nu) == (mj.nq, mj.nv, mj.nu) == MODELS[name][0]
    assert model.ignored == []  # every element and attribute of the file is simulated
    np.testing.assert_array_equal(model.qpos0, mj.qpos0)
    assert model.timestep == mj.opt.timestep

    qpos = np.concatenate([model.qpos0[None], valid_configurations(model, NRANDOM, rng)])
    expected = np.array([mujoco_mass_matrix(mj, q) for q in qpos])
    actual = phalanx.mass_matrix(model, qpos)
    assert actual.shape == (NRANDOM + 1, model.nv, model.nv)
    assert_close(actual, expected, 1e-10, f"{name}: qM")


def phalanx_rest(name: str):
    """Phalanx with contacts, 1 s from qpos0 at rest without control -> (model, qpos (T, nq),
    qvel (T, nv), status, counts (T, NUM_COUNTS))"""
    model = phalanx.load_model(path_of(name))
    model.lcp_solver = "pgs_stabilized"
    assert model.contact and model.limit
    T = int(round(1.0 / model.timestep))
    qpos0 = model.qpos0[None].copy()
    counts = np.full((1, T, phalanx.NUM_COUNTS), -1, np.int32)
    qs, vs, status = phalanx.rollout(model, qpos0, np.zeros((1, model.nv)),
                                     np.zeros((1, T, model.nu)), counts=counts)
    return model, qs[0], vs[0], status, counts[0]


@pytest.mark.parametrize("name", list(MODELS))
def test_rests_on_its_contacts(name):
    model, qs, vs, status, counts = phalanx_rest(name)
    ncon = MODELS[name][1]
    np.testing.assert_array_equal(status, 0)
    contacts = counts[:, phalanx.COUNT_CONTACTS]
    assert (contacts == ncon).all(), (
        f"{name}: contacts per step {np.unique(contacts)} (first off at step "
        f"{np.flatnonzero(contacts != ncon)[:1]}), expected {ncon}")
    np.testing.assert_array_equal(counts[:, phalanx.COUNT_OVERFLOW], 0)
    assert (counts[:, phalanx.COUNT_ROWS] >= ncon).all()  # each contact has at least a normal row
    assert np.abs(vs[-1]).max() < 1e-2, f"{name}: final qvel {vs[-1]}"
    # at rest means where it started: qpos0 is the resting pose, not a pose to fall from
    assert np.abs(qs[-1] - model.qpos0).max() < 1e-3, f"{name}: drifted to {qs[-1]}"


@pytest.mark.parametrize("name", list(MODELS))
def test_mujoco_rests_at_the_same_height(name):
    model, qs, _, _, _ = phalanx_rest(name)
    z = height_index(model, name)
    mj = mujoco.MjModel.from_xml_path(str(path_of(name)))
    d = mujoco.MjData(mj)  # qpos0, zero velocity and control
    for _ in range(int(round(1.0 / mj.opt.timestep))):
        mujoco.mj_step(mj, d)
    assert abs(d.qpos[z] - qs[-1, z]) < 5e-3, (
        f"{name}: height MuJoCo {d.qpos[z]:.5f}, Phalanx {qs[-1, z]:.5f}")
    assert np.abs(d.qvel).max() < 1e-2, f"{name}: MuJoCo's final qvel {d.qvel}"
    assert d.ncon == MODELS[name][1], f"{name}: MuJoCo rests on {d.ncon} contacts"


def test_catapult_bats_the_ball():
    # the ball is within the arm's reach: full negative torque on all three joints swings the
    # nearly straight arm forward through it and sends it about 3 m along +x in both libraries
    # (Phalanx 3.2 m, MuJoCo 2.8 m after 0.8 s); the ball starts at x = 0.3
    name = "catapult"
    model = phalanx.load_model(path_of(name))
    model.lcp_solver = "pgs_stabilized"
    ball = int(model.jnt_qposadr[model.joint_id("ball")])
    assert model.jnt_type[model.joint_id("ball")] == JOINT_FREE
    T = int(round(0.8 / model.timestep))
    ctrl = -np.ones((1, T, model.nu))
    qs, _, status = phalanx.rollout(model, model.qpos0[None].copy(), np.zeros((1, model.nv)), ctrl)
    assert status[0] & (phalanx.STATUS_NAN_STATE | phalanx.STATUS_NAN_RESULT) == 0
    assert qs[0, -1, ball] > 2.0, f"Phalanx: ball at x = {qs[0, -1, ball]:.3f}"

    mj = mujoco.MjModel.from_xml_path(str(path_of(name)))
    d = mujoco.MjData(mj)
    d.ctrl[:] = -1
    for _ in range(T):
        mujoco.mj_step(mj, d)
    assert d.qpos[ball] > 2.0, f"MuJoCo: ball at x = {d.qpos[ball]:.3f}"
