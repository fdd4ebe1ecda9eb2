"""Gradients of steps through the Python API.

A loss on the state after T steps is back-propagated by chaining phalanx.step_vjp; the result
must equal central differences of phalanx.rollout (rtol 1e-6, double). The one-step derivative
of qvel' with respect to ctrl is also compared with MuJoCo's own finite-difference
mjd_transitionFD on the humanoid.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mujoco
import phalanx
from phalanx.testing import random_state

from conftest import HUMANOID

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
T = 20
PARAMS = ["body_mass", "body_inertia", "dof_damping", "dof_armature", "jnt_stiffness",
          "actuator_gear", "body_ipos"]


def loss_and_grad(model, qpos, qvel, ctrl, wq, wv):
    """L = sum(wq * qpos_T) + sum(wv * qvel_T) after len(ctrl) steps, and its gradient with
    respect to qpos, qvel, ctrl (T, nu) and the parameters, by chained step_vjp."""
    states = [(qpos, qvel)]
    for t in range(ctrl.shape[1]):
        q, v, s = phalanx.step(model, *states[-1], ctrl[:, t])
        assert not s.any()
        states.append((q, v))
    loss = (wq * states[-1][0]).sum() + (wv * states[-1][1]).sum()
    gq, gv = wq.copy(), wv.copy()
    gctrl = np.zeros_like(ctrl)
    gparams = {p: 0.0 for p in PARAMS}
    for t in reversed(range(ctrl.shape[1])):
        g = phalanx.step_vjp(model, *states[t], np.ascontiguousarray(ctrl[:, t]), gq, gv)
        gq, gv, gctrl[:, t] = g["qpos"], g["qvel"], g["ctrl"]
        for p in PARAMS:
            gparams[p] = gparams[p] + g[p]
    return loss, gq, gv, gctrl, gparams


def rollout_loss(model, qpos, qvel, ctrl, wq, wv):
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    assert not status.any()
    return (wq * qs[:, -1]).sum() + (wv * vs[:, -1]).sum()


@pytest.fixture
def setup(humanoid, rng):
    model = humanoid
    qpos, qvel = random_state(model, 1, rng, qpos_scale=0.2, qvel_scale=0.5)
    ctrl = rng.uniform(-0.8, 0.8, (1, T, model.nu))  # inside ctrlrange: no clamping kinks
    wq = rng.standard_normal((1, model.nq))
    wv = rng.standard_normal((1, model.nv))
    return model, qpos, qvel, ctrl, wq, wv


def directional_fd(f, x, direction, h=1e-6):
    return (f(x + h * direction) - f(x - h * direction)) / (2 * h)


def test_rollout_gradient_matches_central_differences(setup, rng):
    # d/ds L(x + s d) at s = 0 equals <grad L, d> for random directions of each input
    model, qpos, qvel, ctrl, wq, wv = setup
    _, gq, gv, gctrl, _ = loss_and_grad(model, qpos, qvel, ctrl, wq, wv)
    for name, x, g in [("qpos", qpos, gq), ("qvel", qvel, gv), ("ctrl", ctrl, gctrl)]:
        d = rng.standard_normal(x.shape)

        def f(y, name=name):
            args = {"qpos": qpos, "qvel": qvel, "ctrl": ctrl, name: y}
            return rollout_loss(model, args["qpos"], args["qvel"], args["ctrl"], wq, wv)

        fd = directional_fd(f, x, d)
        ad = float((g * d).sum())
        assert ad == pytest.approx(fd, rel=1e-6, abs=1e-6), name


@pytest.mark.parametrize("param", PARAMS)
def test_parameter_gradients_match_central_differences(setup, rng, param):
    # <dL/dp, d> against (L(p + h d) - L(p - h d)) / 2h, with the parameter shared by the
    # environment: the per-environment adjoints summed over E (here E = 1)
    model, qpos, qvel, ctrl, wq, wv = setup
    _, _, _, _, gp = loss_and_grad(model, qpos, qvel, ctrl, wq, wv)
    p0 = np.array(getattr(model, param), dtype=np.float64)
    d = rng.uniform(0.5, 1.5, p0.shape) * p0  # relative perturbation keeps masses positive

    def f(p):
        model.set_parameter(param, p)
        try:
            return rollout_loss(model, qpos, qvel, ctrl, wq, wv)
        finally:
            model.set_parameter(param, p0)

    # d is relative to the parameter (inertias are ~1e-2), so h = 1e-4 is a relative step:
    # truncation O(h^2) ~ 1e-8, while h = 1e-6 would leave round-off of the loss (~10) visible
    fd = directional_fd(f, p0, d, h=1e-4)
    ad = float((gp[param].sum(axis=0) * d).sum())
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), param


def test_velocity_jacobian_matches_mujoco_finite_differences(humanoid, rng):
    # MuJoCo's mjd_transitionFD gives B = d(state')/d(ctrl) in tangent coordinates; its
    # velocity rows are d qvel' / d ctrl, which step_vjp gives column by column in double.
    # MuJoCo's centred differences with eps 1e-6 are accurate to about 1e-7 relative.
    mj = mujoco.MjModel.from_xml_path(str(humanoid.source))
    mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    mj.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
    data = mujoco.MjData(mj)
    qpos, qvel = random_state(humanoid, 1, rng, qpos_scale=0.2, qvel_scale=0.5)
    ctrl = rng.uniform(-0.8, 0.8, (1, humanoid.nu))
    data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[0], qvel[0], ctrl[0]
    nv, nu = mj.nv, mj.nu
    A = np.zeros((2 * nv, 2 * nv))
    B = np.zeros((2 * nv, nu))
    mujoco.mjd_transitionFD(mj, data, 1e-6, True, A, B, None, None)
    dvdu_mujoco = B[nv:]

    # rows of d qvel'/d ctrl by VJPs with unit adjoints of qvel'
    E = nv
    adj_v = np.eye(nv)
    g = phalanx.step_vjp(humanoid, np.repeat(qpos, E, 0), np.repeat(qvel, E, 0),
                         np.repeat(ctrl, E, 0), np.zeros((E, humanoid.nq)), adj_v)
    dvdu = g["ctrl"]
    np.testing.assert_allclose(dvdu, dvdu_mujoco, rtol=1e-5, atol=1e-6 * np.abs(dvdu).max())

    # and the velocity-velocity block d qvel'/d qvel
    np.testing.assert_allclose(g["qvel"], A[nv:, nv:], rtol=1e-5,
                               atol=1e-6 * np.abs(g["qvel"]).max())


SLIDING_SPHERE = """<mujoco><option timestep='0.002'/><worldbody>
  <geom name='floor' type='plane' size='10 10 .1' friction='0.6'/>
  <body pos='0 0 0.0995'><freejoint/><geom type='sphere' size='.1' mass='1.3'
    friction='0.5'/></body>
</worldbody></mujoco>"""


@pytest.mark.parametrize("solver", ["dantzig", "pgs_stabilized"])
def test_contact_step_vjp_matches_central_differences(tmp_path, rng, solver):
    # a sphere sliding on the floor (friction at its bound) with a push-out row: one step's
    # gradient through the LCP (Nimble) against central differences of phalanx.step, both from
    # a cold start, for the state, and the contact parameters friction and restitution
    path = tmp_path / "sphere.xml"
    path.write_text(SLIDING_SPHERE)
    model = phalanx.load_model(path)
    model.lcp_solver = solver
    model.lcp_tolerance = 1e-9
    model.set_parameter("geom_restitution", np.array([0.3, 0.2]))
    qpos = model.qpos0[None].copy()
    qvel = np.array([[1.0, 0.3, -0.2, 0.5, -1.0, 0.2]])
    ctrl = np.zeros((1, 0))
    wq = rng.standard_normal((1, model.nq))
    wv = rng.standard_normal((1, model.nv))

    def loss(q=qpos, v=qvel):
        q1, v1, status = phalanx.step(model, q, v, ctrl)
        assert not status.any()
        return float((wq * q1).sum() + (wv * v1).sum())

    g = phalanx.step_vjp(model, qpos, qvel, ctrl, wq, wv)
    for name, x, grad in [("qpos", qpos, g["qpos"]), ("qvel", qvel, g["qvel"])]:
        d = rng.standard_normal(x.shape)
        key = "q" if name == "qpos" else "v"
        fd = directional_fd(lambda y, key=key: loss(**{key: y}), x, d)
        assert float((grad * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-8), name
    # friction: the sliding column; restitution; size: the sphere's radius (the contact depth)
    for param, column in [("geom_friction", 0), ("geom_restitution", None), ("geom_size", 0)]:
        p0 = np.array(getattr(model, param), dtype=np.float64)
        d = np.zeros_like(p0)
        if param == "geom_size":
            d[1, 0] = 1.0
        elif column is None:
            d[:] = rng.uniform(0.5, 1.0, d.shape)
        else:
            d[:, column] = rng.uniform(0.5, 1.0, d.shape[0])

        def f(p, param=param, p0=p0):
            model.set_parameter(param, p)
            try:
                return loss()
            finally:
                model.set_parameter(param, p0)

        fd = directional_fd(f, p0, d, h=1e-6)
        ad = float((g[param].sum(axis=0) * d).sum())
        assert ad == pytest.approx(fd, rel=1e-6, abs=1e-8), param


BALL_ON_SLIDE = """<mujoco><option timestep='0.002' gravity='0 0 {g}'/><worldbody>
  <geom type='plane' size='10 10 .1' condim='1'/>
  <body><joint name='z' type='slide' axis='0 0 1'/>
    <geom type='sphere' size='.1' mass='1.5' pos='0 0 0.1' condim='1'/></body>
</worldbody><actuator><motor joint='z' gear='2'/></actuator></mujoco>"""


def test_contact_gradient_options(tmp_path):
    # Nimble's unit cases through step_vjp's options, against their closed forms (Werling et
    # al. 2021); dt = 0.002, m = 1.5, gear = 2
    dt, m, gear, e = 0.002, 1.5, 2.0, 0.8
    path = tmp_path / "bounce.xml"
    path.write_text(BALL_ON_SLIDE.format(g=0))
    model = phalanx.load_model(path)
    model.lcp_solver = "dantzig"
    model.set_parameter("geom_restitution", np.array([0.0, e]))
    # bounce: qvel' = -e qvel; d qpos'/d qpos is 1 in discrete time, -e with the correction
    q, v, u = np.array([[-2e-4]]), np.array([[-2.0]]), np.zeros((1, 1))
    _, v1, _ = phalanx.step(model, q, v, u)
    assert v1[0, 0] == pytest.approx(2.0 * e, abs=1e-12)
    one, zero = np.ones((1, 1)), np.zeros((1, 1))
    plain = phalanx.step_vjp(model, q, v, u, one, zero)
    corrected = phalanx.step_vjp(model, q, v, u, one, zero, bounce_correction=True)
    assert plain["qpos"][0, 0] == pytest.approx(1.0, abs=1e-12)
    assert corrected["qpos"][0, 0] == pytest.approx(-e, abs=1e-12)
    assert corrected["qvel"][0, 0] == pytest.approx(-e * dt, abs=1e-12)

    # resting on the floor, pushed up by less than its weight; loss = -qpos': the plain
    # gradient to ctrl is 0, the complementarity-aware one -dt^2 gear / m
    path.write_text(BALL_ON_SLIDE.format(g=-9.81))
    model = phalanx.load_model(path)
    model.lcp_solver = "dantzig"
    q, u = np.array([[-5e-4]]), np.array([[0.3]])
    plain = phalanx.step_vjp(model, q, zero, u, -one, zero)
    aware = phalanx.step_vjp(model, q, zero, u, -one, zero, complementarity_aware=True)
    assert plain["ctrl"][0, 0] == pytest.approx(0.0, abs=1e-15)
    assert aware["ctrl"][0, 0] == pytest.approx(-dt * dt * gear / m, rel=1e-12)


@pytest.fixture
def taped_scene(sphere_and_pendulum, rng):
    # a sphere sliding on the floor for 50 steps (one contact mode throughout) beside a
    # motor-driven pendulum: state, control and contact-parameter gradients in one model
    model = sphere_and_pendulum
    E, T = 2, 50
    qpos = np.repeat(model.qpos0[None], E, 0)
    qpos[:, 7] = [0.1, -0.2]
    qvel = np.array([[1.0, 0.3, -0.05, 0.5, -1.0, 0.2, 0.4], [1.2, -0.2, 0.0, -0.3, 0.8, 0.1, -0.6]])
    ctrl = 0.5 * rng.uniform(-1, 1, (E, T, model.nu))
    wq, wv = rng.standard_normal((E, T, model.nq)), rng.standard_normal((E, T, model.nv))
    return model, qpos, qvel, ctrl, wq, wv


def test_tape_backward_matches_central_differences(taped_scene, rng):
    model, qpos, qvel, ctrl, wq, wv = taped_scene

    def loss(q=qpos, v=qvel, u=ctrl):
        qs, vs, status = phalanx.rollout(model, q, v, u)
        assert not status.any()
        return float((wq * qs).sum() + (wv * vs).sum())

    tape = phalanx.Tape()
    qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    assert tape.recorded and tape.checkpoint_every == 8 and tape.nstep == 50
    assert float((wq * qs).sum() + (wv * vs).sum()) == loss()  # the tape does not change it
    g = tape.backward(wq, wv)
    assert g["qpos"].shape == qpos.shape and g["ctrl"].shape == ctrl.shape
    for name, x in [("q", qpos), ("v", qvel), ("u", ctrl)]:
        d = rng.standard_normal(x.shape)
        fd = directional_fd(lambda y, name=name: loss(**{name: y}), x, d)
        key = {"q": "qpos", "v": "qvel", "u": "ctrl"}[name]
        assert float((g[key] * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-8), key
    # a shared parameter: the per-environment gradients summed
    mass = np.array(model.body_mass)
    d = np.zeros_like(mass)
    d[1:] = rng.uniform(0.5, 1.0, d.size - 1)

    def f(p):
        model.set_parameter("body_mass", p)
        try:
            return loss()
        finally:
            model.set_parameter("body_mass", mass)

    fd = directional_fd(f, mass, d, h=1e-6)
    assert float((g["body_mass"].sum(axis=0) * d).sum()) == pytest.approx(fd, rel=1e-6)


def test_tape_checkpoints_do_not_change_gradients(taped_scene):
    model, qpos, qvel, ctrl, wq, wv = taped_scene

    def tape_bytes(every, budget):
        tape = phalanx.Tape(checkpoint_every=every, memory_budget=budget)
        phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
        return tape.nbytes

    grads, nbytes = [], []
    for every in [1, 5, 0]:
        tape = phalanx.Tape(checkpoint_every=every)
        phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
        grads.append(tape.backward(wq, wv))
        nbytes.append(tape.nbytes)
    for g in grads[1:]:
        for key in grads[0]:
            np.testing.assert_array_equal(g[key], grads[0][key])  # bit for bit
    assert nbytes[2] < nbytes[0] / 2  # sqrt(T) spacing against a checkpoint per step
    # with segments to recompute, the tape logs each step's LCP solution as far as its memory
    # budget allows (by default, room for a quarter of the rows a step may have); steps not
    # logged are solved again, to the same bits
    E, T = ctrl.shape[:2]
    bare = tape_bytes(5, 1)  # a budget below the records themselves: no log
    few = bare + E * (8 * T + 10 * (qpos.dtype.itemsize + 8))  # the log's heads and 10 rows
    for budget in [0, few]:
        tape = phalanx.Tape(checkpoint_every=5, memory_budget=budget)
        phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
        assert tape.nbytes == few if budget else tape.nbytes > few
        g = tape.backward(wq, wv)
        for key in grads[0]:
            np.testing.assert_array_equal(g[key], grads[0][key])
    # the tape's peak contacts and rows are the most any step's counts show
    counts = np.zeros(ctrl.shape[:2] + (phalanx.NUM_COUNTS,), np.int32)
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, counts=counts, tape=tape)
    assert tape.peak == (counts[..., phalanx.COUNT_CONTACTS].max(),
                         counts[..., phalanx.COUNT_ROWS].max())
    assert tape.peak[1] > 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tape_checkpoints_do_not_change_gradients_with_pgs(dtype, rng):
    # MuJoCo's humanoid as declared (floor, self-collision, limits, PGS) landing on its feet:
    # its contact rows all couple through one tree, so PGS sweeps the Delassus matrix. The
    # rollout's forward-only steps and the backward's recomputed ones must sweep it alike, to
    # the bit, or the spacing of the checkpoints changes the gradients in the last bits
    model = phalanx.load_model(HUMANOID)
    E, T = 2, 40
    qpos = np.repeat(model.qpos0[None], E, 0).astype(dtype)
    qpos[:, 2] = 1.28  # the feet just inside the floor
    qvel = np.zeros((E, model.nv), dtype)
    ctrl = rng.uniform(-1, 1, (E, T, model.nu)).astype(dtype)
    wq = rng.standard_normal((E, T, model.nq)).astype(dtype)
    wv = rng.standard_normal((E, T, model.nv)).astype(dtype)
    counts = np.zeros((E, T, phalanx.NUM_COUNTS), np.int32)
    phalanx.rollout(model, qpos, qvel, ctrl, counts=counts)
    assert counts[:, :3, phalanx.COUNT_ROWS].min() > 20  # many rows: sweeps on A
    grads = []
    for every in [1, 7, 0]:
        tape = phalanx.Tape(checkpoint_every=every)
        phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
        grads.append(tape.backward(wq, wv))
    for g in grads[1:]:
        for key in ("qpos", "qvel", "ctrl", "body_mass"):
            np.testing.assert_array_equal(g[key], grads[0][key])


def test_tape_errors(taped_scene):
    model, qpos, qvel, ctrl, wq, wv = taped_scene
    with pytest.raises(RuntimeError, match="holds no rollout"):
        phalanx.Tape().backward(wq, wv)
    with pytest.raises(ValueError, match="needs at least"):
        phalanx.rollout(model, qpos, qvel, ctrl, tape=phalanx.Tape(memory_budget=1000))
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    with pytest.raises(ValueError, match="adj_qpos"):
        tape.backward(wq[:, :10], wv)
    # an empty rollout cannot be recorded, and the tape keeps its rollout
    with pytest.raises(ValueError, match=r"at least one environment and one step; this rollout "
                                         r"has 2 x 0 \(the tape keeps what it held\)"):
        phalanx.rollout(model, qpos, qvel, ctrl[:, :0], tape=tape)
    assert tape.nstep == ctrl.shape[1]


def test_step_jacobians_match_finite_differences_and_identities(taped_scene, rng):
    # one-step Jacobians from the adjoints (a contact step: sliding sphere, actuated pendulum,
    # an added generalized force f) against central differences and Ridders' extrapolation of
    # phalanx.step, plus identities
    model, qpos, qvel, ctrl, _, _ = taped_scene
    u = ctrl[:, 0]
    f = 0.1 * rng.standard_normal((2, model.nv))
    jac = phalanx.step_jacobians(model, qpos, qvel, u, parameters=True, qfrc=f)
    central = phalanx.step_jacobians_fd(model, qpos, qvel, u, qfrc=f, method="central")
    ridders = phalanx.step_jacobians_fd(model, qpos, qvel, u, qfrc=f, method="ridders")
    assert set(central) == {f"d{r}_d{c}" for r in ("qpos", "qvel")
                            for c in ("qpos", "qvel", "ctrl", "qfrc")}
    for key, ref in central.items():
        scale = np.abs(ref).max() + 1e-12
        np.testing.assert_allclose(jac[key], ref, rtol=0, atol=1e-6 * scale, err_msg=key)
        np.testing.assert_allclose(jac[key], ridders[key], rtol=0, atol=1e-6 * scale,
                                   err_msg=key)
    # the actuator (gear 1.5, affine gain 1 + 0.2 L - 0.1 V of the hinge's L = 1.5 q, V = 1.5
    # qvel) on the hinge (dof 6) is a generalized force on that dof, gear x gain per unit ctrl
    gain = 1 + 0.2 * 1.5 * qpos[:, 7] - 0.1 * 1.5 * qvel[:, 6]
    np.testing.assert_allclose(jac["dqvel_dctrl"][:, :, 0],
                               (1.5 * gain)[:, None] * jac["dqvel_dqfrc"][:, :, 6],
                               rtol=1e-12, atol=1e-15)
    # semi-implicit Euler: qpos' = qpos + dt qvel' on the hinge, so its qpos row is dt times the
    # qvel row plus the identity
    dt = model.timestep
    np.testing.assert_allclose(jac["dqpos_dqvel"][:, 7, :], dt * jac["dqvel_dqvel"][:, 6, :],
                               rtol=1e-12, atol=1e-15)
    # rows contracted with weights equal step_vjp, parameters included
    wq, wv = rng.standard_normal((2, model.nq)), rng.standard_normal((2, model.nv))
    g = phalanx.step_vjp(model, qpos, qvel, u, wq, wv, qfrc=f)
    w = np.concatenate([wq, wv], axis=1)
    for key, block in [("qpos", "dqpos_dqpos"), ("qvel", "dqpos_dqvel"), ("ctrl", "dqpos_dctrl"),
                       ("qfrc", "dqpos_dqfrc")]:
        other = block.replace("dqpos_", "dqvel_")
        both = np.einsum("ei,eij->ej", wq, jac[block]) + np.einsum("ei,eij->ej", wv, jac[other])
        np.testing.assert_allclose(both, g[key], rtol=1e-10, atol=1e-12)
    for name, rows in jac["parameters"].items():
        np.testing.assert_allclose(np.einsum("ei,ei...->e...", w, rows), g[name], rtol=1e-10,
                                   atol=1e-12, err_msg=name)
    # each row is the step_vjp of its unit seed: the one replay the rows share leaves the
    # forward state as a fresh replay would, what the rows share (the LCP adjoint's
    # factorisation, Z = M^-1 J^T) equals what step_vjp computes per call, and the rows of
    # qpos' that the chain rule through integrate gives from those of qvel' (the sphere's
    # quaternion included) equal their own reverse passes, to rounding; with either contact
    # option too (whose rows of qpos' get reverse passes of their own)
    for options in ({}, {"complementarity_aware": True}, {"bounce_correction": True}):
        if options:
            jac = phalanx.step_jacobians(model, qpos, qvel, u, parameters=True, qfrc=f,
                                         **options)
        for r in range(model.nq + model.nv):
            seed = np.zeros((2, model.nq + model.nv))
            seed[:, r] = 1
            g = phalanx.step_vjp(model, qpos, qvel, u, seed[:, :model.nq], seed[:, model.nq:],
                                 qfrc=f, **options)
            block = "dqpos_" if r < model.nq else "dqvel_"
            i = r if r < model.nq else r - model.nq
            for key in ("qpos", "qvel", "ctrl", "qfrc"):
                np.testing.assert_allclose(jac[block + "d" + key][:, i], g[key], rtol=1e-12,
                                           atol=1e-14)
            for name, rows in jac["parameters"].items():
                np.testing.assert_allclose(rows[:, r], g[name], rtol=1e-12, atol=1e-14,
                                           err_msg=name)


def test_step_jacobians_fd_of_chosen_inputs(taped_scene, rng):
    # finite differences of some inputs alone (Nimble's per-Jacobian protocol) perturb those
    # columns only: each environment's step is independent of its batch, so every central
    # block equals the all-inputs call's bit for bit; Ridders' extrapolation stops when its
    # error estimate stops falling over all the entries it has, so a part may stop at another
    # step size than the whole, within the estimate
    model, qpos, qvel, ctrl, _, _ = taped_scene
    u = ctrl[:, 0]
    f = 0.1 * rng.standard_normal((2, model.nv))
    for method in ("central", "ridders"):
        full = phalanx.step_jacobians_fd(model, qpos, qvel, u, qfrc=f, method=method)
        for wrt in ("qvel", ("qfrc", "qpos"), ["ctrl"]):
            part = phalanx.step_jacobians_fd(model, qpos, qvel, u, qfrc=f, method=method,
                                             wrt=wrt)
            names = [wrt] if isinstance(wrt, str) else list(wrt)
            assert set(part) == {f"d{r}_d{c}" for r in ("qpos", "qvel") for c in names}
            for key, block in part.items():
                if method == "central":
                    np.testing.assert_array_equal(block, full[key], err_msg=key)
                else:
                    np.testing.assert_allclose(block, full[key], rtol=0,
                                               atol=1e-8 * np.abs(full[key]).max(), err_msg=key)
    for bad in ("tau", ("qpos", "qpos"), ()):
        with pytest.raises(ValueError, match="wrt must name distinct inputs"):
            phalanx.step_jacobians_fd(model, qpos, qvel, u, wrt=bad)
    # no environments: empty blocks of the same shapes as step_jacobians'
    empty = phalanx.step_jacobians(model, qpos[:0], qvel[:0], u[:0])
    for wrt in (None, "qfrc"):
        part = phalanx.step_jacobians_fd(model, qpos[:0], qvel[:0], u[:0], wrt=wrt)
        assert {k: b.shape for k, b in part.items()} == {k: empty[k].shape for k in part}


def test_humanoid_jacobians_just_after_landing():
    # MuJoCo's humanoid dropped on its back, 0.26 s later: 10 contacts with friction, none tied;
    # all state and control Jacobians against central differences. Just after landing, several
    # friction rows sit close to a change of class (stick / slide), so the state is one where no
    # class changes within the difference step: 50 steps (bench_jacobians.py's state) is one
    # where a change of 1e-12 in the state, from a different rounding of the narrowphase, moves
    # a switch within 1e-8 of qvel[17].
    model = phalanx.load_model(HUMANOID)
    model.lcp_solver = "pgs_stabilized"
    qpos = model.qpos0[None].copy()
    qpos[0, 2] = 0.3
    qpos[0, 3:7] = [np.cos(np.pi / 4), 0.0, np.sin(np.pi / 4), 0.0]
    qs, vs, _ = phalanx.rollout(model, qpos, np.zeros((1, model.nv)),
                                np.zeros((1, 52, model.nu)))
    q, v, u = qs[:, -1].copy(), vs[:, -1].copy(), np.zeros((1, model.nu))
    counts = np.zeros((1, 1, phalanx.NUM_COUNTS), np.int32)
    phalanx.rollout(model, q, v, u[:, None], counts=counts)
    assert counts[0, 0, phalanx.COUNT_CONTACTS] == 10
    jac = phalanx.step_jacobians(model, q, v, u)
    # h = 1e-7: a perturbation of 1e-6 of qvel[8] already changes a friction row's class here
    ref = phalanx.step_jacobians_fd(model, q, v, u, h=1e-7)
    for key, fd in ref.items():
        np.testing.assert_allclose(jac[key], fd, rtol=0, atol=1e-6 * np.abs(fd).max(), err_msg=key)


def test_step_jacobians_inputs_fast_path_and_checked_path_agree():
    # arrays that already are right go straight to the core; anything else (lists, strided
    # views, dtype=) through the checked conversion: both give the same bits, and a wrong shape
    # or dtype is a ValueError naming the expected shape either way
    model = phalanx.load_model(MODELS / "half_cheetah_planar.xml")
    model.lcp_solver = "pgs_stabilized"
    rng = np.random.default_rng(3)
    E = 3
    q = np.repeat(model.qpos0[None], E, axis=0)
    q[:, 1] += 0.05 * rng.standard_normal(E)
    v = 0.2 * rng.standard_normal((E, model.nv))
    u = rng.uniform(-1, 1, (E, model.nu))
    ref = phalanx.step_jacobians(model, q, v, u)
    wide = np.zeros((E, 2 * model.nv))
    wide[:, ::2] = v  # a strided view
    for args, kw in [((q.tolist(), v.tolist(), u.tolist()), {}),
                     ((q, wide[:, ::2], u), {}),
                     ((q, v, u), {"dtype": np.float64})]:
        jac = phalanx.step_jacobians(model, *args, **kw)
        for k in ref:
            np.testing.assert_array_equal(jac[k], ref[k], err_msg=k)
    # float32 takes its own overload: close to double, not equal
    jac32 = phalanx.step_jacobians(model, q.astype(np.float32), v.astype(np.float32),
                                   u.astype(np.float32))
    assert jac32["dqvel_dqvel"].dtype == np.float32
    np.testing.assert_allclose(jac32["dqvel_dqvel"], ref["dqvel_dqvel"], atol=2e-3)
    with pytest.raises(ValueError, match=r"qpos must have shape \(E, nq\) = \(3, 9\)"):
        phalanx.step_jacobians(model, q[:, :8], v, u)
    with pytest.raises(ValueError, match=r"ctrl must have shape \(E, nu\) = \(3, 6\)"):
        phalanx.step_jacobians(model, q, v, u[:2])
    with pytest.raises(ValueError, match="qvel must have dtype float64"):
        phalanx.step_jacobians(model, q, v.astype(np.float32), u)
    with pytest.raises(ValueError, match=r"qfrc must have .*\(3, 9\)"):
        phalanx.step_jacobians(model, q, v, u, qfrc=np.zeros((3, 8)))
    # step_vjp takes the same two paths
    gq, gv = rng.standard_normal((E, model.nq)), rng.standard_normal((E, model.nv))
    vjp = phalanx.step_vjp(model, q, v, u, gq, gv)
    for args in [(q.tolist(), v, u, gq.tolist(), gv), (q, wide[:, ::2], u, gq, gv)]:
        got = phalanx.step_vjp(model, *args)
        for k in ("qpos", "qvel", "ctrl", "body_mass"):
            np.testing.assert_array_equal(got[k], vjp[k], err_msg=k)
    np.testing.assert_allclose(vjp["qvel"], np.einsum("ei,eij->ej", gq, ref["dqpos_dqvel"])
                               + np.einsum("ei,eij->ej", gv, ref["dqvel_dqvel"]), atol=1e-12)
    with pytest.raises(ValueError, match=r"adj_qvel_next must have shape \(E, nv\) = \(3, 9\)"):
        phalanx.step_vjp(model, q, v, u, gq, gv[:, :8])


@pytest.mark.parametrize("path", [MODELS / "half_cheetah_planar.xml", HUMANOID])
def test_contact_free_step_jacobians_match_central_differences(path):
    # models without constraint rows: every row's reverse pass reuses one forward dynamics;
    # the half-cheetah's ninth row takes a scalar pass, all the humanoid's rows take lanes (and
    # its free joint's quaternion rows of qpos' need qvel')
    model = phalanx.load_model(path)
    model.contact = False
    model.limit = False
    rng = np.random.default_rng(7)
    E = 2
    q = np.repeat(model.qpos0[None], E, axis=0) + 0.2 * rng.standard_normal((E, model.nq))
    if path == HUMANOID:
        q[:, 3:7] /= np.linalg.norm(q[:, 3:7], axis=1, keepdims=True)
    v = rng.standard_normal((E, model.nv))
    u = rng.uniform(-1, 1, (E, model.nu))
    jac = phalanx.step_jacobians(model, q, v, u)
    ref = phalanx.step_jacobians_fd(model, q, v, u)
    for key, fd in ref.items():
        np.testing.assert_allclose(jac[key], fd, rtol=0, atol=1e-7 * max(1.0, np.abs(fd).max()),
                                   err_msg=key)
