"""The six-bar tensegrity of examples/models/tensegrity.xml: cables that only pull (spatial
tendons with a general actuator whose force -k (L - l0 - scale act) - d dL/dt is limited to
[-1e9, 0]), the robot as the model file describes it, its motion against MuJoCo with and without
the floor, and gradients (state, activations, controls, cable stiffness, damping and rest length,
rod mass and friction) against central differences."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

import phalanx
import phalanx.testing
from phalanx.testing import taped_gradient_pair

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "tensegrity.xml"
K, D, L0, SCALE = 10000.0, 1000.0, 0.95, 0.075  # the cables' law, as the file writes it


def load(contact: bool):
    mj = mujoco.MjModel.from_xml_path(str(MODEL))
    if not contact:
        mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    return mj, phalanx.from_mujoco(mj)


@pytest.fixture(scope="module")
def free():
    return load(contact=False)


@pytest.fixture(scope="module")
def floor():
    return load(contact=True)


def random_controls(rng, E, T, nu, every=100):
    """controls held for `every` steps (the 10 Hz commands of the paper's data)"""
    return np.repeat(rng.uniform(-1, 1, (E, -(-T // every), nu)), every, axis=1)[:, :T]


def centre_of_mass(qpos):
    """the rods' mean position (equal masses), (..., 3)"""
    return np.mean([qpos[..., 7 * i:7 * i + 3] for i in range(6)], axis=0)


def cable_parameters(k, d, l0, scale, nu=24):
    """gainprm (nu, 9) and biasprm (nu, 9) of cables of stiffness k, damping d, rest length l0
    and control scale: force = k scale act + k l0 - k L - d dL/dt"""
    gain, bias = np.zeros((nu, 9)), np.zeros((nu, 9))
    gain[:, 0] = k * scale
    bias[:, :3] = [k * l0, -k, -d]
    return gain, bias


def test_the_model_is_the_papers_robot(free):
    # six free rods of 10 kg whose end sites are 1.684 m apart, 24 cables, each rod end in four,
    # all 1.031 m long at rest (the tensegrity icosahedron with parallel rods half a rod length
    # apart), each cable's actuator writing the cable law
    mj, model = free
    d = mujoco.MjData(mj)
    mujoco.mj_forward(mj, d)
    assert mj.njnt == 6 and all(int(t) == int(mujoco.mjtJoint.mjJNT_FREE) for t in mj.jnt_type)
    np.testing.assert_allclose(mj.body_mass[1:], 10.0, rtol=1e-12)
    ends = d.site_xpos.reshape(6, 2, 3)
    np.testing.assert_allclose(np.linalg.norm(ends[:, 0] - ends[:, 1], axis=1), 1.684, rtol=1e-12)
    assert mj.ntendon == mj.nu == mj.na == 24
    np.testing.assert_allclose(d.ten_length, np.sqrt(1.5) * 0.842, rtol=1e-9)
    assert np.bincount(mj.wrap_objid.reshape(24, 2).ravel(), minlength=12).tolist() == [4] * 12
    gain, bias = cable_parameters(K, D, L0, SCALE)
    np.testing.assert_array_equal(model.actuator_gainprm, gain)
    np.testing.assert_array_equal(model.actuator_biasprm, bias)
    # at rest the cables hold k (L - l0), about 810 N of pretension each
    np.testing.assert_allclose(d.actuator_force, -K * (d.ten_length - L0), rtol=1e-12)


def test_cables_pull_and_never_push(free, rng):
    # states where the motors let some cables go slack (rest length beyond their length): those
    # carry nothing, the others pull; the accelerations equal MuJoCo's either way
    mj, model = free
    E = 8
    qpos = np.tile(mj.qpos0, (E, 1))
    for i in range(6):  # move the rods a little, keeping their orientations unit
        qpos[:, 7 * i:7 * i + 3] += rng.uniform(-0.02, 0.02, (E, 3))
        qpos[:, 7 * i + 3:7 * i + 7] += rng.uniform(-0.02, 0.02, (E, 4))
        qpos[:, 7 * i + 3:7 * i + 7] /= np.linalg.norm(qpos[:, 7 * i + 3:7 * i + 7], axis=1,
                                                       keepdims=True)
    qvel = rng.uniform(-0.3, 0.3, (E, mj.nv))
    act = rng.uniform(0.5, 1.5, (E, mj.na))  # rest lengths 0.99 to 1.06 m
    ctrl = rng.uniform(-1, 1, (E, mj.nu))
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl, act=act)
    d = mujoco.MjData(mj)
    slack = taut = 0
    for e in range(E):
        d.qpos[:], d.qvel[:], d.act[:], d.ctrl[:] = qpos[e], qvel[e], act[e], ctrl[e]
        mujoco.mj_forward(mj, d)
        law = K * SCALE * act[e] + K * L0 - K * d.ten_length - D * d.ten_velocity
        np.testing.assert_allclose(d.actuator_force, np.minimum(law, 0), rtol=1e-12, atol=1e-9)
        slack += int((law > 0).sum())
        taut += int((law < 0).sum())
        np.testing.assert_allclose(qacc[e], d.qacc, rtol=0, atol=1e-10 * np.abs(d.qacc).max())
    assert slack > 10 and taut > 10


def test_without_the_floor_the_motion_is_mujocos(free, rng):
    # 1 s of random 10 Hz commands while the robot falls freely: the same trajectory to 1e-9
    # (measured 3.6e-13)
    mj, model = free
    E, T = 2, 1000
    ctrl = random_controls(rng, E, T, mj.nu)
    qs, _, acts, status = phalanx.rollout(model, np.tile(mj.qpos0, (E, 1)), np.zeros((E, mj.nv)),
                                          ctrl, act=np.zeros((E, mj.na)))
    assert not status.any()
    d = mujoco.MjData(mj)
    for e in range(E):
        mujoco.mj_resetData(mj, d)
        for t in range(T):
            d.ctrl[:] = ctrl[e, t]
            mujoco.mj_step(mj, d)
        np.testing.assert_allclose(qs[e, -1], d.qpos, rtol=0, atol=1e-9)
        np.testing.assert_allclose(acts[e, -1], d.act, rtol=0, atol=1e-12)
    assert np.abs(acts).max() > 0.5  # the motors moved


def mujoco_centre_of_mass(mj, ctrl, substeps=1):
    """MuJoCo's centre of mass after each control step of ctrl (T, nu) from the model's
    initial state, each control held for `substeps` steps of mj's timestep"""
    d = mujoco.MjData(mj)
    out = []
    for u in ctrl:
        d.ctrl[:] = u
        for _ in range(substeps):
            mujoco.mj_step(mj, d)
        out.append(d.subtree_com[0].copy())
    return np.array(out)


def test_on_the_floor_the_robot_rests_and_shuffles_as_in_mujoco(floor, rng):
    # Contacts are hard here and soft (spring-damper) in MuJoCo, which sinks a little: set down
    # with the motors at rest, the robot settles on a face at MuJoCo's height within 2 mm
    # (measured 0.5 mm). Under 5 s of random 10 Hz commands it shuffles as MuJoCo's converged
    # motion does: the centre of mass within 0.1 m after 5 s (measured 8.5 cm; both move about
    # 0.12 m) and its height within 2 cm throughout (measured 1.2 cm). The reference is MuJoCo
    # with Euler at 0.25 ms: on three command sequences its centre of mass moves the same
    # distance within 2 cm at 1, 0.5 and 0.25 ms. The model file's implicitfast at 1 ms is not
    # converged on the floor (MuJoCo solves its contact forces with M, then applies them
    # through M - h D): the same distances differ by up to 1.2 m between 1, 0.5 and 0.25 ms.
    mj, model = floor
    E, T = 2, 5000
    ctrl = random_controls(rng, E, T, mj.nu)
    ctrl[0] = 0
    qs, _, _, status = phalanx.rollout(model, np.tile(mj.qpos0, (E, 1)), np.zeros((E, mj.nv)),
                                       ctrl, act=np.zeros((E, mj.na)))
    assert not (status & phalanx.STATUS_STOP_MASK).any()
    com = centre_of_mass(qs)
    at_rest = mujoco_centre_of_mass(mj, ctrl[0, :2000])
    assert abs(com[0, 1999, 2] - at_rest[-1, 2]) < 2e-3
    assert np.abs(com[0, 1999] - com[0, 1899]).max() < 1e-3  # it has nearly come to rest
    converged = mujoco.MjModel.from_xml_path(str(MODEL))
    converged.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    converged.opt.timestep /= 4
    ref = mujoco_centre_of_mass(converged, ctrl[1], substeps=4)
    assert np.linalg.norm(com[1, -1] - ref[-1]) < 0.1
    assert np.abs(com[1, :, 2] - ref[:, 2]).max() < 0.02
    assert np.linalg.norm(ref[-1, :2] - ref[0, :2]) > 0.01  # the commands moved it


def cable_loss_gradients(model, qpos, qvel, ctrl, act, rng, names, h=1e-6):
    """(adjoint, central difference) per name of taped_gradient_pair"""
    return {name: taped_gradient_pair(model, qpos, qvel, ctrl, name, rng, act=act, h=h)[:2]
            for name in names}


def test_gradients_without_the_floor_match_central_differences(free, rng):
    # 50 steps of the free robot under random commands, from a perturbed state with the motors
    # half way: state, activations, controls, the cables' gain and bias parameters, rod masses
    mj, model = free
    E, T = 2, 50
    qpos = np.tile(mj.qpos0, (E, 1))
    qvel = rng.uniform(-0.5, 0.5, (E, mj.nv))
    act = rng.uniform(-0.5, 0.5, (E, mj.na))
    ctrl = random_controls(rng, E, T, mj.nu, every=20)
    names = ["qvel", "act", "ctrl", "actuator_gainprm", "actuator_biasprm"]
    # h = 1e-5: the differences are then within 1.1e-7 of the adjoint (and 1e-9 at 1e-4), where at
    # 1e-6 the rounding of 50 steps of the loss already reaches 1e-6 of the gain's gradient
    gradients = cable_loss_gradients(model, qpos, qvel, ctrl, act, rng, names, h=1e-5)
    for name, (ad, fd) in gradients.items():
        assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), name
    mass_gradient_matches(model, qpos, qvel, ctrl, act, rng, rel=1e-6)


def mass_gradient_matches(model, qpos, qvel, ctrl, act, rng, rel):
    """the rods' masses (not the world's, which stays 0) along a random direction: the tape's
    gradient against a central difference"""
    E, T = ctrl.shape[:2]
    wq = rng.standard_normal((E, model.nq))
    adj_q = np.zeros((E, T, model.nq))
    adj_q[:, -1] = wq
    tape = phalanx.Tape(checkpoint_every=8)
    phalanx.rollout(model, qpos, qvel, ctrl, act=act, tape=tape)
    g = tape.backward(adj_q, None)["body_mass"].sum(0)
    direction = np.r_[0.0, rng.uniform(0.5, 1.5, 6)]

    def loss():
        return float((phalanx.rollout(model, qpos, qvel, ctrl, act=act)[0][:, -1] * wq).sum())

    fd = phalanx.testing.parameter_difference(model, "body_mass", loss, direction, h=1e-5)
    assert float(g @ direction) == pytest.approx(fd, rel=rel)
    assert abs(fd) > 1e-6


def test_gradients_of_stiffness_damping_and_rest_length(free, rng):
    # the cables' k, d and l0 reach the loss through gainprm and biasprm (cable_parameters): the
    # chain rule on the tape's gradients against central differences in k, d and l0 themselves
    mj, model = free
    E, T = 2, 40
    qpos, qvel = np.tile(mj.qpos0, (E, 1)), rng.uniform(-0.5, 0.5, (E, mj.nv))
    act = rng.uniform(-0.5, 0.5, (E, mj.na))
    ctrl = random_controls(rng, E, T, mj.nu, every=20)
    wq = rng.standard_normal((E, mj.nq))
    adj_q = np.zeros((E, T, mj.nq))
    adj_q[:, -1] = wq

    def loss(k, d, l0):
        gain, bias = cable_parameters(k, d, l0, SCALE)
        with phalanx.model_parameters(model, {"actuator_gainprm": gain, "actuator_biasprm": bias}):
            qs = phalanx.rollout(model, qpos, qvel, ctrl, act=act)[0]
        return float((qs[:, -1] * wq).sum())

    tape = phalanx.Tape(checkpoint_every=8)
    phalanx.rollout(model, qpos, qvel, ctrl, act=act, tape=tape)
    g = tape.backward(adj_q, None)
    ggain, gbias = g["actuator_gainprm"].sum(0), g["actuator_biasprm"].sum(0)
    grads = {"k": (ggain[:, 0] * SCALE + gbias[:, 0] * L0 - gbias[:, 1]).sum(),
             "d": -gbias[:, 2].sum(), "l0": (gbias[:, 0] * K).sum()}
    x0 = {"k": K, "d": D, "l0": L0}
    for name, step in (("k", 1e-2), ("d", 1.0), ("l0", 1e-7)):
        plus, minus = dict(x0), dict(x0)
        plus[name] += step
        minus[name] -= step
        fd = (loss(**plus) - loss(**minus)) / (2 * step)
        assert grads[name] == pytest.approx(fd, rel=1e-5), name
    assert abs(grads["k"]) > 0 and abs(grads["d"]) > 0 and abs(grads["l0"]) > 0


def test_gradients_through_sliding_floor_contacts(floor, rng):
    # the robot set down sliding at 1 m/s, 30 steps: its rod ends slide on the floor, so the
    # friction coefficient and the masses move the loss; exact gradients on the clamping set
    # (the stabilised solver). A contact's coefficient is the larger of its geoms' (MuJoCo's
    # rule), not differentiable where they tie: the floor's is raised to 1.2 for this test
    mj, model = floor
    model.lcp_solver = "pgs_stabilized"
    friction = np.array(model.geom_friction)
    friction[mj.geom("floor").id, 0] = 1.2
    model.set_parameter("geom_friction", friction)
    settle = phalanx.rollout(model, mj.qpos0[None], np.zeros((1, mj.nv)),
                             np.zeros((1, 1500, mj.nu)), act=np.zeros((1, mj.na)))
    E, T = 2, 30
    qpos = np.repeat(settle[0][:, -1], E, 0)
    qvel = np.zeros((E, mj.nv))
    for i in range(6):
        qvel[:, 6 * i:6 * i + 2] = [1.0, 0.3]
    act = np.repeat(settle[2][:, -1], E, 0)
    ctrl = np.zeros((E, T, mj.nu))
    out = cable_loss_gradients(model, qpos, qvel, ctrl, act, rng, ["geom_friction", "qvel"])
    for name, (ad, fd) in out.items():
        assert ad == pytest.approx(fd, rel=1e-5, abs=1e-8), name
    assert abs(out["geom_friction"][0]) > 1e-3  # the contacts slide: friction matters
    mass_gradient_matches(model, qpos, qvel, ctrl, act, rng, rel=1e-5)
