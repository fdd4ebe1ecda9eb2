"""The XPBD solver through the Python API (model.solver = "xpbd"): rollouts against the
Featherstone solver as the step shrinks, the tape's gradients and the step Jacobians against
central differences, and the clear errors of what it does not simulate yet."""

import numpy as np
import pytest

import phalanx

DOUBLE_PENDULUM = """<mujoco><compiler angle='radian'/>
<option timestep='0.002'><flag contact='disable'/></option>
<worldbody>
  <body pos='0 0 2'><joint name='shoulder' type='hinge' axis='0 1 0' damping='0.02'
      stiffness='0.5'/>
    <geom type='capsule' fromto='0 0 0 0.5 0 0' size='0.03' mass='1'/>
    <body pos='0.5 0 0.05'><joint name='elbow' type='hinge' axis='0 1 0' range='-2 2'/>
      <geom type='capsule' fromto='0 0 0 0.3 0 0' size='0.02' mass='0.4'/></body></body>
</worldbody><actuator><motor joint='shoulder' gear='2'/></actuator></mujoco>"""


@pytest.fixture
def double_pendulum(tmp_path):
    path = tmp_path / "double_pendulum.xml"
    path.write_text(DOUBLE_PENDULUM)
    return path


def xpbd(path, **options):
    model = phalanx.load_model(path)
    model.solver = "xpbd"
    for name, value in options.items():
        setattr(model, name, value)
    return model


def test_options_read_back(double_pendulum):
    model = phalanx.load_model(double_pendulum)
    assert (model.solver, model.xpbd_substeps, model.xpbd_iterations,
            model.xpbd_joint_solver) == ("featherstone", 1, 4, "tree")
    model = xpbd(double_pendulum, xpbd_substeps=3, xpbd_iterations=2,
                 xpbd_joint_solver="gauss_seidel")
    assert (model.solver, model.xpbd_substeps, model.xpbd_iterations,
            model.xpbd_joint_solver) == ("xpbd", 3, 2, "gauss_seidel")
    with pytest.raises(ValueError, match="solver"):
        model.solver = "pbd"
    with pytest.raises(ValueError, match="xpbd_substeps"):
        model.xpbd_substeps = 0


def test_rollouts_converge_to_featherstone(double_pendulum, rng):
    # 0.5 s from a swing, driven, sprung and damped (the elbow's limit is not reached: the two
    # solvers' limits differ, XPBD's hard, the LCP's with Baumgarte): the error against
    # Featherstone at 0.1 ms falls about in proportion to the step (both first order), with
    # either joint solver
    qpos, qvel = np.array([[0.8, -0.5]]), np.array([[0.0, 1.0]])
    u = rng.uniform(-0.5, 0.5)

    def final(model, dt):
        model.timestep = dt
        n = int(round(0.5 / dt))
        qs, vs, status = phalanx.rollout(model, qpos, qvel, np.full((1, n, 1), u))
        assert not status.any()
        return qs[0, -1], vs[0, -1]

    ref = final(phalanx.load_model(double_pendulum), 1e-4)
    for joint_solver in ("tree", "gauss_seidel"):
        errors = []
        for dt in (4e-3, 2e-3, 1e-3, 5e-4):
            q, v = final(xpbd(double_pendulum, xpbd_joint_solver=joint_solver), dt)
            errors.append(max(np.abs(q - ref[0]).max(), 0.1 * np.abs(v - ref[1]).max()))
        print(joint_solver, "errors at 4, 2, 1, 0.5 ms:", errors)
        assert all(b < a for a, b in zip(errors, errors[1:])), errors
        assert np.log2(errors[0] / errors[-1]) / 3 > 0.8  # observed order
        assert errors[-1] < 1e-2


def test_tape_gradients_match_central_differences(double_pendulum, rng):
    # a taped XPBD rollout of 40 steps (two substeps of three iterations): the gradient of a
    # random weighting of the states in the initial state, the controls, the link length
    # (body_pos) and the masses, against central differences of the whole rollout
    model = xpbd(double_pendulum, xpbd_substeps=2, xpbd_iterations=3)
    model.timestep = 0.01
    E, T = 2, 40
    qpos = np.array([[0.3, -0.5], [-0.2, 0.4]])
    qvel = np.array([[0.0, 1.0], [0.5, 0.0]])
    ctrl = rng.uniform(-0.5, 0.5, (E, T, 1))
    wq, wv = rng.standard_normal((E, T, 2)), rng.standard_normal((E, T, 2))
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    grads = tape.backward(wq, wv)

    def loss(q0=qpos, v0=qvel, u=ctrl, params=None):
        with phalanx.model_parameters(model, params or {}):
            qs, vs, status = phalanx.rollout(model, q0, v0, u)
        assert not status.any()
        return float((wq * qs).sum() + (wv * vs).sum())

    h = 1e-4  # the loss carries 1e-11 of round-off (qvel is a difference over the substep)
    checks = {
        "qpos": (grads["qpos"], lambda d: loss(q0=qpos + h * d) - loss(q0=qpos - h * d), qpos),
        "qvel": (grads["qvel"], lambda d: loss(v0=qvel + h * d) - loss(v0=qvel - h * d), qvel),
        "ctrl": (grads["ctrl"], lambda d: loss(u=ctrl + h * d) - loss(u=ctrl - h * d), ctrl),
    }
    for name in ("body_pos", "body_mass", "jnt_stiffness", "dof_damping"):
        p0 = model.parameter(name)
        checks[name] = (grads[name].sum(axis=0),
                        lambda d, n=name, p=p0: (loss(params={n: p + h * d}) -
                                                 loss(params={n: p - h * d})), p0)
    for name, (grad, diff, x) in checks.items():
        d = rng.standard_normal(x.shape)
        if name.startswith("body_"):
            d[0] = 0  # the world
        fd = diff(d) / (2 * h)
        assert float((grad * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-7), name
        assert abs(fd) > 1e-3, name  # each matters here


def test_step_jacobians_match_central_differences(double_pendulum, rng):
    model = xpbd(double_pendulum, xpbd_substeps=2)
    qpos, qvel = np.array([[0.3, -0.5]]), np.array([[0.2, 1.0]])
    ctrl = np.array([[0.3]])
    jac = phalanx.step_jacobians(model, qpos, qvel, ctrl)
    # XPBD's qvel' is a difference of positions over the substep (1 ms): differences at the
    # default h = 1e-6 carry 1e-6 of round-off; at 1e-4 they agree to 2e-8 (measured)
    fd = phalanx.step_jacobians_fd(model, qpos, qvel, ctrl, h=1e-4)
    for key in ("dqpos_dqpos", "dqpos_dqvel", "dqvel_dqpos", "dqvel_dqvel", "dqpos_dctrl",
                "dqvel_dctrl"):
        np.testing.assert_allclose(jac[key], fd[key], rtol=1e-6, atol=1e-7, err_msg=key)
    # not Featherstone's: the solvers' Jacobians differ at this step
    feather = phalanx.step_jacobians(phalanx.load_model(double_pendulum), qpos, qvel, ctrl)
    assert np.abs(feather["dqvel_dqpos"] - jac["dqvel_dqpos"]).max() > 1e-4


@pytest.mark.parametrize("edit, message", [
    (lambda m: setattr(m, "contact", True), "does not simulate contacts"),
    (lambda m: m.set_parameter("dof_armature", np.array([0.1, 0.0])), "armature"),
    (lambda m: m.set_parameter("body_mass", np.array([0.0, 0.0, 0.4])), "no mass"),
])
def test_what_xpbd_does_not_simulate_is_an_error(tmp_path, edit, message):
    path = tmp_path / "model.xml"
    path.write_text(DOUBLE_PENDULUM.replace("<flag contact='disable'/>", "")
                    .replace("<worldbody>", "<worldbody><geom type='plane' size='5 5 .1'/>"))
    model = xpbd(path, contact=False)
    qs, _, _ = phalanx.rollout(model, np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 3, 1)))
    assert np.isfinite(qs).all()
    edit(model)
    with pytest.raises(ValueError, match=message):
        phalanx.rollout(model, np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 3, 1)))


def test_two_joints_on_a_body_is_an_error(tmp_path):
    path = tmp_path / "model.xml"
    path.write_text("""<mujoco><option><flag contact='disable'/></option><worldbody>
      <body><joint type='hinge' axis='0 1 0'/><joint type='hinge' axis='1 0 0'/>
        <geom type='sphere' size='.1' pos='0 0 -.5'/></body></worldbody></mujoco>""")
    model = xpbd(path)
    with pytest.raises(ValueError, match="one joint per body"):
        phalanx.rollout(model, np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 3, 0)))
