"""SIMD passes over environments on the CPU: a batched rollout or step runs packs of
environments on vector lanes (with constraint rows, the stages of fixed structure on the lanes
and collision, rows and the LCP one lane at a time), and each environment's trajectory must
equal the one it has when rolled out alone (one environment never fills a pack: the scalar
kernel), bit for bit, in float32 and float64, whatever the other environments of its pack do,
in air or in a medium (the fluid's drag)."""

import mujoco
import numpy as np
import pytest

import phalanx
from conftest import HUMANOID
from test_equality import EQUALITIES, SCENE


def lanes(dtype):
    """the environments a pack holds on this build's host (AVX-512: 16 float, 8 double; AVX2
    hosts have half)"""
    return phalanx._phalanx.SIMD_LANES[np.dtype(dtype).name]


def min_lanes(W):
    """the fewest lanes of a pack for which a group of them (the lanes with rows, or those
    without) takes its reverse pass on the lanes (PackWalk::kMinLanes): an eighth of them, at
    least one"""
    return max(W // 8, 1)


def random_batch(model, rng, nenv, nstep, dtype, free_joint=True):
    qpos = np.repeat(model.qpos0[None], nenv, axis=0)
    first = 7 if free_joint else 0
    qpos[:, first:] += 0.3 * rng.uniform(-1, 1, size=(nenv, model.nq - first))
    qvel = rng.uniform(-1, 1, size=(nenv, model.nv))
    ctrl = rng.uniform(-1, 1, size=(nenv, nstep, model.nu))
    return qpos.astype(dtype), qvel.astype(dtype), ctrl.astype(dtype)


def humanoids_on_the_floor(rng, dtype, nstep=30, drop=0.3):
    """the humanoid, a pack and three environments more of random states lowered by `drop`
    onto the floor (contacts from the first steps), and random controls"""
    model = phalanx.load_model(str(HUMANOID))
    qpos, qvel, ctrl = random_batch(model, rng, lanes(dtype) + 3, nstep, dtype)
    qpos[:, 2] -= drop
    return model, qpos, qvel, ctrl


def expect_each_alone(model, qpos, qvel, ctrl, qs, vs, status):
    for e in range(len(qpos)):
        q1, v1, s1 = phalanx.rollout(model, qpos[e:e + 1], qvel[e:e + 1], ctrl[e:e + 1])
        assert np.array_equal(qs[e], q1[0]), e
        assert np.array_equal(vs[e], v1[0]), e
        assert status[e] == s1[0], e


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_rollout_equals_each_environment_alone(humanoid, rng, dtype):
    nenv, nstep = 37, 30  # two or four whole packs and a remainder
    qpos, qvel, ctrl = random_batch(humanoid, rng, nenv, nstep, dtype)
    # a lane that branches apart from its pack's at the first step: a zero quaternion on the
    # free joint, which the step normalises to the identity where the others divide by a norm
    qpos[5, 3:7] = 0
    phalanx.pack_stats()
    qs, vs, status = phalanx.rollout(humanoid, qpos, qvel, ctrl)
    stats = phalanx.pack_stats()
    assert not status.any()
    assert stats["passes"] >= (nenv // lanes(dtype)) * nstep
    assert stats["fallbacks"] == 1
    expect_each_alone(humanoid, qpos, qvel, ctrl, qs, vs, status)
    assert phalanx.pack_stats()["passes"] == 0  # one environment: the scalar kernel alone


def test_nan_control_stops_only_its_environment(humanoid, rng):
    nenv, nstep = 16, 10
    qpos, qvel, ctrl = random_batch(humanoid, rng, nenv, nstep, np.float64)
    ctrl[6, 4, 0] = np.nan
    qs, vs, status = phalanx.rollout(humanoid, qpos, qvel, ctrl)
    assert status[6] == phalanx.STATUS_NAN_CTRL
    assert not np.delete(status, 6).any()
    # the stopped environment repeats the state it stopped in
    assert np.array_equal(qs[6, 4:], np.repeat(qs[6, 3:4], nstep - 4, axis=0))
    for e in (5, 7):
        q1, _, _ = phalanx.rollout(humanoid, qpos[e:e + 1], qvel[e:e + 1], ctrl[e:e + 1])
        assert np.array_equal(qs[e], q1[0])


def equality_scene():
    """test_equality's scene with contacts on and four of its couplings at once (a weld, a joint
    and two tendon couplings; its connect would pull the welded box elsewhere), without the
    tendon that wraps over a sphere (whose side of the sphere is a branch on the state that the
    lanes of a pack seldom take alike, so that its steps would go one environment at a time)"""
    wrapping = '<spatial name="sw"><site site="top"/><geom geom="knob"/><site site="tip"/></spatial>'
    assert wrapping in SCENE
    xml = SCENE.replace('<flag contact="disable"/>', "").replace(wrapping, "") % "".join(
        EQUALITIES[k] for k in ("weld", "joint", "tendon", "tendon_of_spatial"))
    return phalanx.from_mujoco(mujoco.MjModel.from_xml_string(xml))


# models with constraint rows: contacts between capsules and with the floor, joint limits, each
# kind of equality, tendons (fixed, spatial, wrapping); both PGS and the stabilised solver
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["humanoid", "humanoid_stabilized", "equalities"])
def test_rollout_with_constraint_rows_equals_each_environment_alone(rng, dtype, case):
    if case == "equalities":
        model, free_joint = equality_scene(), False
    else:
        model, free_joint = phalanx.load_model(str(HUMANOID)), True
        if case == "humanoid_stabilized":
            model.lcp_solver = "pgs_stabilized"
    nenv, nstep = 2 * lanes(dtype) + 3, 60
    qpos, qvel, ctrl = random_batch(model, rng, nenv, nstep, dtype, free_joint)
    if free_joint:
        qpos[:, 2] -= 0.3  # down onto the floor: contacts from the first steps
    phalanx.pack_stats()
    counts = np.zeros((nenv, nstep, phalanx.NUM_COUNTS), np.int32)
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl, counts=counts)
    stats = phalanx.pack_stats()
    assert stats["passes"] >= 2 * nstep - stats["fallbacks"]
    assert stats["fallbacks"] <= 2
    assert (counts[..., phalanx.COUNT_ROWS] > 0).mean() > 0.5  # most steps have rows
    if case == "humanoid":  # PGS's sweeps on the lanes (pgs_lanes) for most of them
        assert stats["lane_sweeps"] > 0.5 * (counts[..., phalanx.COUNT_ROWS] > 0).sum()
    assert not (status & phalanx.STATUS_STOP_MASK).any()
    expect_each_alone(model, qpos, qvel, ctrl, qs, vs, status)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scene", ["fish", "swimmer6"])
def test_rollout_in_a_medium_equals_each_environment_alone(rng, dtype, scene):
    # the fluid's drag on the lanes (test_fluid's scenes: the fish's free body and fins, the
    # swimmer's chain with its joint limits' rows), from gentle states near the reference
    from test_fluid import SCENES

    model = phalanx.from_mujoco(SCENES[scene]())
    assert model.density > 0
    nenv, nstep = 2 * lanes(dtype) + 3, 40
    qpos = np.repeat(model.qpos0[None], nenv, 0) + 0.05 * rng.standard_normal((nenv, model.nq))
    qvel = 0.05 * rng.standard_normal((nenv, model.nv))
    ctrl = rng.uniform(-1, 1, (nenv, nstep, model.nu))
    qpos, qvel, ctrl = (x.astype(dtype) for x in (qpos, qvel, ctrl))
    phalanx.pack_stats()
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl)
    assert phalanx.pack_stats()["passes"] >= nstep
    assert not status.any()
    expect_each_alone(model, qpos, qvel, ctrl, qs, vs, status)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("every, log_rows", [(1, None), (7, None), (7, 150)])
def test_taped_rollout_on_packs_equals_each_environment_alone(rng, dtype, every, log_rows):
    # a tape recorded on packs (checkpoints saved lane by lane, the peaks of contacts and rows
    # per lane, each step's LCP solution) gives each environment the trajectory and the
    # gradients of its tape alone; also when its solution log has room for a few steps only,
    # the lanes' recomputations then solving again from steps that differ lane by lane
    model, qpos, qvel, ctrl = humanoids_on_the_floor(rng, dtype)
    expect_taped_each_alone(model, qpos, qvel, ctrl, rng, every, log_rows=log_rows)


def test_taped_rollout_with_clamped_controls_on_packs_equals_each_environment_alone(rng):
    # controls beyond the motors' ctrlrange are clamped, in some lanes and not in others: the
    # reverse passes take the clamps by selects, so their lanes do not branch apart (the test
    # bounds the passes run again lane by lane) and the gradients are still each environment's
    model, qpos, qvel, ctrl = humanoids_on_the_floor(rng, np.float32)
    assert model.actuator_ctrllimited.all()
    ctrl *= 1.5
    assert 0.2 < (np.abs(ctrl) > model.actuator_ctrlrange[:, 1]).mean() < 0.5
    expect_taped_each_alone(model, qpos, qvel, ctrl, rng, 7)


def test_taped_rollout_with_bounces_on_packs_equals_each_environment_alone(rng):
    # with restitution on the floor the contact rows that approach fast enough bounce: the
    # bounce's term of the rows' Jacobians' adjoint is added lane by lane after the others,
    # which the lanes sum, as each environment's pass alone sums them all
    model, qpos, qvel, ctrl = humanoids_on_the_floor(rng, np.float32, drop=0.1)
    qvel[:, 2] = -2.0  # falling onto the floor
    plain, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    restitution = np.zeros(model.ngeom)
    restitution[0] = 0.5
    model.set_parameter("geom_restitution", restitution)
    bounced, _, _ = phalanx.rollout(model, qpos, qvel, ctrl)
    assert (np.abs(bounced - plain).max(axis=(1, 2)) > 1e-3).all()  # every environment bounces
    expect_taped_each_alone(model, qpos, qvel, ctrl, rng, 7)


def test_complementarity_aware_taped_rollout_on_packs_equals_each_environment_alone(rng):
    # the complementarity-aware pass chooses its LCP classification lane by lane, from the
    # scores of both: its rows' stages stay lane by lane, and the gradients are still each
    # environment's alone
    model, qpos, qvel, ctrl = humanoids_on_the_floor(rng, np.float64)
    expect_taped_each_alone(model, qpos, qvel, ctrl, rng, 7, aware=True)


@pytest.mark.parametrize("integrator", ["euler", "implicitfast"])
def test_taped_rollout_with_equalities_on_packs_equals_each_environment_alone(rng, integrator):
    # the equalities' rows read more of the workspace than contacts and limits do (the body
    # velocities and the subspaces' rates), and so do their reverse passes on the packs, whose
    # second parts branch apart on these lanes and run lane by lane (under implicitfast with
    # each lane's share of the mass matrix's adjoint's terms the lanes computed)
    nenv, nstep = lanes(np.float64) + 3, 30
    model = equality_scene()
    model.integrator = integrator
    model.set_parameter("dof_damping", np.full(model.nv, 0.5))  # (implicitfast's slope)
    qpos, qvel, ctrl = random_batch(model, rng, nenv, nstep, np.float64, free_joint=False)
    for every in (1, 7):
        expect_taped_each_alone(model, qpos, qvel, ctrl, rng, every, lanes_branch=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_implicitfast_taped_rollout_on_packs_equals_each_environment_alone(rng, dtype):
    # implicitfast's second part of a step's reverse pass also reads the mass matrix's adjoint as
    # its terms (the velocity slopes' gradient per term): the lanes take them from the rows'
    # stages on the lanes, or (complementarity-aware, whose rows' stages run lane by lane) each
    # lane's transposed
    model, qpos, qvel, ctrl = humanoids_on_the_floor(rng, dtype)
    model.integrator = "implicitfast"
    assert (model.dof_damping > 0).any()
    for every in (1, 7):
        expect_taped_each_alone(model, qpos, qvel, ctrl, rng, every)
    expect_taped_each_alone(model, qpos, qvel, ctrl, rng, 7, aware=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("integrator", ["euler", "implicitfast"])
def test_taped_rollout_without_rows_on_packs_equals_each_environment_alone(rng, dtype, integrator):
    # the humanoid with contacts and joint limits off has no constraint rows: the whole reverse
    # pass of each step runs on the lanes, on the workspace the recomputation kept there, under
    # either integrator; one lane's zero quaternion branches its pack apart at the first step
    # (forward and reverse), which then runs lane by lane
    model = phalanx.load_model(str(HUMANOID))
    model.contact = model.limit = False
    model.integrator = integrator
    qpos, qvel, ctrl = random_batch(model, rng, lanes(dtype) + 3, 30, dtype)
    for every in (1, 7):
        expect_taped_each_alone(model, qpos, qvel, ctrl, rng, every, rows=False)
    qpos[2, 3:7] = 0
    expect_taped_each_alone(model, qpos, qvel, ctrl, rng, 7, rows=False, forward_branch=True)


def falling_humanoids(rng, dtype, integrator="euler"):
    """the humanoid without joint limits, a pack and three environments more at rest, dropped
    from heights that differ lane by lane, and random controls"""
    model = phalanx.load_model(str(HUMANOID))
    model.limit = False
    model.integrator = integrator
    W = lanes(dtype)
    qpos, qvel, ctrl = random_batch(model, rng, W + 3, 60, dtype)
    qpos[:] = model.qpos0
    qpos[:, 2] += 0.02 + 0.06 * np.arange(W + 3) / W
    qvel[:] = 0
    return model, qpos, qvel, ctrl


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_taped_rollout_falling_onto_the_floor_on_packs_equals_each_environment_alone(rng, dtype):
    # the first steps of falling humanoids have rows in no lane, and take their whole reverse
    # pass on the lanes; then some lanes touch down before others: a step with rows in few lanes
    # walks those alone and takes the pass of the others on the lanes, one with rows in an eighth
    # of them at least takes both (a pack of 8 or fewer has no group too few: an eighth of it is
    # one lane)
    model, qpos, qvel, ctrl = falling_humanoids(rng, dtype)
    W = lanes(dtype)
    least = min_lanes(W)
    for every in (1, 7):
        with_rows, _ = expect_taped_each_alone(model, qpos, qvel, ctrl, rng, every)
        assert (with_rows[:10] == 0).all()
        assert least == 1 or ((with_rows > 0) & (with_rows < least)).any()
        assert ((with_rows >= least) & (W - with_rows >= least)).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("integrator", ["euler", "implicitfast"])
def test_taped_rollout_on_packs_run_again_lane_by_lane_equals_each_environment_alone(
        rng, dtype, integrator):
    # every pass of the backward on the lanes run again lane by lane, as where the lanes branch
    # apart: the passes without rows, and those with, from the rows' stages on the lanes (and
    # under implicitfast each lane's share of the mass matrix's adjoint's terms there)
    model, qpos, qvel, ctrl = falling_humanoids(rng, dtype, integrator)
    phalanx._phalanx._force_reverse_fallbacks(True)
    try:
        for every in (1, 7):
            with_rows, stats = expect_taped_each_alone(model, qpos, qvel, ctrl, rng, every,
                                                       lanes_branch=True)
            assert stats["reverse_passes"] == 0 and stats["reverse_row_passes"] >= 10
            assert (with_rows == 0).any() and (with_rows >= lanes(dtype) // 4).any()
    finally:
        phalanx._phalanx._force_reverse_fallbacks(False)


def expect_taped_each_alone(model, qpos, qvel, ctrl, rng, every, lanes_branch=False,
                            log_rows=None, aware=False, rows=True, forward_branch=False):
    nenv, nstep, _ = ctrl.shape
    dtype = qpos.dtype
    budget = 0  # per environment; 0: the default log
    if log_rows is not None:  # the records', the log's heads and log_rows rows
        bare = phalanx.Tape(checkpoint_every=every, memory_budget=1)
        phalanx.rollout(model, qpos[:1], qvel[:1], ctrl[:1], tape=bare)
        budget = bare.nbytes + 8 * nstep + log_rows * (dtype.itemsize + 8)
    adj_q = rng.standard_normal((nenv, nstep, model.nq)).astype(dtype)
    adj_v = rng.standard_normal((nenv, nstep, model.nv)).astype(dtype)
    phalanx.pack_stats()
    tape = phalanx.Tape(checkpoint_every=every, memory_budget=budget * nenv)
    counts = np.zeros((nenv, nstep, phalanx.NUM_COUNTS), np.int32)
    qs, vs, status = phalanx.rollout(model, qpos, qvel, ctrl, tape=tape, counts=counts)
    if log_rows is not None:
        assert tape.nbytes == budget * nenv
    assert phalanx.pack_stats()["passes"] >= nstep - 2
    g = tape.backward(adj_q, adj_v, complementarity_aware=aware)
    # the backward's recomputation of each segment runs on the pack too (with K = 1, of each
    # step from its record), and so does the part of fixed structure of its steps' reverse
    # passes (with rows in every lane)
    stats = phalanx.pack_stats()
    if forward_branch:  # a step whose lanes branch apart runs again lane by lane
        assert stats["passes"] == nstep and stats["fallbacks"] >= 1
    else:
        assert stats["passes"] >= nstep - 2
        assert stats["passes"] + stats["fallbacks"] == nstep
    # at each step the pack's lanes with rows take a pass on the lanes where they are an eighth
    # of them at least, and so do those without rows (min_lanes); the others walk back alone
    W = lanes(dtype)
    with_rows = (counts[:W, :, phalanx.COUNT_ROWS] > 0).sum(axis=0)
    on_rows, on_flat = with_rows >= min_lanes(W), W - with_rows >= min_lanes(W)
    assert stats["reverse_passes"] + stats["reverse_fallbacks"] == on_rows.sum() + on_flat.sum()
    assert stats["reverse_alone"] == (with_rows * ~on_rows + (W - with_rows) * ~on_flat).sum()
    if not rows:  # every step's whole reverse pass on the lanes
        assert stats["reverse_passes"] >= nstep - 2 and stats["reverse_row_passes"] == 0
    # where the lanes' rows reach the same dof trees (the humanoid's one), the recomputation
    # keeps them in lanes and the rows' stages of fixed structure run on the lanes too
    elif aware:
        assert stats["reverse_row_passes"] == 0
    else:
        assert lanes_branch or stats["reverse_row_passes"] >= on_rows.sum() - 2
    assert lanes_branch or stats["reverse_fallbacks"] <= 2
    assert not (status & phalanx.STATUS_STOP_MASK).any()
    peaks = []
    for e in range(nenv):
        alone = phalanx.Tape(checkpoint_every=every, memory_budget=budget)
        q1, v1, s1 = phalanx.rollout(model, qpos[e:e + 1], qvel[e:e + 1], ctrl[e:e + 1],
                                     tape=alone)
        assert np.array_equal(qs[e], q1[0]) and np.array_equal(vs[e], v1[0]) and status[e] == s1[0]
        peaks.append(alone.peak)
        g1 = alone.backward(adj_q[e:e + 1], adj_v[e:e + 1], complementarity_aware=aware)
        for key in ("qpos", "qvel", "ctrl", "body_mass"):
            assert np.array_equal(g[key][e], g1[key][0]), (e, key)
    assert tape.peak == tuple(np.max(peaks, axis=0))
    assert (tape.peak[1] > 0) == rows
    return with_rows, stats


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_planner_samples_cost_what_they_cost_sampled_alone(dtype):
    # MPPI on the humanoid with contacts and the example's cost terms (head height, uprightness,
    # centre of mass, a quadratic): with W + 3 samples the first W run as a pack; with 5 each
    # runs alone. A sample's noise depends only on its index, so samples 0..4 are the same
    # rollouts in both planners and must cost the same, bit for bit.
    from phalanx import control, costs

    model = phalanx.load_model(str(HUMANOID))
    dt = model.timestep
    q0 = model.qpos0.copy()
    q0[2] -= 0.1
    cost = (costs.BodyHeight(model, "head", 1.5, weight=1000 * dt, terminal_weight=10)
            + costs.BodyUpright(model, "torso", weight=50 * dt, terminal_weight=5)
            + costs.ComPosition(model, [0.0, 0.0], axes="xy", weight=50 * dt)
            + costs.ComVelocity(model, [0.0, 0.0], axes="xy", weight=5 * dt, terminal_weight=1)
            + costs.Quadratic(model, qpos_target=q0, qpos_weight=np.r_[np.zeros(7),
                                                                       np.ones(model.nq - 7)],
                              ctrl_weight=0.1, dt=dt))

    def sample_costs(num_samples):
        planner = control.MPPI(model, 20, num_samples, 0.3, 0.05, cost=cost, seed=3,
                                       dtype=dtype)
        phalanx.pack_stats()
        planner.plan(q0, np.zeros(model.nv))
        return planner.last_costs[0], phalanx.pack_stats()

    packed, stats = sample_costs(lanes(dtype) + 3)
    few = lanes(dtype) - 1  # fewer samples than a pack holds: each is stepped alone
    alone, none = sample_costs(few)
    assert stats["passes"] >= 20 - stats["fallbacks"] and stats["fallbacks"] <= 2
    assert none["passes"] == 0
    assert np.isfinite(alone).all()
    assert np.array_equal(packed[:few], alone)
