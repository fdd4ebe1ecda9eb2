"""phalanx.from_mujoco: a compiled mujoco.MjModel into a phalanx.Model.

Every MJCF that phalanx.load_model (MuJoCo's compiler, then from_mujoco) loads of the examples,
MuJoCo's samples, dm_control's suite and Gymnasium's assets keeps the arrays MuJoCo compiled:
each array with an MjModel field of the same name, ints exactly, reals to RTOL relative to their
row's magnitude, quaternions up to sign; what load_model refuses is from_mujoco's refusal. Meshes (inline vertices and MuJoCo's mug.obj) convert to their convex hulls: adjacency
symmetric, faces planar, counter-clockwise about their outward normals, every hull vertex on no
face's positive side; a height field converts with its data; unsupported physics raises the
documented errors. A converted mesh model steps as MuJoCo does with contacts off.
"""

import pathlib
import re

import mujoco
import numpy as np
import pytest

import phalanx
from phalanx.testing import MUJOCO_SAMPLES, dm_control_suite_dir, gymnasium_assets_dir

RTOL = 1e-12

REPO = pathlib.Path(__file__).resolve().parents[2]
MUJOCO_MODELS = MUJOCO_SAMPLES
GYM_ASSETS = gymnasium_assets_dir()
DM_SUITE = dm_control_suite_dir()
MUG = MUJOCO_MODELS / "mug" / "mug.obj"


def candidate_models():
    """(id, path) of every MJCF of the examples, MuJoCo's samples, dm_control's suite and
    Gymnasium's assets"""
    out = [(f"phalanx-{p.stem}", p) for p in sorted((REPO / "examples" / "models").glob("*.xml"))]
    out += [(f"mujoco-{p.parent.name}-{p.stem}", p) for p in sorted(MUJOCO_MODELS.glob("*/*.xml"))]
    out += [(f"dm-{p.stem}", p) for p in sorted(DM_SUITE.glob("*.xml"))]
    out += [(f"gym-{p.stem}", p) for p in sorted(GYM_ASSETS.glob("*.xml"))]
    return out


def classify():
    """models both compilers load, and those MuJoCo compiles but load_model refuses"""
    both, refused = [], []
    for name, path in candidate_models():
        try:
            mujoco.MjModel.from_xml_path(str(path))
        except ValueError:  # not a whole model (an include) or not for this MuJoCo
            continue
        try:
            phalanx.load_model(path)
        except RuntimeError as e:
            refused.append(pytest.param(path, str(e), id=name))
            continue
        both.append(pytest.param(path, id=name))
    return both, refused


LOADED, REFUSED = classify()
SHAPE = re.compile(r"\((n\w+),(?: (\d+))?\)$")


def arrays(model):
    """{name: array} of every array property of the model's table"""
    out = {}
    for name in dir(type(model)):
        doc = getattr(type(model), name).__doc__ or ""
        if SHAPE.search(doc.strip()) and isinstance(getattr(model, name), np.ndarray):
            out[name] = getattr(model, name)
    return out


def row_error(ours, ref):
    """largest |ours - ref| per row, relative to the row's largest |ref| (1 for zero rows)"""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, f"shape {ours.shape} != {ref.shape}"
    if ref.size == 0:
        return np.zeros(1)
    ours, ref = ours.reshape(ref.shape[0], -1), ref.reshape(ref.shape[0], -1)
    scale = np.abs(ref).max(axis=1)
    scale[scale == 0] = 1
    return np.abs(ours - ref).max(axis=1) / scale


def mujoco_array(mj, name, ours):
    """MuJoCo's compiled field for the phalanx array `name` (None when MjModel has no such field
    or it has another size): the same values are expected"""
    if name == "actuator_gear":  # gear[0] (joint transmissions)
        return mj.actuator_gear[:, 0]
    if name == "actuator_trnid":  # (all of these models' tendons convert: the same ids)
        return mj.actuator_trnid[:, 0]
    if name == "actuator_dynprm":  # a filter's time constant, a muscle's two and its smoothing
        return mj.actuator_dynprm[:, :3]
    if name == "geom_rbound":  # a height field is unbounded (0), as a plane: tested with all
        return np.where(mj.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD, 0, mj.geom_rbound)
    if name == "actuator_trntype":  # Phalanx's numbering: joint 0, tendon 1, slider-crank 2
        trn = mujoco.mjtTrn
        return np.select([mj.actuator_trntype == trn.mjTRN_TENDON,
                          mj.actuator_trntype == trn.mjTRN_SLIDERCRANK], [1, 2], 0).astype(np.int32)
    if name == "actuator_slidersite":  # the second transmission id of a slider-crank
        return np.where(mj.actuator_trntype == mujoco.mjtTrn.mjTRN_SLIDERCRANK,
                        mj.actuator_trnid[:, 1], -1)
    if name in ("actuator_gainprm", "actuator_biasprm"):  # the nine affine and muscle ones
        return np.asarray(getattr(mj, name))[:, :9]
    if not hasattr(mj, name):
        return None
    ref = np.asarray(getattr(mj, name))
    return ref.reshape(ours.shape) if ref.size == ours.size else None


@pytest.mark.parametrize("path", LOADED)
def test_load_model_keeps_mujocos_compiled_arrays(path):
    # load_model is MuJoCo's compiler followed by from_mujoco: every array with an MjModel field
    # of the same name holds MuJoCo's compiled values (ints exactly, reals to RTOL of their row)
    # except where the conversion is documented to differ
    mj = mujoco.MjModel.from_xml_path(str(path))
    ours = phalanx.load_model(path)
    assert ours.source == str(path)
    for n in ["nq", "nv", "nu", "nbody", "njnt", "ngeom", "nmesh", "nhfield"]:
        assert getattr(ours, n) == getattr(mj, n), n
    assert ours.timestep == mj.opt.timestep
    contact_off = bool(mj.opt.disableflags & (mujoco.mjtDisableBit.mjDSBL_CONTACT
                                              | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT))
    no_hull = {k for k in range(mj.nmesh) if mj.mesh_graphadr[k] < 0}
    compared, bad = 0, {}
    for name, x in arrays(ours).items():
        if contact_off and name in ("geom_contype", "geom_conaffinity"):
            assert not x.any(), name  # a disabled contact zeroes the filters
            continue
        if no_hull and (name.startswith("mesh_") or name == "geom_rbound"):
            continue  # a bounding box stands in for a hull MuJoCo did not compute
        y = mujoco_array(mj, name, x)
        if y is None:
            continue
        compared += 1
        if x.dtype.kind in "iu" or y.dtype.kind in "iu":
            err = 0.0 if np.array_equal(x, y) else np.inf
        elif name.endswith("quat"):
            err = float(np.minimum(row_error(x, y), row_error(-x, y)).max()) if x.size else 0.0
        else:
            err = float(row_error(x, y).max())
        if not err <= RTOL:
            bad[name] = err
    assert not bad, f"load_model and MuJoCo's compiled model differ beyond {RTOL}: {bad}"
    assert compared >= 40


def test_parity_covers_the_model_collections():
    ids = {p.id.split("-")[0] for p in LOADED}
    assert {"phalanx", "mujoco", "dm", "gym"} <= ids
    assert len(LOADED) >= 25


def test_every_model_mujoco_compiles_loads():
    # of the examples, MuJoCo's samples, dm_control's suite and Gymnasium's assets, every file
    # MuJoCo's compiler accepts converts (the refusals' form: test_unsupported_physics_is_refused)
    assert not REFUSED, [(p.id, p.values[1]) for p in REFUSED]


# ------------------------------------------------------------------------------ meshes


def mesh_xml(mesh_asset, extra=""):
    return f"""
<mujoco model="meshes">
  <option timestep="0.005"/>
  <asset>
    {mesh_asset}
    <mesh name="tet" vertex="0 0 0  1 0 0  0 1 0  0 0 1  0.2 0.2 0.2"/>
  </asset>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body name="a" pos="0 0 1">
      <freejoint/>
      <geom name="m" type="mesh" mesh="m" density="800"/>
    </body>
    <body name="b" pos="0.5 0 1" euler="10 20 30">
      <joint name="h" type="hinge" axis="0 1 1" damping="0.1"/>
      <geom name="t" type="mesh" mesh="tet" pos="0.1 0 0"/>
      <geom name="s" type="sphere" size="0.1" pos="0 0 -0.2"/>
      {extra}
    </body>
  </worldbody>
  <actuator><motor joint="h" gear="2" ctrlrange="-1 1"/></actuator>
</mujoco>"""


INLINE = mesh_xml('<mesh name="m" vertex="-1 -1 -1  1 -1 -1  -1 1 -1  1 1 -1  -1 -1 1  1 -1 1 '
                  '-1 1 1  1 1 1  0 0 0  0.3 0.2 0.1  0.9 0.9 1.2" scale="0.1 0.2 0.15"/>')
MUG_XML = mesh_xml(f'<mesh name="m" file="{MUG}" scale=".01 .01 .01"/>')


def hull_of(model, k):
    """(vertices, adjacency lists, [(normal, vertex ids)]) of mesh k"""
    a, n = model.mesh_vertadr[k], model.mesh_vertnum[k]
    vert = model.mesh_vert[a:a + n]
    adj = [list(model.mesh_vertadj[model.mesh_vertadjadr[v]:
                                   model.mesh_vertadjadr[v] + model.mesh_vertadjnum[v]])
           for v in range(a, a + n)]
    polys = []
    for p in range(model.mesh_polyadr[k], model.mesh_polyadr[k] + model.mesh_polynum[k]):
        pa, pn = model.mesh_polyvertadr[p], model.mesh_polyvertnum[p]
        polys.append((model.mesh_polynormal[p], list(model.mesh_polyvert[pa:pa + pn])))
    return vert, adj, polys


def check_hull(model, k, mj, mj_mesh):
    vert, adj, polys = hull_of(model, k)
    n = len(vert)
    graph = mj.mesh_graph[mj.mesh_graphadr[mj_mesh]:]
    assert n == graph[0] >= 4  # MuJoCo's hull vertex count
    scale = np.abs(vert).max()
    tol = 1e-5 * scale  # vertices are MuJoCo's float32
    # MuJoCo merges hull triangles whose normals nearly agree into one polygon: on the mug a
    # polygon's vertices lie up to 2e-4 of the mesh's size off its plane
    planar_tol = 5e-4 * scale
    # adjacency: symmetric, no self loops, no repeats; an edge count of a closed polyhedron
    for v, nbrs in enumerate(adj):
        assert len(nbrs) >= 3 and len(set(nbrs)) == len(nbrs) and v not in nbrs
        for u in nbrs:
            assert 0 <= u < n and v in adj[u], f"edge {v}-{u} is not symmetric"
    nedge = sum(map(len, adj)) // 2
    # faces: planar, counter-clockwise about the outward normal, and every hull vertex on no
    # face's positive side (convexity)
    edges_of_faces = set()
    for normal, ids in polys:
        assert len(ids) >= 3 and np.linalg.norm(normal) == pytest.approx(1, abs=1e-9)
        p = vert[ids]
        offset = p @ normal
        assert np.ptp(offset) <= planar_tol, "face vertices off its plane"
        area = np.zeros(3)
        for i in range(len(ids)):
            area += np.cross(p[i], p[(i + 1) % len(ids)])
        assert area @ normal > 0, "face is clockwise about its outward normal"
        assert (vert @ normal).max() <= offset.max() + tol, "a vertex is outside a face's plane"
        for i in range(len(ids)):
            edges_of_faces.add(frozenset((ids[i], ids[(i + 1) % len(ids)])))
    # Euler's formula for the polygons (V - E + F = 2) with the polygon edges
    assert n - len(edges_of_faces) + len(polys) == 2
    assert nedge >= len(edges_of_faces)
    return vert


@pytest.mark.parametrize("xml", [INLINE, MUG_XML], ids=["inline", "mug"])
def test_mesh_converts_to_its_convex_hull(xml):
    mj = mujoco.MjModel.from_xml_string(xml)
    model = phalanx.from_mujoco(mj)
    assert model.nmesh == mj.nmesh == 2
    np.testing.assert_array_equal(model.geom_dataid, mj.geom_dataid)
    for k in range(2):
        vert = check_hull(model, k, mj, k)
        # hull vertices are mesh vertices (float32 in mjModel) in MuJoCo's mesh frame
        mesh = mj.mesh_vert[mj.mesh_vertadr[k]:mj.mesh_vertadr[k] + mj.mesh_vertnum[k]]
        d = np.abs(vert[:, None, :] - mesh[None, :, :].astype(np.float64)).max(-1).min(1)
        assert d.max() == 0
    # fewer hull vertices than mesh vertices (interior points dropped)
    assert model.mesh_vertnum[1] == 4 < mj.mesh_vertnum[1]
    if "mug" in xml:
        assert 4 < model.mesh_vertnum[0] < mj.mesh_vertnum[0]
    # frames and inertias are MuJoCo's, as compiled
    np.testing.assert_array_equal(model.body_mass, mj.body_mass)
    np.testing.assert_array_equal(model.body_inertia, mj.body_inertia)
    np.testing.assert_array_equal(model.body_ipos, mj.body_ipos)
    np.testing.assert_array_equal(model.body_iquat, mj.body_iquat)
    np.testing.assert_array_equal(model.geom_pos, mj.geom_pos)
    np.testing.assert_array_equal(model.geom_quat, mj.geom_quat)
    np.testing.assert_array_equal(model.geom_type, mj.geom_type)
    # bounding sphere: the farthest hull vertex
    g = model.geom_id("t")
    assert model.geom_rbound[g] == pytest.approx(np.linalg.norm(hull_of(model, 1)[0], axis=1).max())


def test_visual_mesh_without_hull_gets_a_stand_in():
    # mug.xml: a mesh only a non-colliding geom uses; MuJoCo computes no hull for it
    mj = mujoco.MjModel.from_xml_path(str(MUJOCO_MODELS / "mug" / "mug.xml"))
    assert mj.mesh_graphadr[0] == -1
    model = phalanx.from_mujoco(mj)
    assert model.ngeom == mj.ngeom and model.nmesh == 1 and model.mesh_vertnum[0] == 8
    assert any("bounding box stands in" in s for s in model.ignored)
    vert, adj, polys = hull_of(model, 0)
    mesh = mj.mesh_vert[:mj.mesh_vertnum[0]]
    np.testing.assert_array_equal(vert.min(0), mesh.min(0))
    np.testing.assert_array_equal(vert.max(0), mesh.max(0))
    for normal, ids in polys:
        p = vert[ids]
        area = sum(np.cross(p[i], p[(i + 1) % 4]) for i in range(4))
        assert area @ normal > 0
    # (a colliding geom on such a mesh is refused: tests/cpp/test_from_mujoco.cpp)


def test_mesh_model_dynamics_match_mujoco_without_contacts():
    mj = mujoco.MjModel.from_xml_string(MUG_XML)
    model = phalanx.from_mujoco(mj)
    model.contact = model.limit = False
    mj.opt.disableflags |= (mujoco.mjtDisableBit.mjDSBL_CONTACT
                            | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
    rng = np.random.default_rng(3)
    qpos0, qvel0 = mj.qpos0.copy(), rng.normal(size=mj.nv)
    T = 100
    ctrl = rng.uniform(-1.5, 1.5, size=(T, mj.nu))
    qs, vs = phalanx.testing.mujoco_rollout(mj, qpos0, qvel0, ctrl)
    q, v, status = phalanx.rollout(model, qpos0[None], qvel0[None], ctrl[None])
    np.testing.assert_array_equal(status, 0)
    dq = np.abs(q[0] - qs).max()
    dv = np.abs(v[0] - vs).max()
    assert dq <= 1e-10 and dv <= 1e-10, (dq, dv)


# ------------------------------------------------------------------------------ height fields

HFIELD_XML = """
<mujoco>
  <asset>
    <hfield name="terrain" nrow="3" ncol="4" size="2 1.5 0.4 0.1"
            elevation="0 1 2 3  4 5 6 7  8 9 10 11"/>
  </asset>
  <worldbody>
    <geom name="ground" type="hfield" hfield="terrain"/>
    <body pos="0 0 1"><freejoint/><geom type="sphere" size="0.1"/></body>
  </worldbody>
</mujoco>"""


def test_hfield_converts_with_its_data():
    mj = mujoco.MjModel.from_xml_string(HFIELD_XML)
    model = phalanx.from_mujoco(mj)
    assert (model.nhfield, model.nhfielddata) == (1, 12)
    np.testing.assert_array_equal(model.hfield_size, mj.hfield_size)
    assert (model.hfield_nrow[0], model.hfield_ncol[0], model.hfield_adr[0]) == (3, 4, 0)
    np.testing.assert_array_equal(model.hfield_data, mj.hfield_data.astype(np.float64))
    # normalised to [0, 1]; MuJoCo's compiler stores elevation's last row (-y edge) first
    expected = (np.arange(12).reshape(3, 4)[::-1] / 11).ravel()
    np.testing.assert_allclose(model.hfield_data, expected, rtol=1e-7)
    assert model.geom_dataid[model.geom_id("ground")] == 0


# ------------------------------------------------------------------------------ refusals

BASE = """
<mujoco>
  <worldbody>
    <body name="b1" pos="0 0 1">
      <joint name="j1" type="hinge" axis="0 1 0" {joint}/>
      <geom name="g1" type="capsule" size="0.05 0.2" {geom}/>
      <body name="b2" pos="0 0 -0.4" {body}>
        <joint name="j2" type="hinge" axis="0 1 0"/>
        <geom name="g2" type="sphere" size="0.1"/>
      </body>
    </body>
    {world}
  </worldbody>
  {sections}
</mujoco>"""


def variant(joint="", geom="", body="", world="", sections=""):
    return BASE.format(joint=joint, geom=geom, body=body, world=world, sections=sections)


REFUSALS = [
    ("tendon", variant(sections='<tendon><fixed name="t" armature="3"><joint joint="j1" '
                                'coef="1"/></fixed></tendon>'),
     r"tendon 't' \(id 0\): tendons with armature are not supported"),
    ("user dynamics", variant(sections='<actuator><general name="p" joint="j1" dyntype="user"/>'
                                       '</actuator>'),
     r"actuator 'p' \(id 0\): has dyntype user, gaintype fixed, biastype none; "
     r"supported are dyntype none, integrator, filter, filterexact or muscle"),
    ("pair", variant(sections='<contact><pair geom1="g1" geom2="g2"/></contact>'),
     r"contact pair 0: explicit contact pairs"),
    ("gravcomp", variant(body='gravcomp="1"'), r"body 'b2' \(id 2\): gravity compensation"),
    ("site transmission", variant(world='<site name="s"/>',
                                  sections='<actuator><motor name="m" site="s"/></actuator>'),
     r"actuator 'm' \(id 0\): transmission 'site' is not supported"),
    ("adhesion", variant(geom='adhesion="1"'), r"geom 'g1' \(id 0\): adhesion is not supported"),
]


@pytest.mark.parametrize("xml,message", [pytest.param(x, m, id=i) for i, x, m in REFUSALS])
def test_unsupported_physics_is_refused(xml, message):
    mj = mujoco.MjModel.from_xml_string(xml)
    with pytest.raises(RuntimeError, match="from_mujoco: " + message):
        phalanx.from_mujoco(mj)


def test_harmless_elements_are_listed_as_ignored():
    xml = variant(world='<site name="s"/><site name="s2" pos="0 0 1"/><camera name="c"/>'
                        '<light name="l"/>',
                  geom='solref="0.01 1" margin="0.01"',
                  sections='<sensor><jointpos joint="j1"/></sensor>'
                           '<option integrator="RK4"/>'
                           '<tendon><spatial name="t"><site site="s"/><geom geom="g2"/>'
                           '<site site="s2"/></spatial></tendon>')
    model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(xml))
    text = "\n".join(model.ignored)
    assert model.nsite == 2 and "site" not in text  # sites convert
    for what in ["camera", "light", "sensor",
                 "geom@solref", "geom@margin", "integrator=\"RK4\""]:
        assert what in text, (what, model.ignored)


def test_not_an_mjmodel_is_a_type_error():
    with pytest.raises(TypeError, match="expected a mujoco.MjModel"):
        phalanx.from_mujoco("humanoid.xml")
    with pytest.raises(TypeError):
        phalanx.from_mujoco(mujoco.MjData(mujoco.MjModel.from_xml_string(variant())))


def test_disable_flags_are_applied(tmp_path):
    xml = variant(joint='range="-1 1" stiffness="2" damping="0.5"',
                  sections='<option gravity="0 0 -5"><flag contact="disable" limit="disable" '
                           'spring="disable" damper="disable" gravity="disable" '
                           'clampctrl="disable"/></option>'
                           '<actuator><motor joint="j1" ctrlrange="-1 1"/></actuator>')
    path = tmp_path / "flags.xml"
    path.write_text(xml)
    ours = phalanx.load_model(path)
    assert not ours.contact and not ours.limit and not ours.pair_geom.size
    assert not ours.jnt_limited.any() and not ours.jnt_stiffness.any()
    assert not ours.dof_damping.any() and not ours.actuator_ctrllimited.any()
    np.testing.assert_array_equal(ours.gravity, 0)


def test_mujoco_of_another_version_is_refused(monkeypatch):
    # the mjModel is read with the layout of the headers phalanx was compiled against
    mj = mujoco.MjModel.from_xml_string(variant())
    assert phalanx._phalanx.MUJOCO_HEADER_VERSION == mujoco.mj_version()
    monkeypatch.setattr(mujoco, "mj_version", lambda: 3002007)
    message = r"built against MuJoCo \d+\.\d+\.\d+ but the imported mujoco is 3\.2\.7"
    with pytest.raises(RuntimeError, match=message):
        phalanx.from_mujoco(mj)


def test_sites_convert_and_their_frames_match_mujoco(rng):
    # dm_control's manipulator: 20 sites on the arm, hand and objects; phalanx.kinematics gives
    # their world frames as MuJoCo's site_xpos and site_xmat
    mj = mujoco.MjModel.from_xml_path(str(DM_SUITE / "manipulator.xml"))
    model = phalanx.from_mujoco(mj)
    assert model.nsite == mj.nsite == 20
    assert model.site_id("grasp") == mj.site("grasp").id
    np.testing.assert_array_equal(model.site_bodyid, mj.site_bodyid)
    qpos = mj.qpos0 + 0.3 * rng.standard_normal((6, mj.nq))
    out = phalanx.kinematics(model, qpos)
    assert out["site_xpos"].shape == (6, 20, 3) and out["site_xmat"].shape == (6, 20, 3, 3)
    data = mujoco.MjData(mj)
    for e in range(6):
        data.qpos[:] = qpos[e]
        mujoco.mj_kinematics(mj, data)
        np.testing.assert_allclose(out["site_xpos"][e], data.site_xpos, rtol=0, atol=1e-14)
        np.testing.assert_allclose(out["site_xmat"][e].reshape(-1, 9), data.site_xmat, rtol=0,
                                   atol=1e-14)
