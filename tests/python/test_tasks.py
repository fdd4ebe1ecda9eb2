"""phalanx.envs.make: the standard tasks against the suites they come from.

For every task, a batch is reset and stepped by Phalanx with random actions; at the states it
reaches, the suite's own code computes the reward, termination and observations from MuJoCo at
the same physics state (dm_control: the task's get_reward and get_observation after
reset_context sets qpos, qvel and ctrl; Gymnasium: the environment's own step(), its simulation
replaced by setting the state Phalanx reached), and they must agree to 1e-6. The timing (physics
steps per action, steps per episode) is read from the suites too. Where a task reads contact
forces (Gymnasium's Ant: cfrc_ext), MuJoCo's soft contacts and Phalanx's hard ones give
different forces at the same state: MuJoCo is given Phalanx's cfrc_ext, whose definition
test_body_report holds to MuJoCo's for the same forces.
"""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")
suite = pytest.importorskip("dm_control.suite")

import phalanx.envs  # noqa: E402
from phalanx.testing import dm_control_on_this_mujoco  # noqa: E402

dm_control_on_this_mujoco()
E = 3
STEPS = 12
DM_TASKS = [n for n in phalanx.envs.task_names() if n.startswith("dm_control/")]
GYM_TASKS = [n for n in phalanx.envs.task_names() if n.startswith("gymnasium/")]


def _trajectory(env, steps=STEPS, seed=0):
    """(qpos, qvel, actions, obs, reward, terminated) of every step, with the state before it,
    under uniformly random actions; autoreset steps are left out"""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    low, high = env.single_action_space.low, env.single_action_space.high
    for _ in range(steps):
        before = env.sim.qpos.copy(), env.sim.qvel.copy()
        resetting = env._autoreset.copy()
        actions = rng.uniform(low, high, (env.num_envs, len(low)))
        obs, reward, terminated, truncated, _ = env.step(actions)
        reads_contacts = env.task.reads_contacts
        for e in np.flatnonzero(~resetting):
            out.append(dict(before=(before[0][e], before[1][e]), qpos=env.sim.qpos[e].copy(),
                            qvel=env.sim.qvel[e].copy(), action=actions[e], obs=obs[e],
                            reward=reward[e], terminated=terminated[e]))
            if reads_contacts:
                out[-1]["cfrc_ext"] = env.task.forward_report(env.sim)["cfrc_ext"][e].copy()
    return out


def _near_reference(env, n=8, seed=1):
    """states near the model's reference pose (where the suites' goals mostly are: the cart-pole
    upright, the pendulum and the acrobot's arms straight, the point mass on its target), so
    that the sparse rewards are sampled at 1 too: the reward and observations the task computes
    there, as _trajectory's entries"""
    rng = np.random.default_rng(seed)
    m, sim = env.model, env.sim
    out = []
    for _ in range(n):
        qpos = np.asarray(m.qpos0) + 0.02 * rng.standard_normal((env.num_envs, m.nq))
        qvel = 0.02 * rng.standard_normal((env.num_envs, m.nv))
        actions = rng.uniform(-1, 1, (env.num_envs, m.nu))
        sim.reset(qpos=qpos, qvel=qvel)
        reward, obs = env.task.reward(sim, actions), env.task.observe(sim)
        out += [dict(qpos=qpos[e], qvel=qvel[e], action=actions[e], obs=obs[e],
                     reward=reward[e]) for e in range(env.num_envs)]
    return out


@pytest.mark.parametrize("name", DM_TASKS)
def test_dm_control_task_equals_the_suite(name):
    domain, task = name.split("/")[1].split("-")
    env = phalanx.envs.make(name, E, obs_dtype=np.float64)
    ref = suite.load(domain, task)
    physics = ref.physics
    # timing: physics steps per action and steps per episode
    assert env.frame_skip == ref._n_sub_steps
    assert env.max_episode_steps == int(np.ceil(ref._step_limit))
    for s in _trajectory(env) + _near_reference(env):
        with physics.reset_context():
            physics.data.qpos[:] = s["qpos"]
            physics.data.qvel[:] = s["qvel"]
            physics.data.ctrl[:] = s["action"]
        reward = ref.task.get_reward(physics)
        obs = np.concatenate([np.atleast_1d(v).ravel()
                              for v in ref.task.get_observation(physics).values()])
        np.testing.assert_allclose(s["reward"], reward, rtol=0, atol=1e-6)
        np.testing.assert_allclose(s["obs"], obs, rtol=0, atol=1e-6)


def _replaying(ref, qpos, qvel, cfrc_ext=None):
    """Gymnasium's do_simulation replaced by putting MuJoCo at the state Phalanx reached (and,
    given, Phalanx's contact wrenches in cfrc_ext)"""
    m, d = ref.model, ref.data

    def simulate(ctrl, n_frames):
        d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, qvel, ctrl
        mujoco.mj_forward(m, d)
        mujoco.mj_rnePostConstraint(m, d)
        if cfrc_ext is not None:
            d.cfrc_ext[:] = cfrc_ext

    return simulate


@pytest.mark.parametrize("name", GYM_TASKS)
def test_gymnasium_task_equals_gymnasium(name):
    env = phalanx.envs.make(name, E, obs_dtype=np.float64)
    spec = gymnasium.spec(name.split("/")[1])
    ref = gymnasium.make(spec.id).unwrapped
    ref.reset(seed=0)
    assert env.frame_skip == ref.frame_skip
    assert env.max_episode_steps == spec.max_episode_steps
    assert env.dt == pytest.approx(ref.dt)
    touching = 0
    for s in _trajectory(env):
        ref.set_state(*s["before"])
        ref.do_simulation = _replaying(ref, s["qpos"], s["qvel"], s.get("cfrc_ext"))
        obs, reward, terminated, _, _ = ref.step(s["action"])
        np.testing.assert_allclose(s["reward"], reward, rtol=0, atol=1e-6)
        assert s["terminated"] == terminated
        np.testing.assert_allclose(s["obs"], obs, rtol=0, atol=1e-6)
        touching += np.any(s.get("cfrc_ext", 0) != 0)
    if env.task.reads_contacts:  # contact wrenches took part
        assert touching >= E


def test_initial_states_follow_the_suites():
    """dm_control's walker draws limited joints in their ranges and the humanoid starts free of
    contacts; Gymnasium's reacher puts its goal in the disc of radius 0.2 at rest, and its
    pusher the cylinder in its box, farther than 0.17 from the goal at 0, both at rest"""
    walker = phalanx.envs.make("dm_control/walker-walk", 64)
    walker.reset(seed=1)
    m = walker.model
    limited = np.flatnonzero(np.asarray(m.jnt_limited).reshape(-1))
    lo, hi = np.asarray(m.jnt_range).reshape(-1, 2)[limited].T
    q = walker.sim.qpos[:, np.asarray(m.jnt_qposadr).reshape(-1)[limited]]
    assert ((q >= lo) & (q <= hi)).all()
    assert (q.std(axis=0) > 0.2 * (hi - lo) / np.sqrt(12)).all()  # spread over the range

    humanoid = phalanx.envs.make("dm_control/humanoid-stand", 8)
    humanoid.reset(seed=2)
    found = phalanx.contacts(humanoid.model, humanoid.sim.qpos, humanoid.sim.qvel)
    np.testing.assert_array_equal(found["count"], 0)

    reacher = phalanx.envs.make("gymnasium/Reacher-v5", 256)
    reacher.reset(seed=3)
    goal = reacher.sim.qpos[:, -2:]
    assert (np.linalg.norm(goal, axis=1) < 0.2).all()
    np.testing.assert_array_equal(reacher.sim.qvel[:, -2:], 0)


def test_make_rejects_unknown_tasks():
    with pytest.raises(ValueError, match="unknown task 'dm_control/cheetah-walk'.*cheetah-run"):
        phalanx.envs.make("dm_control/cheetah-walk", 2)
    with pytest.raises(ValueError, match="unknown task 'Pusher-v4'"):
        phalanx.envs.make("Pusher-v4", 2)
    env = phalanx.envs.make("HalfCheetah-v5", 2)
    assert env.task.name == "gymnasium/HalfCheetah-v5"

    pusher = phalanx.envs.make("gymnasium/Pusher-v5", 256)
    pusher.reset(seed=4)
    cylinder = pusher.sim.qpos[:, -4:-2]
    assert (np.linalg.norm(cylinder, axis=1) > 0.17).all()
    assert ((cylinder >= [-0.3, -0.2]) & (cylinder <= [0, 0.2])).all()
    np.testing.assert_array_equal(pusher.sim.qpos[:, -2:], 0)
    np.testing.assert_array_equal(pusher.sim.qvel[:, -4:], 0)
    np.testing.assert_array_equal(pusher.sim.qpos[:, :7], np.broadcast_to(
        np.asarray(pusher.model.qpos0)[:7], (256, 7)))
