"""Narrowphase against MuJoCo, contact by contact, on thousands of random poses per pair type.

Each pair type gets a two-geom model: two free bodies with one geom each, or, for a plane, a
plane on a mocap body (planes may not move under a joint) and a free body. For every pose
MuJoCo runs mj_kinematics + mj_collision; its geom_xpos / geom_xmat and d.contact (pos,
frame[:3] = normal, dist, geom ids) are compared with _phalanx.collide_pairs on the same frames:
the same number of contacts, and, matched as sets by position, equal pos, normal and dist.

All nine pairs are analytic in MuJoCo (mjc_PlaneSphere, mjc_PlaneCapsule, mjc_PlaneBox,
mjc_SphereSphere, mjc_SphereCapsule, mjc_SphereBox, mjc_CapsuleCapsule, mjc_CapsuleBox and the
separating-axis mjc_BoxBox) and Phalanx implements the same algorithms, so the tolerance is
1e-9 absolute on unit-scale geometry: both evaluate the same formulas in double, arranged
differently (e.g. a unit vector by division rather than by a reciprocal), which differs by
round-off amplified at worst by the conditioning of a closest-point solve (observed up to
2e-12, in capsule-box).
Margin is 0 (MuJoCo's default) except in test_margin_keeps_separated_contacts_like_mujoco.

Pose sets per pair: uniformly random orientations with centre offsets around contact
distance, plus structured sets that reach the special branches: nearly axis-aligned poses
(resting boxes and capsules, 4-point plane-box and up-to-8-point box-box face manifolds),
parallel, antiparallel and nearly parallel capsules (the parallel branch of capsule-capsule and
its threshold), a sphere centre inside a box.

MuJoCo 4.0's capsule-capsule differs from the 3.12 source this code was first written from:
axes count as parallel below sin^2(angle) = 1e-8 (not |det| < 1e-15), and parallel capsules
get contacts at the two ends of their overlap along the axis (not the first two of four end
probes). Phalanx follows 4.0; the parallel sets here pin that behaviour down.
"""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
from phalanx import _phalanx  # noqa: E402

PLANE, SPHERE, CAPSULE, BOX = 0, 2, 3, 6
NAMES = {PLANE: "plane", SPHERE: "sphere", CAPSULE: "capsule", BOX: "box"}
TOL = 1e-9
NPOSE = 3000  # poses per pose set


def model_xml(type1: int, size1, type2: int, size2) -> str:
    """two geoms of the given MuJoCo types and sizes, geom1 a plane on a mocap body or a free body"""

    def geom(t, s):
        return f'<geom type="{NAMES[t]}" size="{" ".join(repr(float(x)) for x in s)}"/>'

    body1 = (f'<body mocap="true">{geom(type1, size1)}</body>' if type1 == PLANE
             else f"<body><freejoint/>{geom(type1, size1)}</body>")
    return (f"<mujoco><worldbody>{body1}<body><freejoint/>{geom(type2, size2)}</body>"
            "</worldbody></mujoco>")


def random_quat(rng: np.random.Generator, n: int) -> np.ndarray:
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a.T
    w2, x2, y2, z2 = b.T
    return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2], 1)


def near_axis_aligned(rng: np.random.Generator, n: int, tilt: float) -> np.ndarray:
    """each quaternion near the identity or near a quarter turn about y (z up or z along x)"""
    small = np.concatenate([np.ones((n, 1)), tilt * rng.uniform(-1, 1, (n, 3))], 1)
    small /= np.linalg.norm(small, axis=1, keepdims=True)
    quarter = np.where(rng.uniform(size=(n, 1)) < 0.5, [[1.0, 0, 0, 0]],
                       [[np.cos(np.pi / 4), 0, np.sin(np.pi / 4), 0]])
    return quat_mul(small, quarter)


def poses(kind: str, rng: np.random.Generator, n: int, spread: float):
    """positions and quaternions of both geoms: (p1, q1, p2, q2)"""
    p1 = rng.uniform(-0.2, 0.2, (n, 3))
    p2 = p1 + rng.uniform(-spread, spread, (n, 3))
    if kind == "random":
        q1, q2 = random_quat(rng, n), random_quat(rng, n)
    elif kind == "aligned":
        q1, q2 = near_axis_aligned(rng, n, 0.05), near_axis_aligned(rng, n, 0.05)
    elif kind in ("parallel", "near-parallel"):
        # equal or opposite z axes; near-parallel turns geom2 by an angle log-uniform in
        # [1e-9, 1e-2] about a random axis, across MuJoCo's parallel threshold sin^2 = 1e-8
        q1 = random_quat(rng, n)
        q2 = q1.copy()
        if kind == "near-parallel":
            angle = np.exp(rng.uniform(np.log(1e-9), np.log(1e-2), n))
            axis = rng.normal(size=(n, 3))
            axis /= np.linalg.norm(axis, axis=1, keepdims=True)
            q2 = quat_mul(q2, np.concatenate([np.cos(angle / 2)[:, None],
                                              np.sin(angle / 2)[:, None] * axis], 1))
        flip = rng.uniform(size=n) < 0.5  # half a turn about x: opposite z axes
        q2[flip] = quat_mul(q2[flip], np.tile([0.0, 1.0, 0.0, 0.0], (flip.sum(), 1)))
    else:
        raise ValueError(kind)
    return p1, q1, p2, q2


def mujoco_contacts(type1, size1, type2, size2, p1, q1, p2, q2):
    """MuJoCo's frames and contacts of every pose: (xpos1, xmat1, xpos2, xmat2, contacts), the
    contacts a list per pose of (pos, normal, dist)"""
    m = mujoco.MjModel.from_xml_string(model_xml(type1, size1, type2, size2))
    d = mujoco.MjData(m)
    n = len(p1)
    xpos = np.zeros((2, n, 3))
    xmat = np.zeros((2, n, 3, 3))
    contacts = []
    for e in range(n):
        if type1 == PLANE:
            d.mocap_pos[0], d.mocap_quat[0] = p1[e], q1[e]
            d.qpos[:] = np.concatenate([p2[e], q2[e]])
        else:
            d.qpos[:] = np.concatenate([p1[e], q1[e], p2[e], q2[e]])
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        for g in range(2):
            xpos[g, e] = d.geom_xpos[g]
            xmat[g, e] = d.geom_xmat[g].reshape(3, 3)
        cons = []
        for c in d.contact[: d.ncon]:
            assert tuple(c.geom) == (0, 1), "geom1 must be the geom of the smaller type"
            cons.append((c.pos.copy(), c.frame[:3].copy(), float(c.dist)))
        contacts.append(cons)
    return xpos[0], xmat[0], xpos[1], xmat[1], contacts


def padded(size) -> np.ndarray:
    return np.array(list(size) + [0.0] * (3 - len(size)))


def assert_same_contacts(ref, count, pos, normal, dist, tol=TOL) -> float:
    """the same number of contacts per pose, and, matched as sets by position, equal pos, normal
    and dist to tol; returns the worst difference"""
    counts_mj = np.array([len(c) for c in ref])
    mismatch = np.flatnonzero(counts_mj != count)
    assert mismatch.size == 0, (
        f"{mismatch.size} poses differ in contact count, first {mismatch[0]}: "
        f"MuJoCo {counts_mj[mismatch[0]]}, Phalanx {count[mismatch[0]]}")
    worst = 0.0
    for e, cons in enumerate(ref):
        free = list(range(count[e]))
        for rp, rn, rd in cons:
            # the nearest unmatched Phalanx contact
            k = min(free, key=lambda k: np.linalg.norm(pos[e, k] - rp))
            free.remove(k)
            err = max(np.abs(pos[e, k] - rp).max(), np.abs(normal[e, k] - rn).max(),
                      abs(dist[e, k] - rd))
            worst = max(worst, err)
            assert err <= tol, (
                f"pose {e}: MuJoCo pos {rp} normal {rn} dist {rd}; "
                f"Phalanx pos {pos[e, k]} normal {normal[e, k]} dist {dist[e, k]}")
    return worst


def compare(type1, size1, type2, size2, kind, spread, seed, min_contacts, min_multi=0):
    """run one pose set through both and assert contact-by-contact agreement; returns the
    worst difference and the contact counts"""
    rng = np.random.default_rng(seed)
    p1, q1, p2, q2 = poses(kind, rng, NPOSE, spread)
    x1, r1, x2, r2, ref = mujoco_contacts(type1, size1, type2, size2, p1, q1, p2, q2)
    count, pos, normal, dist, _ = _phalanx.collide_pairs(type1, padded(size1), x1, r1, type2,
                                                      padded(size2), x2, r2, 0.0)
    worst = assert_same_contacts(ref, count, pos, normal, dist)
    # the pose set reached what it was built for
    assert count.sum() >= min_contacts, f"only {count.sum()} contacts"
    assert (count >= 2).sum() >= min_multi, f"only {(count >= 2).sum()} multi-point poses"
    return worst, count


# (name, type1, size1, type2, size2, pose kind, centre spread, min contacts, min multi-point poses)
CASES = [
    ("plane-sphere", PLANE, [0, 0, 1], SPHERE, [0.3], "random", 0.4, 1000, 0),
    ("plane-capsule", PLANE, [0, 0, 1], CAPSULE, [0.2, 0.4], "random", 0.6, 1000, 200),
    ("plane-capsule-lying", PLANE, [0, 0, 1], CAPSULE, [0.2, 0.4], "aligned", 0.3, 1000, 300),
    ("plane-box", PLANE, [0, 0, 1], BOX, [0.3, 0.2, 0.4], "random", 0.6, 1000, 300),
    ("plane-box-resting", PLANE, [0, 0, 1], BOX, [0.3, 0.2, 0.4], "aligned", 0.45, 1000, 300),
    ("sphere-sphere", SPHERE, [0.3], SPHERE, [0.2], "random", 0.4, 1000, 0),
    ("sphere-capsule", SPHERE, [0.3], CAPSULE, [0.2, 0.4], "random", 0.6, 500, 0),
    ("sphere-box", SPHERE, [0.3], BOX, [0.3, 0.2, 0.4], "random", 0.6, 800, 0),
    ("sphere-box-inside", SPHERE, [0.1], BOX, [0.3, 0.2, 0.4], "random", 0.25, 2500, 0),
    ("capsule-capsule", CAPSULE, [0.2, 0.4], CAPSULE, [0.15, 0.3], "random", 0.6, 500, 0),
    ("capsule-capsule-parallel", CAPSULE, [0.2, 0.4], CAPSULE, [0.15, 0.3], "parallel", 0.4,
     1000, 300),
    ("capsule-capsule-near-parallel", CAPSULE, [0.2, 0.4], CAPSULE, [0.15, 0.3],
     "near-parallel", 0.4, 1000, 300),
    ("capsule-box", CAPSULE, [0.2, 0.4], BOX, [0.3, 0.2, 0.4], "random", 0.7, 800, 200),
    ("capsule-box-lying", CAPSULE, [0.1, 0.4], BOX, [0.6, 0.5, 0.1], "aligned", 0.35, 800, 200),
    ("capsule-box-aligned", CAPSULE, [0.2, 0.4], BOX, [0.3, 0.2, 0.4], "aligned", 0.6, 800, 200),
    ("box-box", BOX, [0.3, 0.2, 0.4], BOX, [0.25, 0.35, 0.15], "random", 0.7, 800, 200),
    ("box-box-stacked", BOX, [0.6, 0.5, 0.1], BOX, [0.25, 0.35, 0.15], "aligned", 0.3, 2000,
     300),
]


@pytest.mark.parametrize("name,type1,size1,type2,size2,kind,spread,min_contacts,min_multi",
                         CASES, ids=[c[0] for c in CASES])
def test_matches_mujoco(name, type1, size1, type2, size2, kind, spread, min_contacts,
                        min_multi):
    seed = sum(map(ord, name))
    worst, counts = compare(type1, size1, type2, size2, kind, spread, seed, min_contacts,
                            min_multi)
    print(f"{name}: {NPOSE} poses, {counts.sum()} contacts, counts "
          f"{np.bincount(counts).tolist()}, worst difference {worst:.1e}")


def test_box_box_reaches_full_manifolds_and_edge_contacts():
    """box-box's two stage-2 branches both occur and agree: 8-point face manifolds (a cube
    turned about the face normal over another) and single edge-edge contacts, whose normal is
    no face normal of either box"""
    rng = np.random.default_rng(5)
    n = 500
    size = [0.3, 0.3, 0.3]
    # face manifolds: the top cube turned by 20..70 degrees about z, slightly tilted
    angle = rng.uniform(np.radians(20), np.radians(70), n)
    turn = np.stack([np.cos(angle / 2), 0 * angle, 0 * angle, np.sin(angle / 2)], 1)
    small = np.concatenate([np.ones((n, 1)), 0.002 * rng.uniform(-1, 1, (n, 3))], 1)
    q2 = quat_mul(small / np.linalg.norm(small, axis=1, keepdims=True), turn)
    p1 = np.zeros((n, 3))
    p2 = np.stack([0.02 * rng.uniform(-1, 1, n), 0.02 * rng.uniform(-1, 1, n),
                   0.6 - rng.uniform(0.001, 0.02, n)], 1)
    q1 = np.tile([1.0, 0, 0, 0], (n, 1))
    x1, r1, x2, r2, ref = mujoco_contacts(BOX, size, BOX, size, p1, q1, p2, q2)
    count, pos, normal, dist, _ = _phalanx.collide_pairs(BOX, padded(size), x1, r1, BOX,
                                                      padded(size), x2, r2)
    assert_same_contacts(ref, count, pos, normal, dist)
    assert (count == 8).sum() > n // 2
    # edge-edge: random orientations, single contacts with a normal off every face
    p1, q1, p2, q2 = poses("random", rng, NPOSE, 0.6)
    x1, r1, x2, r2, ref = mujoco_contacts(BOX, size, BOX, size, p1, q1, p2, q2)
    count, pos, normal, dist, _ = _phalanx.collide_pairs(BOX, padded(size), x1, r1, BOX,
                                                      padded(size), x2, r2)
    assert_same_contacts(ref, count, pos, normal, dist)
    single = np.flatnonzero(count == 1)
    faces = np.concatenate([r1[single], r2[single]], 2)  # (n, 3, 6) face normals as columns
    align = np.abs(np.einsum("ni,nij->nj", normal[single, 0], faces)).max(1)
    assert (align < 0.999).sum() > 50


def test_margin_keeps_separated_contacts_like_mujoco():
    """with a margin, contacts up to dist <= margin are reported by both (MuJoCo's margin is the
    geom's margin attribute, summed over the pair)"""
    rng = np.random.default_rng(11)
    n = 1000
    margin = 0.05
    for type1, size1, type2, size2 in [(SPHERE, [0.3], BOX, [0.3, 0.2, 0.4]),
                                       (BOX, [0.3, 0.2, 0.4], BOX, [0.25, 0.35, 0.15]),
                                       (PLANE, [0, 0, 1], CAPSULE, [0.2, 0.4])]:
        xml = model_xml(type1, size1, type2, size2).replace(
            "<worldbody>", f'<default><geom margin="{margin / 2}"/></default><worldbody>')
        m = mujoco.MjModel.from_xml_string(xml)
        d = mujoco.MjData(m)
        p1, q1, p2, q2 = poses("random", rng, n, 0.7)
        count_mj, xs = [], []
        for e in range(n):
            if type1 == PLANE:
                d.mocap_pos[0], d.mocap_quat[0] = p1[e], q1[e]
                d.qpos[:] = np.concatenate([p2[e], q2[e]])
            else:
                d.qpos[:] = np.concatenate([p1[e], q1[e], p2[e], q2[e]])
            mujoco.mj_kinematics(m, d)
            mujoco.mj_collision(m, d)
            count_mj.append(d.ncon)
            xs.append((d.geom_xpos.copy(), d.geom_xmat.reshape(2, 3, 3).copy(),
                       sorted(float(c.dist) for c in d.contact[: d.ncon])))
        count, _, _, dist, _ = _phalanx.collide_pairs(
            type1, padded(size1), np.array([x[0][0] for x in xs]), np.array([x[1][0] for x in xs]),
            type2, padded(size2), np.array([x[0][1] for x in xs]), np.array([x[1][1] for x in xs]),
            margin)
        assert np.array_equal(count, count_mj)
        separated = 0
        for e in range(n):
            np.testing.assert_allclose(sorted(dist[e, : count[e]]), xs[e][2], atol=TOL)
            separated += sum(0 < x <= margin for x in xs[e][2])
        assert separated > 20


def test_collide_pairs_checks_its_arguments():
    one = np.zeros((1, 3))
    rot = np.eye(3)[None]
    with pytest.raises(ValueError, match="type1 must be <= type2"):
        _phalanx.collide_pairs(BOX, np.ones(3), one, rot, SPHERE, np.ones(3), one, rot, 0.0)
    with pytest.raises(ValueError, match=r"rot2 must have shape \(N, 3, 3\)"):
        _phalanx.collide_pairs(SPHERE, np.ones(3), one, rot, BOX, np.ones(3), one, np.eye(3), 0.0)
    with pytest.raises(ValueError, match="have no collision function"):
        _phalanx.collide_pairs(PLANE, np.ones(3), one, rot, PLANE, np.ones(3), one, rot, 0.0)
    with pytest.raises(ValueError, match="geom types"):
        _phalanx.collide_pairs(SPHERE, np.ones(3), one, rot, 7, np.ones(3), one, rot, 0.0)
    count, pos, normal, dist, _ = _phalanx.collide_pairs(SPHERE, np.ones(3), one, rot, SPHERE,
                                                         np.ones(3), one + [0, 0, 1.5], rot)
    assert count.dtype == np.int32 and count.tolist() == [1]
    assert pos.shape == (1, 8, 3) and normal.shape == (1, 8, 3) and dist.shape == (1, 8)
    np.testing.assert_allclose(dist[0, 0], -0.5)  # dist = |c2 - c1| - r1 - r2
    np.testing.assert_allclose(normal[0, 0], [0, 0, 1])
