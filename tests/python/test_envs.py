"""phalanx.envs.VectorEnv: the Gymnasium vector-environment contract.

Gymnasium's environment checker (gymnasium.utils.env_checker.check_env) covers single
environments only, so the vector API is checked here explicitly, with Gymnasium's own space
and data checks where they apply: spaces, reset(seed) determinism, step return shapes and
dtypes, fresh (not reused) return arrays, NEXT_STEP autoreset, partial resets, and Gymnasium's
episode-statistics wrapper on top.
"""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
from gymnasium.utils.env_checker import data_equivalence  # noqa: E402
from gymnasium.utils.passive_env_checker import (  # noqa: E402
    check_action_space,
    check_observation_space,
    data_shares_objects,
)
from gymnasium.utils.seeding import np_random  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

import phalanx  # noqa: E402
import phalanx.envs  # noqa: E402

E = 4

TWO_MOTORS = """<mujoco><option timestep='0.01'/><worldbody>
  <body><joint name='a' type='hinge' axis='0 1 0'/><geom type='capsule' fromto='0 0 0 .3 0 0'
    size='.02' mass='1'/>
    <body pos='.3 0 0'><joint name='b' type='hinge' axis='0 1 0'/>
      <geom type='capsule' fromto='0 0 0 .3 0 0' size='.02' mass='1'/></body></body>
  <body pos='0 0 2'><freejoint/><geom type='sphere' size='.1' mass='1' contype='0'
    conaffinity='0'/></body>
</worldbody><actuator><motor joint='a' ctrlrange='-2 3'/><motor joint='b'/></actuator>
</mujoco>"""


@pytest.fixture
def two_motors(tmp_path):
    """a limited and an unlimited motor on a double pendulum, beside a free-falling sphere"""
    path = tmp_path / "two_motors.xml"
    path.write_text(TWO_MOTORS)
    return path


class Switch:
    """a terminated_fn whose answer the test sets"""

    def __init__(self) -> None:
        self.mask = np.zeros(E, bool)

    def __call__(self, sim):
        return self.mask.copy()


def _env(path, terminated_fn=None, **kwargs):
    return phalanx.envs.VectorEnv(path, E, reward_fn=lambda sim, a: -np.square(sim.qvel).sum(1),
                                  terminated_fn=terminated_fn, **kwargs)


def test_spaces(two_motors):
    env = _env(two_motors)
    nq, nv = env.model.nq, env.model.nv
    assert env.num_envs == E
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    for space in (env.single_action_space, env.action_space):
        check_action_space(space)
        assert isinstance(space, gymnasium.spaces.Box) and space.dtype == np.float32
    for space in (env.single_observation_space, env.observation_space):
        check_observation_space(space)
        assert isinstance(space, gymnasium.spaces.Box) and space.dtype == np.float32
    assert env.single_action_space.shape == (2,) and env.action_space.shape == (E, 2)
    np.testing.assert_array_equal(env.single_action_space.low, [-2, -1])   # ctrlrange / [-1, 1]
    np.testing.assert_array_equal(env.single_action_space.high, [3, 1])
    np.testing.assert_array_equal(env.action_space.low, np.tile([-2, -1], (E, 1)))
    assert env.single_observation_space.shape == (nq + nv,)
    assert env.observation_space.shape == (E, nq + nv)
    assert np.all(env.observation_space.low == -np.inf)
    assert env.action_space.sample().shape == (E, 2)


def test_reset_seed_determinism(two_motors):
    env, other = _env(two_motors), _env(two_motors)
    obs, info = env.reset(seed=3)
    assert obs.shape == (E, env.model.nq + env.model.nv) and obs.dtype == np.float32
    assert obs in env.observation_space and isinstance(info, dict)
    assert data_equivalence(other.reset(seed=3), (obs, info), exact=True)
    assert not np.array_equal(other.reset(seed=4)[0], obs)       # another seed, other states
    assert len({tuple(row) for row in obs}) == E                  # environments differ
    # an unseeded reset continues the generator: not a repeat
    assert not np.array_equal(env.reset()[0], obs)
    # the reset distribution: init +- noise, unit quaternion of the free joint
    env = _env(two_motors, reset_noise_scale=0.1)
    obs, _ = env.reset(seed=0)
    q = env.sim.qpos
    np.testing.assert_allclose(np.linalg.norm(q[:, 5:9], axis=1), 1.0, rtol=1e-12)
    assert np.all(np.abs(q[:, :5] - env.model.qpos0[:5]) <= 0.1)
    np.testing.assert_array_equal(obs, np.concatenate([env.sim.qpos, env.sim.qvel], 1)
                                  .astype(np.float32))
    with pytest.raises(ValueError, match="seed must be an int or None"):
        env.reset(seed=[1, 2, 3, 4])


def test_step_returns(two_motors):
    env = _env(two_motors, terminated_fn=lambda sim: sim.qpos[:, 0] > 10.0)
    obs0, _ = env.reset(seed=1)
    out = env.step(env.action_space.sample())
    obs, reward, terminated, truncated, info = out
    assert obs.shape == (E, env.model.nq + env.model.nv) and obs.dtype == np.float32
    assert obs in env.observation_space
    assert reward.shape == (E,) and reward.dtype == np.float64
    assert terminated.shape == truncated.shape == (E,)
    assert terminated.dtype == truncated.dtype == np.bool_
    assert isinstance(info, dict) and info["status"].shape == (E,) and info["_status"].all()
    np.testing.assert_allclose(reward, -np.square(env.sim.qvel).sum(1))
    # fresh arrays every call, not views of the simulator or of the previous results
    out2 = env.step(np.zeros((E, 2), np.float64))
    assert not data_shares_objects(out, out2)
    assert not np.shares_memory(out2[0], env.sim.qpos) and not np.shares_memory(obs0, obs)


def test_step_determinism(two_motors):
    """the same seed and actions give the same trajectory, autoresets included"""
    runs = []
    for _ in range(2):
        env = _env(two_motors, terminated_fn=lambda sim: sim.qvel[:, 0] > 0.3,
                   max_episode_steps=4, reset_noise_scale=0.1)
        actions = np.random.default_rng(5).uniform(-1, 1, (10, E, 2))
        run = [env.reset(seed=11)]
        run += [env.step(a) for a in actions]
        runs.append(run)
    assert data_equivalence(runs[0], runs[1], exact=True)
    assert any(step[2].any() for step in runs[0][1:])              # some terminated


def test_next_step_autoreset(two_motors):
    """an environment that terminates on step t is reset on step t + 1 (action ignored, first
    observation of a new episode, reward 0, not terminated or truncated); the others step on"""
    switch = Switch()
    env = _env(two_motors, terminated_fn=switch, reset_noise_scale=0.05)
    nq, nv = env.model.nq, env.model.nv
    rng, _ = np_random(21)                       # the generator env.reset(seed=21) makes
    env.reset(seed=21)
    rng.uniform(size=(E, nq)), rng.uniform(size=(E, nv))          # the reset's draws
    actions = np.full((E, 2), 0.5)

    switch.mask[1] = True
    obs, reward, terminated, truncated, _ = env.step(actions)
    np.testing.assert_array_equal(terminated, [False, True, False, False])
    assert not truncated.any()
    after = np.concatenate([env.sim.qpos, env.sim.qvel], 1)
    np.testing.assert_array_equal(obs, after.astype(np.float32))   # the final observation
    assert env.elapsed_steps[1] == 1

    switch.mask[:] = False
    reference = phalanx.Simulator(phalanx.load_model(two_motors), E)
    reference.qpos, reference.qvel = env.sim.qpos, env.sim.qvel
    reference.step(np.where(np.arange(E)[:, None] == 1, 7.0, actions))
    obs, reward, terminated, truncated, _ = env.step(
        np.where(np.arange(E)[:, None] == 1, 7.0, actions))  # env 1's wild action: ignored
    q1 = env.init_qpos + rng.uniform(-0.05, 0.05, (1, nq))
    v1 = env.init_qvel + rng.uniform(-0.05, 0.05, (1, nv))
    q1[:, 5:9] /= np.linalg.norm(q1[:, 5:9])
    np.testing.assert_array_equal(obs[1], np.concatenate([q1[0], v1[0]]).astype(np.float32))
    assert reward[1] == 0.0 and not terminated[1] and not truncated[1]
    assert env.elapsed_steps[1] == 0 and env.sim.time[1] == 0
    others = [0, 2, 3]
    np.testing.assert_array_equal(env.sim.qpos[others], reference.qpos[others])
    assert np.all(reward[others] != 0) and np.all(env.elapsed_steps[others] == 2)

    obs, reward, *_ = env.step(actions)          # env 1 is in its new episode
    assert env.elapsed_steps[1] == 1 and reward[1] != 0


def test_same_step_autoreset(two_motors):
    """with AutoresetMode.SAME_STEP an environment that terminates on step t is reset within
    step t: its reward and terminated flag are step t's, its observation the new episode's
    first, and the final observation is in info["final_obs"]"""
    switch = Switch()
    env = _env(two_motors, terminated_fn=switch, reset_noise_scale=0.05,
               autoreset_mode=AutoresetMode.SAME_STEP)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    nq, nv = env.model.nq, env.model.nv
    rng, _ = np_random(5)
    env.reset(seed=5)
    rng.uniform(size=(E, nq)), rng.uniform(size=(E, nv))
    reference = phalanx.Simulator(phalanx.load_model(two_motors), E)
    reference.qpos, reference.qvel = env.sim.qpos, env.sim.qvel
    actions = np.full((E, 2), 0.5)
    reference.step(actions)

    switch.mask[2] = True
    obs, reward, terminated, truncated, info = env.step(actions)
    np.testing.assert_array_equal(terminated, [False, False, True, False])
    np.testing.assert_array_equal(info["_final_obs"], [False, False, True, False])
    final = np.concatenate([reference.qpos[2], reference.qvel[2]]).astype(np.float32)
    np.testing.assert_array_equal(info["final_obs"][2], final)
    assert info["final_obs"][0] is None
    np.testing.assert_array_equal(reward, -np.square(reference.qvel).sum(1))  # step t's reward
    q2 = env.init_qpos + rng.uniform(-0.05, 0.05, (1, nq))
    v2 = env.init_qvel + rng.uniform(-0.05, 0.05, (1, nv))
    q2[:, 5:9] /= np.linalg.norm(q2[:, 5:9])
    np.testing.assert_array_equal(obs[2], np.concatenate([q2[0], v2[0]]).astype(np.float32))
    assert env.elapsed_steps[2] == 0 and env.elapsed_steps[0] == 1

    switch.mask[:] = False
    obs, reward, terminated, *_ = env.step(actions)  # env 2 steps its new episode at once
    assert env.elapsed_steps[2] == 1 and reward[2] != 0 and not terminated.any()
    with pytest.raises(ValueError, match="autoreset_mode must be"):
        _env(two_motors, autoreset_mode="same")


def test_truncation_and_stopped_physics(two_motors):
    env = _env(two_motors, max_episode_steps=3)
    env.reset(seed=0)
    actions = np.zeros((E, 2))
    for t in range(2):
        *_, terminated, truncated, _ = env.step(actions)
        assert not truncated.any()
    *_, terminated, truncated, _ = env.step(actions)
    assert truncated.all() and not terminated.any()
    obs, reward, terminated, truncated, _ = env.step(actions)       # every env reset
    assert not (terminated.any() or truncated.any()) and np.all(reward == 0)
    assert np.all(env.elapsed_steps == 0)

    # an environment whose state turns NaN stops, is terminated, and reset next step
    env.sim.qpos[2, 0] = np.nan
    _, _, terminated, _, info = env.step(actions)
    np.testing.assert_array_equal(terminated, [False, False, True, False])
    assert info["status"][2] & phalanx.STATUS_NAN_STATE
    obs, _, terminated, _, info = env.step(actions)
    assert np.isfinite(obs).all() and info["status"][2] == 0 and not terminated.any()

    # without a limit episodes run on
    endless = _env(two_motors, max_episode_steps=None)
    endless.reset(seed=0)
    for t in range(5):
        *_, truncated, _ = endless.step(actions)
        assert not truncated.any()
    np.testing.assert_array_equal(endless.elapsed_steps, 5)
    with pytest.raises(ValueError, match="max_episode_steps must be a positive integer"):
        _env(two_motors, max_episode_steps=0)


def test_partial_reset_with_reset_mask(two_motors):
    env = _env(two_motors)
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.ones((E, 2)))
    before = env.sim.qpos.copy()
    mask = np.array([True, False, False, True])
    obs, _ = env.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(env.sim.qpos[~mask], before[~mask])
    assert np.all(env.elapsed_steps == [0, 3, 3, 0])
    assert np.abs(env.sim.qpos[mask, :5] - env.model.qpos0[:5]).max() <= 0.01
    for bad in (mask.astype(int), np.zeros(E, bool), np.ones(E + 1, bool)):
        with pytest.raises(ValueError, match="reset_mask"):
            env.reset(options={"reset_mask": bad})


def test_wrong_actions_are_clear_errors(two_motors):
    env = _env(two_motors)
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(np.zeros((E, 2)))
    env.reset(seed=0)
    before = env.sim.qpos.copy()
    for bad in (np.zeros(2), np.zeros((E, 3)), np.zeros((E + 1, 2)), np.zeros((E, 2, 1))):
        with pytest.raises(ValueError, match=r"actions must have shape \(num_envs, nu\) = "
                                             r"\(4, 2\), got"):
            env.step(bad)
    actions = np.zeros((E, 2))
    actions[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN or inf in 1 environment\(s\): \[3\]"):
        env.step(actions)
    np.testing.assert_array_equal(env.sim.qpos, before)             # nothing was stepped
    scalar = phalanx.envs.VectorEnv(two_motors, E, reward_fn=lambda sim, a: 0.0)
    scalar.reset(seed=0)
    with pytest.raises(ValueError, match=r"reward_fn must return shape \(num_envs,\) = \(4,\)"):
        scalar.step(np.zeros((E, 2)))


def test_gymnasium_episode_statistics_wrapper(two_motors):
    """Gymnasium's RecordEpisodeStatistics reads the autoreset mode and sums the rewards"""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    env = RecordEpisodeStatistics(_env(two_motors, max_episode_steps=3))
    env.reset(seed=0)
    total = np.zeros(E)
    for t in range(3):
        _, reward, _, truncated, info = env.step(np.zeros((E, 2)))
        total += reward
    assert truncated.all() and info["_episode"].all()
    np.testing.assert_allclose(info["episode"]["r"], total, rtol=1e-6)
    np.testing.assert_array_equal(info["episode"]["l"], 3)


def test_randomize_parameters_at_reset(two_motors):
    env = _env(two_motors, randomize={"body_mass": (0.5, 1.5)}, max_episode_steps=2)
    env.reset(seed=0)
    nominal = phalanx.load_model(two_motors).parameter("body_mass")
    masses = env.sim.parameter("body_mass")
    scale = masses[:, 1:] / nominal[1:]
    assert np.all((scale >= 0.5) & (scale < 1.5)) and np.unique(scale[:, 0]).size == E
    env.reset(options={"reset_mask": np.array([False, True, False, False])})
    now = env.sim.parameter("body_mass")
    np.testing.assert_array_equal(np.delete(now, 1, 0), np.delete(masses, 1, 0))
    assert not np.array_equal(now[1], masses[1])


def test_cartpole_tasks():
    env = phalanx.envs.cartpole(E)
    assert env.dt == pytest.approx(0.02) and env.max_episode_steps == 500
    obs, _ = env.reset(seed=0)
    assert obs.shape == (E, 4) and np.abs(obs).max() <= 0.05
    ended = np.zeros(E, bool)
    for _ in range(150):                       # unactuated, the pole falls over
        obs, reward, terminated, truncated, _ = env.step(np.zeros((E, 1)))
        ended |= terminated
        assert np.all(reward[~ended] == 1.0)
        if ended.all():
            break
    assert ended.all() and not truncated.any()

    swing = phalanx.envs.cartpole(E, task="swingup", max_episode_steps=10)
    obs, _ = swing.reset(seed=0)
    assert obs.shape == (E, 5) and swing.single_observation_space.shape == (5,)
    np.testing.assert_allclose(obs[:, 1], -1.0, atol=2e-3)           # cos(angle): hanging
    _, reward, *_ = swing.step(np.ones((E, 1)))
    assert np.all((reward > -0.02) & (reward < 0.01))
    with pytest.raises(ValueError, match="task must be 'balance' or 'swingup'"):
        phalanx.envs.cartpole(E, task="juggle")
