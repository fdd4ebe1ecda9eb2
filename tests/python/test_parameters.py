"""Model parameters shared by all environments or set per environment (environment e reads
copy e % nbatch), and their gradients."""

from __future__ import annotations

import numpy as np
import pytest

import phalanx


def sliding_state(model, E):
    # the sphere slides on the floor (one contact, friction at its bound), the pendulum swings
    qpos = np.repeat(model.qpos0[None], E, 0)
    qpos[:, 7] = np.linspace(-0.2, 0.2, E)
    qvel = np.zeros((E, model.nv))
    qvel[:, 0] = np.linspace(0.8, 1.2, E)
    qvel[:, 1] = 0.3
    qvel[:, 6] = 0.4
    return qpos, qvel


def test_parameter_names_and_shapes(sphere_and_pendulum):
    model = sphere_and_pendulum
    assert phalanx.PARAMETERS == ("body_mass", "body_inertia", "dof_damping", "dof_armature",
                                  "jnt_stiffness", "actuator_gear", "body_ipos", "body_pos",
                                  "actuator_gainprm", "actuator_biasprm", "tendon_stiffness",
                                  "tendon_damping", "tendon_lengthspring", "mocap_pos",
                                  "mocap_quat", "geom_friction", "geom_restitution",
                                  "geom_size")
    for name in phalanx.PARAMETERS:
        np.testing.assert_array_equal(model.parameter(name), getattr(model, name))


def test_per_environment_parameters_step_like_separate_models(sphere_and_pendulum, rng):
    # 5 environments over 3 copies of mass, friction, sphere radius and pendulum centre of mass:
    # each environment moves exactly as a model holding its copy alone
    model = sphere_and_pendulum
    E, nbatch, T = 5, 3, 40
    copies = {
        "body_mass": model.body_mass * rng.uniform(0.7, 1.3, (nbatch, model.nbody)),
        "geom_friction": model.geom_friction * rng.uniform(0.5, 1.5, (nbatch, model.ngeom, 1)),
        "geom_size": model.geom_size * np.array([1.0, 1.02, 1.0])[:, None, None],
        "body_ipos": model.body_ipos + rng.uniform(-0.05, 0.05, (nbatch, model.nbody, 3)),
    }
    qpos, qvel = sliding_state(model, E)
    ctrl = rng.uniform(-0.5, 0.5, (E, T, model.nu))
    shared = {name: model.parameter(name) for name in copies}
    for name, values in copies.items():
        model.set_parameter(name, values)
        np.testing.assert_array_equal(model.parameter(name), values)
        np.testing.assert_array_equal(getattr(model, name), values[0])  # the field keeps copy 0
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    assert not status.any()
    for e in range(E):
        with phalanx.model_parameters(model, {n: v[e % nbatch] for n, v in copies.items()}):
            q1, v1, _ = phalanx.rollout(model, qpos[e:e + 1], qvel[e:e + 1], ctrl[e:e + 1])
        np.testing.assert_array_equal(qs[e], q1[0])
        np.testing.assert_array_equal(vs[e], v1[0])
    # the copies make a difference: environments 0 and 3 share copy 0, 0 and 1 do not
    x0 = qs[:, -1, 0] - qpos[:, 0]
    assert abs(x0[1] - x0[0]) > 1e-4
    # one copy of the field's shape makes it shared again
    for name, values in shared.items():
        model.set_parameter(name, values)
        assert model.parameter(name).shape == values.shape


def test_per_environment_parameter_gradients(sphere_and_pendulum, rng):
    # with one copy per environment, environment e's gradient of a rollout loss is the
    # derivative with respect to its own copy: central differences that perturb copy e only
    model = sphere_and_pendulum
    E, T = 2, 30
    qpos, qvel = sliding_state(model, E)
    ctrl = rng.uniform(-0.5, 0.5, (E, T, model.nu))
    wq, wv = rng.standard_normal((E, T, model.nq)), rng.standard_normal((E, T, model.nv))
    base = {n: np.repeat(model.parameter(n)[None], E, 0) for n in
            ("body_mass", "body_ipos", "geom_size", "geom_friction")}
    base["body_mass"][1] *= 1.2
    base["geom_size"][1, 1, 0] *= 1.01  # a larger sphere in environment 1
    for name, values in base.items():
        model.set_parameter(name, values)

    def loss(name, values):
        with phalanx.model_parameters(model, {name: values}):
            qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
        assert not status.any()
        return (wq * qs).sum(axis=(1, 2)) + (wv * vs).sum(axis=(1, 2))  # per environment

    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    grads = tape.backward(wq, wv)
    h = 1e-6
    for name, values in base.items():
        d = rng.uniform(0.5, 1.5, values.shape) * np.where(values != 0, values, 0.01)
        if name == "geom_size":
            d[:, 0] = d[:, 1, 1:] = 0  # the plane's size is unused; the sphere has one
        if name == "geom_friction":
            d[:, :, 1:] = 0  # only the sliding coefficient enters the step
        if name == "body_mass":
            d[:, 0] = 0  # the world
        for e in range(E):
            de = np.zeros_like(d)
            de[e] = d[e]
            fd = (loss(name, values + h * de) - loss(name, values - h * de)) / (2 * h)
            ad = float((grads[name][e] * d[e]).sum())
            assert ad == pytest.approx(fd[e], rel=1e-6, abs=1e-8), (name, e)
            assert fd[1 - e] == pytest.approx(0.0, abs=1e-9), (name, e)  # neighbours untouched


def test_parameter_errors(sphere_and_pendulum):
    model = sphere_and_pendulum
    with pytest.raises(ValueError, match=r"body_mass must have shape \(3,\) \(shared\) or "
                                         r"\(nbatch, 3\) \(per environment\), got \(2, 2\)"):
        model.set_parameter("body_mass", np.ones((2, 2)))
    with pytest.raises(ValueError, match="'body_color' is not a model parameter"):
        model.set_parameter("body_color", np.ones(3))
    mass = model.parameter("body_mass")
    bad = np.repeat(mass[None], 2, 0)
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="body_mass: entry 2 of copy 1 is nan, expected a finite"):
        model.set_parameter("body_mass", bad)
    sizes = np.repeat(model.geom_size[None], 2, 0)
    sizes[0, 1, 0] = 0.0
    with pytest.raises(ValueError, match=r"geom_size: entry 3 of copy 0 is 0, expected > 0"):
        model.set_parameter("geom_size", sizes)
    np.testing.assert_array_equal(model.parameter("body_mass"), mass)  # unchanged


def test_builtin_losses_value_and_gradient(sphere_and_pendulum, rng):
    # the running-plus-terminal tracking loss and the control cost: values against their
    # formulas, gradients against central differences of the whole rollout
    from phalanx import losses

    model = sphere_and_pendulum
    E, T = 2, 30
    qpos, qvel = sliding_state(model, E)
    ctrl = rng.uniform(-0.5, 0.5, (E, T, model.nu))
    q_goal = model.qpos0 + 0.1
    w = rng.uniform(0.5, 2.0, model.nq)
    loss = (losses.StateCost(qpos_target=q_goal, qvel_target=np.zeros((E, model.nv)),
                             qpos_weight=w, qvel_weight=0.1, terminal_qpos_weight=10.0,
                             terminal_qvel_weight=1.0)
            + losses.ControlCost(weight=0.3))
    value, g = losses.value_and_grad(model, qpos, qvel, ctrl, loss)
    qs, vs = g["qs"], g["vs"]
    eq, ev = qs - q_goal, vs
    # phalanx.costs's convention: no factor 1/2; the terminal weight adds at the last step
    expect = ((w * eq ** 2).sum(axis=(1, 2)) + 10.0 * (eq[:, -1] ** 2).sum(axis=1)
              + 0.1 * (ev ** 2).sum(axis=(1, 2)) + 1.0 * (ev[:, -1] ** 2).sum(axis=1)
              + 0.3 * (ctrl ** 2).sum(axis=(1, 2)))
    np.testing.assert_allclose(value, expect, rtol=1e-13)

    def total(qpos=qpos, qvel=qvel, ctrl=ctrl):
        qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl)
        return loss(qs, vs, ctrl).sum()

    h = 1e-6
    for name, x in [("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)]:
        d = rng.standard_normal(x.shape)
        if name == "qpos":
            d[:, 3:7] = 0  # along the quaternion only through its normalisation
        fd = (total(**{name: x + h * d}) - total(**{name: x - h * d})) / (2 * h)
        assert float((g[name] * d).sum()) == pytest.approx(fd, rel=1e-6), name
    with pytest.raises(ValueError, match=r"qpos_weight must be a scalar or have shape \(8,\)"):
        losses.StateCost(qpos_weight=np.ones(3))(qs, vs, ctrl)
    with pytest.raises(ValueError, match=r"qpos_target must have shape \(8,\), \(E, 8\) or"):
        losses.StateCost(qpos_target=np.ones(5))(qs, vs, ctrl)


# the scene has no mocap bodies: test_mocap.py checks the gradients of their poses
@pytest.mark.parametrize("name", [p for p in phalanx.PARAMETERS if not p.startswith("mocap_")])
def test_rollout_gradient_of_every_parameter(sphere_and_pendulum, rng, name):
    # T = 50 with the sphere sliding in contact (one mode throughout) and the pendulum under
    # its motor: <dL/dp, d> from the tape against central differences of the whole rollout,
    # the parameter shared by both environments (per-environment gradients summed)
    model = sphere_and_pendulum
    model.set_parameter("jnt_stiffness", np.array([0.0, 0.8]))  # the hinge gets a spring
    model.set_parameter("dof_armature", np.r_[np.zeros(6), 0.01])
    model.set_parameter("geom_restitution", np.array([0.3, 0.2, 0.1]))
    E, T = 2, 50
    qpos, qvel = sliding_state(model, E)
    ctrl = rng.uniform(-0.5, 0.5, (E, T, model.nu))
    wq, wv = rng.standard_normal((E, T, model.nq)), rng.standard_normal((E, T, model.nv))
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    grad = tape.backward(wq, wv)[name].sum(axis=0)
    p0 = model.parameter(name)
    d = rng.uniform(0.5, 1.5, p0.shape) * np.where(p0 != 0, np.abs(p0), 0.1)
    if name.startswith("body_"):
        d[0] = 0  # the world
    if name == "geom_size":
        d[0] = 0  # the plane's size is unused
        d[1:, 1:] = 0  # the sphere has a radius only; the capsule does not collide
    if name == "geom_friction":
        d[:, 1:] = 0  # only the sliding coefficient enters the step

    def loss(p):
        with phalanx.model_parameters(model, {name: p}):
            qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
        assert not status.any()
        return float((wq * qs).sum() + (wv * vs).sum())

    h = 1e-6
    fd = (loss(p0 + h * d) - loss(p0 - h * d)) / (2 * h)
    ad = float((grad * d).sum())
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-9)
    if name == "geom_restitution":
        return  # nothing bounces here: the gradient is 0, and so is the difference
    if name == "body_pos":
        return  # moving where a lone pendulum hangs changes nothing: see the double pendulum below
    assert abs(fd) > 1e-6  # the parameter matters here, so the check has teeth


DOUBLE_PENDULUM = """<mujoco><option timestep='0.002'/><worldbody>
  <body pos='0 0 2'><joint name='shoulder' type='hinge' axis='0 1 0' damping='0.02'/>
    <geom type='capsule' fromto='0 0 0 0.5 0 0' size='0.03' mass='1'/>
    <body pos='0.5 0 0.05'><joint type='hinge' axis='0 1 0'/>
      <geom type='capsule' fromto='0 0 0 0.3 0 0' size='0.02' mass='0.4'/></body></body>
</worldbody><actuator><motor joint='shoulder' gear='2'/></actuator></mujoco>"""


def test_rollout_gradient_of_link_lengths(tmp_path, rng):
    # body_pos of the second link (where it hangs from the first: the first link's length)
    # moves the chain's dynamics: the tape's gradient against central differences
    path = tmp_path / "double_pendulum.xml"
    path.write_text(DOUBLE_PENDULUM)
    model = phalanx.load_model(path)
    E, T = 2, 100
    qpos = np.array([[0.3, -0.5], [-0.2, 0.4]])
    qvel = np.array([[0.0, 1.0], [0.5, 0.0]])
    ctrl = rng.uniform(-0.5, 0.5, (E, T, model.nu))
    wq, wv = rng.standard_normal((E, T, model.nq)), rng.standard_normal((E, T, model.nv))
    tape = phalanx.Tape()
    phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
    grad = tape.backward(wq, wv)["body_pos"].sum(axis=0)
    p0 = model.parameter("body_pos")

    def loss(p):
        with phalanx.model_parameters(model, {"body_pos": p}):
            qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl)
        return float((wq * qs).sum() + (wv * vs).sum())

    h = 1e-6
    for body, axis in ((2, 0), (2, 2), (1, 0)):
        d = np.zeros_like(p0)
        d[body, axis] = 1
        fd = (loss(p0 + h * d) - loss(p0 - h * d)) / (2 * h)
        assert grad[body, axis] == pytest.approx(fd, rel=1e-6, abs=1e-7)  # differences: 1e-8 noise
        if body == 2:
            assert abs(fd) > 1e-3  # the link length matters
        else:
            assert abs(fd) < 1e-6  # where the chain hangs does not
