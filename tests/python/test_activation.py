"""Actuators with activation dynamics (MuJoCo's dyntype integrator, filter and filterexact, with
actrange, actearly and the intvelocity servo): the activations as state beside qpos and qvel,
trajectories against MuJoCo's mj_step, and gradients (initial state and activations, controls,
gain and bias parameters) of taped rollouts and of step_vjp against central differences."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import phalanx
import phalanx.control
import phalanx.costs
from phalanx.testing import taped_gradient_pair

# a hinge-hinge-slide arm: an integrating velocity servo with its act range, a first-order
# filter, an exact filter read early (actearly) with an affine bias, a clamped integrator, and a
# stateless motor among them
ARM = """<mujoco><option timestep="0.002"><flag contact="disable"/></option><worldbody>
  <body pos="0 0 1"><joint name="a" type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
    <body pos="0.3 0 0"><joint name="b" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.04"/>
      <body pos="0.3 0 0"><joint name="c" type="slide" axis="1 0 0"/>
        <geom type="box" size="0.05 0.05 0.05"/></body></body></body>
</worldbody><actuator>
  <intvelocity name="iv" joint="a" kp="20" kv="1" actrange="-0.05 0.05"/>
  <general name="filter" joint="b" dyntype="filter" dynprm="0.05" gainprm="3" ctrllimited="true"
           ctrlrange="-1 1"/>
  <general name="exact" joint="c" dyntype="filterexact" dynprm="0.03" gainprm="2"
           biastype="affine" biasprm="0 -5 -0.5" actearly="true"/>
  <motor name="motor" joint="c" gear="2"/>
  <general name="integrator" joint="b" dyntype="integrator" gainprm="1.5" actlimited="true"
           actrange="-0.3 0.4"/>
</actuator></mujoco>"""


@pytest.fixture
def arm():
    mj = mujoco.MjModel.from_xml_string(ARM)
    return mj, phalanx.from_mujoco(mj)


def mujoco_rollout(mj, qpos, qvel, act, ctrl):
    """MuJoCo's Euler steps from (qpos, qvel, act) under ctrl (T, nu) -> the states after each"""
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:], d.act[:] = qpos, qvel, act
    out = []
    for u in ctrl:
        d.ctrl[:] = u
        mujoco.mj_step(mj, d)
        out.append((d.qpos.copy(), d.qvel.copy(), d.act.copy()))
    return [np.array(x) for x in zip(*out)]


def test_the_activations_convert_as_mujoco_compiled_them(arm):
    mj, model = arm
    assert model.na == mj.na == 4
    np.testing.assert_array_equal(model.actuator_dyntype, mj.actuator_dyntype)
    np.testing.assert_array_equal(model.actuator_actadr, mj.actuator_actadr)
    np.testing.assert_array_equal(model.actuator_actearly, mj.actuator_actearly)
    np.testing.assert_array_equal(model.actuator_dynprm, mj.actuator_dynprm[:, :3])
    np.testing.assert_array_equal(model.actuator_actrange, mj.actuator_actrange)


def test_trajectories_match_mujoco(arm, rng):
    # 600 steps of random controls from random states and activations; every clamp is reached:
    # the servo's and the integrator's act ranges and the filter's ctrl range
    mj, model = arm
    E, T = 4, 600
    qpos = mj.qpos0 + rng.uniform(-0.3, 0.3, (E, mj.nq))
    qvel = rng.uniform(-1, 1, (E, mj.nv))
    act = rng.uniform(-0.05, 0.05, (E, mj.na))
    ctrl = rng.uniform(-2, 2, (E, T, mj.nu))
    ctrl[:, :T // 2, 4] += 2  # the integrator rises to its upper limit, then falls to the lower
    ctrl[:, T // 2:, 4] -= 3
    qs, vs, acts, status = phalanx.rollout(model, qpos, qvel, ctrl, act=act)
    assert not status.any()
    for e in range(E):
        rq, rv, ra = mujoco_rollout(mj, qpos[e], qvel[e], act[e], ctrl[e])
        np.testing.assert_allclose(acts[e], ra, rtol=0, atol=1e-12)
        np.testing.assert_allclose(qs[e], rq, rtol=0, atol=1e-10)
        np.testing.assert_allclose(vs[e], rv, rtol=0, atol=1e-9)
    assert np.isclose(acts[..., 0], 0.05).any() and np.isclose(acts[..., 0], -0.05).any()
    assert np.isclose(acts[..., 3], 0.4).any() and np.isclose(acts[..., 3], -0.3).any()
    # one step at a time carries the same activations
    q, v, a, _ = phalanx.step(model, qpos, qvel, ctrl[:, 0], act=act)
    np.testing.assert_array_equal(a, acts[:, 0])
    np.testing.assert_array_equal(q, qs[:, 0])


def test_forward_dynamics_reads_the_activations(arm, rng):
    mj, model = arm
    E = 32
    qpos = mj.qpos0 + rng.uniform(-0.5, 0.5, (E, mj.nq))
    qvel = rng.uniform(-2, 2, (E, mj.nv))
    act = rng.uniform(-1, 1, (E, mj.na))
    ctrl = rng.uniform(-2, 2, (E, mj.nu))
    d = mujoco.MjData(mj)
    ref = []
    for q, v, a, u in zip(qpos, qvel, act, ctrl):
        d.qpos[:], d.qvel[:], d.act[:], d.ctrl[:] = q, v, a, u
        mujoco.mj_forward(mj, d)
        ref.append(d.qacc.copy())
    ref = np.array(ref)
    qacc = phalanx.forward_dynamics(model, qpos, qvel, ctrl, act=act)
    np.testing.assert_allclose(qacc, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


PARAMS = ["actuator_gainprm", "actuator_biasprm", "actuator_gear"]


def gentle_start(mj, rng, E, T):
    """E states near qpos0 with small activations and T steps of moderate controls"""
    return (mj.qpos0 + rng.uniform(-0.3, 0.3, (E, mj.nq)), rng.uniform(-0.5, 0.5, (E, mj.nv)),
            rng.uniform(-0.02, 0.02, (E, mj.na)), rng.uniform(-0.5, 0.5, (E, T, mj.nu)))


@pytest.mark.parametrize("name", ["qpos", "qvel", "act", "ctrl"] + PARAMS)
def test_taped_gradients_match_central_differences(arm, rng, name):
    # a loss on the final state and on every step's activations, through 40 steps in double;
    # the controls stay inside the ranges and the activations inside theirs (no kinks)
    mj, model = arm
    qpos, qvel, act, ctrl = gentle_start(mj, rng, 1, 40)
    ctrl[..., 0] *= 0.01  # the servo's act stays within +-0.05
    acts = phalanx.rollout(model, qpos, qvel, ctrl, act=act)[2]
    assert np.abs(acts[..., 0]).max() < 0.05 and np.abs(acts[..., 3]).max() < 0.3
    ad, fd, _ = taped_gradient_pair(model, qpos, qvel, ctrl, name, rng, act=act)
    assert ad == pytest.approx(fd, rel=1e-6, abs=1e-9), name


def test_step_vjp_chains_to_the_tape(arm, rng):
    # step_vjp carries the activations' adjoint from step to step as the tape does
    mj, model = arm
    T = 5
    qpos, qvel, act, ctrl = gentle_start(mj, rng, 2, T)
    wq, wv, wa = (rng.standard_normal((2, n)) for n in (mj.nq, mj.nv, mj.na))
    states = [(qpos, qvel, act)]
    for t in range(T):
        q, v, a, _ = phalanx.step(model, *states[-1][:2], ctrl[:, t], act=states[-1][2])
        states.append((q, v, a))
    gq, gv, ga = wq, wv, wa
    gc = np.zeros(ctrl.shape)
    for t in reversed(range(T)):
        q, v, a = states[t]
        g = phalanx.step_vjp(model, q, v, np.ascontiguousarray(ctrl[:, t]), gq, gv, act=a,
                             adj_act_next=ga)
        gq, gv, ga, gc[:, t] = g["qpos"], g["qvel"], g["act"], g["ctrl"]
    tape = phalanx.Tape(checkpoint_every=2)
    phalanx.rollout(model, qpos, qvel, ctrl, act=act, tape=tape)
    adj = [np.zeros((2, T, n)) for n in (mj.nq, mj.nv, mj.na)]
    adj[0][:, -1], adj[1][:, -1], adj[2][:, -1] = wq, wv, wa
    ref = tape.backward(adj[0], adj[1], adj_act=adj[2])
    for key, got in (("qpos", gq), ("qvel", gv), ("act", ga), ("ctrl", gc)):
        np.testing.assert_allclose(got, ref[key], rtol=1e-12, atol=1e-12)


def test_the_activations_are_required_and_checked(arm):
    mj, model = arm
    q, v, u = mj.qpos0[None], np.zeros((1, mj.nv)), np.zeros((1, mj.nu))
    with pytest.raises(ValueError, match=r"actuator activations \(na = 4\): pass act="):
        phalanx.step(model, q, v, u)
    with pytest.raises(ValueError, match=r"act .*4"):
        phalanx.step(model, q, v, u, act=np.zeros((1, 3)))
    with pytest.raises(ValueError, match="step_jacobian does not cover actuator activations"):
        phalanx.step_jacobians(model, q, v, u)
    # a non-finite activation stops the environment, and only it
    act = np.zeros((2, 4))
    act[1, 2] = np.nan
    _, _, a, status = phalanx.step(model, np.repeat(q, 2, 0), np.zeros((2, mj.nv)),
                                   np.zeros((2, mj.nu)), act=act)
    assert status[0] == 0 and status[1] == phalanx.STATUS_NAN_STATE
    assert np.isnan(a[1, 2]) and np.isfinite(a[0]).all()


def test_taped_gradients_with_contacts_do_not_depend_on_the_checkpoints(arm, rng):
    # with constraint rows the backward pass keeps each recomputed step's reverse inputs (slots)
    # and walks them with the activations' adjoint; every checkpoint spacing gives the same bits
    mj, _ = arm
    xml = ARM.replace('<flag contact="disable"/>', "").replace(
        "<worldbody>", '<worldbody><geom type="plane" size="2 2 0.1" pos="0 0 0.93"/>')
    model = phalanx.from_mujoco(mujoco.MjModel.from_xml_string(xml))
    model.lcp_solver = "pgs_stabilized"
    T = 60
    qpos = np.tile(mj.qpos0, (2, 1)) + rng.uniform(-0.2, 0.2, (2, mj.nq))
    act = rng.uniform(-0.02, 0.02, (2, mj.na))
    ctrl = rng.uniform(-0.5, 0.5, (2, T, mj.nu))
    adj = [rng.standard_normal((2, T, n)) for n in (mj.nq, mj.nv, mj.na)]
    grads = []
    for every in (1, 5):
        tape = phalanx.Tape(checkpoint_every=every)
        counts = np.zeros((2, T, phalanx.NUM_COUNTS), np.int32)
        phalanx.rollout(model, qpos, np.zeros((2, mj.nv)), ctrl, act=act, tape=tape,
                        counts=counts)
        assert counts[..., phalanx.COUNT_ROWS].max() > 0  # the arm touches the floor
        grads.append(tape.backward(adj[0], adj[1], adj_act=adj[2]))
    for key in ("qpos", "qvel", "act", "ctrl", "actuator_gainprm"):
        np.testing.assert_array_equal(grads[0][key], grads[1][key], err_msg=key)


def test_the_simulator_holds_the_activations(arm, rng):
    # sim.act advances with the steps as the functional calls carry it, rollouts return it,
    # reset puts it back
    mj, model = arm
    sim = phalanx.Simulator(model, num_envs=3)
    assert sim.act.shape == (3, mj.na) and not sim.act.any()
    sim.act[:] = rng.uniform(-0.02, 0.02, sim.act.shape)
    act0 = sim.act.copy()
    ctrl = rng.uniform(-1, 1, (3, 6, mj.nu))
    q_ref, v_ref, a_ref, _ = phalanx.rollout(model, sim.qpos.copy(), sim.qvel.copy(), ctrl,
                                             act=act0)
    for t in range(3):
        sim.step(ctrl[:, t])
    np.testing.assert_array_equal(sim.act, a_ref[:, 2])
    qs, vs, acts = sim.rollout(ctrl[:, 3:])
    np.testing.assert_array_equal(acts, a_ref[:, 3:])
    np.testing.assert_array_equal(qs, q_ref[:, 3:])
    np.testing.assert_array_equal(sim.act, a_ref[:, -1])
    sim.reset(env_ids=[1], act=np.full(mj.na, 0.01))
    np.testing.assert_array_equal(sim.act[1], 0.01)
    np.testing.assert_array_equal(sim.act[0], a_ref[0, -1])


def test_planners_roll_their_samples_out_from_the_activations(arm, rng):
    # MPPI's samples start from the problems' (qpos, qvel, act): their costs equal those of
    # phalanx.rollout of the same controls from that state; other activations change them
    mj, model = arm
    cost = phalanx.costs.Quadratic(model, qpos_weight=[1.0, 2.0, 3.0], qvel_weight=[0.1] * 3)
    planner = phalanx.control.MPPI(model, horizon=12, num_samples=8, sigma=0.5,
                                   temperature=1.0, cost=cost, num_problems=2)
    qpos, qvel, act, _ = gentle_start(mj, rng, 2, 1)
    with pytest.raises(ValueError, match=r"actuator activations \(na = 4\): pass act="):
        planner.plan(qpos, qvel)
    planner.plan(qpos, qvel, act=act, iterations=1)
    _, ctrl = planner.last_samples  # (N, K, H, nu)
    K = ctrl.shape[1]
    qs, vs, _, status = phalanx.rollout(model, np.repeat(qpos, K, 0), np.repeat(qvel, K, 0),
                                        ctrl.reshape(2 * K, 12, -1), act=np.repeat(act, K, 0))
    assert not status.any()
    ref = np.asarray(cost(qs, vs, ctrl.reshape(2 * K, 12, -1))).reshape(2, K)
    np.testing.assert_allclose(planner.last_costs, ref, rtol=1e-12)
    qs2, vs2, _, _ = phalanx.rollout(model, np.repeat(qpos, K, 0), np.repeat(qvel, K, 0),
                                     ctrl.reshape(2 * K, 12, -1),
                                     act=np.repeat(act + 0.03, K, 0))
    assert not np.allclose(np.asarray(cost(qs2, vs2, ctrl.reshape(2 * K, 12, -1))), ref.ravel())


@pytest.mark.parametrize("frontend", ["torch", "jax"])
def test_torch_and_jax_carry_the_activations_and_their_gradients(arm, rng, frontend):
    # the wrappers' rollouts and steps return the activations, and their gradients with respect
    # to the initial state, activations and controls equal the tape's
    mj, model = arm
    T = 6
    qpos, qvel, act, ctrl = gentle_start(mj, rng, 2, T)
    wq, wv, wa = (rng.standard_normal((2, T, n)) for n in (mj.nq, mj.nv, mj.na))
    tape = phalanx.Tape(checkpoint_every=3)
    ref_q, _, ref_a, _ = phalanx.rollout(model, qpos, qvel, ctrl, act=act, tape=tape)
    ref = tape.backward(wq, wv, adj_act=wa)
    ref_step = phalanx.step(model, qpos, qvel, ctrl[:, 0], act=act)
    u0 = np.ascontiguousarray(ctrl[:, 0])
    ref_vjp = phalanx.step_vjp(model, qpos, qvel, u0, wq[:, 0], wv[:, 0], act=act,
                               adj_act_next=wa[:, 0])
    if frontend == "torch":
        torch = pytest.importorskip("torch")
        import phalanx.torch as pt
        x = [torch.tensor(a, requires_grad=True) for a in (qpos, qvel, ctrl, act)]
        qs, vs, acts = pt.rollout(model, x[0], x[1], x[2], act=x[3])
        loss = ((torch.tensor(wq) * qs).sum() + (torch.tensor(wv) * vs).sum()
                + (torch.tensor(wa) * acts).sum())
        loss.backward()
        grads = [t.grad.numpy() for t in x]
        outs = [qs.detach().numpy(), acts.detach().numpy()]
        y = [torch.tensor(a, requires_grad=True) for a in (qpos, qvel, u0, act)]
        q1, v1, a1 = pt.step(model, *y[:3], act=y[3])
        ((torch.tensor(wq[:, 0]) * q1).sum() + (torch.tensor(wv[:, 0]) * v1).sum()
         + (torch.tensor(wa[:, 0]) * a1).sum()).backward()
        step_grads = [t.grad.numpy() for t in y]
        step = [t.detach().numpy() for t in (q1, v1, a1)]
    else:
        jax = pytest.importorskip("jax")
        jax.config.update("jax_enable_x64", True)
        import phalanx.jax as pj

        def loss(q, v, u, a):
            qs, vs, acts = pj.rollout(model, q, v, u, act=a)
            return (wq * qs).sum() + (wv * vs).sum() + (wa * acts).sum()

        grads = [np.asarray(g) for g in jax.grad(loss, argnums=(0, 1, 2, 3))(qpos, qvel, ctrl, act)]
        qs, _, acts = pj.rollout(model, qpos, qvel, ctrl, act=act)
        outs = [np.asarray(qs), np.asarray(acts)]
        step = [np.asarray(t) for t in pj.step(model, qpos, qvel, u0, act=act)]

        def step_loss(q, v, u, a):
            q1, v1, a1 = pj.step(model, q, v, u, act=a)
            return (wq[:, 0] * q1).sum() + (wv[:, 0] * v1).sum() + (wa[:, 0] * a1).sum()

        step_grads = [np.asarray(g) for g in
                      jax.grad(step_loss, argnums=(0, 1, 2, 3))(qpos, qvel, u0, act)]
    np.testing.assert_array_equal(outs[0], ref_q)
    np.testing.assert_array_equal(outs[1], ref_a)
    for got, want in zip(step, ref_step[:3]):
        np.testing.assert_array_equal(got, want)
    for got, got_step, key in zip(grads, step_grads, ("qpos", "qvel", "ctrl", "act")):
        np.testing.assert_allclose(got, ref[key], rtol=1e-12, atol=1e-12, err_msg=key)
        np.testing.assert_allclose(got_step, ref_vjp[key], rtol=1e-12, atol=1e-12, err_msg=key)
