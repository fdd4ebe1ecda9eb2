"""phalanx.envs.make's reacher, ball_in_cup, finger, humanoid_CMU, manipulator, stacker,
quadruped, dog and lqr where test_tasks' trajectories seldom go, held to the suite, to MuJoCo and to
analytic facts.

Initial states follow the distributions of the suite's initialize_episode (ranges, spread,
targets, rest); at raw draws the states the rejection drops are those where MuJoCo finds
contacts (ncon of the suite's model, its moved bodies at the draw's poses), and every reset
state has none in either. A partial reset redraws the state and the episode's model values
(``Task.episode_edits``) of the environments it resets only. Sparse rewards are 1 exactly
where the analytic condition holds on both sides of its boundary, and there, as where the
arm's props are on their targets or in the hand, the suite's get_reward and get_observation
(its named model given ``episode_edits(e)``, its touch sensors Phalanx's contacts, as in
test_tasks) agree. The CMU humanoid's centre of mass velocity is MuJoCo's subtree_linvel of
the thorax (not the whole model's), and the props meet each environment's moved receptacle
as in MuJoCo's model with the receptacle moved there. The quadruped starts at the lowest
height, in the suite's 1 cm steps, where MuJoCo finds it free of contacts. The lqr's model is
the suite's drawn with random=0, and its episodes end where the suite's do. The dog's initial
states, activations included, follow the suite's.
"""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
suite = pytest.importorskip("dm_control.suite")

import phalanx  # noqa: E402
import phalanx.envs  # noqa: E402
from phalanx._tasks import randomize_limited_and_rotational_joints  # noqa: E402
from phalanx.testing import dm_control_on_this_mujoco, put_episode_edits  # noqa: E402
from test_tasks import _mujoco_touch  # noqa: E402

dm_control_on_this_mujoco()
ARM_TASKS = ([f"manipulator-{t}" for t in ("bring_ball", "bring_peg", "insert_ball",
                                           "insert_peg")] + ["stacker-stack_2", "stacker-stack_4"])


def _make(name, n, **kwargs):
    return phalanx.envs.make(f"dm_control/{name}", n, **kwargs)


def _suite(name):  # the suite's environment of "domain-task"
    return suite.load(*name.split("-", 1))


def _put(physics, edits, qpos, qvel=0.0, ctrl=0.0):
    """the suite's physics at a state, its model edited as its episode start edits it"""
    put_episode_edits(physics, edits)
    with physics.reset_context():
        physics.data.qpos[:], physics.data.qvel[:], physics.data.ctrl[:] = qpos, qvel, ctrl
    return physics


def _arm_edits(task, pos, quat):
    """the suite's model edits that put the moved bodies at poses (nmocap, 3), (nmocap, 4)"""
    return {(f, b): v[m] for b, m in task.mocap.items() for f, v in (("body_pos", pos),
                                                                     ("body_quat", quat))}


def _equals_the_suite(env, ref, qpos, qvel, actions):
    """the task's reward and observations at states (E, nq), (E, nv) with actions (E, nu)
    equal the suite's get_reward and get_observation at the same states; returns the rewards"""
    sim, task = env.sim, env.task
    sim.reset(qpos=qpos, qvel=qvel)
    sim.ctrl = actions
    reward, obs = task.reward(sim, actions), task.observe(sim)
    found = task.forward_report(sim) if task.reads_forces else {}
    for e in range(env.num_envs):
        physics = _put(ref.physics, task.episode_edits(e), qpos[e], qvel[e], actions[e])
        if task.reads_forces:
            touch = _mujoco_touch(physics, {k: v[e] for k, v in found.items()},
                                  task.touch_sites)
            physics.touch = lambda touch=touch: np.log1p(touch)
        theirs = np.concatenate([np.atleast_1d(v).ravel()
                                 for v in ref.task.get_observation(physics).values()])
        assert ref.task.get_reward(physics) == pytest.approx(reward[e], rel=0, abs=1e-6)
        np.testing.assert_allclose(obs[e], theirs, rtol=0, atol=1e-6)
    return reward


def _raw_draws(env, rng, n):
    """n initial states as the task draws them before rejecting penetrating ones: qpos (n, nq),
    the model Phalanx counts their contacts in, and each draw's model edits for MuJoCo"""
    task, m = env.task, env.model
    qpos = np.tile(np.asarray(m.qpos0, np.float64), (n, 1))
    if task.domain == "ball_in_cup":
        (x0, x1), (z0, z1) = task.ball_range
        qpos[:, task.slides[0]] = rng.uniform(x0, x1, n)
        qpos[:, task.slides[1]] = rng.uniform(z0, z1, n)
    elif task.domain in ("manipulator", "stacker"):
        pos, quat = np.tile(task.mocap_pos0, (n, 1, 1)), np.tile(task.mocap_quat0, (n, 1, 1))
        qpos[:, task.arm_q] = rng.uniform(task.arm_low, task.arm_high, (n, 8))
        qpos[:, task.finger] = qpos[:, task.thumb]
        task.draw(rng, qpos, np.zeros((n, m.nv)), pos, quat)
        task.candidates.set_parameter("mocap_pos", pos)
        task.candidates.set_parameter("mocap_quat", quat)
        return qpos, task.candidates, [_arm_edits(task, pos[e], quat[e]) for e in range(n)]
    else:
        randomize_limited_and_rotational_joints(m, qpos, rng)
    return qpos, m, [task.episode_edits(0)] * n


@pytest.mark.parametrize("name", ["ball_in_cup-catch", "finger-turn_hard",
                                  "humanoid_CMU-stand", *ARM_TASKS])
def test_initial_states_reject_what_mujoco_finds_touching(name, rng):
    """the suite redraws while MuJoCo's ncon > 0: at raw draws Phalanx's contacts are MuJoCo's
    (but where the deepest is a touch at distance 0: the insert tasks' prop on its target fits
    its cup or slot exactly, and rounding decides), and a reset's states touch nothing"""
    env = _make(name, 24)
    ref = _suite(name)
    qpos, model, edits = _raw_draws(env, rng, 150)
    found = phalanx.contacts(model, qpos)
    live = np.arange(found["dist"].shape[1]) < found["count"][:, None]
    deepest = np.where(live, found["dist"], np.inf).min(axis=1)
    touching = 0
    for e in range(qpos.shape[0]):
        d = _put(ref.physics, edits[e], qpos[e]).data
        if (found["count"][e] > 0) != (d.ncon > 0):
            theirs = d.contact.dist[:d.ncon].min() if d.ncon else np.inf
            assert "insert" in name and min(deepest[e], theirs) >= -1e-12, (e, deepest[e])
            touching += 1
    rejected = (found["count"] > 0).mean()
    assert 0.02 < rejected < 1 and touching <= 0.05 * qpos.shape[0], (rejected, touching)
    env.reset(seed=2)
    np.testing.assert_array_equal(phalanx.contacts(env.model, env.sim.qpos)["count"], 0)
    for e in range(env.num_envs):
        assert _put(ref.physics, env.task.episode_edits(e), env.sim.qpos[e]).data.ncon == 0


@pytest.mark.parametrize("name", ["reacher-hard", "ball_in_cup-catch", "finger-turn_easy",
                                  "humanoid_CMU-stand", "manipulator-insert_peg",
                                  "stacker-stack_4"])
def test_partial_reset_redraws_only_the_reset_episodes(name):
    """the state and the episode's model edits change for the environments reset only, and
    the edits returned before the reset still hold the episode they were returned for"""
    env = _make(name, 8)
    env.reset(seed=7)
    qpos = env.sim.qpos.copy()
    before = [env.task.episode_edits(e) for e in range(8)]  # as returned
    edits = [{k: np.copy(v) for k, v in d.items()} for d in before]
    mask = np.arange(8) % 3 == 0
    env.reset(options={"reset_mask": mask})
    after = [env.task.episode_edits(e) for e in range(8)]
    for e in range(8):
        assert (np.any(env.sim.qpos[e] != qpos[e])) == mask[e]
        assert after[e].keys() == edits[e].keys()
        moved = [not np.array_equal(after[e][k], v) for k, v in edits[e].items()]
        assert any(moved) == (mask[e] and bool(edits[e])), (e, after[e], edits[e])
        for k, v in edits[e].items():
            np.testing.assert_array_equal(before[e][k], v, err_msg=f"{e} {k}")
    if hasattr(env.task, "poses"):  # the physics uses the poses the edits report
        np.testing.assert_array_equal(env.sim.parameter("mocap_pos"), env.task.poses[0])
        np.testing.assert_array_equal(env.sim.parameter("mocap_quat"), env.task.poses[1])


def test_reacher_and_ball_in_cup_initial_states():
    """reacher: the shoulder uniform in [-pi, pi], the wrist in its +-160 degrees, at rest, the
    target at a distance uniform in [0.05, 0.2] and uniform in angle, its radius the task's;
    ball_in_cup: the cup at rest at its origin, the ball at rest in x [-0.2, 0.2],
    z [0.2, 0.5], sometimes inside the cup"""
    n = 512
    for task, size in (("easy", 0.05), ("hard", 0.015)):
        env = _make(f"reacher-{task}", n)
        env.reset(seed=3)
        q = env.sim.qpos
        lo, hi = np.asarray(env.model.jnt_range).reshape(-1, 2)[1]
        assert hi == pytest.approx(np.deg2rad(160)) and lo == -hi
        assert (np.abs(q[:, 0]) <= np.pi).all() and q[:, 0].std() > 0.9 * 2 * np.pi / 12**0.5
        assert ((q[:, 1] >= lo) & (q[:, 1] <= hi)).all()
        assert q[:, 1].std() > 0.9 * (hi - lo) / 12**0.5
        np.testing.assert_array_equal(env.sim.qvel, 0)
        target = np.array([env.task.episode_edits(e)[("geom_pos", "target")]
                           for e in range(n)])
        distance = np.linalg.norm(target[:, :2], axis=1)
        assert ((distance >= 0.05) & (distance <= 0.2)).all()
        assert abs(distance.mean() - 0.125) < 0.01  # uniform in distance, not in area
        angle = np.arctan2(target[:, 0], target[:, 1])
        assert np.histogram(angle, bins=4, range=(-np.pi, np.pi))[0].min() > 0.75 * n / 4
        np.testing.assert_array_equal(target[:, 2], 0.01)  # the file's height
        assert env.task.episode_edits(0)[("geom_size", "target")][0] == size
    env = _make("ball_in_cup-catch", n)
    env.reset(seed=4)
    q = env.sim.qpos
    np.testing.assert_array_equal(q[:, :2], 0)
    np.testing.assert_array_equal(env.sim.qvel, 0)
    assert ((np.abs(q[:, 2]) <= 0.2) & (q[:, 3] >= 0.2) & (q[:, 3] <= 0.5)).all()
    assert ((np.abs(q[:, 2]) < 0.025) & (np.abs(q[:, 3] - 0.35) < 0.025)).any()


@pytest.mark.parametrize("task", ["spin", "turn_easy", "turn_hard"])
def test_finger_initial_states(task):
    """the joints uniform in their ranges (the spinner in [-pi, pi]) at rest; the spin task's
    hinge damping and the turn tasks' target radius the suite's; the targets on the suite's
    circle about the hinge, uniform in angle"""
    env = _make(f"finger-{task}", 512)
    env.reset(seed=5)
    ref = _suite(f"finger-{task}")
    ref.reset()
    physics, m = ref.physics, env.model
    np.testing.assert_array_equal(env.sim.qvel, 0)
    adr = np.asarray(m.jnt_qposadr).reshape(-1)
    lo, hi = np.asarray(m.jnt_range).reshape(-1, 2)[:2].T
    np.testing.assert_allclose(hi, np.deg2rad(110))
    fingers = env.sim.qpos[:, adr[:2]]
    assert ((fingers >= lo) & (fingers <= hi)).all()
    assert (fingers.min(axis=0) < lo + 0.1).all() and (fingers.max(axis=0) > hi - 0.1).all()
    spinner = env.sim.qpos[:, adr[m.joint_id("hinge")]]
    assert (np.abs(spinner) <= np.pi).all() and spinner.min() < -3 and spinner.max() > 3
    damping = np.asarray(m.dof_damping).reshape(-1)[m.joint_id("hinge")]
    assert damping == physics.named.model.dof_damping["hinge"]
    edits = [env.task.episode_edits(e) for e in range(env.num_envs)]
    if task == "spin":
        assert edits[0] == {("dof_damping", "hinge"): physics.named.model.dof_damping["hinge"]}
        return
    assert edits[0][("site_size", "target")][0] == physics.named.model.site_size["target", 0]
    anchor = physics.named.data.xanchor["hinge", ["x", "z"]]
    reach = np.linalg.norm(physics.named.model.site_pos["target", ["x", "z"]] - anchor)
    offset = np.array([d[("site_pos", "target")][::2] for d in edits]) - anchor
    np.testing.assert_allclose(np.linalg.norm(offset, axis=1), reach, rtol=0, atol=1e-12)
    angle = np.arctan2(offset[:, 0], offset[:, 1])
    assert np.histogram(angle, bins=8, range=(-np.pi, np.pi))[0].min() > 32  # 64 expected


def test_humanoid_cmu_initial_states():
    """at rest at the model's root position, its orientation rand(4) normalised (every entry
    >= 0), its hinges spread over their ranges"""
    env = _make("humanoid_CMU-stand", 64)
    env.reset(seed=3)
    m, q = env.model, env.sim.qpos
    np.testing.assert_array_equal(env.sim.qvel, 0)
    np.testing.assert_array_equal(q[:, :3], np.tile(np.asarray(m.qpos0)[:3], (64, 1)))
    np.testing.assert_allclose(np.linalg.norm(q[:, 3:7], axis=1), 1, atol=1e-12)
    assert (q[:, 3:7] >= 0).all() and (q[:, 3:7].std(axis=0) > 0.1).all()
    hinges = np.flatnonzero(np.asarray(m.jnt_type).reshape(-1)
                            == phalanx._phalanx.JOINT_TYPES.index("hinge"))
    assert hinges.size == 56 and np.asarray(m.jnt_limited).reshape(-1)[hinges].all()
    lo, hi = np.asarray(m.jnt_range).reshape(-1, 2)[hinges].T
    h = q[:, np.asarray(m.jnt_qposadr).reshape(-1)[hinges]]
    assert ((h >= lo) & (h <= hi)).all()
    assert (h.std(axis=0) > 0.2 * (hi - lo) / 12**0.5).all()


def _pose(edits, body):
    """a moved body's x, y, z and angle about y (E, 4) from the edits, each a turn about y"""
    pos = np.array([d[("body_pos", body)] for d in edits])
    quat = np.array([d[("body_quat", body)] for d in edits])
    np.testing.assert_allclose(quat[:, [1, 3]], 0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1, atol=1e-12)
    return np.concatenate([pos, 2 * np.arctan2(quat[:, 2:3], quat[:, :1])], axis=1)


@pytest.mark.parametrize("name", ARM_TASKS)
def test_arm_initial_states(name):
    """the arm in its ranges, the hand symmetric, at rest. Manipulator: the target (and its
    receptacle) in x [-0.4, 0.4], z [0.1, 0.4], turned by up to pi (pi/3 inserting); the prop
    in it, in the hand or anywhere (with an x velocity in [-5, 5]). Stacker: the target an odd
    number of box sizes high, at x in [-0.37, 0.37]; the boxes in their box, at rest"""
    n = 256
    env = _make(name, n)
    env.reset(seed=3)
    t, qpos, qvel = env.task, env.sim.qpos, env.sim.qvel
    arm = qpos[:, t.arm_q]
    assert ((arm >= t.arm_low) & (arm <= t.arm_high)).all()
    assert (np.ptp(arm, axis=0) > 0.5 * (t.arm_high - t.arm_low)).all()  # the rejection narrows
    np.testing.assert_array_equal(qpos[:, t.finger], qpos[:, t.thumb])
    np.testing.assert_array_equal(qvel[:, t.arm_v], 0)
    edits = [t.episode_edits(e) for e in range(n)]
    if t.domain == "stacker":
        target = _pose(edits, "target")
        np.testing.assert_allclose(np.unique(target[:, 2]),
                                   t.box_size * (2 * np.arange(t.n_boxes) + 1), atol=1e-15)
        assert (np.abs(target[:, 0]) <= 0.37).all()
        np.testing.assert_array_equal(target[:, [1, 3]], np.tile([0.001, 0], (n, 1)))
        boxes = qpos[:, t.box_q].reshape(n, t.n_boxes, 3)
        assert ((boxes >= [0.1, 0, 0]) & (boxes <= [0.3, 0.7, 2 * np.pi])).all()
        np.testing.assert_array_equal(qvel, 0)
        return
    target = _pose(edits, t.target)
    assert ((np.abs(target[:, 0]) <= 0.4) & (target[:, 2] >= 0.1) & (target[:, 2] <= 0.4)).all()
    np.testing.assert_array_equal(target[:, 1], 0.001)
    bound = np.pi / 3 if t.insert else np.pi
    assert (np.abs(target[:, 3]) <= bound + 1e-12).all()
    assert np.abs(target[:, 3]).max() > 0.9 * bound
    if t.insert:
        receptacle = _pose(edits, "slot" if t.peg else "cup")
        np.testing.assert_array_equal(receptacle[:, [0, 2]], target[:, [0, 2]])
        np.testing.assert_allclose(receptacle[:, 3], target[:, 3], atol=1e-12)
        np.testing.assert_array_equal(receptacle[:, 1], 0)
    prop = qpos[:, t.prop_q]
    in_target = np.all(np.abs(prop - target[:, [0, 2, 3]]) < 1e-12, axis=1)
    k = phalanx.kinematics(env.model, qpos)
    grasp, axes = k["site_xpos"][:, t.grasp], k["site_xmat"][:, t.grasp]
    in_hand = np.all(np.abs(prop[:, :2] - grasp[:, ::2]) < 1e-9, axis=1)
    np.testing.assert_allclose(prop[in_hand, 2],
                               np.pi - np.arctan2(axes[in_hand, 2, 0], axes[in_hand, 0, 0]))
    anywhere = ~in_target & ~in_hand
    assert ((prop[anywhere] >= [-0.5, 0, 0]) & (prop[anywhere] <= [0.5, 0.7, 2 * np.pi])).all()
    assert in_hand.any() and in_target.any() and anywhere.mean() > 0.7
    vx = qvel[:, t.prop_v[0]]
    assert (np.abs(vx) <= 5).all() and (vx[anywhere] != 0).all() and np.abs(vx).max() > 4
    np.testing.assert_array_equal(np.delete(qvel, t.prop_v[0], axis=1), 0)


def _sparse_states(env, rng):
    """states on both sides of a sparse reward's boundary: qpos, qvel and the reward expected"""
    t, n = env.task, env.num_envs
    qpos, qvel = env.sim.qpos.copy(), rng.normal(0, 0.5, (n, env.model.nv))
    if t.domain == "reacher":  # the target moved to around the finger
        finger = t.in_world(env.sim, t.finger_body, t.finger_pos)[:, :2]
        angle, distance = rng.uniform(0, 2 * np.pi, n), rng.uniform(0, 2 * t.radii, n)
        t.targets[:] = finger + distance[:, None] * np.stack([np.cos(angle), np.sin(angle)], 1)
        return qpos, qvel, distance <= t.radii
    if t.domain == "ball_in_cup":  # the ball around the cup's target box (x, z)
        cup, offset = rng.uniform(-0.2, 0.2, (n, 2)), rng.uniform(-0.04, 0.04, (n, 2))
        return (np.concatenate([cup, cup + offset + [0, 0.35]], axis=1), qvel,
                np.all(np.abs(offset) < 0.025, axis=1))
    if t.target_radius is None:  # finger-spin: the hinge at -15 rad/s or faster
        qvel[:, t.hinge_v] = [-30, -15 - 1e-6, -15, -15 + 1e-6, 0, 20]
        return qpos, qvel, qvel[:, t.hinge_v] <= -15
    # the hinge turned from the target's angle so that the tip, on the target's circle, is
    # these fractions of the target's radius from its centre
    hinge = int(np.asarray(env.model.jnt_qposadr).reshape(-1)[env.model.joint_id("hinge")])
    offset = t.targets - t.anchor
    fraction = np.array([0, 0.5, 0.99, 1.01, 1.5, 2])
    turn = 2 * np.arcsin(fraction * t.target_radius / (2 * t.reach))
    qpos[:, hinge] = -np.arctan2(offset[:, 0], offset[:, 1]) + turn
    return qpos, qvel, fraction <= 1


@pytest.mark.parametrize("name", ["reacher-easy", "reacher-hard", "ball_in_cup-catch",
                                  "finger-spin", "finger-turn_easy", "finger-turn_hard"])
def test_sparse_rewards_are_1_where_the_suites_are(name, rng):
    env = _make(name, 6, obs_dtype=np.float64)
    env.reset(seed=7)
    qpos, qvel, expected = _sparse_states(env, rng)
    actions = rng.uniform(-1, 1, (env.num_envs, env.model.nu))
    reward = _equals_the_suite(env, _suite(name), qpos, qvel, actions)
    np.testing.assert_array_equal(reward, expected)
    assert 0 < expected.sum() < env.num_envs


@pytest.mark.parametrize("name", ARM_TASKS)
def test_arm_rewards_where_they_are_earned(name, rng):
    """the prop (a random box) near its target: rewarded (a box's reward needs the hand away
    too); the peg at the grasp site along the hand: at least a third (grasping)"""
    n = 4
    env = _make(name, n, obs_dtype=np.float64)
    env.reset(seed=5)
    t, ref = env.task, _suite(name)
    qpos, qvel = env.sim.qpos.copy(), rng.normal(0, 0.1, (n, env.model.nv))
    actions = rng.uniform(-1, 1, (n, env.model.nu))
    target = _pose([t.episode_edits(e) for e in range(n)],
                   "target" if t.domain == "stacker" else t.target)[:, [0, 2, 3]]
    prop = (t.box_q.reshape(t.n_boxes, 3)[rng.integers(t.n_boxes, size=n)]
            if t.domain == "stacker" else np.tile(t.prop_q, (n, 1)))
    qpos[np.arange(n)[:, None], prop] = target + rng.normal(0, 0.005, (n, 3))
    reward = _equals_the_suite(env, ref, qpos, qvel, actions)
    assert (reward > 0.1).all() if t.domain == "manipulator" else (reward > 0).any(), reward
    if t.domain == "manipulator" and t.peg:
        k = phalanx.kinematics(env.model, qpos)
        grasp, axes = k["site_xpos"][:, t.grasp], k["site_xmat"][:, t.grasp]
        qpos[:, t.prop_q] = np.stack([grasp[:, 0], grasp[:, 2], np.pi - np.arctan2(
            axes[:, 2, 0], axes[:, 0, 0])], axis=1)
        reward = _equals_the_suite(env, ref, qpos, qvel, actions)
        assert (reward >= 1 / 3 - 1e-9).all(), reward


@pytest.mark.parametrize("name", ["humanoid-run", "humanoid_CMU-run"])
def test_com_velocity_is_mujocos_subtree_linvel(name, rng):
    """the humanoid's torso subtree is the whole model; the CMU humanoid's thorax subtree is
    the upper body, whose centre of mass velocity is not the whole model's"""
    env = _make(name, 4)
    env.reset(seed=0)
    qvel = rng.standard_normal(env.sim.qvel.shape)
    env.sim.reset(qpos=env.sim.qpos, qvel=qvel)
    ours = env.task.com_velocity(env.sim)
    mj = env.task.mujoco_model()
    data = mujoco.MjData(mj)
    torso = mj.body(env.task.torso_name).id
    whole = env.task._subtrees[torso].size == mj.nbody - 1
    assert whole == (name == "humanoid-run")
    for e in range(env.num_envs):
        data.qpos[:], data.qvel[:] = env.sim.qpos[e], qvel[e]
        mujoco.mj_forward(mj, data)
        mujoco.mj_subtreeVel(mj, data)
        np.testing.assert_allclose(ours[e], data.subtree_linvel[torso], rtol=0, atol=1e-10)
        if not whole:
            assert np.abs(ours[e] - data.subtree_linvel[0]).max() > 1e-3


@pytest.mark.parametrize("task", ["insert_ball", "insert_peg"])
def test_manipulator_contacts_follow_the_moved_receptacle(task):
    """a prop dropped into each environment's receptacle (drawn per environment) meets it as
    in the suite's model with the receptacle moved there: the same geom pairs and depths"""
    env = _make(f"manipulator-{task}", 6)
    env.reset(seed=11)
    t, ref = env.task, _suite(f"manipulator-{task}")
    edits = [t.episode_edits(e) for e in range(env.num_envs)]
    target = _pose(edits, t.target)
    assert np.unique(target[:, 0]).size == env.num_envs
    qpos = env.sim.qpos.copy()
    qpos[:, t.prop_q] = target[:, [0, 2, 3]] - [0, 0.03, 0]  # into the cup or slot
    found = phalanx.contacts(env.model, qpos)
    assert (found["count"] > 0).all()
    for e in range(env.num_envs):
        d = _put(ref.physics, edits[e], qpos[e]).data
        c = found["count"][e]
        ours = sorted(zip(map(tuple, np.sort(found["geom"][e, :c], axis=1)),
                          found["dist"][e, :c]))
        theirs = sorted(zip(map(tuple, np.sort(d.contact.geom[:d.ncon], axis=1)),
                            d.contact.dist[:d.ncon]))
        assert [g for g, _ in ours] == [g for g, _ in theirs], (e, ours, theirs)
        np.testing.assert_allclose([x for _, x in ours], [x for _, x in theirs], atol=1e-6)


@pytest.mark.parametrize("name", ["quadruped-walk", "quadruped-fetch"])
def test_quadruped_starts_at_the_first_height_mujoco_finds_free(name):
    """the suite's _find_non_contacting_height: the torso raised from the floor in 1 cm steps
    until MuJoCo finds no contact, so MuJoCo's model of the suite finds none at the reset
    height and one a step lower; the hinges at rest, the orientation a unit quaternion
    (walk: any; fetch: a heading about z, the place within 0.9 of the floor's half-size, the
    ball dropped from 2 m with a horizontal throw)"""
    env = _make(name, 12)
    env.reset(seed=5)
    physics = _suite(name).physics
    m, q, v = env.model, env.sim.qpos.copy(), env.sim.qvel.copy()
    quat = q[:, 3:7]
    np.testing.assert_allclose(np.linalg.norm(quat, axis=1), 1, atol=1e-12)
    hinges = env.task.hinge_q
    np.testing.assert_array_equal(q[:, hinges], np.tile(np.asarray(m.qpos0)[hinges], (12, 1)))
    assert np.all(q[:, 2] > 0)
    if name.endswith("fetch"):  # upright: one height
        np.testing.assert_array_equal(quat[:, 1:3], 0)
        spawn = 0.9 * physics.named.model.geom_size["floor", 0]
        ball = env.task.ball_q
        assert np.all(np.abs(q[:, :2]) <= spawn) and np.all(np.abs(q[:, ball:ball + 2]) <= spawn)
        np.testing.assert_array_equal(q[:, ball + 2], 2)
        assert np.all(np.abs(v[:, env.task.ball_v:env.task.ball_v + 2]) > 0)
    else:  # any orientation: heights spread
        assert np.all(quat.std(axis=0) > 0.3) and np.ptp(q[:, 2]) > 0.05
    for e in range(12):
        rest = np.asarray(m.qpos0, np.float64).copy()  # the suite searches from qpos0
        rest[:7] = q[e, :7]
        _put(physics, {}, rest)
        assert physics.data.ncon == 0
        rest[2] -= 0.01
        _put(physics, {}, rest)
        assert physics.data.ncon > 0


@pytest.mark.parametrize("task", ["lqr_2_1", "lqr_6_2"])
def test_lqr_is_the_model_the_suite_draws_and_ends_where_it_does(task, rng):
    """Phalanx's lqr model is the one the suite draws with random=0 (its springs drawn at
    random): 50 steps from the reset states under random controls equal MuJoCo's mj_step on
    the suite's model to 1e-12; the initial positions have norm sqrt(2); episodes end where
    the suite's get_termination says so, on both sides of the state norm 1e-6"""
    env = _make(f"lqr-{task}", 4)
    env.reset(seed=2)
    ref = suite.load("lqr", task, task_kwargs={"random": 0})
    physics = ref.physics
    m, d = physics.model.ptr, physics.data.ptr
    np.testing.assert_allclose(np.linalg.norm(env.sim.qpos, axis=1), np.sqrt(2), rtol=1e-12)
    np.testing.assert_array_equal(env.sim.qvel, 0)
    start = env.sim.qpos.copy()
    ctrl = rng.uniform(-1, 1, (50, 4, m.nu))
    qpos, qvel, _ = phalanx.rollout(env.model, start, env.sim.qvel, ctrl.transpose(1, 0, 2))
    for e in range(4):
        mujoco.mj_resetData(m, d)
        d.qpos[:] = start[e]
        for t in range(50):
            d.ctrl[:] = ctrl[t, e]
            mujoco.mj_step(m, d)
            np.testing.assert_allclose(qpos[e, t], d.qpos, rtol=0, atol=1e-12)
            np.testing.assert_allclose(qvel[e, t], d.qvel, rtol=0, atol=1e-12)
    assert np.abs(qpos[:, -1] - start).max() > 0.1  # the springs moved it
    sim = env.sim
    direction = rng.standard_normal((4, m.nq + m.nv))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    state = direction * np.array([0.5e-6, 0.999e-6, 1.001e-6, 2e-6])[:, None]
    sim.reset(qpos=state[:, :m.nq], qvel=state[:, m.nq:])
    ends = env.task.terminated(sim)
    np.testing.assert_array_equal(ends, [True, True, False, False])
    for e in range(4):
        _put(physics, {}, state[e, :m.nq], state[e, m.nq:])
        assert ends[e] == (ref.task.get_termination(physics) is not None)


@pytest.mark.parametrize("name", ["dog-stand", "dog-fetch"])
def test_dog_initial_states(name):
    """the suite's Stand.initialize_episode: at rest at qpos0 but for a heading about z, the
    root's horizontal velocity and turn rate drawn with spread 2, the activations uniform in
    the control ranges (the environment's act); fetch throws the ball from 0.75 of the floor's
    half-size, 5 cm up, towards the centre at most 5 m/s across and sqrt(2 g 3) up"""
    n = 256
    env = _make(name, n)
    env.reset(seed=4)
    m, task = env.model, env.task
    q, v, act = env.sim.qpos, env.sim.qvel, env.sim.act
    q0 = np.asarray(m.qpos0, np.float64)
    np.testing.assert_array_equal(q[:, task.hinge_q], np.tile(q0[task.hinge_q], (n, 1)))
    np.testing.assert_array_equal(q[:, :3], np.tile(q0[:3], (n, 1)))
    np.testing.assert_array_equal(q[:, 4:6], 0)
    np.testing.assert_allclose(q[:, 3] ** 2 + q[:, 6] ** 2, 1, atol=1e-12)
    root = v[:, :6]
    np.testing.assert_array_equal(root[:, 2:5], 0)
    assert np.allclose(root[:, [0, 1, 5]].std(axis=0), 2, rtol=0.2)
    np.testing.assert_array_equal(v[:, 6:task.ball_v if name.endswith("fetch") else None], 0)
    lo, hi = np.asarray(m.actuator_ctrlrange).reshape(-1, 2).T
    assert m.na == m.nu and np.all((act >= lo) & (act <= hi))
    assert np.all(act.std(axis=0) > 0.2 * (hi - lo) / 12**0.5)
    if name.endswith("fetch"):
        ball = q[:, task.ball_q:task.ball_q + 3]
        np.testing.assert_allclose(np.linalg.norm(ball[:, :2], axis=1), 0.75 * task.floor_size,
                                   rtol=1e-12)
        np.testing.assert_array_equal(ball[:, 2], 0.05)
        throw = v[:, task.ball_v:task.ball_v + 3]
        across = np.linalg.norm(throw[:, :2], axis=1)
        assert np.all(across <= 5 * np.sqrt(2) * 1.2) and np.all(throw[:, 2] >= 0)
        assert np.all(throw[:, 2] <= np.sqrt(2 * 9.81 * 3))
        inward = -(throw[:, :2] * ball[:, :2]).sum(axis=1) / (across * 0.75 * task.floor_size
                                                               + 1e-300)
        assert np.all(inward[across > 0.5] > 0.8)  # towards the centre, give or take the noise
