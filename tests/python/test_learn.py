"""phalanx.learn: SHAC's pieces against their definitions, its actor gradient against finite
differences through the simulator, and training that improves the cart-pole swing-up.

- TD(lambda) targets: lambda = 0 is the one-step target, lambda = 1 the discounted return
  closed by the window's last value, any lambda the (1 - lambda) lambda^(n-1) mixture of n-step
  returns; a terminated episode adds no value after its end and the recursion stops there.
- The actor loss of a window, -1/(N h) sum [sum gamma^t r_t + gamma^h V'(s_h)], differentiated
  through phalanx.torch.step (its adjoints), equals central differences of the same window
  (same noise, same starts) in a policy parameter, in double.
- Running observation statistics equal numpy's mean and variance of all batches; the target
  critic moves by Polyak averaging; APG's loss is the episode's return; a window whose actor
  gradient is an outlier against the recent median is not applied, and only such a window.
- The differentiable dm_control tasks (CheetahRun, HumanoidWalk) reward and observe as the
  standard tasks do, tolerance is dm_control's, and their gradients pass gradcheck.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import phalanx.learn as pl

F64 = torch.float64


def _brute_lambda_returns(r, values, gamma, lam):
    """the lambda-return of each step of one episode segment without ends: the mixture of its
    n-step returns, the longest closed by the window's last value"""
    h = len(r)
    out = np.zeros(h)
    for t in range(h):
        n_max = h - t
        nstep = []
        for n in range(1, n_max + 1):
            g = sum(gamma**k * r[t + k] for k in range(n)) + gamma**n * values[t + n - 1]
            nstep.append(g)
        weights = [(1 - lam) * lam ** (n - 1) for n in range(1, n_max)] + [lam ** (n_max - 1)]
        out[t] = np.dot(weights, nstep)
    return out


@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_td_lambda_targets_are_lambda_returns(lam, rng):
    h, n, gamma = 6, 4, 0.9
    r = torch.tensor(rng.standard_normal((h, n)), dtype=F64)
    nv = torch.tensor(rng.standard_normal((h, n)), dtype=F64)  # V(s_{t+1})
    none = torch.zeros(h, n, dtype=torch.bool)
    targets = pl.td_lambda_targets(r, nv, none, none, nv[-1], gamma, lam)
    for e in range(n):
        expected = _brute_lambda_returns(r[:, e].numpy(), nv[:, e].numpy(), gamma, lam)
        np.testing.assert_allclose(targets[:, e].numpy(), expected, rtol=1e-12, atol=1e-12)
    if lam == 0.0:
        np.testing.assert_allclose(targets, r + gamma * nv, rtol=1e-14)


def test_td_lambda_targets_stop_at_episode_ends():
    """env 0 terminates at step 2 (no value after it), env 1 is truncated there (its value
    closes the episode); both restart at step 3, a new segment"""
    h, gamma, lam = 5, 0.9, 1.0
    r = torch.arange(1.0, 1.0 + 2 * h, dtype=F64).reshape(h, 2)
    nv = 10 + torch.arange(2.0 * h, dtype=F64).reshape(h, 2)
    terminated = torch.zeros(h, 2, dtype=torch.bool)
    done = torch.zeros(h, 2, dtype=torch.bool)
    terminated[2, 0] = done[2, 0] = done[2, 1] = True
    g = pl.td_lambda_targets(r, nv, terminated, done, nv[-1], gamma, lam).numpy()
    r, nv = r.numpy(), nv.numpy()
    for e, tail in ((0, 0.0), (1, gamma * nv[2, 1])):
        np.testing.assert_allclose(g[2, e], r[2, e] + tail, rtol=1e-14)
        np.testing.assert_allclose(g[0, e], r[0, e] + gamma * r[1, e] + gamma**2 * g[2, e],
                                   rtol=1e-14)
        # the new episode: closed by the window's last value
        np.testing.assert_allclose(g[3, e], r[3, e] + gamma * r[4, e] + gamma**2 * nv[4, e],
                                   rtol=1e-14)


def _shac(**changes):
    cfg = pl.SHACConfig(num_envs=3, horizon=4, normalize_obs=False, actor_hidden=(8, 8),
                        critic_hidden=(8, 8), seed=3)
    return pl.SHAC(pl.CartPoleSwingUp(), pl.replace(cfg, **changes))


def _window_loss(agent, state):
    """the loss of the window from a saved (generator state, q, v, age), restoring it"""
    gen, q, v, age = state
    agent.generator.set_state(gen)
    agent.q, agent.v, agent.age = q.clone(), v.clone(), age.clone()
    return agent.window()[0]


def test_actor_loss_gradient_is_the_finite_difference_of_the_window():
    agent = _shac()
    agent.q = agent.q + torch.tensor([0.3, -1.2], dtype=F64)  # off the hanging rest state
    agent.v = agent.v + torch.tensor([0.5, 2.0], dtype=F64)
    state = (agent.generator.get_state(), agent.q, agent.v, agent.age)
    loss = _window_loss(agent, state)
    agent.actor.zero_grad()
    loss.backward()
    checked = 0
    for param in (agent.actor.net[0].weight, agent.actor.net[-1].bias, agent.actor.log_std):
        grad = param.grad.clone()
        for index in [(0,) * param.dim(), tuple(s - 1 for s in param.shape)]:
            eps = 1e-6
            with torch.no_grad():
                old = param[index].item()
                param[index] = old + eps
                up = _window_loss(agent, state).item()
                param[index] = old - eps
                down = _window_loss(agent, state).item()
                param[index] = old
            fd = (up - down) / (2 * eps)
            assert grad[index].item() == pytest.approx(fd, rel=1e-5, abs=1e-9)
            checked += abs(fd) > 1e-6
    assert checked >= 4  # the gradient is not trivially zero


def test_staggered_resets_spread_the_episode_ends_over_the_windows():
    """each environment's first episode is truncated at an age drawn over the episode; then
    every episode is whole, and the ends of the windows' episodes follow the ages"""
    task = pl.CartPoleSwingUp()
    task.episode_steps = 12
    h, n = 4, 64
    agent = pl.SHAC(task, pl.SHACConfig(num_envs=n, horizon=h, actor_hidden=(8,),
                                        critic_hidden=(8,), seed=2))
    age = agent.age.clone()
    assert age.min() >= 0 and age.max() < task.episode_steps
    # every age class is drawn (64 draws of 12: each missed with probability (11/12)^64)
    assert len(set(age.tolist())) == task.episode_steps
    ended = torch.zeros(n, dtype=torch.long)
    for _ in range(6):
        done = agent.window()[5]
        for t in range(h):  # the steps at which each environment's episode ended
            expected = (age + t + 1) % task.episode_steps == 0
            assert torch.equal(done[t], expected)
        age = (age + h) % task.episode_steps
        assert torch.equal(agent.age, age)
        ended += done.sum(dim=0)
    # 24 steps: each environment ends exactly two episodes, whatever its first age
    assert torch.equal(ended, torch.full((n,), 2))
    unstaggered = pl.SHAC(task, pl.replace(agent.cfg, stagger_resets=False))
    assert torch.equal(unstaggered.age, torch.zeros(n, dtype=torch.long))
    assert not pl.APG(task, agent.cfg).cfg.stagger_resets


def test_evaluation_ends_an_episode_that_diverges():
    """the deterministic policy's mean return; an episode whose state turns NaN ends there
    (its rewards before count) and its neighbours run on"""
    task = pl.CartPoleSwingUp()
    task.episode_steps = 6
    agent = pl.SHAC(task, pl.SHACConfig(num_envs=3, actor_hidden=(8,), critic_hidden=(8,),
                                        seed=4))
    q, v = task.initial_states(3, torch.Generator().manual_seed(99))
    u = torch.zeros(3, 1, dtype=F64)
    rewards = []
    for _ in range(task.episode_steps):
        u = agent.act(q, v, u)
        previous = (q, v)
        q, v = agent._step(q, v, u)
        rewards.append(task.reward(q, v, u, previous))
    rewards = torch.stack(rewards)  # (steps, episodes)
    assert agent.evaluate(3, seed=99) == pytest.approx(rewards.sum(dim=0).mean().item(),
                                                        rel=1e-14)
    step, calls = agent._step, [0]

    def diverging(q, v, u):  # environment 0's state turns NaN in the third step
        assert torch.isfinite(q).all() and torch.isfinite(u).all()
        q, v = step(q, v, u)
        calls[0] += 1
        if calls[0] == 3:
            q = q.clone()
            q[0] = float("nan")
        return q, v

    agent._step = diverging
    expected = (rewards[:2, 0].sum() + rewards[:, 1:].sum()) / 3
    assert agent.evaluate(3, seed=99) == pytest.approx(expected.item(), rel=1e-14)
    assert calls[0] == task.episode_steps


def test_state_gradient_rows_are_clipped_to_a_multiple_of_their_median():
    grad = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.6, 0.8], [1.0, 0.0], [300.0, -400.0]],
                        dtype=F64)
    # nonzero row lengths 5, 1, 1, 500: median 1 (torch's lower middle), bound 2
    out = pl.clip_rows_to_median(grad, factor=2.0)
    np.testing.assert_allclose(out[0], [1.2, 1.6], rtol=1e-15)
    np.testing.assert_allclose(out[4], [1.2, -1.6], rtol=1e-15)
    assert torch.equal(out[1:4], grad[1:4])
    zero = torch.zeros(3, 2, dtype=F64)
    assert torch.equal(pl.clip_rows_to_median(zero, 2.0), zero)


def test_a_chaotic_environment_does_not_outweigh_the_others():
    """a window's actor gradient with one environment's state gradient blown up by 1e6 after
    a step (a hook standing in for a chaotic contact) stays within a factor of the gradient
    without it; unclipped (state_grad_clip=0) it is a million times larger"""
    def gradient(clip, blow_up):
        agent = _shac(num_envs=8, state_grad_clip=clip)
        step = agent._step

        def chaotic(q, v, u):
            q, v = step(q, v, u)
            if blow_up and q.requires_grad:
                scale = torch.ones(q.shape[0], 1, dtype=F64)
                scale[3] = 1e6
                q.register_hook(lambda g: g * scale)
            return q, v

        agent._step = chaotic
        agent.actor.zero_grad()
        agent.window()[0].backward()
        return torch.cat([p.grad.reshape(-1) for p in agent.actor.parameters()]).norm().item()

    assert pl.SHACConfig().state_grad_clip == 0.0  # the paper's: off
    calm = gradient(10.0, False)
    assert gradient(0.0, False) == pytest.approx(calm, rel=1e-12)  # no row was clipped
    assert gradient(0.0, True) > 1e4 * calm
    assert gradient(10.0, True) < 10 * calm


def test_running_norm_is_the_mean_and_variance_of_everything_seen(rng):
    norm = pl.RunningNorm(3)
    batches = [rng.standard_normal((n, 3)) * [1, 10, 0.1] + [5, -2, 0] for n in (7, 30, 2)]
    for b in batches:
        norm.update(torch.tensor(b, dtype=F64))
    data = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), data.var(axis=0), rtol=1e-12)
    x = torch.tensor(data[:4], dtype=F64)
    np.testing.assert_allclose(norm(x).numpy(), (data[:4] - data.mean(0))
                               / np.sqrt(data.var(0) + norm.eps), rtol=1e-12)


def test_target_critic_follows_by_polyak_averaging():
    agent = _shac()
    old = copy.deepcopy(agent.target)
    with torch.no_grad():
        for p in agent.critic.parameters():
            p.add_(torch.randn_like(p))
    agent.update_target()
    a = agent.cfg.target_alpha
    for p_new, p_old, p in zip(agent.target.parameters(), old.parameters(),
                               agent.critic.parameters()):
        torch.testing.assert_close(p_new, a * p_old + (1 - a) * p, rtol=1e-14, atol=1e-14)


def test_the_acting_policy_is_a_polyak_average_of_the_actor():
    """after the n-th applied window the policy's parameters are w old + (1 - w) actor's, with
    w = min(policy_average, (1 + n) / (10 + n)); act() is the policy's mean; a window that is
    not applied moves neither; with policy_average 0 the actor itself acts"""
    state = lambda m: [p.detach().clone() for p in m.parameters()]  # noqa: E731
    agent = _shac(policy_average=0.2)  # (1 + n) / (10 + n): 0.18 at n = 1, 0.25 at n = 2
    assert agent.policy is not agent.actor
    assert all(torch.equal(a, p) for a, p in zip(state(agent.actor), state(agent.policy)))
    for n, w in ((1, 2 / 11), (2, 0.2), (3, 0.2)):
        old = state(agent.policy)
        assert not agent.iteration()["skipped"] and agent.applied == n
        for p, p_old, a in zip(agent.policy.parameters(), old, agent.actor.parameters()):
            torch.testing.assert_close(p, w * p_old + (1 - w) * a, rtol=1e-14, atol=1e-14)
    assert any(not torch.equal(a, p) for a, p in zip(state(agent.actor), state(agent.policy)))
    q, v = pl.CartPoleSwingUp().initial_states(5, torch.Generator().manual_seed(0))
    obs = agent.task.observe(q, v, torch.zeros(5, 1, dtype=F64))
    with torch.no_grad():
        torch.testing.assert_close(agent.act(q, v), agent.policy(obs), rtol=0, atol=0)
        assert (agent.act(q, v) - agent.actor(obs)).abs().max() > 1e-6
    agent.grad_norms.extend([1e-12] * 20)  # the next window is an outlier
    old = state(agent.policy)
    assert agent.iteration()["skipped"] and agent.applied == 3
    assert all(torch.equal(p, p_old) for p, p_old in zip(state(agent.policy), old))
    plain = _shac(policy_average=0.0)
    assert plain.policy is plain.actor


def test_outlier_gradients_are_measured_against_the_recent_median():
    agent = _shac(outlier_factor=10.0, outlier_window=40)
    # too few windows seen (under a tenth of the window): everything finite applies
    agent.grad_norms.extend([1.0, 1.0, 1.0])
    assert not agent.outlier(1e6) and agent.outlier(float("nan")) and agent.outlier(math.inf)
    agent.grad_norms.extend([1.0, 2.0, 3.0, 4.0, 5.0])  # median 1.5 of the eight
    assert not agent.outlier(15.0) and agent.outlier(15.0 + 1e-9)
    # a lasting rise becomes the median and is applied from then on
    for _ in range(40):
        agent.grad_norms.append(100.0)
    assert not agent.outlier(900.0) and agent.outlier(1001.0)
    assert not _shac(outlier_factor=0.0).outlier(1e300)


def test_an_outlier_window_moves_the_critic_but_not_the_actor():
    """a window whose actor gradient is an outlier leaves the actor and its optimiser as they
    were (the same window without the guard moves them) and still fits the critic"""
    state = lambda a: [p.detach().clone() for p in a.parameters()]  # noqa: E731
    for factor in (10.0, 0.0):
        agent = _shac(outlier_factor=factor)
        agent.grad_norms.extend([1e-12] * 20)  # every real gradient is far above this median
        actor, critic = state(agent.actor), state(agent.critic)
        stats = agent.iteration()
        assert stats["skipped"] == (factor > 0) and agent.skipped == int(factor > 0)
        assert stats["grad_norm"] > 1e-9 and agent.grad_norms[-1] == stats["grad_norm"]
        moved = [not torch.equal(p, p0) for p, p0 in zip(agent.actor.parameters(), actor)]
        assert all(moved) if factor == 0 else not any(moved)
        assert (len(agent.actor_opt.state) == 0) == (factor > 0)
        assert any(not torch.equal(p, p0) for p, p0 in zip(agent.critic.parameters(), critic))


def test_apg_loss_is_the_episode_return():
    """a window of the whole (short) episode without critic: -mean sum_t gamma^t r_t / h"""
    task = pl.CartPoleSwingUp()
    task.episode_steps = 6
    agent = pl.APG(task, pl.SHACConfig(num_envs=2, normalize_obs=False, actor_hidden=(8,),
                                       critic_hidden=(8,), seed=1))
    assert agent.cfg.horizon == 6 and agent.critic is None
    gen = agent.generator.get_state()
    q, v = agent.q.clone(), agent.v.clone()
    loss = agent.window()[0]
    agent.generator.set_state(gen)
    total = torch.zeros(2, dtype=F64)
    with torch.no_grad():
        for t in range(6):
            noise = torch.randn(2, 1, generator=agent.generator, dtype=F64)
            u = agent.actor(task.observe(q, v), noise)
            q, v = agent._step(q, v, u)
            total += agent.cfg.gamma**t * task.reward(q, v, u)
    assert loss.item() == pytest.approx(-total.mean().item() / 6, rel=1e-12)
    # the episode ended with the window: every environment restarted
    np.testing.assert_array_equal(agent.age.numpy(), 0)


def test_shac_improves_the_cartpole_swing_up():
    torch.set_num_threads(1)
    # seed 1: its untrained policy barely moves the cart (seed 0's already swings the pole)
    agent = pl.SHAC(pl.CartPoleSwingUp(), pl.SHACConfig(num_envs=32, seed=1))
    before = agent.evaluate(episodes=8)
    history = agent.train(32, eval_every=32)
    after = history["returns"][-1]
    assert history["env_steps"][-1] == 32 * 32 * 32
    # the hanging pole earns about 0.3 per step from its swings; SHAC's first windows swing
    # it higher (about 0.5 per step)
    assert after > before + 100 and after > 200, (before, after)


def test_cheetah_run_is_the_standard_task(rng):
    """CheetahRun's rewards and observations are phalanx.envs' dm_control/cheetah-run's (which
    test_tasks holds to dm_control's) along a random trajectory, and its reward's gradient in
    qvel is the centre of mass Jacobian's forward row over 10 where the speed is in (0, 10)"""
    import phalanx

    task = pl.CheetahRun()
    env = phalanx.envs.make("dm_control/cheetah-run", 4, obs_dtype=np.float64)
    env.reset(seed=0)
    for _ in range(6):
        actions = rng.uniform(-1, 1, (4, 6))
        obs, reward, *_ = env.step(actions)
        q = torch.tensor(env.sim.qpos)
        v = torch.tensor(env.sim.qvel, requires_grad=True)
        r = task.reward(q, v, torch.tensor(actions))
        np.testing.assert_allclose(r.detach().numpy(), reward, rtol=0, atol=1e-12)
        np.testing.assert_allclose(task.observe(q, v).detach().numpy(), obs, rtol=0, atol=1e-12)
    r.sum().backward()
    jac = phalanx.kinematics_vjp(task.model, env.sim.qpos, env.sim.qvel,
                                 com_vel=np.tile([0.1, 0.0, 0.0], (4, 1)))["qvel"]
    moving = (r > 0).numpy() & (r < 1).numpy()
    assert moving.any()
    np.testing.assert_allclose(v.grad.numpy()[moving], jac[moving], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(v.grad.numpy()[~moving], 0)
    q0, v0 = task.initial_states(3, torch.Generator().manual_seed(0))
    assert q0.shape == (3, task.model.nq) and torch.isfinite(q0).all()
    # settled on the floor: 200 steps from rest leave it nearly still
    assert v0.abs().max() < 0.5


def test_ant_is_the_standard_task(rng):
    """Ant's rewards, observations and terminations are phalanx.envs' gymnasium/Ant-v5's
    (which test_tasks holds to Gymnasium's) along random trajectories that make contact, and
    at heights inside and outside the healthy range; the reward's gradient is 1/dt in the
    torso's x, -1/dt in its x at the step's start, minus the controls in the controls (the
    control cost 0.5 |u|^2), and none in the velocities (the contact cost carries none)"""
    import phalanx

    task = pl.Ant()
    n = 6
    env = phalanx.envs.make("gymnasium/Ant-v5", n, obs_dtype=np.float64)
    obs, _ = env.reset(seed=1)
    q, v = torch.tensor(env.sim.qpos), torch.tensor(env.sim.qvel)
    np.testing.assert_allclose(task.observe(q, v, torch.zeros(n, 8)).numpy(), obs, atol=1e-12)
    touched = 0
    for step in range(120):
        actions = rng.uniform(-1, 1, (n, 8))
        previous = (q, v)
        obs, reward, terminated, truncated, _ = env.step(actions)
        # the environments that ended restart: compare those that did not
        kept = ~(terminated | truncated)
        q = torch.tensor(env.sim.qpos, requires_grad=True)
        v = torch.tensor(env.sim.qvel, requires_grad=True)
        u = torch.tensor(actions, requires_grad=True)
        p0 = previous[0].clone().requires_grad_(True)
        r = task.reward(q, v, u, (p0, previous[1]))
        ours = task.terminated(q, v).numpy()
        if kept.any():
            np.testing.assert_allclose(r.detach().numpy()[kept], reward[kept], rtol=0,
                                       atol=1e-10)
            np.testing.assert_allclose(task.observe(q, v, u).detach().numpy()[kept],
                                       obs[kept], rtol=0, atol=1e-12)
            np.testing.assert_array_equal(ours[kept], False)
        touched += int((task.contact_wrenches(q, v, u)[kept].abs().sum(dim=(1, 2)) > 0).sum())
        if step % 40 == 0:
            r.sum().backward()
            dt = task.model.timestep * task.frame_skip
            np.testing.assert_allclose(q.grad[:, 0].numpy(), 1 / dt, rtol=1e-14)
            np.testing.assert_allclose(p0.grad[:, 0].numpy(), -1 / dt, rtol=1e-14)
            np.testing.assert_allclose(u.grad.numpy(), -actions, rtol=1e-14)
            assert v.grad is None  # no path from the velocities to the reward
        q, v = torch.tensor(env.sim.qpos), torch.tensor(env.sim.qvel)
    assert touched > 0
    # termination against the suite's rule on heights inside, at and outside [0.2, 1]
    from types import SimpleNamespace

    qs = np.repeat(env.sim.qpos[:1], 7, axis=0)
    qs[:, 2] = [0.1, 0.2, 0.5, 1.0, 1.2, np.nan, 0.5]
    vs = np.zeros((7, 14))
    vs[6, 3] = np.inf
    expected = ~env.task.healthy(SimpleNamespace(qpos=qs, qvel=vs))
    np.testing.assert_array_equal(task.terminated(torch.tensor(qs), torch.tensor(vs)).numpy(),
                                  expected)
    np.testing.assert_array_equal(expected, [1, 0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("sigmoid", ["gaussian", "linear", "quadratic"])
def test_tolerance_is_dm_controls(sigmoid, rng):
    from dm_control.utils import rewards

    x = rng.uniform(-3, 3, 200)
    for bounds, margin, at in (((0.0, 0.0), 1.0, 0.1), ((-0.5, 1.0), 0.7, 0.3),
                               ((1.0, np.inf), 2.0, 0.0 if sigmoid != "gaussian" else 0.1),
                               ((-1.0, 1.0), 0.0, 0.1)):
        ours = pl.tolerance(torch.tensor(x), bounds=bounds, margin=margin, sigmoid=sigmoid,
                            value_at_margin=at)
        theirs = rewards.tolerance(x, bounds=bounds, margin=margin, sigmoid=sigmoid,
                                   value_at_margin=at)
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-15)


@pytest.mark.parametrize("task", ["stand", "walk"])
def test_humanoid_is_the_standard_task(task, rng):
    """HumanoidWalk's rewards and observations are phalanx.envs' dm_control/humanoid-<task>'s
    (which test_tasks holds to dm_control's) along a random trajectory, and the reward's
    gradient in qpos, qvel and the controls passes torch's gradcheck (central differences) in
    double"""
    import phalanx.envs

    hw = pl.HumanoidWalk(task)
    env = phalanx.envs.make(f"dm_control/humanoid-{task}", 3, obs_dtype=np.float64)
    assert (hw.frame_skip, hw.episode_steps) == (env.frame_skip, env.max_episode_steps)
    env.reset(seed=1)
    for _ in range(5):
        actions = rng.uniform(-1, 1, (3, hw.model.nu))
        obs, reward, *_ = env.step(actions)
        q, v, u = (torch.tensor(a) for a in (env.sim.qpos, env.sim.qvel, actions))
        np.testing.assert_allclose(hw.reward(q, v, u).numpy(), reward, rtol=0, atol=1e-12)
        np.testing.assert_allclose(hw.observe(q, v).numpy(), obs, rtol=0, atol=1e-12)
    # a state the reward is smooth at and not flat: head near its goal height, moving
    q = q.clone()
    q[:, 2] += 0.25
    v = v + 0.5
    inputs = tuple(t.clone().requires_grad_(True) for t in (q, v, 0.5 * u))
    assert torch.autograd.gradcheck(lambda q, v, u: hw.reward(q, v, u), inputs, eps=1e-6,
                                    atol=1e-7, rtol=1e-5)
    assert torch.autograd.gradcheck(lambda q, v: hw.observe(q, v), inputs[:2], eps=1e-6,
                                    atol=1e-7, rtol=1e-5)
    q0, v0 = hw.initial_states(2, torch.Generator().manual_seed(0))
    assert q0.shape == (2, hw.model.nq) and torch.all(v0 == 0)


def test_training_over_two_ranks_keeps_them_equal_and_averages_their_gradients():
    """SHAC over two ranks (phalanx.testing.ThreadCollective in threads, the in-process
    stand-in for TorchDistributed): each steps half of the environments, drawn from its own
    generator; after one window the actor gradient each applies is the mean of the two
    ranks' own window gradients, which serial agents of the same seeds compute; after three,
    both hold the same actor, critic, target and observation statistics, the last the
    statistics of both ranks' observations"""
    from phalanx.testing import ThreadCollective, run_in_threads

    cfg = pl.SHACConfig(num_envs=4, horizon=4, actor_hidden=(8,), critic_hidden=(8,), seed=5,
                        outlier_factor=0.0)
    group = ThreadCollective.group(2)
    agents = [pl.SHAC(pl.CartPoleSwingUp(), cfg, distributed=c) for c in group]
    # serial agents of rank r: the generator of seed * world + rank, two environments each
    serial = [pl.SHAC(pl.CartPoleSwingUp(), pl.replace(cfg, num_envs=2, seed=5 * 2 + r))
              for r in range(2)]
    grads, first = [], torch.cat([s.task.observe(s.q, s.v) for s in serial])
    for a in serial:
        for module in ("actor", "critic", "target", "norm"):
            getattr(a, module).load_state_dict(getattr(agents[0], module).state_dict())
        a.norm.update(first)
        a.norm.update = lambda x: None  # the shared statistics, merged once above
        loss = a.window()[0]
        grads.append(torch.autograd.grad(loss, list(a.actor.parameters())))
    mean = [(g0 + g1) / 2 for g0, g1 in zip(*grads)]
    applied = []  # the first average of each rank's iteration is its actor's
    for a in agents:
        def record(params, original=a.distributed.average, mine=[]):
            original(params)
            if not mine:
                mine.append(True)
                applied.append([p.grad.clone() for p in params])
        a.distributed.average = record
    run_in_threads([lambda a=a: a.iteration() for a in agents], group)
    assert len(applied) == 2
    for got in applied:
        for g, m in zip(got, mean):
            torch.testing.assert_close(g, m, rtol=1e-12, atol=1e-15)
    run_in_threads([lambda a=a: [a.iteration() for _ in range(2)] for a in agents], group)
    for module in ("actor", "critic", "target", "norm"):
        s0, s1 = (getattr(a, module).state_dict() for a in agents)
        assert all(torch.equal(s0[k], s1[k]) for k in s0), module
    assert agents[0].env_steps == 3 * 4 * 4
    assert not torch.equal(agents[0].q, agents[1].q)  # each rank its own environments
