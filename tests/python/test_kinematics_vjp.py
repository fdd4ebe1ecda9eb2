"""phalanx.kinematics_vjp and phalanx.torch.kinematics: the gradients of the body and site
frames and of the centre of mass and its velocity with respect to the state.

Against MuJoCo: on a chain of hinges and slides (where qpos and qvel share coordinates) the
gradient of a site's position is its Jacobian mj_jacSite transposed times the seed, that of the
centre of mass velocity mj_jacSubtreeCom's, of a body's z axis mj_jacBody's rotational part.
Against finite differences: torch.autograd.gradcheck in double of every output, on a model with
free and ball joints and sites turned in their bodies.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

import phalanx
import phalanx.torch as pt

CHAIN = """<mujoco><worldbody>
  <body name="a" pos="0 0 1"><joint type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.05"/>
    <body name="b" pos="0.5 0 0"><joint type="slide" axis="1 0 0"/><joint type="hinge" axis="0 0 1"/>
      <geom type="box" size="0.1 0.05 0.05" pos="0.1 0 0"/>
      <site name="tip" pos="0.3 0.1 -0.05" euler="10 20 30"/></body></body>
  <body name="c" pos="-1 0 0.5"><joint type="hinge" axis="1 0 0"/>
    <geom type="sphere" size="0.1" pos="0 0.2 0"/></body>
</worldbody></mujoco>"""

FREE = """<mujoco><worldbody>
  <body name="torso" pos="0 0 1"><freejoint/><geom type="box" size="0.2 0.1 0.1"/>
    <site name="s0" pos="0.2 0 0.1" euler="30 0 45"/>
    <body name="arm" pos="0.2 0 0"><joint type="ball"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <body name="hand" pos="0.3 0 0"><joint type="hinge" axis="0 1 0"/>
        <geom type="sphere" size="0.05" pos="0.05 0 0"/>
        <site name="s1" pos="0.1 0.02 0" euler="0 60 10"/></body></body></body>
</worldbody></mujoco>"""


def test_gradients_are_mujocos_jacobians(rng):
    mj = mujoco.MjModel.from_xml_string(CHAIN)
    model = phalanx.from_mujoco(mj)
    data = mujoco.MjData(mj)
    E = 4
    qpos = rng.uniform(-1, 1, (E, mj.nq))
    qvel = rng.standard_normal((E, mj.nv))
    g_site = rng.standard_normal((E, mj.nsite, 3))
    g_comvel = rng.standard_normal((E, 3))
    g_xmat = np.zeros((E, mj.nbody, 3, 3))
    g_xmat[:, 2, :, 2] = rng.standard_normal((E, 3))  # body b's z axis (xmat's third column)
    adj = phalanx.kinematics_vjp(model, qpos, qvel, site_xpos=g_site, com_vel=g_comvel,
                                 xmat=g_xmat)
    for e in range(E):
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_forward(mj, data)
        jac_site, jac_com = np.zeros((3, mj.nv)), np.zeros((3, mj.nv))
        mujoco.mj_jacSite(mj, data, jac_site, None, 0)
        mujoco.mj_jacSubtreeCom(mj, data, jac_com, 0)
        jac_rot = np.zeros((3, mj.nv))
        mujoco.mj_jacBody(mj, data, None, jac_rot, 2)
        # d z / dq = omega x z per unit joint velocity: the columns of jac_rot crossed with z
        z = data.xmat[2].reshape(3, 3)[:, 2]
        jac_z = np.cross(jac_rot.T, z).T
        # com_vel = J_com(q) qvel: its qvel gradient is J_com^T g
        np.testing.assert_allclose(adj["qvel"][e], jac_com.T @ g_comvel[e], rtol=1e-12,
                                   atol=1e-12)
        # xpos part: J_site^T g, plus the z axis' and com_vel's q dependence (checked below by
        # finite differences); here every seed but the site's is zero in a second call
        only_site = phalanx.kinematics_vjp(model, qpos[e:e + 1], site_xpos=g_site[e:e + 1])
        np.testing.assert_allclose(only_site["qpos"][0], jac_site.T @ g_site[e, 0],
                                   rtol=1e-12, atol=1e-12)
        only_z = phalanx.kinematics_vjp(model, qpos[e:e + 1], xmat=g_xmat[e:e + 1])
        np.testing.assert_allclose(only_z["qpos"][0], jac_z.T @ g_xmat[e, 2, :, 2],
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("with_qvel", [True, False])
def test_torch_kinematics_passes_gradcheck(with_qvel, rng):
    mj = mujoco.MjModel.from_xml_string(FREE)
    model = phalanx.from_mujoco(mj)
    E = 2
    qpos = np.tile(mj.qpos0, (E, 1)) + 0.3 * rng.standard_normal((E, mj.nq))
    for a in (3, 7):  # the free and the ball joint's quaternions, normalised
        qpos[:, a:a + 4] /= np.linalg.norm(qpos[:, a:a + 4], axis=1, keepdims=True)
    q = torch.tensor(qpos, dtype=torch.float64, requires_grad=True)
    v = torch.tensor(rng.standard_normal((E, mj.nv)), requires_grad=True) if with_qvel else None
    weights = {n: torch.tensor(rng.standard_normal(shape), dtype=torch.float64)
               for n, shape in (("xpos", (E, mj.nbody, 3)), ("xmat", (E, mj.nbody, 3, 3)),
                                ("site_xpos", (E, mj.nsite, 3)),
                                ("site_xmat", (E, mj.nsite, 3, 3)), ("com", (E, 3)),
                                ("com_vel", (E, 3)))}

    def scalar(q, *v):
        # the quaternions renormalised, so that the finite differences stay on the sphere
        # (kinematics reads them normalised)
        parts = [q[:, :3], q[:, 3:7] / q[:, 3:7].norm(dim=1, keepdim=True),
                 q[:, 7:11] / q[:, 7:11].norm(dim=1, keepdim=True), q[:, 11:]]
        out = pt.kinematics(model, torch.cat(parts, dim=1), v[0] if v else None)
        return sum((out[n] * weights[n]).sum() for n in out)

    inputs = (q, v) if with_qvel else (q,)
    assert torch.autograd.gradcheck(scalar, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)
    out = pt.kinematics(model, q.detach(), v.detach() if with_qvel else None)
    ref = phalanx.kinematics(model, qpos, v.detach().numpy() if with_qvel else None)
    for n, t in out.items():
        np.testing.assert_array_equal(t.numpy(), ref[n])
    assert ("com_vel" in out) == with_qvel


def test_kinematics_vjp_rejects_a_com_vel_seed_without_qvel():
    model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(CHAIN))
    with pytest.raises(ValueError, match="com_vel adjoint needs qvel"):
        phalanx.kinematics_vjp(model, np.zeros((1, 4)), com_vel=np.ones((1, 3)))
    with pytest.raises(ValueError, match="site_xpos"):
        phalanx.kinematics_vjp(model, np.zeros((2, 4)), site_xpos=np.ones((2, 3)))
