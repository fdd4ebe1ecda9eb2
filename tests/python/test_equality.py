"""Equality constraints (connect, weld, joint and tendon couplings) as hard bilateral rows: what
they hold over long runs, that a weld moves its body as a rigid attachment would, the active
flag, MuJoCo's site semantics, and gradients against central differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import chained_vjp

# An arm (two hinges and a slide) hanging from the world, a free box, a two-hinge pendulum, two
# fixed tendons and two spatial ones from a site above the arm to its tip, one straight, one
# wrapping over a sphere fixed in the world; the equality under test goes into %s.
SCENE = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <body name="l1" pos="0 0 1"><joint name="a" type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.04"/>
    <body name="l2" pos="0 0 -0.3"><joint name="b" type="hinge" axis="0 1 0.3" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.05 0 -0.3" size="0.04"/>
      <site name="tip" pos="0.07 0.1 -0.32" quat="0.9 0.1 0.2 0.3"/>
      <body name="l3" pos="0.05 0 -0.3"><joint name="s" type="slide" axis="1 0 0" damping="10"/>
        <geom type="box" size="0.05 0.04 0.03"/></body></body></body>
  <body name="box" pos="0.12 0.1 0.33"><freejoint/><geom type="box" size="0.05 0.06 0.07"/>
    <site name="box_site" pos="0 0 0" quat="0.9 0.1 0.2 0.3"/></body>
  <body name="p" pos="0.2 0.3 1"><joint name="c" type="hinge" axis="1 0 0" damping="0.05"/>
    <joint name="d" type="hinge" axis="0 1 0" damping="0.05"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 -0.2" size="0.03"/></body>
  <site name="top" pos="0.3 0.05 1.3"/><geom name="knob" type="sphere" size="0.05" pos="0.22 0.06 1.1"/>
</worldbody><tendon>
  <fixed name="t1"><joint joint="a" coef="0.5"/><joint joint="s" coef="1"/></fixed>
  <fixed name="t2"><joint joint="c" coef="1"/><joint joint="b" coef="-0.3"/></fixed>
  <spatial name="sp"><site site="top"/><site site="tip"/></spatial>
  <spatial name="sw"><site site="top"/><geom geom="knob"/><site site="tip"/></spatial>
</tendon><equality>%s</equality>
<actuator><motor joint="a"/><motor joint="c"/><motor joint="s"/></actuator></mujoco>"""

EQUALITIES = {
    "connect": '<connect body1="box" body2="l3" anchor="0.02 -0.03 0.01"/>',
    "connect_world": '<connect body1="l3" body2="world" anchor="0.05 0 0"/>',
    "weld": '<weld body1="box" body2="l2" relpose="0.07 0.1 -0.32 0.9 0.1 0.2 0.3" '
            'anchor="0.01 0.02 0.03"/>',
    "joint": '<joint joint1="c" joint2="a" polycoef="0.1 0.5 0.3 -0.2 0.4"/>',
    "joint_constant": '<joint joint1="d" polycoef="0.2 0 0 0 0"/>',
    "tendon": '<tendon tendon1="t2" tendon2="t1" polycoef="0.05 -0.7 0.4 0.3 -0.5"/>',
    # a wrapping spatial tendon coupled to a fixed one, a fixed one to a straight spatial one
    "tendon_spatial": '<tendon tendon1="sw" tendon2="t1" polycoef="0 0.6 0.2 0 0"/>',
    "tendon_of_spatial": '<tendon tendon1="t2" tendon2="sp" polycoef="0.02 -0.8 0.3 0 0"/>',
}


def scene(equality: str, **options) -> tuple[mujoco.MjModel, phalanx.Model]:
    mj = mujoco.MjModel.from_xml_string(SCENE % equality)
    model = phalanx.from_mujoco(mj)
    model.lcp_solver = options.get("lcp_solver", "pgs_stabilized")
    return mj, model


CONNECT, WELD = int(mujoco.mjtEq.mjEQ_CONNECT), int(mujoco.mjtEq.mjEQ_WELD)


def positions(mj: mujoco.MjModel, data: mujoco.MjData, q) -> mujoco.MjData:
    """data with MuJoCo's frames and tendon lengths at the configuration q"""
    data.qpos[:] = q
    mujoco.mj_kinematics(mj, data)
    mujoco.mj_comPos(mj, data)
    mujoco.mj_tendon(mj, data)
    return data


def residuals(mj: mujoco.MjModel, qpos: np.ndarray) -> np.ndarray:
    """|p1 - p2| of a connect or weld's anchors and the largest entry of F1 - F2 of a weld's
    frames, or |L1 - L1ref - P(L2 - L2ref)| of a joint or tendon coupling, per state, by MuJoCo's
    kinematics"""
    data = mujoco.MjData(mj)
    out = []
    for q in qpos:
        positions(mj, data, q)
        row = []
        for i in range(mj.neq):
            eq, o1, o2 = mj.eq_data[i], mj.eq_obj1id[i], mj.eq_obj2id[i]
            kind = int(mj.eq_type[i])
            if kind in (CONNECT, WELD):
                if int(mj.eq_objtype[i]) == int(mujoco.mjtObj.mjOBJ_SITE):
                    p1, p2 = data.site_xpos[o1], data.site_xpos[o2]
                    f1, f2 = data.site_xmat[o1], data.site_xmat[o2]
                else:
                    weld = kind == WELD
                    a1, a2 = (eq[3:6], eq[0:3]) if weld else (eq[0:3], eq[3:6])
                    p1 = data.xpos[o1] + data.xmat[o1].reshape(3, 3) @ a1
                    p2 = data.xpos[o2] + data.xmat[o2].reshape(3, 3) @ a2
                    rel = np.zeros(9)
                    mujoco.mju_quat2Mat(rel, eq[6:10])
                    f1 = data.xmat[o1].reshape(3, 3) @ rel.reshape(3, 3)
                    f2 = data.xmat[o2]
                row.append(np.linalg.norm(p1 - p2))
                if kind == WELD:
                    row.append(np.abs(np.reshape(f1, (3, 3)) - np.reshape(f2, (3, 3))).max())
            else:
                joint = kind == int(mujoco.mjtEq.mjEQ_JOINT)

                def x(o):
                    if joint:
                        adr = mj.jnt_qposadr[o]
                        return data.qpos[adr] - mj.qpos0[adr]
                    return data.ten_length[o] - mj.tendon_length0[o]

                x2 = x(o2) if o2 >= 0 else 0.0
                row.append(abs(x(o1) - np.polyval(eq[4::-1], x2)))
        out.append(row)
    return np.array(out)


def residual_coordinates(mj: mujoco.MjModel, qpos, tendon: int) -> np.ndarray:
    """the tendon's length less its value at qpos0 per state, by MuJoCo's kinematics"""
    data = mujoco.MjData(mj)
    return np.array([positions(mj, data, q).ten_length[tendon] - mj.tendon_length0[tendon]
                     for q in qpos])


def settled(model: phalanx.Model, mj: mujoco.MjModel, steps: int = 300):
    """a state on the constraints: from qpos0 at rest without gravity, a few hundred steps of
    the rows' drift correction (qpos0 need not satisfy a coupling or a relpose)"""
    gravity = model.gravity
    model.gravity = [0, 0, 0]
    qs, vs, status = phalanx.rollout(model, mj.qpos0[None], np.zeros((1, model.nv)),
                                     np.zeros((1, steps, model.nu)))
    model.gravity = gravity
    assert not status.any()
    return qs[:, -1], np.zeros((1, model.nv))


def test_a_driven_four_bar_loop_stays_closed():
    # crank, coupler and rocker closed by a connect at the coupler's tip, a sinusoidal torque on
    # the crank: over 10 s the loop's gap stays below 1e-6 m (the rows' correction removes the
    # fraction erp of the gap each step and their curvature term leaves O(dt^3) per step)
    xml = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
      <body name="crank" pos="0 0 1"><joint name="a" type="hinge" axis="0 1 0" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02"/>
        <body name="coupler" pos="0 0 -0.3"><joint type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0.5 0 0.1" size="0.02"/></body></body>
      <body name="rocker" pos="0.5 0 1"><joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02"/></body>
    </worldbody><equality><connect body1="coupler" body2="rocker" anchor="0.5 0 0.1"/>
    </equality><actuator><motor joint="a"/></actuator></mujoco>"""
    mj = mujoco.MjModel.from_xml_string(xml)
    model = phalanx.from_mujoco(mj)
    assert model.neq == 1 and model.eq_type[0] == CONNECT
    model.lcp_solver = "pgs_stabilized"
    T = 5000
    t = np.arange(T) * model.timestep
    ctrl = (1.5 * np.sin(3 * t))[None, :, None]
    qs, _, status = phalanx.rollout(model, np.zeros((1, 3)), np.zeros((1, 3)), ctrl)
    assert not status.any()
    assert np.ptp(qs[0, :, 0]) > 1.0  # the crank swings through more than a radian
    gap = residuals(mj, qs[0])
    assert gap.max() < 1e-6
    # without the constraint the tips part
    free = mujoco.MjModel.from_xml_string(xml.replace("<connect", "<!-- <connect")
                                          .replace('0.1"/>\n    </equality>',
                                                   '0.1"/> -->\n    </equality>'))
    assert free.neq == 0
    qf, _, _ = phalanx.rollout(phalanx.from_mujoco(free), np.zeros((1, 3)), np.zeros((1, 3)),
                               ctrl)
    assert residuals(mj, qf[0]).max() > 0.1


def test_a_welded_body_moves_as_a_rigid_attachment():
    # a free box welded to the arm's second link against the same box as a child body of that
    # link: the weld holds position and orientation within 1e-6 while the arm swings under
    # gentle torques, and the joint angles follow the rigid model's (the same dynamics,
    # integrated in other coordinates)
    arm = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
      <body name="l1" pos="0 0 1"><joint name="a" type="hinge" axis="0 1 0" damping="0.2"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.04"/>
        <body name="l2" pos="0 0 -0.3"><joint name="b" type="hinge" axis="0 1 0.3"
            damping="0.2"/>
          <geom type="capsule" fromto="0 0 0 0.05 0 -0.3" size="0.04"/>%s</body></body>%s
    </worldbody>%s<actuator><motor joint="a"/><motor joint="b"/></actuator></mujoco>"""
    box = '<geom type="box" size="0.05 0.06 0.07" mass="2"/>'
    rigid = mujoco.MjModel.from_xml_string(
        arm % (f'<body name="box" pos="0.1 0.05 -0.32">{box}</body>', "", ""))
    welded = mujoco.MjModel.from_xml_string(
        arm % ("", f'<body name="box" pos="0.1 0.05 0.38"><freejoint/>{box}</body>',
               '<equality><weld body1="box" body2="l2"/></equality>'))
    T = 5000
    t = np.arange(T) * 0.002
    ctrl = np.stack([2.0 * np.sin(2 * t), 0.3 * np.cos(3 * t)], -1)[None]
    qr, _, _ = phalanx.rollout(phalanx.from_mujoco(rigid), np.zeros((1, 2)), np.zeros((1, 2)),
                               ctrl)
    model = phalanx.from_mujoco(welded)
    model.lcp_solver = "pgs_stabilized"
    qw, _, status = phalanx.rollout(model, welded.qpos0[None], np.zeros((1, model.nv)), ctrl)
    assert not status.any()
    assert np.ptp(qr[0, :, 0]) > 0.5
    gap = residuals(welded, qw[0])
    assert gap.max() < 1e-6
    np.testing.assert_allclose(qw[0, :, :2], qr[0], rtol=0, atol=1e-3)


def path_curvature(mj: mujoco.MjModel, qpos, qvel, tendon: int, h: float = 1e-4) -> np.ndarray:
    """d^2/ds^2 of the tendon's length along q(s) = qpos integrated by s qvel (its curvature at
    qacc = 0, J_dot qvel), by central differences of MuJoCo's tendon lengths, per state"""
    data = mujoco.MjData(mj)
    out = []
    for q, v in zip(qpos, qvel):
        length = []
        for s in (-h, 0.0, h):
            qs = np.array(q)
            mujoco.mj_integratePos(mj, qs, v, s)
            length.append(positions(mj, data, qs).ten_length[tendon])
        out.append((length[0] - 2 * length[1] + length[2]) / h**2)
    return np.array(out)


@pytest.mark.parametrize("kind", ["joint", "tendon", "joint_constant", "tendon_spatial",
                                  "tendon_of_spatial"])
def test_couplings_hold_while_driven(kind):
    # the motors drive the arm and the pendulum for 10 s; the couplings of joints and fixed
    # tendons hold within 1e-6. A spatial tendon's row leaves out the curvature of the tendon's
    # path (kappa = J_dot qvel), so each step adds dt^2/2 kappa (times P'(x2) for the second
    # tendon) to the residual and the drift correction takes the fraction erp of it out: the
    # residual stays below dt^2/2 max|kappa P'| / erp, a few microns here
    mj, model = scene(EQUALITIES[kind])
    qpos, qvel = settled(model, mj)
    assert residuals(mj, qpos).max() < 1e-6
    T = 5000
    t = np.arange(T) * model.timestep
    ctrl = np.stack([1.0 * np.sin(2 * t), 0.1 * np.cos(3 * t), 0.5 * np.sin(t)], -1)[None]
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    assert not (status & phalanx.STATUS_STOP_MASK).any(), np.unique(status)
    assert np.ptp(qs[0, :, 0]) > 0.2  # the arm moved
    gap = residuals(mj, qs[0]).max()
    o1, o2 = int(mj.eq_obj1id[0]), int(mj.eq_obj2id[0])
    spatial = [o for o in (o1, o2) if kind.startswith("tendon") and o >= 0 and
               mj.tendon_type[o] != mujoco.mjtTendon.mjTENDON_FIXED]
    if not spatial:
        assert gap < 1e-6
        return
    (o,) = spatial
    if mj.tendon(o).name == "sw":  # it wraps over the knob all the way (longer than straight)
        length = phalanx.kinematics(model, qs[0, ::50])["ten_length"]
        assert (length[:, o] - length[:, mj.tendon("sp").id]).min() > 1e-3
    kappa = path_curvature(mj, qs[0, ::5], vs[0, ::5], o)
    if o == o2:  # the second tendon's curvature enters through P'(x2)
        x2 = residual_coordinates(mj, qs[0, ::5], o2)
        kappa = kappa * np.polyval(np.polyder(mj.eq_data[0, 4::-1]), x2)
    erp = 0.2  # the drift correction's rate, the model's default
    bound = model.timestep**2 / 2 * np.abs(kappa).max() / erp
    assert 1e-7 < gap < 1.2 * bound, (gap, bound)


def test_inactive_equalities_leave_the_motion_alone(rng):
    # MJCF active="false", or eq_active switched off, steps as if the constraint were absent
    mj, model = scene(EQUALITIES["joint"].replace("/>", ' active="false"/>'))
    assert list(model.eq_active) == [0]
    _, plain = scene("")
    qpos = mj.qpos0[None] + 0.1 * rng.standard_normal((1, model.nq)) * (np.arange(model.nq) < 3)
    qvel = rng.standard_normal((1, model.nv))
    ctrl = rng.uniform(-1, 1, (1, 200, model.nu))
    q1, v1, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    q0, v0, _ = phalanx.rollout(plain, qpos, qvel, ctrl)
    np.testing.assert_array_equal(q1, q0)
    np.testing.assert_array_equal(v1, v0)
    model.eq_active = [1]
    q2, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    assert residuals(mj, q2[0, -10:]).max() < 1e-4 < residuals(mj, q1[0, -10:]).max()
    model.eq_active = np.array([0])
    q3, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    np.testing.assert_array_equal(q3, q0)
    with pytest.raises(ValueError, match="eq_active needs 1 entries"):
        model.eq_active = [1, 1]
    with pytest.raises(ValueError, match="0 or 1"):
        model.eq_active = [2]


def test_site_semantics_convert_to_the_sites_frames(rng):
    # MuJoCo's connect and weld between sites take the sites' positions (and a weld their
    # orientations): the converted rows hold the sites together
    mj, model = scene('<weld site1="box_site" site2="tip"/>')
    assert mj.eq_objtype[0] == mujoco.mjtObj.mjOBJ_SITE
    np.testing.assert_array_equal(model.eq_obj1id, [mj.body("box").id])
    np.testing.assert_array_equal(model.eq_obj2id, [mj.body("l2").id])
    np.testing.assert_array_equal(model.eq_anchor[0], np.r_[mj.site("box_site").pos,
                                                            mj.site("tip").pos])
    qpos, _ = settled(model, mj, 500)
    # then hanging under gravity until the swing has died down
    qs, _, _ = phalanx.rollout(model, qpos, np.zeros((1, model.nv)),
                               np.zeros((1, 3000, model.nu)))
    qpos = qs[:, -1]
    T = 2000
    t = np.arange(T) * model.timestep
    ctrl = np.stack([0.5 * np.sin(2 * t), 0.1 * np.cos(3 * t), 0.5 * np.sin(t)], -1)[None]
    qs, _, status = phalanx.rollout(model, qpos, np.zeros((1, model.nv)), ctrl)
    assert not status.any()
    assert residuals(mj, qs[0]).max() < 1e-6


@pytest.mark.parametrize("kind", list(EQUALITIES))
@pytest.mark.parametrize("name", ["qpos", "qvel", "ctrl"])
def test_gradients_match_central_differences(rng, kind, name):
    # 20 steps in double from a state on the constraint, random torques
    mj, model = scene(EQUALITIES[kind])
    qpos, qvel = settled(model, mj, 200)
    qvel = 0.3 * rng.standard_normal((1, model.nv))  # the rows take out what violates them
    T = 20
    ctrl = rng.uniform(-0.5, 0.5, (1, T, model.nu))
    wq, wv = rng.standard_normal((1, model.nq)), rng.standard_normal((1, model.nv))
    grads = chained_vjp(model, qpos, qvel, ctrl, wq, wv)

    def loss(q=qpos, v=qvel, u=ctrl):
        qs, vs, _ = phalanx.rollout(model, q, v, u)
        return float((wq * qs[:, -1]).sum() + (wv * vs[:, -1]).sum())

    x0 = {"qpos": qpos, "qvel": qvel, "ctrl": ctrl}[name]
    d = rng.standard_normal(x0.shape)
    if name == "qpos":
        d[:, 6:10] = 0  # the box's quaternion: its tangent is the qvel direction's business
    h = 1e-6
    key = {"qpos": "q", "qvel": "v", "ctrl": "u"}[name]
    fd = (loss(**{key: x0 + h * d}) - loss(**{key: x0 - h * d})) / (2 * h)
    ad = float((grads[name] * d).sum())
    assert ad == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_step_jacobians_through_weld_and_connect_rows(rng):
    # the Jacobians' reverse passes (several seeds at once) against central differences
    mj, model = scene(EQUALITIES["weld"] + EQUALITIES["connect_world"])
    qpos, _ = settled(model, mj, 200)
    qvel = 0.3 * rng.standard_normal((1, model.nv))
    ctrl = rng.uniform(-0.5, 0.5, (1, model.nu))
    jac = phalanx.step_jacobians(model, qpos, qvel, ctrl)
    central = phalanx.step_jacobians_fd(model, qpos, qvel, ctrl, method="central")
    for key, ref in central.items():
        if key.endswith("qfrc"):
            continue
        scale = np.abs(ref).max() + 1e-12
        np.testing.assert_allclose(jac[key], ref, rtol=0, atol=1e-6 * scale, err_msg=key)


GRIPPER = """<robot name="gripper">
  <link name="base"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
    ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="left"><inertial><origin xyz="0 0.02 0"/><mass value="0.1"/><inertia ixx="1e-4"
    iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="right"><inertial><origin xyz="0 -0.02 0"/><mass value="0.2"/><inertia ixx="1e-4"
    iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="slide" type="prismatic"><parent link="base"/><child link="left"/>
    <axis xyz="0 1 0"/><limit lower="-1" upper="1"/></joint>
  <joint name="follow" type="prismatic"><parent link="base"/><child link="right"/>
    <origin xyz="0 0 0.1"/><axis xyz="0 1 0"/><limit lower="-1" upper="1"/>
    <mimic joint="slide" multiplier="-1.5" offset="0.01"/></joint>
</robot>"""


def test_a_urdf_mimic_joint_follows_its_leader(tmp_path):
    # URDF's <mimic>: follow = -1.5 slide + 0.01, held while a force drives the leader; the
    # follower's inertia loads the leader's motion as the coupling's energy says
    path = tmp_path / "gripper.urdf"
    path.write_text(GRIPPER)
    model = phalanx.load_model(path)
    model.lcp_solver = "pgs_stabilized"
    assert model.neq == 1 and list(model.eq_polycoef[0]) == [0.01, -1.5, 0, 0, 0]
    model.gravity = [0, 0, 0]
    qpos = np.array([[0.0, 0.01]])
    force = 0.3
    qfrc = np.array([[force, 0.0]])
    q, _, status = phalanx.step(model, qpos, np.zeros((1, 2)), np.zeros((1, 0)), nstep=500,
                                qfrc=qfrc)
    assert not status.any()
    assert abs(q[0, 1] - (-1.5 * q[0, 0] + 0.01)) < 1e-9
    # one dof with mass m1 + 1.5^2 m2: slide = F t^2 / (2 m_eff)
    t = 500 * model.timestep
    m_eff = 0.1 + 1.5 ** 2 * 0.2
    assert q[0, 0] == pytest.approx(force * t * (t + model.timestep) / (2 * m_eff), rel=1e-9)
