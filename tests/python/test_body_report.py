"""phalanx.body_report and phalanx.actuator_forces: MuJoCo's subtree_com, cinert, cvel,
cfrc_ext and qfrc_actuator at the same states.

cinert and cvel are held to MuJoCo's mj_forward on Gymnasium's humanoid and ant and on a scene
of several trees with a massless body. cfrc_ext is held to MuJoCo given the same forces: the
contact forces Phalanx finds (phalanx.contacts) are put on MuJoCo's bodies as xfrc_applied at
their centres of mass, which mj_rnePostConstraint reports in cfrc_ext as the contacts' wrench
about each tree's centre of mass."""

from __future__ import annotations

import os

import mujoco
import numpy as np
import pytest

import phalanx

GYM_ASSETS = os.path.join(os.path.dirname(__import__("gymnasium").__file__), "envs", "mujoco",
                          "assets")

# three trees: a hinge-slide-ball chain whose middle body is light, a free box, and a massless
# static body (its subtree's centre of mass is its own frame's, MuJoCo's rule)
TREES = """<mujoco><worldbody>
  <body pos="2 0.5 0.3" euler="0 30 0"/>
  <body pos="0 0 1"><joint type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
    <body pos="0.3 0 0"><joint type="slide" axis="1 0 0"/>
      <inertial pos="0.01 0 0" mass="1e-3" diaginertia="1e-6 1e-6 1e-6"/>
      <body pos="0.1 0 0"><joint type="ball"/>
        <geom type="box" size="0.05 0.1 0.02" pos="0.02 0.03 -0.01" euler="10 20 30"/></body>
    </body></body>
  <body pos="1 1 0.5"><freejoint/><geom type="box" size="0.1 0.2 0.05" pos="0.02 0 0.01"/></body>
</worldbody></mujoco>"""


def models():
    yield "trees", mujoco.MjModel.from_xml_string(TREES)
    for name in ("ant.xml", "humanoid.xml"):
        yield name, mujoco.MjModel.from_xml_path(os.path.join(GYM_ASSETS, name))


def random_states(mj, rng, E):
    qpos = np.repeat(mj.qpos0[None], E, 0) + 0.3 * rng.standard_normal((E, mj.nq))
    for j in range(mj.njnt):  # unit quaternions for the free and ball joints
        a = mj.jnt_qposadr[j]
        if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            a += 3
        if mj.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
            qpos[:, a:a + 4] /= np.linalg.norm(qpos[:, a:a + 4], axis=1, keepdims=True)
    return qpos, rng.standard_normal((E, mj.nv))


@pytest.mark.parametrize("name,mj", list(models()), ids=lambda x: x if isinstance(x, str) else "")
def test_subtree_com_cinert_cvel_match_mujoco(name, mj, rng):
    model = phalanx.from_mujoco(mj)
    E = 6
    qpos, qvel = random_states(mj, rng, E)
    report = phalanx.body_report(model, qpos, qvel)
    without = phalanx.body_report(model, qpos)
    assert "cvel" not in without and "cfrc_ext" not in report
    data = mujoco.MjData(mj)
    for e in range(E):
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_forward(mj, data)
        np.testing.assert_allclose(report["subtree_com"][e], data.subtree_com, rtol=0, atol=1e-12)
        np.testing.assert_allclose(report["cinert"][e], data.cinert, rtol=0, atol=1e-12)
        np.testing.assert_allclose(report["cvel"][e], data.cvel, rtol=0, atol=1e-11)
        np.testing.assert_array_equal(without["cinert"][e], report["cinert"][e])


# Gymnasium's ant dropped onto its floor: contacts of the feet (capsules) with the plane
def ant_on_the_floor(rng, E):
    mj = mujoco.MjModel.from_xml_path(os.path.join(GYM_ASSETS, "ant.xml"))
    qpos = np.repeat(mj.qpos0[None], E, 0)
    qpos[:, 7:] += 0.3 * rng.standard_normal((E, mj.nq - 7))
    qpos[:, 2] = 0.0  # lowered until the legs touch
    qvel = 0.5 * rng.standard_normal((E, mj.nv))
    return mj, qpos, qvel


def test_contact_wrenches_match_mujoco_for_the_same_forces(rng):
    mj, qpos, qvel = ant_on_the_floor(rng, 5)
    model = phalanx.from_mujoco(mj)
    E = qpos.shape[0]
    ctrl = rng.uniform(-1, 1, (E, mj.nu))
    found = phalanx.contacts(model, qpos, qvel, ctrl)
    assert np.all(found["count"] >= 2)
    report = phalanx.body_report(model, qpos, qvel, found)
    free = mujoco.MjModel.from_xml_path(os.path.join(GYM_ASSETS, "ant.xml"))
    free.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    data = mujoco.MjData(free)
    touched = 0
    for e in range(E):
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_kinematics(free, data)
        mujoco.mj_comPos(free, data)
        data.xfrc_applied[:] = 0
        for i in range(found["count"][e]):
            f = found["frame"][e, i].T @ found["force"][e, i]
            p = found["pos"][e, i]
            for geom, sign in zip(found["geom"][e, i], (-1.0, 1.0)):
                b = free.geom_bodyid[geom]
                data.xfrc_applied[b, :3] += sign * f
                data.xfrc_applied[b, 3:] += sign * np.cross(p - data.xipos[b], f)
        data.xfrc_applied[0] = 0
        mujoco.mj_forward(free, data)
        mujoco.mj_rnePostConstraint(free, data)
        scale = np.abs(data.cfrc_ext).max()
        np.testing.assert_allclose(report["cfrc_ext"][e], data.cfrc_ext, rtol=0,
                                   atol=1e-12 * scale)
        touched += np.count_nonzero(np.abs(data.cfrc_ext).max(axis=1) > 1e-3 * scale)
    assert touched >= 2 * E  # several bodies carry contact forces, not only the torso


def test_contact_counts_and_geoms_out_of_range_are_refused(rng):
    mj, qpos, qvel = ant_on_the_floor(rng, 2)
    model = phalanx.from_mujoco(mj)
    found = phalanx.contacts(model, qpos, qvel)
    bad = dict(found, count=found["count"].copy())
    bad["count"][1] = model.nconmax + 1
    with pytest.raises(ValueError, match="nconmax"):
        phalanx.body_report(model, qpos, qvel, bad)
    bad = dict(found, geom=found["geom"].copy())
    bad["geom"][0, 0, 1] = mj.ngeom
    with pytest.raises(ValueError, match="geom"):
        phalanx.body_report(model, qpos, qvel, bad)
    with pytest.raises(ValueError, match="frame"):
        phalanx.body_report(model, qpos, qvel, dict(found, frame=found["frame"][:, :, :2]))


@pytest.mark.parametrize("which", ["gymnasium-humanoid", "muscle-arm"])
def test_actuator_forces_match_mujoco(which, rng):
    """joint motors with gears (Gymnasium's humanoid), and muscles with activations on a hinge,
    a slide, a fixed and a spatial tendon beside a position servo (test_muscles' arm)"""
    if which == "muscle-arm":
        from test_muscles import ARM

        mj = mujoco.MjModel.from_xml_string(ARM)
    else:
        mj = mujoco.MjModel.from_xml_path(os.path.join(GYM_ASSETS, "humanoid.xml"))
    model = phalanx.from_mujoco(mj)
    E = 5
    qpos, qvel = random_states(mj, rng, E)
    ctrl = rng.uniform(-1, 1, (E, mj.nu))
    act = rng.uniform(0, 1, (E, mj.na)) if mj.na else None
    qfrc = phalanx.actuator_forces(model, qpos, qvel, ctrl, act=act)
    data = mujoco.MjData(mj)
    for e in range(E):
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[e], qvel[e], ctrl[e]
        if mj.na:
            data.act[:] = act[e]
        mujoco.mj_forward(mj, data)
        assert np.abs(data.qfrc_actuator).max() > 0
        np.testing.assert_allclose(qfrc[e], data.qfrc_actuator, rtol=0,
                                   atol=1e-12 * np.abs(data.qfrc_actuator).max())


def test_accelerations_and_internal_forces_match_mujoco_for_any_qacc(rng):
    """cacc and cfrc_int (mj_rnePostConstraint) for a given qacc, without contacts: several
    trees, a massless body, hinge, slide, ball and free joints"""
    mj = mujoco.MjModel.from_xml_string(TREES)
    model = phalanx.from_mujoco(mj)
    E = 5
    qpos, qvel = random_states(mj, rng, E)
    qacc = rng.standard_normal((E, mj.nv))
    report = phalanx.body_report(model, qpos, qvel, qacc=qacc)
    mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT  # no contact forces in it
    data = mujoco.MjData(mj)
    for e in range(E):
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_forward(mj, data)
        data.qacc[:] = qacc[e]
        mujoco.mj_rnePostConstraint(mj, data)
        np.testing.assert_allclose(report["cacc"][e], data.cacc, rtol=0, atol=1e-11)
        np.testing.assert_allclose(report["cfrc_int"][e], data.cfrc_int, rtol=0, atol=1e-11)
    with pytest.raises(ValueError, match="qvel"):
        phalanx.body_report(model, qpos, qacc=qacc)


def ant_with_sensors():
    """Gymnasium's ant with a rotated, offset site on the torso and on a lower leg, each
    carrying an accelerometer, a gyro, a velocimeter, a force and a torque sensor"""
    spec = mujoco.MjSpec.from_file(os.path.join(GYM_ASSETS, "ant.xml"))
    kinds = ("accelerometer", "gyro", "velocimeter", "force", "torque")
    for body, pos, euler in (("torso", [0.05, -0.02, 0.03], [0.3, -0.2, 0.5]),
                             ("aux_1", [0.1, 0.05, 0.0], [-0.4, 0.1, 1.2])):
        site = spec.body(body).add_site(name=f"s_{body}", pos=pos)
        site.quat = np.empty(4)
        mujoco.mju_euler2Quat(site.quat, np.array(euler), "xyz")
        for kind in kinds:
            spec.add_sensor(name=f"{kind}_{body}", objtype=mujoco.mjtObj.mjOBJ_SITE,
                            objname=f"s_{body}",
                            type=getattr(mujoco.mjtSensor, f"mjSENS_{kind.upper()}"))
    return spec.compile(), kinds


def test_sensors_of_the_constraint_forces_match_mujoco_for_the_same_forces(rng):
    """the ant on its floor with joint limits and contacts: qacc from forward_dynamics given
    qfrc_constraint, cacc and cfrc_int from body_report, and site_sensors' readings, against
    MuJoCo's mj_forward made to apply Phalanx's constraint forces (its own constraints
    disabled, the contact forces as xfrc_applied at the bodies' centres of mass and the rest of
    qfrc_constraint, the limits', as qfrc_applied)"""
    _, qpos, qvel = ant_on_the_floor(rng, 4)
    mj, kinds = ant_with_sensors()
    model = phalanx.from_mujoco(mj)
    E = qpos.shape[0]
    qpos[:, 7:] *= 3  # past the hips' and ankles' limits too
    ctrl = rng.uniform(-1, 1, (E, mj.nu))
    found = phalanx.contacts(model, qpos, qvel, ctrl)
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl, qfrc=found["qfrc_constraint"])
    report = phalanx.body_report(model, qpos, qvel, found, qacc=qacc)
    sites = [mj.site(f"s_{b}").id for b in ("torso", "aux_1")]
    read = phalanx.site_sensors(model, phalanx.kinematics(model, qpos, qvel), report, sites)
    mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    data = mujoco.MjData(mj)
    for e in range(E):
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos[e], qvel[e], ctrl[e]
        mujoco.mj_forward(mj, data)
        xfrc, through_contacts = np.zeros((mj.nbody, 6)), np.zeros(mj.nv)
        for i in range(found["count"][e]):
            f, p = found["frame"][e, i].T @ found["force"][e, i], found["pos"][e, i]
            for geom, on in zip(found["geom"][e, i], (-f, f)):
                b = mj.geom_bodyid[geom]
                if b > 0:
                    xfrc[b] += np.concatenate([on, np.cross(p - data.xipos[b], on)])
                    mujoco.mj_applyFT(mj, data, on, np.zeros(3), p, b, through_contacts)
        limits = found["qfrc_constraint"][e] - through_contacts
        assert np.abs(limits).max() > 1  # the limits take part
        data.xfrc_applied[:], data.qfrc_applied[:] = xfrc, limits
        mujoco.mj_forward(mj, data)
        scale = np.abs(data.qacc).max()
        np.testing.assert_allclose(qacc[e], data.qacc, rtol=0, atol=1e-10 * scale)
        for name in ("cacc", "cfrc_int"):
            ref = getattr(data, name)
            np.testing.assert_allclose(report[name][e], ref, rtol=0,
                                       atol=1e-10 * np.abs(ref).max())
        for k, s in enumerate(sites):
            for kind in kinds:
                ref = data.sensor(f"{kind}_{mj.body(mj.site_bodyid[s]).name}").data
                np.testing.assert_allclose(read[kind][e, k], ref, rtol=0,
                                           atol=1e-10 * max(1.0, np.abs(ref).max()))


def test_site_sensors_refuse_what_they_cannot_read(rng):
    mj, _ = ant_with_sensors()
    model = phalanx.from_mujoco(mj)
    qpos, qvel = random_states(mj, rng, 2)
    body = phalanx.kinematics(model, qpos, qvel)
    with pytest.raises(ValueError, match="nsite"):
        phalanx.site_sensors(model, body, phalanx.body_report(model, qpos, qvel), [mj.nsite])
    with pytest.raises(ValueError, match="given qvel"):
        phalanx.site_sensors(model, body, phalanx.body_report(model, qpos), [0])
    # without qacc, only the velocity sensors
    read = phalanx.site_sensors(model, body, phalanx.body_report(model, qpos, qvel), [0])
    assert set(read) == {"gyro", "velocimeter"}
