"""The MJCF loader (MuJoCo's compiler in libmujoco, then from_mujoco) against the mujoco package.

Each model is loaded by phalanx.load_model and by mujoco.MjModel.from_xml_path, and every array
the loader fills is compared with MuJoCo's field of the same meaning (the conversion's own
reading of mjModel: disabled flags, gears, limits). Values must agree to RTOL relative to the
magnitude of their row (a body's position, a joint's range, a body's inertia tensor).

Inertias are compared as the full tensor in the body frame, R(iquat) diag(inertia) R(iquat)^T,
because principal axes are not unique when moments coincide; geom quaternions up to sign.
"""

import pathlib
import shutil

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import MUJOCO_SAMPLES, dm_control_suite_dir, gymnasium_assets_dir

RTOL = 1e-10

# MuJoCo's compiler warnings (settotalmass is deprecated) go here instead of MUJOCO_LOG.TXT in
# the working directory
MUJOCO_WARNINGS = []
mujoco.set_mju_user_warning(MUJOCO_WARNINGS.append)

REPO = pathlib.Path(__file__).resolve().parents[2]
MUJOCO_MODELS = MUJOCO_SAMPLES
GYM_ASSETS = gymnasium_assets_dir()
DM_SUITE = dm_control_suite_dir()

GYM_MODELS = ["ant", "half_cheetah", "hopper", "walker2d", "humanoid", "humanoidstandup",
              "swimmer", "inverted_pendulum", "inverted_double_pendulum", "reacher"]
DM_MODELS = ["cheetah", "walker", "hopper", "humanoid", "cartpole", "acrobot", "pendulum",
             "point_mass"]

MODELS = (
    [pytest.param(MUJOCO_MODELS / "humanoid" / "humanoid.xml", id="mujoco-humanoid")]
    + [pytest.param(REPO / "examples" / "models" / f, id=f"phalanx-{f[:-4]}")
       for f in ["cartpole.xml", "double_pendulum.xml"]]
    + [pytest.param(GYM_ASSETS / f"{n}.xml", id=f"gym-{n}") for n in GYM_MODELS]
    + [pytest.param(DM_SUITE / f"{n}.xml", id=f"dm-{n}") for n in DM_MODELS]
)


def quat_to_mat(q):
    """Rotation matrices of unit quaternions (w, x, y, z), shape (n, 4) -> (n, 3, 3)."""
    w, x, y, z = q.T
    return np.stack([
        np.stack([w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z], -1),
    ], -2)


def inertia_tensors(iquat, inertia):
    """Inertia tensors in the body frame, R diag(inertia) R^T, shape (nbody, 3, 3)."""
    r = quat_to_mat(np.asarray(iquat))
    return r @ (np.asarray(inertia)[:, :, None] * np.swapaxes(r, 1, 2))


def row_error(ours, ref):
    """Largest |ours - ref| per row, relative to the row's largest |ref| (1 for zero rows)."""
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape, f"shape {ours.shape} != {ref.shape}"
    if ref.size == 0:
        return np.zeros(0)
    ours = ours.reshape(ref.shape[0], -1)
    ref = ref.reshape(ref.shape[0], -1)
    scale = np.abs(ref).max(axis=1)
    scale[scale == 0] = 1
    return np.abs(ours - ref).max(axis=1) / scale


class Comparison:
    """Collects each array's worst relative error and reports all failures at once."""

    def __init__(self):
        self.errors = {}

    def close(self, name, ours, ref):
        err = row_error(ours, ref)
        self.errors[name] = float(err.max(initial=0.0))

    def close_up_to_sign(self, name, ours, ref):
        err = np.minimum(row_error(ours, ref), row_error(-np.asarray(ours), ref))
        self.errors[name] = float(err.max(initial=0.0))

    def equal(self, name, ours, ref):
        ours, ref = np.asarray(ours), np.asarray(ref)
        assert ours.shape == ref.shape, f"{name}: shape {ours.shape} != {ref.shape}"
        self.errors[name] = 0.0 if np.array_equal(ours, ref) else np.inf

    def check(self):
        bad = {k: v for k, v in self.errors.items() if not v <= RTOL}
        assert not bad, f"arrays differing from MuJoCo beyond {RTOL}: {bad}"
        return max(self.errors.values(), default=0.0)


def compare(path):
    ours = phalanx.load_model(str(path))
    ref = mujoco.MjModel.from_xml_path(str(path))
    c = Comparison()
    disabled = ref.opt.disableflags
    no_contact = bool(disabled & (mujoco.mjtDisableBit.mjDSBL_CONTACT
                                  | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT))
    no_limit = bool(disabled & (mujoco.mjtDisableBit.mjDSBL_LIMIT
                                | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT))

    # counts and options
    for n in ["nq", "nv", "nu", "nbody", "njnt", "ngeom"]:
        assert getattr(ours, n) == getattr(ref, n), n
    c.close("timestep", [[ours.timestep]], [[ref.opt.timestep]])
    gravity = ref.opt.gravity * (not disabled & mujoco.mjtDisableBit.mjDSBL_GRAVITY)
    c.close("gravity", np.asarray(ours.gravity)[None], gravity[None])
    for kind, obj, n in [("body", mujoco.mjtObj.mjOBJ_BODY, ref.nbody),
                         ("joint", mujoco.mjtObj.mjOBJ_JOINT, ref.njnt),
                         ("geom", mujoco.mjtObj.mjOBJ_GEOM, ref.ngeom),
                         ("actuator", mujoco.mjtObj.mjOBJ_ACTUATOR, ref.nu)]:
        names = [mujoco.mj_id2name(ref, obj, i) or "" for i in range(n)]
        assert list(getattr(ours, f"{kind}_names")) == names, f"{kind}_names"

    # bodies
    for f in ["body_parentid", "body_rootid", "body_jntnum", "body_jntadr", "body_dofnum",
              "body_dofadr", "body_geomnum", "body_geomadr"]:
        c.equal(f, getattr(ours, f), getattr(ref, f))
    for f in ["body_pos", "body_quat", "body_ipos", "body_mass"]:
        c.close(f, getattr(ours, f), getattr(ref, f))
    c.close("body inertia tensor", inertia_tensors(ours.body_iquat, ours.body_inertia),
            inertia_tensors(ref.body_iquat, ref.body_inertia))

    # joints and dofs
    for f in ["jnt_type", "jnt_bodyid", "jnt_qposadr", "jnt_dofadr", "dof_bodyid", "dof_jntid",
              "dof_parentid"]:
        c.equal(f, getattr(ours, f), getattr(ref, f))
    c.equal("jnt_limited", ours.jnt_limited, ref.jnt_limited * (not no_limit))
    for f in ["jnt_pos", "jnt_axis", "jnt_range", "jnt_stiffness", "dof_damping",
              "dof_armature"]:
        c.close(f, getattr(ours, f), getattr(ref, f))
    c.close("qpos0", ours.qpos0[:, None], ref.qpos0[:, None])
    c.close("qpos_spring", ours.qpos_spring[:, None], ref.qpos_spring[:, None])

    # geoms
    for f in ["geom_type", "geom_bodyid", "geom_condim"]:
        c.equal(f, getattr(ours, f), getattr(ref, f))
    c.equal("geom_contype", ours.geom_contype, ref.geom_contype * (not no_contact))
    c.equal("geom_conaffinity", ours.geom_conaffinity, ref.geom_conaffinity * (not no_contact))
    for f in ["geom_size", "geom_pos", "geom_friction"]:
        c.close(f, getattr(ours, f), getattr(ref, f))
    c.close("geom_rbound", ours.geom_rbound[:, None], ref.geom_rbound[:, None])
    c.close_up_to_sign("geom_quat", ours.geom_quat, ref.geom_quat)

    # contact exclusions, as unordered body pairs (MuJoCo sorts them)
    ref_pairs = sorted((s >> 16, s & 0xFFFF) for s in ref.exclude_signature)
    our_pairs = sorted(tuple(sorted(p)) for p in np.asarray(ours.exclude_bodies).reshape(-1, 2))
    assert our_pairs == ref_pairs

    # actuators: MuJoCo's first gear component and its joint or (fixed) tendon; tendons: the
    # joints and coefficients of each
    c.close("actuator_gear", np.asarray(ours.actuator_gear)[:, None], ref.actuator_gear[:, :1])
    c.equal("actuator_trntype", ours.actuator_trntype,
            (ref.actuator_trntype == mujoco.mjtTrn.mjTRN_TENDON).astype(np.int32))
    c.equal("actuator_trnid", ours.actuator_trnid, ref.actuator_trnid[:, 0])
    c.equal("wrap_objid", ours.wrap_objid, ref.wrap_objid)
    c.close("wrap_prm", np.asarray(ours.wrap_prm)[:, None], ref.wrap_prm[:, None])
    c.close("actuator_ctrlrange", ours.actuator_ctrlrange, ref.actuator_ctrlrange)
    clamp = not disabled & mujoco.mjtDisableBit.mjDSBL_CLAMPCTRL
    c.equal("actuator_ctrllimited", ours.actuator_ctrllimited, ref.actuator_ctrllimited * clamp)

    return c.check()


@pytest.mark.parametrize("path", MODELS)
def test_model_matches_mujoco(path):
    worst = compare(path)
    print(f"{path.name}: worst relative difference {worst:.3g}")


def test_generated_dm_control_swimmer(tmp_path):
    """The 6-link swimmer that dm_control generates from swimmer.xml."""
    from dm_control.suite import swimmer

    xml, _ = swimmer.get_model_and_assets(6)
    shutil.copytree(DM_SUITE / "common", tmp_path / "common")
    path = tmp_path / "swimmer6.xml"
    path.write_bytes(xml)
    worst = compare(path)
    print(f"swimmer6: worst relative difference {worst:.3g}")


# Features the models above leave out: nested default classes with partial sizes, childclass,
# frames, every orientation form, eulerseq, fullinertia, an inertial orientation, geom groups
# outside inertiagrouprange, boundinertia, ball and free joints, springref, a tendon-coupled
# motor, contact exclusion.
FEATURES_XML = """\
<mujoco model="features">
  <compiler angle="degree" eulerseq="zyX" inertiagrouprange="0 3" boundinertia="1e-6"/>
  <option timestep="0.004" gravity="0 0.5 -9" integrator="RK4"/>
  <default>
    <joint damping="0.3" armature="0.01"/>
    <geom size="0.05 0.1 0.02" friction="0.7"/>
    <default class="a">
      <joint stiffness="2" springref="10"/>
      <geom type="ellipsoid" size="0.03" density="700"/>
      <default class="b">
        <geom type="cylinder" size=".04 .08"/>
        <joint type="slide" axis="1 1 0" range="-.2 .3"/>
      </default>
    </default>
    <motor ctrlrange="-2 2" gear="3 1 1"/>
  </default>
  <worldbody>
    <geom type="plane" size="1 1 .1" zaxis="0.1 0 1"/>
    <body name="b1" pos="0.1 0.2 0.3" xyaxes="1 1 0 -1 1 0.2" childclass="a">
      <joint name="j1" type="ball"/>
      <geom name="g1" pos="0.1 0 0" axisangle="1 2 3 40"/>
      <geom name="g2" class="b" fromto="0 0 0 0.1 0.2 0.3"/>
      <geom name="g3" type="box" euler="10 20 30" pos="0 0.1 0" group="4"/>
      <frame pos="0 0 0.2" euler="0 0 30">
        <body name="b2" pos="0.2 0 0" quat="1 0.1 0 0">
          <joint name="j2" class="b" pos="0.01 0.02 0"/>
          <joint name="j3" type="hinge" axis="0 1 0" ref="15" range="-30 60"/>
          <geom name="g4" class="b" type="box" size=".02 .03 .04" mass="0.3"/>
          <frame zaxis="1 0 0">
            <geom name="g5" type="capsule" size=".01 .05" pos="0 0 .1"/>
          </frame>
        </body>
      </frame>
      <body name="b3" pos="0 -0.3 0">
        <inertial pos="0.01 0.02 0.03" mass="0.5" fullinertia="0.02 0.025 0.03 0.001 -0.002 0.003"/>
        <joint name="j4" axis="1 0 0" springref="20"/>
        <geom name="g6" type="sphere" size="0.05"/>
        <body name="b4" pos="0 0 -0.1">
          <inertial pos="0 0 0" mass="0.1" diaginertia="1e-4 2e-4 2.5e-4" euler="10 0 0"/>
          <joint name="j5" type="slide" axis="0 0 1" ref="0.05" springref="0.02"/>
        </body>
      </body>
    </body>
    <body name="free" pos="1 0 1" euler="5 10 15">
      <freejoint name="root"/>
      <geom name="g7" type="box" size="0.1 0.2 0.3" pos="0.05 0 0" euler="0 90 0"/>
      <geom name="g8" type="sphere" size="0.1" pos="-0.2 0.1 0" mass="2"/>
      <body name="empty" pos="0.3 0.2 0.1" euler="0 0 45">
        <body name="leaf" pos="0 0 0.1">
          <joint name="j6" type="hinge" axis="0 0 -1"/>
          <geom name="g9" type="sphere" size="0.02"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="t">
      <joint joint="j4" coef="0"/>
      <joint joint="j6" coef="-2"/>
    </fixed>
  </tendon>
  <contact>
    <exclude body1="b1" body2="free"/>
  </contact>
  <actuator>
    <motor name="m1" joint="j3"/>
    <motor name="m2" tendon="t" ctrllimited="false"/>
  </actuator>
</mujoco>
"""

# inertiafromgeom="true" (geoms override the inertial), settotalmass, radians, balanceinertia,
# boundmass, and nested includes found relative to the including file.
TOTALMASS_XML = """\
<mujoco model="totalmass">
  <compiler angle="radian" inertiafromgeom="true" settotalmass="7.5" balanceinertia="true"
            boundmass="0.01"/>
  <include file="parts/arm.xml"/>
  <worldbody>
    <body name="base" pos="0 0 1" euler="0.1 0.2 0.3">
      <joint name="yaw" axis="0 0 1" range="-1.5 1.5" ref="0.2"/>
      <inertial pos="0 0 0" mass="100" diaginertia="1 1 1"/>
      <geom type="cylinder" size="0.1 0.05"/>
      <geom type="box" size="0.3 0.01 0.01" pos="0.2 0 0"/>
      <body name="thin" pos="0.5 0 0">
        <joint name="roll" axis="1 0 0"/>
        <inertial pos="0 0 0" mass="1" diaginertia="1 1 3"/>
      </body>
      <body name="light" pos="0 0.5 0">
        <joint name="pitch" axis="0 1 0"/>
        <geom type="sphere" size="0.001" density="1"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
ARM_XML = """\
<mujoco>
  <default><default class="arm"><geom type="capsule" size="0.03"/></default></default>
  <include file="link.xml"/>
</mujoco>
"""
LINK_XML = """\
<mujoco>
  <worldbody>
    <body name="arm" pos="0 1 0.5" zaxis="0 1 1">
      <joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom class="arm" fromto="0 0 0 0.4 0 0"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_features_match_mujoco(tmp_path):
    path = tmp_path / "features.xml"
    path.write_text(FEATURES_XML)
    compare(path)


def test_compiler_options_and_includes_match_mujoco(tmp_path):
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "arm.xml").write_text(ARM_XML)
    (tmp_path / "parts" / "link.xml").write_text(LINK_XML)
    path = tmp_path / "totalmass.xml"
    path.write_text(TOTALMASS_XML)
    compare(path)
    assert sum(phalanx.load_model(str(path)).body_mass) == pytest.approx(7.5, rel=1e-12)
