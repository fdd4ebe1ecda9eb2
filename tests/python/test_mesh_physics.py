"""Physics through mesh and height-field contacts, simulated by phalanx.rollout in float64.

* A convex-mesh cube behaves as the primitive box of the same size (same rest height, same
  slide), both in Phalanx: the two reach the floor through different pair functions
  (plane_convex and plane_box) that must give the same four corner contacts.
* A once-subdivided icosahedron (42 vertices) rolls down a tilted plane: it moves downhill, and
  its velocity and angular velocity are those of rolling (|v| ~ r |w|).
* A box settles on a height-field ramp with its bottom face on the slope.
* MuJoCo's mug sample (a free body with 34 collision geoms: boxes and a cylinder, the mesh is
  visual only in that file) comes to rest on the floor at MuJoCo's height.
* The gradient of a whole rollout through a mesh-floor contact equals central differences.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
import phalanx  # noqa: E402

MUG = Path("/usr/share/mujoco/model/mug/mug.xml")
H = 0.1  # half size of the cubes
CUBE_VERTS = " ".join(f"{sx * H} {sy * H} {sz * H}"
                      for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1))


def convert(xml: str):
    return phalanx.from_mujoco(mujoco.MjModel.from_xml_string(xml))


def run(model, qpos, qvel, T, ctrl=None):
    qpos, qvel = np.atleast_2d(np.asarray(qpos, float)), np.atleast_2d(np.asarray(qvel, float))
    if ctrl is None:
        ctrl = np.zeros((len(qpos), T, model.nu))
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    phalanx.raise_if_stopped(status, "rollout")
    return qs, vs


def quat_to_mat(q):
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


# ---- a mesh cube against the primitive box ---------------------------------------------------

CUBES = f"""<mujoco><option timestep="0.002"/>
<asset><mesh name="cube" vertex="{CUBE_VERTS}"/></asset>
<worldbody><geom type="plane" size="10 10 .1" friction="0.5"/>
  <body pos="0 0 {H + 0.01}"><freejoint/><geom type="box" size="{H} {H} {H}" mass="1"
    friction="0.5"/></body>
  <body pos="0 3 {H + 0.01}"><freejoint/><geom type="mesh" mesh="cube" mass="1"
    friction="0.5"/></body>
</worldbody></mujoco>"""


def test_mesh_cube_rests_and_slides_like_the_primitive_box():
    model = convert(CUBES)
    mj = mujoco.MjModel.from_xml_string(CUBES)
    # the mesh is not recentred or turned by the compiler (symmetric cube): same geom frames
    np.testing.assert_allclose(mj.geom_pos[2], 0, atol=1e-9)
    qpos0 = model.qpos0.copy()
    # settle from 1 cm above the floor for 1 s
    qs, vs = run(model, qpos0, np.zeros(model.nv), 500)
    z_box, z_mesh = qs[0, -1, 2], qs[0, -1, 9]
    print(f"rest heights: box {z_box:.9f}, mesh {z_mesh:.9f}")
    assert abs(z_box - H) < 2e-3  # on the floor (observed 0.83 mm low: the contact's softness)
    assert abs(z_mesh - z_box) < 1e-6
    assert np.abs(vs[0, -1]).max() < 1e-6
    # slide: both at rest on the floor, then 2 m/s along x; friction 0.5 stops them after
    # v^2 / (2 mu g) = 0.41 m
    qpos = qs[0, -1].copy()
    qvel = np.zeros(model.nv)
    qvel[0] = qvel[6] = 2.0
    qs, vs = run(model, qpos, qvel, 500)
    d_box, d_mesh = qs[0, -1, 0] - qpos[0], qs[0, -1, 7] - qpos[7]
    print(f"slide distances: box {d_box:.6f}, mesh {d_mesh:.6f}")
    assert abs(d_box - 4.0 / (2 * 0.5 * 9.81)) < 0.02 * d_box
    assert abs(d_mesh - d_box) < 0.02 * d_box
    assert np.abs(vs[0, -1]).max() < 1e-6  # both stopped without tipping over
    np.testing.assert_allclose(qs[0, -1, 3:7], [1, 0, 0, 0], atol=1e-6)
    np.testing.assert_allclose(qs[0, -1, 10:14], [1, 0, 0, 0], atol=1e-6)


# ---- a polyhedral ball rolls down a slope ----------------------------------------------------


def icosphere(radius: float) -> np.ndarray:
    """an icosahedron subdivided once, on a sphere of the radius: 42 vertices"""
    t = (1 + 5 ** 0.5) / 2
    v = np.array([(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t),
                  (0, -1, -t), (0, 1, -t), (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)], float)
    edge = np.min([np.linalg.norm(v[i] - v[j]) for i in range(12) for j in range(i)])
    mids = {tuple(np.round((v[i] + v[j]) / 2, 12)) for i in range(12) for j in range(i)
            if np.linalg.norm(v[i] - v[j]) < edge * 1.01}
    pts = np.concatenate([v, np.array(sorted(mids))])
    assert len(pts) == 42
    return pts / np.linalg.norm(pts, axis=1, keepdims=True) * radius


SLOPE = np.radians(20)
R_BALL = 0.1


def test_icosphere_rolls_down_a_slope():
    """launched rolling downhill at 1 m/s (from rest at the identity orientation it balances on
    its lowest vertex, right under its centre: an equilibrium, in MuJoCo too), it keeps rolling
    and speeds up: |v| = r |w| within 10 % (between the inradius 0.93 r and r for the pivot
    of a polyhedron), w about the horizontal axis across the slope, and an acceleration above
    zero but below a rolling sphere's 5/7 g sin(slope) (each tip onto the next face loses energy;
    sliding would give g sin(slope))"""
    verts = " ".join(f"{x:.17g}" for x in icosphere(R_BALL).ravel())
    # the plane turned about y by SLOPE: downhill is +x turned, (cos, 0, -sin)
    xml = f"""<mujoco><option timestep="0.002"/>
    <asset><mesh name="ball" vertex="{verts}"/></asset>
    <worldbody><geom type="plane" size="10 10 .1" euler="0 {np.degrees(SLOPE)} 0" friction="1"/>
      <body pos="0 0 {R_BALL / np.cos(SLOPE) + 0.002}"><freejoint/>
        <geom type="mesh" mesh="ball" density="1000" friction="1"/></body>
    </worldbody></mujoco>"""
    model = convert(xml)
    T, dt, v0 = 750, 0.002, 1.0  # 1.5 s
    down = np.array([np.cos(SLOPE), 0, -np.sin(SLOPE)])
    normal = np.array([np.sin(SLOPE), 0, np.cos(SLOPE)])
    axis = np.cross(normal, down)  # rolling downhill turns about it
    qvel = np.concatenate([v0 * down, v0 / R_BALL * axis])
    qs, vs = run(model, model.qpos0, qvel, T)
    travel = (qs[0, -1, :3] - qs[0, 0, :3]) @ down
    v, w = vs[0, T // 2:, :3], vs[0, T // 2:, 3:6]
    speed, spin = np.linalg.norm(v, axis=1), np.linalg.norm(w, axis=1)
    ratio = speed.mean() / (R_BALL * spin.mean())
    accel = 2 * (travel - v0 * T * dt) / (T * dt) ** 2 / (9.81 * np.sin(SLOPE))
    height = qs[0, :, :3] @ normal  # centre above the plane
    print(f"travel {travel:.3f} m, |v| / (r |w|) = {ratio:.3f}, acceleration / g sin = "
          f"{accel:.3f}, height above plane {height.min():.4f}..{height.max():.4f}")
    assert travel > v0 * T * dt  # downhill, faster than it was launched
    assert abs(ratio - 1) < 0.1
    assert (np.abs(w @ axis) > 0.95 * spin).mean() > 0.95
    assert 0.1 < accel < 5 / 7
    assert height.min() > 0.9 * R_BALL  # on the plane, not through it
    assert abs(qs[0, -1, 1]) < 0.05 * travel  # straight down the slope


# ---- a box settles on a height-field ramp ----------------------------------------------------


def test_box_settles_on_a_height_field_ramp():
    n = 8
    elevation = np.tile(np.linspace(0.2, 0.8, n), (n, 1))  # rises along x
    size = (1.0, 1.0, 0.4, 0.1)
    # MuJoCo rescales elevation data to [0, 1]: the surface is z = size[2] (x + 1) / 2
    slope = np.arctan(size[2] / (2 * size[0]))  # 0.197 rad

    def surface(x):
        return size[2] * (x + size[0]) / (2 * size[0])

    x0 = 0.1
    z0 = surface(x0 + H) + H + 0.02  # level, its uphill bottom edge 2 cm above the ramp
    xml = f"""<mujoco><option timestep="0.002"/>
    <asset><hfield name="ramp" nrow="{n}" ncol="{n}" size="{' '.join(map(str, size))}"
      elevation="{' '.join(f'{x:.17g}' for x in elevation.ravel())}"/></asset>
    <worldbody><geom type="hfield" hfield="ramp" friction="1"/>
      <body pos="{x0} 0.05 {z0}"><freejoint/><geom type="box" size="{H} {H} {H}" mass="1"
        friction="1"/></body>
    </worldbody></mujoco>"""
    model = convert(xml)
    qs, vs = run(model, model.qpos0, np.zeros(model.nv), 1000)
    up = quat_to_mat(qs[0, -1, 3:7])[:, 2]  # the box's z axis, normal to its bottom face
    slope_normal = np.array([-np.sin(slope), 0, np.cos(slope)])
    tilt = np.arccos(np.clip(up @ slope_normal, -1, 1))
    # the centre lies H above the ramp's surface (measured along its normal)
    on_ramp = np.array([qs[0, -1, 0], qs[0, -1, 1], surface(qs[0, -1, 0])])
    gap = (qs[0, -1, :3] - on_ramp) @ slope_normal
    print(f"final speed {np.abs(vs[0, -1]).max():.1e}, tilt from the slope {tilt:.2e} rad, "
          f"centre {gap:.6f} above the surface, moved {qs[0, -1, :2] - model.qpos0[:2]}")
    assert np.abs(vs[0, -1]).max() < 1e-3
    assert tilt < 1e-2
    assert abs(gap - H) < 1e-3
    assert np.linalg.norm(qs[0, -1, :2] - model.qpos0[:2]) < 0.05  # friction (1 > tan) holds it


# ---- MuJoCo's mug ------------------------------------------------------------------------------


@pytest.mark.skipif(not MUG.exists(), reason="MuJoCo's samples (libmujoco-samples) missing")
def test_mug_rests_on_the_floor_at_mujocos_height():
    """after 1.2 s from the file's initial state: position and orientation steady (change
    < 1e-4 over the last 0.2 s), upright, and at MuJoCo's height within 2 mm. MuJoCo's contacts
    are soft (default solref 0.02 s, solimp 0.9 .. 0.95): the mug sinks into the floor by an
    amount set by those parameters and its weight (0.14 mm, measured), and its weight spreads
    over the bottom cylinder and the 20 wall boxes differently in the two solvers; 2 mm bounds
    both effects with a margin of ten times the observed difference (0.1 mm). Note: the mesh
    geom of mug.xml is visual (contype 0): the contacts are cylinder-plane and box-plane."""
    mj = mujoco.MjModel.from_xml_path(str(MUG))
    model = phalanx.from_mujoco(mj)
    dt = model.timestep
    steps = int(round(1.2 / dt))
    qpos = model.qpos0.copy()
    qs, vs = run(model, qpos, np.zeros(model.nv), steps)
    last = int(round(0.2 / dt))
    tail = qs[0, -last:]
    change = np.abs(tail - tail[-1]).max()
    # MuJoCo's own simulation of the file
    d = mujoco.MjData(mj)
    for _ in range(steps):
        mujoco.mj_step(mj, d)
    print(f"Phalanx mug at z = {qs[0, -1, 2]:.6f}, MuJoCo {d.qpos[2]:.6f}; change over the last "
          f"0.2 s {change:.1e}; quat {qs[0, -1, 3:7]}")
    assert change < 1e-4
    assert np.abs(vs[0, -1]).max() < 1e-3
    assert abs(qs[0, -1, 2] - d.qpos[2]) < 2e-3
    # upright like MuJoCo's
    up = quat_to_mat(qs[0, -1, 3:7])[:, 2]
    assert up[2] > np.cos(np.radians(1))
    assert abs(d.qpos[2]) < 0.05  # and MuJoCo's came to rest on the floor too


# ---- a gradient through a mesh contact -------------------------------------------------------

PUSHED = f"""<mujoco><option timestep="0.002"/>
<asset><mesh name="cube" vertex="{CUBE_VERTS}"/></asset>
<worldbody><geom type="plane" size="10 10 .1" friction="0.3"/>
  <body pos="0 0 {H}"><joint name="x" type="slide" axis="1 0 0"/>
    <joint name="z" type="slide" axis="0 0 1"/>
    <geom type="mesh" mesh="cube" mass="1" friction="0.3"/></body>
</worldbody><actuator><motor joint="x" gear="1"/></actuator></mujoco>"""


def test_rollout_gradient_through_a_mesh_contact_matches_central_differences():
    """a mesh cube sliding on the floor (four contacts all along, sliding friction) pushed by a
    motor on its x slide: d x_T / d (qvel_0, ctrl) from the tape against central differences
    (h = 1e-6 in double: error ~ eps x / h ~ 1e-10 relative), rtol 1e-5"""
    model = convert(PUSHED)
    model.lcp_solver = "pgs_stabilized"
    model.lcp_tolerance = 1e-12
    T = 100
    # resting on the floor (settled), moving at 2 m/s, pushed by 1 N (friction 0.3 g = 2.9 N
    # decelerates it to 2 - 1.9 * 0.2 = 1.6 m/s: sliding throughout)
    settle, _ = run(model, model.qpos0, np.zeros(model.nv), 200)
    qpos = settle[0, -1][None].copy()
    qvel = np.array([[2.0, 0.0]])
    ctrl = np.full((1, T, 1), 1.0)
    tape = phalanx.Tape()
    counts = np.zeros((1, T, phalanx.NUM_COUNTS), np.int32)
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl, tape=tape, counts=counts)
    assert (counts[..., phalanx.COUNT_CONTACTS] == 4).all()  # the face on the floor throughout
    assert vs[0, -1, 0] > 1.0
    wq = np.zeros((1, T, model.nq))
    wq[0, -1, 0] = 1.0  # loss: x after the last step
    g = tape.backward(wq, None)

    h = 1e-6

    def final_x(qv, u):
        q, _ = run(model, np.repeat(qpos, len(qv), 0), qv, T, u)
        return q[:, -1, 0]

    fd_v = final_x(qvel + [[h, 0], [-h, 0]], np.repeat(ctrl, 2, 0))
    fd_vx = (fd_v[0] - fd_v[1]) / (2 * h)
    fd_u = final_x(np.repeat(qvel, 2, 0), np.concatenate([ctrl + h, ctrl - h]))
    fd_ctrl = (fd_u[0] - fd_u[1]) / (2 * h)  # all controls at once
    print(f"d x_T / d v0: tape {g['qvel'][0, 0]:.12f}, central {fd_vx:.12f}; d x_T / d u (sum "
          f"over steps): tape {g['ctrl'].sum():.12f}, central {fd_ctrl:.12f}")
    # sliding: x_T = x_0 + v_0 T dt + ..., so d x_T / d v0 = T dt exactly in free sliding
    assert abs(fd_vx - T * model.timestep) < 0.01 * T * model.timestep
    np.testing.assert_allclose(g["qvel"][0, 0], fd_vx, rtol=1e-5)
    np.testing.assert_allclose(g["ctrl"].sum(), fd_ctrl, rtol=1e-5)
    # one step's control alone (the 10th)
    e = np.zeros((2, T, 1))
    e[0, 9, 0], e[1, 9, 0] = h, -h
    fd_one = final_x(np.repeat(qvel, 2, 0), np.repeat(ctrl, 2, 0) + e)
    np.testing.assert_allclose(g["ctrl"][0, 9, 0], (fd_one[0] - fd_one[1]) / (2 * h), rtol=1e-5)


SPINNING = f"""<mujoco><option timestep="0.002"/>
<asset><mesh name="cube" vertex="{CUBE_VERTS}"/></asset>
<worldbody><geom type="plane" size="10 10 .1" friction="0.4"/>
  <body pos="0 0 {H}"><freejoint/><geom type="mesh" mesh="cube" mass="1" friction="0.4"/></body>
</worldbody></mujoco>"""


def test_rollout_gradient_of_a_spinning_mesh_cube_matches_central_differences():
    """a free mesh cube sliding and spinning on the floor: the friction at its four corners
    turns with the corners' velocities, so the final pose depends nonlinearly on the initial
    velocity. Gradient of a random weighting of the final (x, y, yaw quaternion) with respect
    to all six initial velocities, tape against central differences (h = 1e-6), rtol 1e-5."""
    model = convert(SPINNING)
    model.lcp_solver = "pgs_stabilized"
    model.lcp_tolerance = 1e-12
    T = 50
    settle, _ = run(model, model.qpos0, np.zeros(model.nv), 200)
    qpos = settle[0, -1][None].copy()
    # sliding and turning about z; Phalanx's friction acts per tangent direction (each
    # component slows by mu g = 3.9 m/s^2): all still sliding after 0.1 s
    qvel = np.array([[1.5, 1.0, 0.0, 0.0, 0.0, 6.0]])
    tape = phalanx.Tape()
    counts = np.zeros((1, T, phalanx.NUM_COUNTS), np.int32)
    qs, vs, status = phalanx.rollout(model, qpos, qvel, np.zeros((1, T, 0)), tape=tape,
                                     counts=counts)
    assert (counts[..., phalanx.COUNT_CONTACTS] == 4).all()
    assert np.abs(vs[0, -1, :2]).min() > 0.3 and abs(vs[0, -1, 5]) > 0.5  # still sliding
    w = np.zeros(model.nq)
    w[[0, 1, 3, 6]] = [1.0, -0.7, 0.3, 0.5]
    wq = np.zeros((1, T, model.nq))
    wq[0, -1] = w
    g = tape.backward(wq, None)["qvel"][0]
    h = 1e-6
    dirs = np.eye(model.nv)
    q, _ = run(model, np.repeat(qpos, 2 * model.nv, 0),
               np.concatenate([qvel + h * dirs, qvel - h * dirs]), T)
    fd = (q[: model.nv, -1] @ w - q[model.nv:, -1] @ w) / (2 * h)
    print(f"d loss / d qvel0: tape {g}, central {fd}, max difference relative to the largest "
          f"{np.abs(g - fd).max() / np.abs(fd).max():.1e}")
    assert np.abs(fd[[0, 1, 5]]).min() > 1e-3  # the directions that matter
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())
