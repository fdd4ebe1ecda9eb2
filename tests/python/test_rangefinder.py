"""phalanx.rangefinders and per-environment height fields against MuJoCo.

Rays are cast from a site on a free probe body, along the site's z axis, at a scene of every
geom type (plane, height field, sphere, capsule, ellipsoid, cylinder, box, convex mesh), with
geoms that are not drawn (their colour's or their material's alpha 0) and a geom of the probe
itself, which the rays must not see; MuJoCo's rangefinder sensor (mj_forward's sensordata, and
mj_ray for the geom met) is the reference, per environment with each environment's own height
field. A height field set per environment (``set_parameter("hfield_data", (E, n))``) gives each
environment the contacts and steps it has alone.
"""

from __future__ import annotations

import numpy as np
import pytest

import phalanx

mujoco = pytest.importorskip("mujoco")

SCENE = """
<mujoco>
  <asset>
    <hfield name="hills" nrow="13" ncol="17" size="1.5 1.2 0.6 0.1"/>
    <mesh name="tet" vertex="0 0 0  0.4 0 0  0 0.4 0  0 0 0.4"/>
    <material name="ghost" rgba="1 1 1 0"/>
    <material name="solid" rgba="0 1 0 1"/>
  </asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" pos="0 0 -0.6"/>
    <geom name="hills" type="hfield" hfield="hills" pos="3 0 -0.4" euler="0 0 20"/>
    <geom name="sphere" type="sphere" size="0.25" pos="0 1.2 0.3"/>
    <geom name="capsule" type="capsule" size="0.12 0.3" pos="1.2 1.2 0.3" euler="30 20 10"/>
    <geom name="ellipsoid" type="ellipsoid" size="0.2 0.35 0.15" pos="-1.2 1.2 0.3"
          euler="10 40 -20"/>
    <geom name="cylinder" type="cylinder" size="0.18 0.25" pos="0 -1.2 0.3" euler="50 0 30"/>
    <geom name="box" type="box" size="0.25 0.12 0.3" pos="1.2 -1.2 0.3" euler="-20 15 70"/>
    <geom name="mesh" type="mesh" mesh="tet" pos="-1.2 -1.2 0.2" euler="10 20 30"
          material="solid"/>
    <geom name="unseen" type="sphere" size="0.3" pos="-1.2 0 0.3" rgba="1 0 0 0"/>
    <geom name="ghost" type="box" size="0.3 0.3 0.3" pos="1.2 0 0.3" material="ghost"/>
    <body name="probe" pos="0 0 0.4">
      <freejoint/>
      <geom name="probe" type="sphere" size="0.08"/>
      <site name="eye" pos="0.02 0 0.01"/>
    </body>
  </worldbody>
  <sensor><rangefinder name="eye" site="eye"/></sensor>
</mujoco>
"""


def _quat_z_to(d):
    """unit quaternions (n, 4) turning the z axis to the unit directions d (n, 3)"""
    q = np.stack([1 + d[:, 2], -d[:, 1], d[:, 0], np.zeros(len(d))], axis=1)
    down = q[:, 0] < 1e-9  # d = -z: a half turn about x
    q[down] = [0, 1, 0, 0]
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _probes(mj, rng, n):
    """qpos (n, 7) of the probe: anywhere about the scene, its eye turned at a random geom's
    centre (a tenth of them anywhere), so that every type is met"""
    centres = mj.geom_pos[:-1] + np.array([0, 0, 0.3]) * (mj.geom_type[:-1, None] == 0)
    pos = rng.uniform([-2.5, -2.5, -0.5], [4, 2.5, 1.2], (n, 3))
    aim = centres[rng.integers(0, len(centres), n)] + 0.2 * rng.standard_normal((n, 3)) - pos
    wild = rng.uniform(size=n) < 0.1
    aim[wild] = rng.standard_normal((wild.sum(), 3))
    aim /= np.linalg.norm(aim, axis=1, keepdims=True)
    return np.concatenate([pos, _quat_z_to(aim)], axis=1)


def _mujoco_rays(mj, qpos, terrains=None):
    """MuJoCo's rangefinder reading and the geom its ray meets, per state (and terrain)"""
    d = mujoco.MjData(mj)
    site = mj.site("eye").id
    dist, geom = np.zeros(len(qpos)), np.zeros(len(qpos), int)
    for e, q in enumerate(qpos):
        if terrains is not None:
            mj.hfield_data[:] = terrains[e]
        d.qpos[:] = q
        mujoco.mj_forward(mj, d)
        dist[e] = d.sensordata[0]
        found = np.array([-1], np.int32)
        mujoco.mj_ray(mj, d, d.site_xpos[site], d.site_xmat[site].reshape(3, 3)[:, 2], None, 1,
                      mj.site_bodyid[site], found, None)
        geom[e] = found[0]
    return dist, geom


@pytest.fixture(scope="module")
def scene():
    mj = mujoco.MjModel.from_xml_string(SCENE)
    return mj, phalanx.from_mujoco(mj)


def test_visibility_is_mujocos(scene):
    mj, model = scene
    np.testing.assert_array_equal(
        np.asarray(model.geom_visible).reshape(-1),
        [mj.geom(n).name not in ("unseen", "ghost") for n in range(mj.ngeom)])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rays_equal_mujocos_rangefinder(scene, rng, dtype):
    mj, model = scene
    qpos = _probes(mj, rng, 3000)
    found = phalanx.rangefinders(model, qpos, ["eye"], dtype=dtype)
    dist, geom = _mujoco_rays(mj, qpos)
    hit = dist >= 0
    # every geom type is met, none of those not drawn nor the probe's own
    met = {mj.geom(g).name for g in geom[hit]}
    assert met == {"floor", "hills", "sphere", "capsule", "ellipsoid", "cylinder", "box",
                   "mesh"}
    np.testing.assert_array_equal(found["geom"][:, 0], geom)
    tol = 1e-10 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(found["dist"][:, 0], dist, rtol=tol, atol=tol)
    assert np.all(found["dist"][~hit, 0] == -1)


def test_rays_from_inside_meet_the_surface_on_the_way_out(scene):
    """a ray that starts inside a geom meets its far side, as MuJoCo's"""
    mj, model = scene
    centres = np.array([mj.geom(n).pos for n in ("sphere", "capsule", "ellipsoid", "cylinder",
                                                 "box", "mesh")])
    qpos = np.concatenate([centres, _quat_z_to(np.tile([0.6, 0.0, 0.8], (6, 1)))], axis=1)
    found = phalanx.rangefinders(model, qpos, [model.site_id("eye")])
    dist, geom = _mujoco_rays(mj, qpos)
    assert np.all(dist > 0)
    np.testing.assert_array_equal(found["geom"][:, 0], geom)
    np.testing.assert_allclose(found["dist"][:, 0], dist, rtol=1e-10)


def _terrains(mj, rng, n):
    return rng.uniform(0, 1, (n, mj.nhfielddata)).astype(np.float32).astype(np.float64)


def test_each_environment_casts_at_its_own_height_field(scene, rng):
    mj, model = scene
    model = phalanx.from_mujoco(mj)
    n = 400
    terrains = _terrains(mj, rng, n)
    model.set_parameter("hfield_data", terrains)
    # the probe above the hills, looking down at them
    hills = mj.geom("hills").pos
    pos = hills + rng.uniform([-1.3, -1.3, 0.8], [1.3, 1.3, 1.5], (n, 3))
    aim = np.concatenate([rng.uniform(-0.4, 0.4, (n, 2)), -np.ones((n, 1))], axis=1)
    aim /= np.linalg.norm(aim, axis=1, keepdims=True)
    qpos = np.concatenate([pos, _quat_z_to(aim)], axis=1)
    found = phalanx.rangefinders(model, qpos, ["eye"])
    dist, geom = _mujoco_rays(mj, qpos, terrains)
    assert np.mean(geom == mj.geom("hills").id) > 0.8
    np.testing.assert_array_equal(found["geom"][:, 0], geom)
    np.testing.assert_allclose(found["dist"][:, 0], dist, rtol=1e-10)
    # the same rays at one shared height field see another surface
    model.set_parameter("hfield_data", terrains[0])
    shared = phalanx.rangefinders(model, qpos, ["eye"])["dist"][:, 0]
    assert shared[0] == found["dist"][0, 0]
    assert np.mean(np.abs(shared[1:] - found["dist"][1:, 0]) > 1e-3) > 0.5


def test_per_environment_height_fields_step_as_each_alone(rng):
    """boxes dropped on rough ground: each environment's own terrain gives it the contacts and
    the trajectory it has with that terrain shared by a batch of one"""
    mj = mujoco.MjModel.from_xml_string("""
    <mujoco>
      <asset><hfield name="ground" nrow="9" ncol="9" size="1 1 0.3 0.1"/></asset>
      <worldbody>
        <geom type="hfield" hfield="ground"/>
        <body pos="0 0 0.5"><freejoint/><geom type="box" size="0.2 0.15 0.1"/></body>
      </worldbody>
    </mujoco>""")
    model = phalanx.from_mujoco(mj)
    n = 4
    terrains = _terrains(mj, rng, n)
    qpos = np.tile(np.asarray(model.qpos0, np.float64), (n, 1))
    qpos[:, :2] = rng.uniform(-0.3, 0.3, (n, 2))
    qvel, ctrl = np.zeros((n, model.nv)), np.zeros((n, 300, model.nu))
    model.set_parameter("hfield_data", terrains)
    together = phalanx.rollout(model, qpos, qvel, ctrl)[0]
    for e in range(n):
        model.set_parameter("hfield_data", terrains[e])
        alone = phalanx.rollout(model, qpos[e:e + 1], qvel[e:e + 1], ctrl[e:e + 1])[0]
        np.testing.assert_array_equal(together[e], alone[0])
    # the boxes came to rest at different heights on their terrains
    rest = together[:, -1, 2]
    assert np.ptp(rest) > 1e-3


def test_bad_sites_and_fields_are_named(scene):
    mj, model = scene
    qpos = np.tile(mj.qpos0, (2, 1))
    with pytest.raises(ValueError, match="no site named 'nose'"):
        phalanx.rangefinders(model, qpos, ["nose"])
    with pytest.raises(ValueError, match="site 7 is outside"):
        phalanx.rangefinders(model, qpos, [7])
    with pytest.raises(ValueError, match="hfield_data"):
        model.set_parameter("hfield_data", np.zeros((2, 5)))
    with pytest.raises(ValueError, match="finite"):
        model.set_parameter("hfield_data", np.full(mj.nhfielddata, np.nan))
    assert "hfield_data" in phalanx.ENV_FIELDS and "hfield_data" not in phalanx.PARAMETERS
