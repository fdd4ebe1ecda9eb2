"""Fluid forces (MJCF <option density viscosity wind>, MuJoCo's inertia-box model) against
MuJoCo, and their gradients against central differences.

MuJoCo's qacc and qfrc_inverse include the fluid's generalized force (qfrc_fluid, part of
qfrc_passive); with constraints disabled they are what Phalanx's forward_dynamics,
inverse_dynamics and rollout compute, on the Euler integrator (the drag explicit) and on
implicitfast (the drag's velocity slope in the implicit matrix, as MuJoCo's). The scenes:
dm_control's fish (a free body with fins) and six-link swimmer, and a small model that
exercises the corners of the model: a body whose inertia is not diagonal in its frame (so the
box's frame is not the body's), a flat inertia (A + B = C: the box has no third side, which
MuJoCo clamps), a massless body and a body welded to the world (neither feels the fluid), and a
slide joint under a hinge. A free sphere's Stokes drag checks each integrator (and the XPBD
solver) against the exact decay of its velocity.
"""

from __future__ import annotations

import numpy as np
import pytest

import phalanx
from phalanx.testing import assert_close, random_ctrl, random_state

import mujoco  # noqa: E402

CORNERS = """
<mujoco>
  <option density="1.2e3" viscosity="0.05" wind="0.4 -0.3 0.2" timestep="0.002"/>
  <worldbody>
    <body name="float" pos="0 0 1">
      <freejoint/>
      <geom type="box" size="0.2 0.1 0.05" pos="0.05 0 0" euler="10 20 30" density="900"/>
      <geom type="sphere" size="0.05" pos="-0.2 0.1 0"/>
      <body name="arm" pos="0.25 0 0">
        <joint name="hinge" type="hinge" axis="0 1 1" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
        <body name="slider" pos="0.3 0 0">
          <joint type="slide" axis="1 0 0"/>
          <inertial pos="0.02 0 0" mass="0.2" diaginertia="0.001 0.002 0.003"/>
          <geom type="box" size="0.1 0.1 0.01" contype="0" conaffinity="0"/>
          <body name="massless" pos="0 0 0.1">
            <site name="tip" size="0.01"/>
          </body>
        </body>
      </body>
    </body>
    <body name="fixed" pos="1 0 0">
      <geom type="sphere" size="0.1"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" gear="2" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def corners_model():
    return mujoco.MjModel.from_xml_string(CORNERS)


def fish_model():
    from dm_control.suite import fish
    xml, assets = fish.get_model_and_assets()
    return mujoco.MjModel.from_xml_string(xml, assets)


def swimmer_model():
    from dm_control.suite import swimmer
    xml, assets = swimmer.get_model_and_assets(6)
    return mujoco.MjModel.from_xml_string(xml, assets)


SCENES = {"corners": corners_model, "fish": fish_model, "swimmer6": swimmer_model}


class Scene:
    """one MuJoCo model, with wind added where it has none, and Phalanx's conversion of it,
    constraints disabled in both"""

    def __init__(self, name):
        self.mj = SCENES[name]()
        if not self.mj.opt.wind.any():
            self.mj.opt.wind[:] = [0.3, -0.5, 0.1]
        self.mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
        self.model = phalanx.from_mujoco(self.mj)
        self.model.contact = self.model.limit = False
        self.data = mujoco.MjData(self.mj)
        assert self.model.density == self.mj.opt.density > 0
        assert self.model.viscosity == self.mj.opt.viscosity
        np.testing.assert_array_equal(self.model.wind, self.mj.opt.wind)

    def forward(self, qpos, qvel, ctrl):
        """mj_forward -> (qacc, qfrc_fluid) of each environment"""
        out = []
        for q, v, u in zip(qpos, qvel, ctrl):
            self.data.qpos[:], self.data.qvel[:], self.data.ctrl[:] = q, v, u
            mujoco.mj_forward(self.mj, self.data)
            out.append((self.data.qacc.copy(), self.data.qfrc_fluid.copy()))
        return np.array([a for a, _ in out]), np.array([f for _, f in out])


@pytest.fixture(scope="module", params=list(SCENES))
def scene(request):
    return Scene(request.param)


def test_forward_and_inverse_dynamics_match_mujoco(scene, rng):
    # qacc with the fluid's force in it, at random states whose velocities make the drag
    # comparable to the other forces; and the fluid's own share, as the difference of
    # Phalanx's inverse dynamics with and without the medium (MuJoCo's qfrc_fluid)
    model, E = scene.model, 6
    qpos, qvel = random_state(model, E, rng, qvel_scale=2.0)
    ctrl = random_ctrl(model, (E,), rng)
    qacc_ref, fluid_ref = scene.forward(qpos, qvel, ctrl)
    assert np.abs(fluid_ref).max() > 1e-2  # the medium matters at these states
    assert_close(phalanx.forward_dynamics(model, qpos, qvel, ctrl), qacc_ref, 1e-10, "qacc")
    with_fluid = phalanx.inverse_dynamics(model, qpos, qvel, qacc_ref)
    density, viscosity = model.density, model.viscosity
    model.density = model.viscosity = 0.0
    try:
        without = phalanx.inverse_dynamics(model, qpos, qvel, qacc_ref)
    finally:
        model.density, model.viscosity = density, viscosity
    assert_close(without - with_fluid, fluid_ref, 1e-10, "qfrc_fluid")


def check_rollout(scene, rng):
    """200 steps under random controls from near the reference (see below), which the drag
    slows, against mj_step; tolerance as test_dynamics_mujoco's trajectories"""
    model, E, T = scene.model, 2, 200
    qpos, qvel = random_state(model, E, rng, qpos_scale=0.05, qvel_scale=0.1)
    ctrl = random_ctrl(model, (E, T), rng)
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    np.testing.assert_array_equal(status, 0)
    d = scene.data
    for e in range(E):
        mujoco.mj_resetData(scene.mj, d)
        d.qpos[:], d.qvel[:] = qpos[e], qvel[e]
        q_ref, v_ref = [], []
        for u in ctrl[e]:
            d.ctrl[:] = u
            mujoco.mj_step(scene.mj, d)
            q_ref.append(d.qpos.copy())
            v_ref.append(d.qvel.copy())
        assert_close(qs[e:e + 1], np.array(q_ref)[None], 1e-8, f"qpos, env {e}")
        assert_close(vs[e:e + 1], np.array(v_ref)[None], 1e-8, f"qvel, env {e}")
    assert np.abs(vs).max() < 100  # a motion the drag bounds, not a divergence


def test_rollout_matches_mujoco(scene, rng):
    # Euler, MuJoCo's default integrator, as all three scenes ask
    assert scene.mj.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER
    check_rollout(scene, rng)


def check_step_jacobians(scene, rng):
    """the step's Jacobians (reverse passes through the drag) against finite differences of
    the step, every input: Ridders' extrapolation, since the light swimmer's steps leave plain
    central differences at h = 1e-6 with round-off of ~2e-7"""
    model, E = scene.model, 2
    qpos, qvel = random_state(model, E, rng, qvel_scale=0.2)
    ctrl = random_ctrl(model, (E,), rng, beyond=0.9)
    jac = phalanx.step_jacobians(model, qpos, qvel, ctrl)
    ref = phalanx.step_jacobians_fd(model, qpos, qvel, ctrl, method="ridders")
    for key, fd in ref.items():
        np.testing.assert_allclose(jac[key], fd, rtol=0, atol=1e-7 * max(1.0, np.abs(fd).max()),
                                   err_msg=key)


def test_step_jacobians_match_central_differences(scene, rng):
    check_step_jacobians(scene, rng)


PARAMS = ["body_mass", "body_inertia", "body_ipos"]
STEPS = {"body_mass": 1e-4, "body_inertia": 1e-6, "body_ipos": 1e-4}


def check_parameter_gradient(scene, rng, param):
    """<dL/dp, d> from step_vjp over 10 steps against central differences, from states near
    the reference at rest (the fish's fins are light and stiffly actuated: far from it, its
    explicit step diverges within a few steps, as MuJoCo's does). The steps h (STEPS): the
    drag makes the loss curved in the inertias, whose box sides are their square roots, so that
    a relative step of 1e-5 leaves truncation errors of ~1e-5 and 1e-6 ~1e-7; in the masses
    and centres of mass the curvature is mild and round-off rules, ~1e-6 at h = 1e-6 and
    ~1e-9 at 1e-4 (measured on the three scenes, both integrators)."""
    model, T = scene.model, 10
    qpos, qvel = random_state(model, 1, rng, qpos_scale=0.05, qvel_scale=0.02)
    ctrl = random_ctrl(model, (1, T), rng, beyond=0.9)
    wq, wv = rng.standard_normal((1, model.nq)), rng.standard_normal((1, model.nv))
    states = [(qpos, qvel)]
    for t in range(T):
        q, v, s = phalanx.step(model, *states[-1], ctrl[:, t])
        assert not s.any()
        states.append((q, v))
    gq, gv, gp = wq.copy(), wv.copy(), 0.0
    for t in reversed(range(T)):
        g = phalanx.step_vjp(model, *states[t], np.ascontiguousarray(ctrl[:, t]), gq, gv)
        gq, gv, gp = g["qpos"], g["qvel"], gp + g[param].sum(axis=0)
    p0 = np.array(getattr(model, param), dtype=np.float64)
    d = rng.uniform(0.5, 1.5, p0.shape) * p0
    if param == "body_ipos":  # centres of mass at their bodies' origins have none to scale
        d = 0.01 * rng.standard_normal(p0.shape)
    if param == "body_inertia":
        # a flat inertia (A + B = C) sits on the clamp of its box's third side, whose square
        # root has no derivative there: the direction leaves such bodies' inertias alone
        inertia = p0.reshape(-1, 3)
        flat = np.any(inertia.sum(axis=1, keepdims=True) - 2 * inertia < 1e-12, axis=1)
        d.reshape(-1, 3)[flat] = 0

    def loss(p):
        model.set_parameter(param, p)
        try:
            qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl)
        finally:
            model.set_parameter(param, p0)
        return (wq * qs[:, -1]).sum() + (wv * vs[:, -1]).sum()

    h = STEPS[param]
    fd = (loss(p0 + h * d) - loss(p0 - h * d)) / (2 * h)
    assert float((gp * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-8), param


@pytest.mark.parametrize("param", PARAMS)
def test_parameter_gradients_through_the_drag(scene, rng, param):
    # the box's sides come from the masses and inertias, the point the drag acts at from
    # body_ipos
    check_parameter_gradient(scene, rng, param)


@pytest.fixture
def implicitfast(scene):
    """the scene with both MuJoCo and Phalanx on the implicitfast integrator, whose matrix
    takes the drag's velocity slope"""
    scene.mj.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    scene.model.integrator = "implicitfast"
    yield scene
    scene.mj.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    scene.model.integrator = "euler"


def test_implicitfast_rollout_matches_mujoco(implicitfast, rng):
    # as on Euler; and the fish's light fins, which the explicit drag flings about far from
    # rest, stay bounded from faster states
    check_rollout(implicitfast, rng)
    model, E, T = implicitfast.model, 2, 200
    qpos, qvel = random_state(model, E, rng, qpos_scale=0.3, qvel_scale=1.0)
    qs, vs, status = phalanx.rollout(model, qpos, qvel, random_ctrl(model, (E, T), rng))
    np.testing.assert_array_equal(status, 0)
    assert np.abs(vs).max() < 100


def test_implicitfast_gradients_match_central_differences(implicitfast, rng):
    # the implicit step's adjoint through the drag's slope: the step's Jacobians and the
    # parameters' gradients, as in the Euler tests above
    check_step_jacobians(implicitfast, rng)
    for param in PARAMS:
        check_parameter_gradient(implicitfast, rng, param)


def test_medium_options_and_errors():
    # the options read and write, and the medium off when springs and dampers are both
    # disabled (as MuJoCo's mj_passive)
    model = phalanx.from_mujoco(corners_model())
    assert (model.density, model.viscosity) == (1.2e3, 0.05)
    np.testing.assert_array_equal(model.wind, [0.4, -0.3, 0.2])
    model.wind = [0, 0, 1]
    np.testing.assert_array_equal(model.wind, [0, 0, 1])
    with pytest.raises(ValueError, match="density must be finite and >= 0"):
        model.density = -1.0
    with pytest.raises(ValueError, match="wind must be finite"):
        model.wind = [0, np.nan, 0]
    disabled = corners_model()
    disabled.opt.disableflags |= (mujoco.mjtDisableBit.mjDSBL_SPRING
                                  | mujoco.mjtDisableBit.mjDSBL_DAMPER)
    assert phalanx.from_mujoco(disabled).density == 0


@pytest.mark.parametrize("integrator", ["euler", "implicitfast", "xpbd"])
def test_stokes_drag_decays_a_free_sphere(integrator):
    # A free sphere in a viscous medium without gravity (density 0: Stokes drag alone). Its
    # inertia box is the cube of side s = r sqrt(12 / 5) (I = 2 m r^2 / 5 on every axis), so
    # F = -k v with k = 3 pi mu s and tau = -c w with c = pi mu s^3. Explicit in Euler's and
    # XPBD's steps (held over the substeps): v' = (1 - h k / m) v; implicit in implicitfast's:
    # v' = v / (1 + h k / m); likewise w with c / I. Exact recurrences, so round-off only;
    # but XPBD takes its velocities from each substep's change of pose: the position's
    # difference (round-off of ~1e-12 relative over the steps) and the orientation quaternion's
    # first-order difference (off by up to 9e-4 here).
    r, mass, mu, h, steps = 0.1, 2.0, 0.5, 0.01, 100
    model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(f"""
      <mujoco><option timestep="{h}" viscosity="{mu}" gravity="0 0 0"/>
      <worldbody><body><freejoint/><geom size="{r}" mass="{mass}"/></body></worldbody>
      </mujoco>"""))
    if integrator == "xpbd":
        model.solver, model.xpbd_substeps = "xpbd", 4
    else:
        model.integrator = integrator
    inertia = 0.4 * mass * r * r
    s = r * np.sqrt(12 / 5)
    k, c = 3 * np.pi * mu * s, np.pi * mu * s ** 3
    v0 = np.array([0.3, -0.2, 0.5, 1.0, -2.0, 0.5])  # linear (world), angular (body frame)
    qs, vs, status = phalanx.rollout(model, model.qpos0[None], v0[None],
                                     np.zeros((1, steps, 0)))
    assert not status.any()
    if integrator == "implicitfast":
        lin, ang = 1 / (1 + h * k / mass), 1 / (1 + h * c / inertia)
    else:
        lin, ang = 1 - h * k / mass, 1 - h * c / inertia
    n = np.arange(1, steps + 1)[:, None]
    expected = np.concatenate([v0[:3] * lin ** n, v0[3:] * ang ** n], axis=1)
    rtol_lin, rtol_ang = (1e-10, 2e-3) if integrator == "xpbd" else (1e-12, 1e-12)
    np.testing.assert_allclose(vs[0, :, :3], expected[:, :3], rtol=rtol_lin, atol=1e-15)
    np.testing.assert_allclose(vs[0, :, 3:], expected[:, 3:], rtol=rtol_ang, atol=1e-15)
    # the drag matters: after a second the speed is well below its start
    assert np.linalg.norm(vs[0, -1, :3]) < 0.9 * np.linalg.norm(v0[:3])
