"""The XPBD solver through the Python API (model.solver = "xpbd"): rollouts against the
Featherstone solver as the step shrinks, the tape's gradients and the step Jacobians against
central differences, and the clear errors of what it does not simulate yet."""

import numpy as np
import pytest

import phalanx
from conftest import HUMANOID

DOUBLE_PENDULUM = """<mujoco><compiler angle='radian'/>
<option timestep='0.002'><flag contact='disable'/></option>
<worldbody>
  <body pos='0 0 2'><joint name='shoulder' type='hinge' axis='0 1 0' damping='0.02'
      stiffness='0.5'/>
    <geom type='capsule' fromto='0 0 0 0.5 0 0' size='0.03' mass='1'/>
    <body pos='0.5 0 0.05'><joint name='elbow' type='hinge' axis='0 1 0' range='-2 2'/>
      <geom type='capsule' fromto='0 0 0 0.3 0 0' size='0.02' mass='0.4'/></body></body>
</worldbody><actuator><motor joint='shoulder' gear='2'/></actuator></mujoco>"""


def model_file(tmp_path, name, xml):
    """the MJCF text xml written to tmp_path / name, its path"""
    path = tmp_path / name
    path.write_text(xml)
    return path


@pytest.fixture
def double_pendulum(tmp_path):
    return model_file(tmp_path, "double_pendulum.xml", DOUBLE_PENDULUM)


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
    (lambda m: m.set_parameter("body_mass", np.array([0.0, 0.0, 0.4])), "no mass"),
])
def test_what_xpbd_does_not_simulate_is_an_error(tmp_path, edit, message):
    path = tmp_path / "model.xml"
    path.write_text(DOUBLE_PENDULUM.replace("<flag contact='disable'/>", "")
                    .replace("<worldbody>", "<worldbody><geom type='plane' size='5 5 .1'/>"))
    model = xpbd(path)
    qs, _, _ = phalanx.rollout(model, np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 3, 1)))
    assert np.isfinite(qs).all()
    edit(model)
    with pytest.raises(ValueError, match=message):
        phalanx.rollout(model, np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 3, 1)))


@pytest.mark.parametrize("joints, option, message", [
    ("<joint type='hinge' axis='0 1 0'/><joint type='slide' axis='1 0 0'/>", {},
     "two or three hinges"),
    ("<joint type='hinge' axis='0 1 0'/><joint type='hinge' axis='0 -1 0'/>", {}, "dependent"),
    ("<joint type='hinge' axis='0 1 0'/><joint type='hinge' axis='1 0 0'/>",
     {"xpbd_joint_solver": "gauss_seidel"}, "tree solver"),
    ("<joint type='slide' axis='1 0 0' armature='0.1'/>", {}, "hinges only"),
])
def test_joints_xpbd_cannot_compose_are_an_error(tmp_path, joints, option, message):
    path = tmp_path / "model.xml"
    path.write_text(f"""<mujoco><option><flag contact='disable'/></option><worldbody>
      <body>{joints}<geom type='sphere' size='.1' pos='0 0 -.5'/></body></worldbody></mujoco>""")
    model = xpbd(path, **option)
    with pytest.raises(ValueError, match=message):
        phalanx.rollout(model, np.zeros((1, model.nq)), np.zeros((1, model.nv)),
                        np.zeros((1, 3, 0)))


# Composite joints: a link carrying a body of three hinges at one anchor (a hip), which carries
# one of two hinges at two anchors (an ankle) and one of two skewed hinges at one anchor (a
# shoulder)
COMPOSITE = """<mujoco><compiler angle='radian'/><option timestep='0.002'>
  <flag contact='disable'/></option><worldbody>
  <body pos='0 0 2'><joint type='hinge' axis='0 1 0'/>
    <geom type='capsule' fromto='0 0 0 0.4 0 0' size='0.03' mass='1'/>
    <body pos='0.4 0 0'><joint type='hinge' axis='1 0 0' range='-1 1'/>
      <joint type='hinge' axis='0 0 1' range='-1 1'/><joint type='hinge' axis='0 1 0' range='-1.2 1.2'/>
      <geom type='capsule' fromto='0 0 0 0.3 0.05 -0.1' size='0.02' mass='0.5'/>
      <body pos='0.3 0.05 -0.1'><joint type='hinge' axis='0 1 0' pos='0 0 0.04'/>
        <joint type='hinge' axis='0.89 0 0.45' pos='0 0 0.02'/>
        <geom type='box' size='0.05 0.03 0.02' pos='0.05 0 0' mass='0.3'/></body>
      <body pos='0 0.1 0'><joint type='hinge' axis='0.82 0.41 0.41'/>
        <joint type='hinge' axis='0 -0.71 0.71'/>
        <geom type='capsule' fromto='0 0 0 0 0.2 0' size='0.02' mass='0.2'/></body>
    </body></body>
</worldbody></mujoco>"""


@pytest.fixture
def composite(tmp_path):
    return model_file(tmp_path, "composite.xml", COMPOSITE)


def converges_to_featherstone(path, qpos, qvel, duration, edit=lambda m: None):
    """the largest errors of qpos and qvel after `duration` against Featherstone at 1e-5 s, at
    steps of 2, 1, 0.5 and 0.25 ms"""
    def final(model, dt):
        edit(model)
        model.timestep = dt
        n = int(round(duration / dt))
        qs, vs, status = phalanx.rollout(model, qpos, qvel, np.zeros((1, n, model.nu)))
        assert not (status.astype(np.int64) & ~phalanx.STATUS_LCP_NOT_CONVERGED).any()
        return qs[0, -1], vs[0, -1]

    ref = final(phalanx.load_model(path), 1e-5)
    errors = []
    for dt in (2e-3, 1e-3, 5e-4, 2.5e-4):
        q, v = final(xpbd(path), dt)
        errors.append((np.abs(q - ref[0]).max(), np.abs(v - ref[1]).max()))
    return np.array(errors)


def test_composite_joints_converge_to_featherstone(composite, rng):
    # 0.3 s of a swing from random angles and velocities: the errors halve with the step (first
    # order); the limits are not reached (the solvers' limits differ, XPBD's hard)
    model = phalanx.load_model(composite)
    qpos = 0.2 * rng.standard_normal((1, model.nq))
    qvel = 0.5 * rng.standard_normal((1, model.nv))
    errors = converges_to_featherstone(composite, qpos, qvel, 0.3)
    print("errors (qpos, qvel) at 2, 1, 0.5, 0.25 ms:", errors.tolist())
    assert (errors[1:] < 0.6 * errors[:-1]).all()
    assert errors[-1, 0] < 0.02


def test_humanoid_without_contacts_converges_to_featherstone(rng):
    # MuJoCo's humanoid (hips of three hinges, abdomen and shoulders of two, ankles of two at
    # two anchors, armature on every hinge), flying for 0.2 s from random joint angles within
    # the middle of their ranges and random velocities
    path = HUMANOID
    model = phalanx.load_model(path)
    qpos = model.qpos0[None].copy()
    qpos[0, 2] = 2.0
    lo, hi = model.jnt_range[1:, 0], model.jnt_range[1:, 1]
    qpos[0, 7:] = rng.uniform(lo + 0.3 * (hi - lo), hi - 0.3 * (hi - lo))
    qvel = 0.5 * rng.standard_normal((1, model.nv))

    def edit(m):
        m.contact = False

    errors = converges_to_featherstone(path, qpos, qvel, 0.2, edit)
    print("errors (qpos, qvel) at 2, 1, 0.5, 0.25 ms:", errors.tolist())
    assert (errors[1:] < 0.6 * errors[:-1]).all()
    assert errors[-1, 0] < 1e-3


def test_composite_limits_hold(composite, rng):
    # thrown at 3 rad/s per hinge for 1 s: every hinge of the composite joints stays within its
    # range (to the 4 iterations' residual)
    model = xpbd(composite, xpbd_iterations=4)
    qvel = 3.0 * rng.standard_normal((1, model.nv))
    qs, _, status = phalanx.rollout(model, np.zeros((1, model.nq)), qvel,
                                    np.zeros((1, 500, 0)))
    assert not status.any()
    lo, hi = model.jnt_range[1:4, 0], model.jnt_range[1:4, 1]
    q = qs[0, :, 1:4]
    assert ((q > hi - 1e-3) | (q < lo + 1e-3)).any()  # a limit is reached
    assert (q < hi + 2e-3).all() and (q > lo - 2e-3).all()


def check_step_jacobians(model, qpos, qvel, ctrl, atol, **fd_options):
    """the step's state Jacobians against differences (step_jacobians_fd with fd_options, rtol
    1e-6 and atol), and the masses' columns against central differences"""
    jac = phalanx.step_jacobians(model, qpos, qvel, ctrl, parameters=True)
    fd = phalanx.step_jacobians_fd(model, qpos, qvel, ctrl, **fd_options)
    for key in ("dqpos_dqpos", "dqpos_dqvel", "dqvel_dqpos", "dqvel_dqvel"):
        np.testing.assert_allclose(jac[key], fd[key], rtol=1e-6, atol=atol, err_msg=key)
    mass = model.parameter("body_mass")
    for b in range(1, model.nbody):
        out = []
        for sign in (1, -1):
            d = np.zeros_like(mass)
            d[b] = sign * 1e-6
            with phalanx.model_parameters(model, {"body_mass": mass + d}):
                q, v, _ = phalanx.step(model, qpos, qvel, ctrl)
            out.append(np.r_[q[0], v[0]])
        np.testing.assert_allclose(jac["parameters"]["body_mass"][0][:, b],
                                   (out[0] - out[1]) / 2e-6, rtol=1e-6, atol=1e-6)


# A block on a tilted slide limited to [-0.2, 0.1] about its reference 0.05 (so the limits stand
# at -0.25 and 0.05 from where body_pos puts it), carrying a rod on a ball joint limited to a cone
# of 0.5 rad
SLIDE_BALL = """<mujoco><compiler angle='radian'/><option timestep='0.002'><flag contact='disable'/></option><worldbody>
  <body pos='0 0 1'><joint type='slide' axis='0 0.6 0.8' range='-0.2 0.1' ref='0.05'/>
    <geom type='box' size='0.1 0.05 0.04' mass='1'/>
    <body pos='0.1 0 -0.05'><joint type='ball' range='0 0.5'/>
      <geom type='capsule' fromto='0 0 0 0.3 0 -0.2' size='0.03' mass='0.5'/></body></body>
</worldbody></mujoco>"""


@pytest.fixture
def slide_ball(tmp_path):
    return model_file(tmp_path, "slide_ball.xml", SLIDE_BALL)


def ball_angle(quat):
    """the rotation angle of unit quaternions (..., 4)"""
    return 2 * np.arctan2(np.linalg.norm(quat[..., 1:], axis=-1), np.abs(quat[..., 0]))


@pytest.mark.parametrize("joint_solver", ["tree", "gauss_seidel"])
def test_slide_and_ball_limits_hold(slide_ball, joint_solver, rng):
    # thrown for 1 s: the slide stays within its range and the ball within its cone, each
    # reaching its bound (hard limits: to what the iterations leave), with either joint solver
    model = xpbd(slide_ball, xpbd_joint_solver=joint_solver, xpbd_iterations=6)
    qpos = np.array([[0.0, 1.0, 0.0, 0.0, 0.0]])
    qvel = np.array([[-1.5, 4.0, -3.0, 2.0]])
    qs, _, status = phalanx.rollout(model, qpos, qvel, np.zeros((1, 500, 0)))
    assert not status.any()
    slide, angle = qs[0, :, 0], ball_angle(qs[0, :, 1:5])
    assert slide.min() == pytest.approx(-0.2, abs=1e-3) and slide.min() > -0.2 - 1e-4
    assert slide.max() < 0.1 + 1e-4
    assert angle.max() == pytest.approx(0.5, abs=1e-3) and angle.max() < 0.5 + 1e-4
    # unlimited, both leave their ranges from the same start
    model.limit = False
    qs, _, _ = phalanx.rollout(model, qpos, qvel, np.zeros((1, 500, 0)))
    assert qs[0, :, 0].min() < -0.3 and ball_angle(qs[0, :, 1:5]).max() > 0.7


@pytest.mark.parametrize("joint_solver", ["tree", "gauss_seidel"])
def test_slide_and_ball_limit_jacobians_match_central_differences(slide_ball, joint_solver, rng):
    # one step of two substeps from the slide at its lower limit and the ball at its cone, both
    # moving on: the step's Jacobians and the masses' columns against central differences
    model = xpbd(slide_ball, xpbd_joint_solver=joint_solver, xpbd_substeps=2,
                 xpbd_iterations=3)
    model.timestep = 0.01
    axis = np.array([0.0, 0.6, 0.8])
    quat = np.r_[np.cos(0.249), np.sin(0.249) * axis]  # turned by 0.498 rad
    qpos = np.r_[-0.199, quat][None]
    qvel = np.r_[-1.0, 3.0 * axis][None] + 0.1 * rng.standard_normal((1, 4))
    ctrl = np.zeros((1, 0))
    q, _, _ = phalanx.step(model, qpos, qvel, ctrl)
    assert q[0, 0] > -0.2 - 1e-3 and ball_angle(q[0, 1:5]) < 0.5 + 1e-3  # both limits acted
    model.limit = False
    free, _, _ = phalanx.step(model, qpos, qvel, ctrl)
    assert free[0, 0] < -0.205 and ball_angle(free[0, 1:5]) > 0.52
    model.limit = True
    # the step curves steeply in the quaternion (central differences' error falls as h^2 from
    # 2e-5 in dqvel_dqpos at h = 1e-5, measured): Ridders' extrapolation
    check_step_jacobians(model, qpos, qvel, ctrl, atol=1e-6, method="ridders")


def test_composite_step_jacobians_match_central_differences(composite, rng):
    # two substeps of three iterations, the hip's first hinge at its limit and moving on, against
    # central differences; the masses' columns too
    model = xpbd(composite, xpbd_substeps=2, xpbd_iterations=3)
    model.timestep = 0.01
    qpos = 0.3 * rng.standard_normal((1, model.nq))
    qvel = rng.standard_normal((1, model.nv))
    qpos[0, 1], qvel[0, 1] = 0.995, 2.0
    ctrl = np.zeros((1, 0))
    q, _, _ = phalanx.step(model, qpos, qvel, ctrl)
    assert q[0, 1] < 1.0  # the limit acted
    check_step_jacobians(model, qpos, qvel, ctrl, atol=1e-7, h=1e-4)


# A cable: a sphere hanging from a world site by a two-site spatial tendon limited to L (its
# sites at the anchor and at the sphere's centre), so that the cable pulls through the centre of
# mass and the sphere moves as a point pendulum while taut and falls freely while slack.
CABLE_L = 0.8


def cable_model(tmp_path, pos="0.8 0 1", lo=0.0):
    path = tmp_path / "cable.xml"
    path.write_text(f"""<mujoco><option timestep='0.002'><flag contact='disable'/></option>
<worldbody><site name='anchor' pos='0 0 1'/>
  <body pos='{pos}'><freejoint/><geom type='sphere' size='0.02' mass='1'/>
    <site name='end'/></body></worldbody>
<tendon><spatial limited='true' range='{lo} {CABLE_L}'><site site='anchor'/><site site='end'/>
</spatial></tendon></mujoco>""")
    return xpbd(path)


def rk4(f, y, seconds, dt):
    """y' = f(y) integrated over `seconds` by RK4 steps of dt"""
    for _ in range(int(round(seconds / dt))):
        k1 = f(y)
        k2 = f(y + dt / 2 * k1)
        k3 = f(y + dt / 2 * k2)
        k4 = f(y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


def pendulum_angle(theta0, seconds, dt=1e-5):
    """the point pendulum's angle from the downward vertical (RK4, a fine step)"""
    w2 = 9.81 / CABLE_L

    def f(y):
        return np.array([y[1], -w2 * np.sin(y[0])])

    return rk4(f, np.array([theta0, 0.0]), seconds, dt)[0]


def test_taut_cable_swings_as_a_point_pendulum(tmp_path):
    # released from rest with the cable taut and horizontal: the length stays L to round-off at
    # every step, and the swing angle after 0.4 s approaches the point pendulum's as dt shrinks
    model = cable_model(tmp_path)
    qpos, qvel = model.qpos0[None], np.zeros((1, 6))
    reference = pendulum_angle(np.pi / 2, 0.4)
    errors = []
    for dt in (4e-3, 2e-3, 1e-3, 5e-4):
        model.timestep = dt
        qs, _, status = phalanx.rollout(model, qpos, qvel, np.zeros((1, int(round(0.4 / dt)), 0)))
        assert not status.any()
        offset = qs[0, :, :3] - np.array([0, 0, 1])
        np.testing.assert_allclose(np.linalg.norm(offset, axis=-1), CABLE_L, rtol=0, atol=1e-9)
        x, z = offset[-1, 0], offset[-1, 2]
        errors.append(abs(np.arctan2(x, -z) - reference))
    print("errors at 4, 2, 1, 0.5 ms:", errors)
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert np.log2(errors[0] / errors[-1]) / 3 > 0.8  # first order
    assert errors[-1] < 0.02


def test_slack_cable_lets_the_body_fall_freely_until_taut(tmp_path):
    # 0.5 m below the anchor with 0.8 m of cable: semi-implicit Euler's free fall exactly,
    # z_n = z_0 - g h^2 n (n + 1) / 2, until the cable is taut; then the cable holds at L
    model = cable_model(tmp_path, pos="0 0 0.5")
    h, n = model.timestep, 300
    qs, vs, _ = phalanx.rollout(model, model.qpos0[None], np.zeros((1, 6)), np.zeros((1, n, 0)))
    k = np.arange(1, n + 1)
    free = 0.5 - 9.81 * h * h * k * (k + 1) / 2
    slack = free > 1 - CABLE_L
    assert 50 < slack.sum() < n - 50
    np.testing.assert_allclose(qs[0, slack, 2], free[slack], rtol=0, atol=1e-12)
    np.testing.assert_allclose(qs[0, ~slack, 2], 1 - CABLE_L, rtol=0, atol=1e-9)
    assert np.abs(vs[0, -1]).max() < 1e-6  # the fall stopped: a rigid cable, no bounce


def test_cable_that_pushes_keeps_its_lower_limit(tmp_path):
    # a lower limit of 0.5 m below the anchor: the sphere thrown up at it stops at 0.5 m (the
    # rigid constraint takes its speed: no bounce) and then falls back under gravity
    model = cable_model(tmp_path, pos="0 0 0.3", lo=0.5)
    qvel = np.array([[0.0, 0.0, 3.0, 0.0, 0.0, 0.0]])
    qs, _, _ = phalanx.rollout(model, model.qpos0[None], qvel, np.zeros((1, 100, 0)))
    dist = np.linalg.norm(qs[0, :, :3] - np.array([0, 0, 1]), axis=-1)
    assert dist.min() > 0.5 - 1e-9
    stopped = np.flatnonzero(np.abs(dist - 0.5) < 1e-9)
    assert len(stopped) >= 1 and dist[stopped[0] - 1] > 0.5 + 1e-3  # it got there
    assert dist[-1] > 0.55


def test_cable_gradients_match_central_differences(tmp_path, rng):
    # a taped rollout through the swing (the cable taut throughout): gradients in the initial
    # state and in the sphere's mass and centre of mass (where the cable's site sits relative to
    # it) against central differences
    model = cable_model(tmp_path)
    model.timestep = 0.01
    T = 20
    qpos = model.qpos0[None].copy()
    qvel = np.array([[0.0, 0.3, 0.0, 0.5, -0.2, 0.1]])
    ipos = np.array([[0, 0, 0], [0.01, -0.02, 0.015]])
    model.set_parameter("body_ipos", ipos)
    wq, wv = rng.standard_normal((1, T, 7)), rng.standard_normal((1, T, 6))
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, np.zeros((1, T, 0)), tape=tape)
    grads = tape.backward(wq, wv)

    def loss(q0=qpos, v0=qvel, params=None):
        with phalanx.model_parameters(model, params or {}):
            qs, vs, status = phalanx.rollout(model, q0, v0, np.zeros((1, T, 0)))
        assert not status.any()
        return float((wq * qs).sum() + (wv * vs).sum())

    h = 1e-5
    for name, x in (("qvel", qvel), ("body_ipos", ipos), ("body_mass", model.parameter("body_mass"))):
        d = rng.standard_normal(x.shape)
        if name.startswith("body_"):
            d[0] = 0
            grad = grads[name].sum(axis=0)
            fd = (loss(params={name: x + h * d}) - loss(params={name: x - h * d})) / (2 * h)
        else:
            grad = grads[name]
            fd = (loss(v0=qvel + h * d) - loss(v0=qvel - h * d)) / (2 * h)
        assert float((grad * d).sum()) == pytest.approx(fd, rel=1e-5, abs=1e-6), name
        assert abs(fd) > 1e-3, name


def test_limited_tendon_that_is_not_a_cable_is_an_error(tmp_path):
    # a limited fixed tendon (a sum of joint coordinates) has no path for XPBD to project
    path = tmp_path / "model.xml"
    path.write_text(DOUBLE_PENDULUM.replace("</mujoco>", """<tendon><fixed limited='true'
      range='-1 1'><joint joint='shoulder' coef='1'/><joint joint='elbow' coef='1'/></fixed>
      </tendon></mujoco>"""))
    model = xpbd(path)
    with pytest.raises(ValueError, match="spatial tendon through 2 to 16 sites"):
        phalanx.rollout(model, model.qpos0[None], np.zeros((1, 2)), np.zeros((1, 3, 1)))


def test_cable_over_world_sites_is_the_shorter_cable(tmp_path):
    # a cable from a world site A over the anchor B (a world site too) to the sphere, limited to
    # |AB| + L: its first segment is constant, so the sphere swings as on the cable of length L
    # from B, to round-off
    model = cable_model(tmp_path)
    path = tmp_path / "over.xml"
    path.write_text(f"""<mujoco><option timestep='0.002'><flag contact='disable'/></option>
<worldbody><site name='a' pos='-0.3 0 1.4'/><site name='anchor' pos='0 0 1'/>
  <body pos='0.8 0 1'><freejoint/><geom type='sphere' size='0.02' mass='1'/>
    <site name='end'/></body></worldbody>
<tendon><spatial limited='true' range='0 {0.5 + CABLE_L}'><site site='a'/><site site='anchor'/>
<site site='end'/></spatial></tendon></mujoco>""")
    over = xpbd(path)
    qvel = np.array([[0.0, 0.3, 0.0, 0.5, -0.2, 0.1]])
    qs = [phalanx.rollout(m, m.qpos0[None], qvel, np.zeros((1, 200, 0)))[0] for m in (model, over)]
    assert np.linalg.norm(qs[0][0, :, :3] - model.qpos0[:3], axis=-1).max() > 0.5  # it swung
    np.testing.assert_allclose(qs[1], qs[0], rtol=0, atol=1e-12)


def bead_x(x0, seconds, a, b, dt=1e-5):
    """x of a bead sliding without friction on the ellipse (a sin s, -b cos s) from rest at x0:
    RK4 on Lagrange's equation of its one coordinate s, M(s) s'' + M'(s) s'^2 / 2 = -g b sin s,
    with M(s) = a^2 cos^2 s + b^2 sin^2 s (kinetic energy M s'^2 / 2 per unit mass)"""
    g = 9.81

    def f(y):
        s, w = y
        mass = a * a * np.cos(s) ** 2 + b * b * np.sin(s) ** 2
        dmass = (b * b - a * a) * np.sin(2 * s)
        return np.array([w, (-g * b * np.sin(s) - 0.5 * dmass * w * w) / mass])

    return a * np.sin(rk4(f, np.array([np.arcsin(x0 / a), 0.0]), seconds, dt)[0])


def test_bead_on_a_string_moves_on_its_ellipse(tmp_path):
    # a string of length 1.4 m between world sites 1 m apart through a sphere's centre: the sphere
    # slides on the ellipse whose foci are the anchors; released from rest at x = 0.3 m, the
    # string holds its length to round-off and x at 0.6 s approaches the Lagrangian's as dt
    # shrinks
    L, c, x0 = 1.4, 0.5, 0.3
    a, b = L / 2, np.sqrt((L / 2) ** 2 - c * c)
    z0 = -b * np.sqrt(1 - (x0 / a) ** 2)
    path = tmp_path / "bead.xml"
    path.write_text(f"""<mujoco><option><flag contact='disable'/></option><worldbody>
  <site name='a' pos='-{c} 0 1'/><site name='b' pos='{c} 0 1'/>
  <body pos='{x0} 0 {1 + z0}'><freejoint/><geom type='sphere' size='0.02' mass='0.3'/>
    <site name='bead'/></body></worldbody>
<tendon><spatial limited='true' range='0 {L}'><site site='a'/><site site='bead'/>
<site site='b'/></spatial></tendon></mujoco>""")
    model = xpbd(path)
    reference = bead_x(x0, 0.6, a, b)
    errors = []
    for dt in (2e-3, 1e-3, 5e-4):
        model.timestep = dt
        qs, _, status = phalanx.rollout(model, model.qpos0[None], np.zeros((1, 6)),
                                        np.zeros((1, int(round(0.6 / dt)), 0)))
        assert not status.any()
        p = qs[0, :, :3]
        length = (np.linalg.norm(p - [-c, 0, 1], axis=-1) + np.linalg.norm(p - [c, 0, 1], axis=-1))
        np.testing.assert_allclose(length, L, rtol=0, atol=1e-9)
        errors.append(abs(p[-1, 0] - reference))
    print("bead x at 0.6 s:", reference, "errors at 2, 1, 0.5 ms:", errors)
    assert x0 - abs(reference) > 0.1  # it is on its way across
    assert errors[2] < errors[1] < errors[0] < 0.02
    assert np.log2(errors[0] / errors[2]) / 2 > 0.8  # first order


@pytest.mark.parametrize("joint_solver", ["tree", "gauss_seidel"])
@pytest.mark.parametrize("through", [False, True])
def test_cable_on_a_chain_gradients_match_central_differences(tmp_path, rng, joint_solver,
                                                              through):
    # the double pendulum held by a cable from the world to its tip (through a site on the
    # first link when `through`), its upper limit the median of its free length over the
    # rollout (between two steps' lengths, so that no step starts taut by round-off) so that it
    # is taut about half of the time: the iterations alternate joints and cable, and the
    # gradients run back through both
    sites = "<site site='hook'/><site site='mid'/><site site='tip'/>" if through else \
        "<site site='hook'/><site site='tip'/>"
    xml = DOUBLE_PENDULUM.replace(
        "<geom type='capsule' fromto='0 0 0 0.3 0 0' size='0.02' mass='0.4'/>",
        "<geom type='capsule' fromto='0 0 0 0.3 0 0' size='0.02' mass='0.4'/>"
        "<site name='tip' pos='0.3 0 0'/>").replace(
        "<geom type='capsule' fromto='0 0 0 0.5 0 0' size='0.03' mass='1'/>",
        "<geom type='capsule' fromto='0 0 0 0.5 0 0' size='0.03' mass='1'/>"
        "<site name='mid' pos='0.25 0 0.04'/>").replace(
        "<worldbody>", "<worldbody><site name='hook' pos='0.9 0 2.5'/>")
    T = 15
    qpos, qvel = np.array([[0.3, -0.5]]), np.array([[0.4, 0.2]])
    ctrl = rng.uniform(-0.5, 0.5, (1, T, 1))

    def model_with(limit):
        path = tmp_path / "chain.xml"
        path.write_text(xml.replace("</mujoco>", f"<tendon><spatial limited='true' "
                                    f"range='0 {limit}'>{sites}</spatial></tendon></mujoco>"))
        model = xpbd(path, xpbd_joint_solver=joint_solver, xpbd_iterations=3)
        model.timestep = 0.01
        return model

    def length(model, qs):
        x = phalanx.kinematics(model, qs)["site_xpos"]
        order = [0, 1, 2] if through else [0, 2]
        return sum(np.linalg.norm(x[:, j] - x[:, i], axis=-1) for i, j in zip(order, order[1:]))

    free = np.sort(length(model_with(10.0), phalanx.rollout(model_with(10.0), qpos, qvel,
                                                             ctrl)[0][0]))
    limit = float(free[T // 2 - 1] + free[T // 2]) / 2  # between two steps' lengths
    model = model_with(limit)
    qs, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    lengths = length(model, qs[0])
    # held: never beyond the limit by more than what three iterations leave, and taut a while.
    # Joints and cable alternate, which converges linearly; through the first link, whose hinge
    # takes most of the cable's pull there, it leaves about 5e-3 m after three iterations
    # (measured: 1.7e-3 after 10, 2.2e-4 after 30)
    excess = 1e-2 if through else 1e-4
    assert lengths.max() < limit + excess
    assert (lengths > limit - excess).sum() >= T // 3
    wq, wv = rng.standard_normal((1, T, 2)), rng.standard_normal((1, T, 2))
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    grads = tape.backward(wq, wv)

    def loss(v0=qvel, params=None):
        with phalanx.model_parameters(model, params or {}):
            qs, vs, status = phalanx.rollout(model, qpos, v0, ctrl)
        assert not status.any()
        return float((wq * qs).sum() + (wv * vs).sum())

    h = 1e-5
    d = rng.standard_normal(qvel.shape)
    fd = (loss(v0=qvel + h * d) - loss(v0=qvel - h * d)) / (2 * h)
    assert float((grads["qvel"] * d).sum()) == pytest.approx(fd, rel=1e-5, abs=1e-6)
    for name in ("body_pos", "body_ipos"):
        p0 = model.parameter(name)
        d = rng.standard_normal(p0.shape)
        d[0] = 0
        fd = (loss(params={name: p0 + h * d}) - loss(params={name: p0 - h * d})) / (2 * h)
        assert float((grads[name].sum(axis=0) * d).sum()) == pytest.approx(fd, rel=1e-5,
                                                                           abs=1e-6), name
        assert abs(fd) > 1e-3, name


CONTACTS = """<mujoco><option timestep='0.005'/><worldbody>
  <geom type='plane' size='5 5 .1' friction='0.6'/>
  <body pos='0 0 0.1'><freejoint/><geom type='box' size='.1 .08 .06' mass='1.5'/></body>
  <body pos='0.5 0 0.2'><freejoint/><geom type='sphere' size='.1' mass='0.7'/></body>
</worldbody></mujoco>"""


@pytest.fixture
def contacts(tmp_path):
    path = tmp_path / "contacts.xml"
    path.write_text(CONTACTS)
    model = xpbd(path, xpbd_substeps=3, xpbd_iterations=2)
    model.set_parameter("geom_restitution", np.array([0.0, 0.0, 0.5]))
    return model


def test_contact_step_jacobians_match_central_differences(contacts):
    # a tilted box landing on a corner while it slides and spins, and a ball hitting the floor
    # at 2 m/s (restitution 0.5): every contact branch (normal, static and dynamic friction,
    # the bounce) in one step of three substeps of two iterations, against central differences
    # of the state and of the masses and inertias
    axis = np.array([0.3, 0.5, 0.2]) / np.linalg.norm([0.3, 0.5, 0.2])
    tilt = np.r_[np.cos(0.025), np.sin(0.025) * axis]
    qpos = np.array([[0.02, 0.01, 0.058, *tilt, 0.5, 0.0, 0.102, 1, 0, 0, 0]])
    qvel = np.array([[0.8, -0.3, -0.2, 0.5, 1.0, -0.7, 0.1, 0.2, -2.0, 0.3, 0.0, 0.0]])
    ctrl = np.zeros((1, 0))
    jac = phalanx.step_jacobians(contacts, qpos, qvel, ctrl, parameters=True)
    # slopes of qvel' in qpos reach 1e3 (a millimetre of penetration is a velocity over the
    # substep), where differences at h = 1e-6 carry 1e-4 of truncation (it falls as h^2:
    # 1e-2 at h = 1e-5, measured)
    fd = phalanx.step_jacobians_fd(contacts, qpos, qvel, ctrl, h=1e-6)
    for key in ("dqpos_dqpos", "dqpos_dqvel", "dqvel_dqpos", "dqvel_dqvel"):
        scale = np.abs(fd[key]).max()
        np.testing.assert_allclose(jac[key], fd[key], rtol=0, atol=3e-7 * scale, err_msg=key)
    for name in ("body_mass", "body_inertia"):
        p0 = contacts.parameter(name)
        for index in np.ndindex(p0[1:].shape):
            index = (index[0] + 1, *index[1:])
            d = np.zeros_like(p0)
            d[index] = 1e-5 * p0[index]  # relative: the inertias are 3e-3 kg m^2
            out = []
            for sign in (1, -1):
                with phalanx.model_parameters(contacts, {name: p0 + sign * d}):
                    q, v, status = phalanx.step(contacts, qpos, qvel, ctrl)
                assert not status.any()
                out.append(np.r_[q[0], v[0]])
            fd_col = (out[0] - out[1]) / (2 * d[index])
            col = jac["parameters"][name][0][(slice(None), *index)]
            np.testing.assert_allclose(col, fd_col, rtol=1e-5, atol=1e-5, err_msg=f"{name}{index}")


def test_contact_tape_gradients_match_central_differences(contacts, rng):
    # 20 steps of a flat box sliding and turning on its four corners and a ball rolling: the
    # taped gradients in the initial state and the masses against central differences
    qpos = np.array([[0, 0, 0.06, 1, 0, 0, 0, 0.5, 0, 0.1, 1, 0, 0, 0]])
    qvel = np.array([[1.0, 0.4, 0, 0, 0, 2.0, 0.5, -0.3, 0, 3.0, 5.0, 0]])
    T = 20
    ctrl = np.zeros((1, T, 0))
    wq, wv = rng.standard_normal((1, T, 14)), rng.standard_normal((1, T, 12))
    tape = phalanx.Tape()
    phalanx.rollout(contacts, qpos, qvel, ctrl, tape=tape)
    grads = tape.backward(wq, wv)

    def loss(q0=qpos, v0=qvel, params=None):
        with phalanx.model_parameters(contacts, params or {}):
            qs, vs, status = phalanx.rollout(contacts, q0, v0, ctrl)
        assert not status.any()
        return float((wq * qs).sum() + (wv * vs).sum())

    h = 1e-6
    mass = contacts.parameter("body_mass")
    for name, x in (("qpos", qpos), ("qvel", qvel), ("body_mass", mass)):
        d = rng.standard_normal(x.shape)
        if name == "qpos":
            d[0, [3, 4, 5, 6, 10, 11, 12, 13]] = 0  # positions only: quaternions stay unit
            fd = (loss(q0=qpos + h * d) - loss(q0=qpos - h * d)) / (2 * h)
            grad = grads[name]
        elif name == "qvel":
            fd = (loss(v0=qvel + h * d) - loss(v0=qvel - h * d)) / (2 * h)
            grad = grads[name]
        else:
            d[0] = 0
            fd = (loss(params={name: x + h * d}) - loss(params={name: x - h * d})) / (2 * h)
            grad = grads[name].sum(axis=0)
        assert float((grad * d).sum()) == pytest.approx(fd, rel=1e-5, abs=1e-5), name
        assert abs(fd) > 1e-2, name


def test_armature_converges_to_featherstone(composite, rng):
    # the composite chain with armature on every hinge (0.01 kg m^2, a fifth to a half of the
    # light links' inertia), limits off: the errors halve with the step
    def edit(m):
        m.set_parameter("dof_armature", np.full(m.nv, 0.01))
        m.limit = False

    model = phalanx.load_model(composite)
    qpos = 0.2 * rng.standard_normal((1, model.nq))
    qvel = 0.5 * rng.standard_normal((1, model.nv))
    errors = converges_to_featherstone(composite, qpos, qvel, 0.3, edit)
    print("errors (qpos, qvel) at 2, 1, 0.5, 0.25 ms:", errors.tolist())
    assert (errors[1:] < 0.6 * errors[:-1]).all()
    assert errors[-1, 0] < 1e-3
    # the armature matters at this size: without it the motion differs by more than that
    edit_off = lambda m: (edit(m), m.set_parameter("dof_armature", np.zeros(m.nv)))
    ref = phalanx.load_model(composite)
    edit(ref)
    ref.timestep = 2.5e-4
    off = xpbd(composite)
    edit_off(off)
    off.timestep = 2.5e-4
    n = int(round(0.3 / 2.5e-4))
    with_arm = phalanx.rollout(ref, qpos, qvel, np.zeros((1, n, 0)))[0][0, -1]
    without = phalanx.rollout(off, qpos, qvel, np.zeros((1, n, 0)))[0][0, -1]
    assert np.abs(with_arm - without).max() > 10 * errors[-1, 0]


def test_humanoid_on_the_floor_step_jacobians_match_central_differences(rng):
    # MuJoCo's humanoid as it is (armature on its hinges, limits) landing on its feet with
    # random controls, two substeps of two iterations: the one-step Jacobians against central
    # differences (h = 1e-6, whose truncation on the contacts' slopes of 5e2 falls as h^2) and
    # the armature's column on the masses' too
    model = xpbd(HUMANOID, xpbd_substeps=2, xpbd_iterations=2)
    qpos = model.qpos0[None].copy()
    qpos[0, 2] = 1.25
    qvel = 0.3 * rng.standard_normal((1, model.nv))
    qvel[0, 2] = -0.5
    ctrl = 0.2 * rng.standard_normal((1, model.nu))
    jac = phalanx.step_jacobians(model, qpos, qvel, ctrl, parameters=True)
    fd = phalanx.step_jacobians_fd(model, qpos, qvel, ctrl, h=1e-6)
    for key in ("dqpos_dqpos", "dqpos_dqvel", "dqvel_dqpos", "dqvel_dqvel", "dqvel_dctrl"):
        scale = np.abs(fd[key]).max()
        np.testing.assert_allclose(jac[key], fd[key], rtol=0, atol=1e-7 * scale, err_msg=key)
    assert np.abs(fd["dqvel_dqpos"]).max() > 100  # the contacts act
    armature = model.parameter("dof_armature")
    d = np.where(armature > 0, 1e-6, 0.0)
    out = []
    for sign in (1, -1):
        with phalanx.model_parameters(model, {"dof_armature": armature + sign * d}):
            q, v, _ = phalanx.step(model, qpos, qvel, ctrl)
        out.append(np.r_[q[0], v[0]])
    np.testing.assert_allclose(jac["parameters"]["dof_armature"][0] @ (d / 1e-6),
                               (out[0] - out[1]) / 2e-6, rtol=1e-5, atol=1e-6)
