"""Gymnasium's MuJoCo v5 tasks on Phalanx: "gymnasium/<Name>-v5".

Each task reads Gymnasium's own model file, frame skip, episode length, reset noise, reward
terms (with v5's default weights), termination and observations. Positions and velocities
come from the batch's state; body positions from ``phalanx.kinematics`` at the state after the
step, and the contact wrenches (cfrc_ext) from ``phalanx.contacts`` and ``phalanx.body_report``
at that state with the action held. (Gymnasium reads body positions and cfrc_ext from MuJoCo's
mjData after mj_step, which holds those of the state before the step's last physics step; here
they are those of the state the step returns, the state Gymnasium's reward would read after
mj_forward and mj_rnePostConstraint. At a reset state Gymnasium's cfrc_ext is zero, as MuJoCo
computes it only after a step; here it is that of the reset state.) The contact forces are
Phalanx's: hard contacts solved as an LCP, where MuJoCo's are soft.
"""

from __future__ import annotations

import os

import numpy as np

from ._tasks import Task


def _assets() -> str:
    """Gymnasium's model files (without importing gymnasium.envs.mujoco, which needs its
    renderer's packages)"""
    import importlib.util

    spec = importlib.util.find_spec("gymnasium")
    if spec is None or spec.origin is None:
        raise ImportError("phalanx.envs: the Gymnasium tasks need gymnasium (pip install "
                          "gymnasium)")
    return os.path.join(os.path.dirname(spec.origin), "envs", "mujoco", "assets")


class GymnasiumTask(Task):
    """A v5 task: its model file (in Gymnasium's assets), frame skip, episode length and the
    uniform reset noise added to qpos0 (and to zero velocities, or ``velocity_noise``
    "normal": that scale times a standard normal)."""

    xml = ""
    reset_noise_scale = 0.1
    velocity_noise = "uniform"
    forward_reward_weight = 1.0
    ctrl_cost_weight = 0.0

    def __init__(self) -> None:
        self.name = f"gymnasium/{type(self).__name__}-v5"
        super().__init__(os.path.join(_assets(), self.xml))

    def initial_state(self, env, n):
        rng, s, m = env.np_random, self.reset_noise_scale, self.model
        qpos = np.asarray(m.qpos0, np.float64) + rng.uniform(-s, s, (n, m.nq))
        if self.velocity_noise == "normal":
            qvel = s * rng.standard_normal((n, m.nv))
        else:
            qvel = rng.uniform(-s, s, (n, m.nv))
        return qpos, qvel

    def ctrl_cost(self, actions):
        return self.ctrl_cost_weight * np.square(actions).sum(axis=1)


class _Forward(GymnasiumTask):
    """tasks rewarded for the speed of qpos[0] over the step (x_velocity) less a control cost,
    observing qpos but for its first ``excluded`` coordinates, and qvel"""

    excluded = 1

    def before_step(self, sim):
        self._x_before = sim.qpos[:, 0].copy()

    def forward_reward(self, sim):
        dt = self.model.timestep * self.frame_skip
        return self.forward_reward_weight * (sim.qpos[:, 0] - self._x_before) / dt

    def reward(self, sim, actions):
        return self.forward_reward(sim) - self.ctrl_cost(actions)

    def observe(self, sim):
        return np.concatenate([sim.qpos[:, self.excluded:], sim.qvel], axis=1)


class HalfCheetah(_Forward):
    xml = "half_cheetah.xml"
    frame_skip = 5
    velocity_noise = "normal"
    ctrl_cost_weight = 0.1


class Hopper(_Forward):
    xml = "hopper.xml"
    frame_skip = 4
    reset_noise_scale = 5e-3
    ctrl_cost_weight = 1e-3
    healthy_reward = 1.0
    terminates = True
    healthy_state_range = (-100.0, 100.0)
    healthy_z_range = (0.7, np.inf)
    healthy_angle_range = (-0.2, 0.2)

    def healthy(self, sim):
        z, angle = sim.qpos[:, 1], sim.qpos[:, 2]
        ok = ((self.healthy_z_range[0] < z) & (z < self.healthy_z_range[1])
              & (self.healthy_angle_range[0] < angle) & (angle < self.healthy_angle_range[1]))
        if self.healthy_state_range is not None:
            state = np.concatenate([sim.qpos, sim.qvel], axis=1)[:, 2:]
            lo, hi = self.healthy_state_range
            ok &= ((lo < state) & (state < hi)).all(axis=1)
        return ok

    def reward(self, sim, actions):
        return super().reward(sim, actions) + self.healthy_reward * self.healthy(sim)

    def terminated(self, sim):
        return ~self.healthy(sim)

    def observe(self, sim):
        return np.concatenate([sim.qpos[:, 1:], np.clip(sim.qvel, -10, 10)], axis=1)


class Walker2d(Hopper):
    xml = "walker2d_v5.xml"
    healthy_state_range = None
    healthy_z_range = (0.8, 2.0)
    healthy_angle_range = (-1.0, 1.0)


class Swimmer(_Forward):
    """the three-link swimmer in a viscous, dense medium, rewarded for its speed along x.
    Phalanx steps its model by semi-implicit Euler for the RK4 it asks for (Model.ignored
    lists it): the rewards equal Gymnasium's at the same state and the forces are MuJoCo's,
    the integration is not Gymnasium's"""

    xml = "swimmer.xml"
    frame_skip = 4
    ctrl_cost_weight = 1e-4
    excluded = 2


class Ant(GymnasiumTask):
    """the quadruped rewarded for the speed of its torso along x, for staying healthy (a
    finite state with the torso's height in [0.2, 1]; episodes end otherwise), less its control
    and contact costs; observing qpos but x and y, qvel and the contact wrenches on its bodies
    clipped to [-1, 1]"""

    xml = "ant.xml"
    frame_skip = 5
    velocity_noise = "normal"
    ctrl_cost_weight = 0.5
    contact_cost_weight = 5e-4
    healthy_reward = 1.0
    healthy_z_range = (0.2, 1.0)
    contact_force_range = (-1.0, 1.0)
    terminates = True
    reads_forces = ("cfrc_ext",)

    def before_step(self, sim):
        self._x_before = sim.qpos[:, 0].copy()  # the torso's frame is its free joint's

    def contact_forces(self, sim):
        return np.clip(self.forward_report(sim)["cfrc_ext"], *self.contact_force_range)

    def healthy(self, sim):
        z = sim.qpos[:, 2]
        finite = np.isfinite(sim.qpos).all(axis=1) & np.isfinite(sim.qvel).all(axis=1)
        return finite & (self.healthy_z_range[0] <= z) & (z <= self.healthy_z_range[1])

    def reward(self, sim, actions):
        dt = self.model.timestep * self.frame_skip
        forward = self.forward_reward_weight * (sim.qpos[:, 0] - self._x_before) / dt
        contact_cost = self.contact_cost_weight * np.square(self.contact_forces(sim)).sum(
            axis=(1, 2))
        return (forward + self.healthy_reward * self.healthy(sim) - self.ctrl_cost(actions)
                - contact_cost)

    def terminated(self, sim):
        return ~self.healthy(sim)

    def observe(self, sim):
        return np.concatenate([sim.qpos[:, 2:], sim.qvel,
                               self.contact_forces(sim)[:, 1:].reshape(sim.num_envs, -1)],
                              axis=1)


class Humanoid(GymnasiumTask):
    """the humanoid rewarded for the speed of its centre of mass along x and for staying
    healthy (the torso's height in (1, 2); episodes end otherwise), less its control cost and
    its contact cost (at most 10); observing qpos but x and y, qvel, and about each tree's
    centre of mass the bodies' inertias and velocities, the actuators' generalized force on
    the joints and the contact wrenches on the bodies"""

    xml = "humanoid.xml"
    frame_skip = 5
    reset_noise_scale = 1e-2
    forward_reward_weight = 1.25
    ctrl_cost_weight = 0.1
    contact_cost_weight = 5e-7
    contact_cost_max = 10.0
    healthy_reward = 5.0
    healthy_z_range = (1.0, 2.0)
    terminates = True
    reads_forces = ("cfrc_ext",)

    def before_step(self, sim):
        self._com_before = self.kinematics(sim)["com"][:, 0].copy()

    def contact_cost(self, sim):
        cost = self.contact_cost_weight * np.square(self.forward_report(sim)["cfrc_ext"]).sum(
            axis=(1, 2))
        return np.minimum(cost, self.contact_cost_max)

    def healthy(self, sim):
        z = sim.qpos[:, 2]
        return (self.healthy_z_range[0] < z) & (z < self.healthy_z_range[1])

    def reward(self, sim, actions):
        dt = self.model.timestep * self.frame_skip
        forward = self.forward_reward_weight * (self.kinematics(sim)["com"][:, 0]
                                                - self._com_before) / dt
        return (forward + self.healthy_reward * self.healthy(sim) - self.ctrl_cost(actions)
                - self.contact_cost(sim))

    def terminated(self, sim):
        return ~self.healthy(sim)

    def observe(self, sim):
        r, n = self.forward_report(sim), sim.num_envs
        return np.concatenate([sim.qpos[:, 2:], sim.qvel, r["cinert"][:, 1:].reshape(n, -1),
                               r["cvel"][:, 1:].reshape(n, -1), r["qfrc_actuator"][:, 6:],
                               r["cfrc_ext"][:, 1:].reshape(n, -1)], axis=1)


class HumanoidStandup(Humanoid):
    """the humanoid lying on the floor, rewarded for the height of its torso (over one physics
    step's time), less its control cost and its impact cost (at most 10), plus 1; episodes run
    to their end; observations as Humanoid's"""

    xml = "humanoidstandup.xml"
    contact_cost_weight = 0.5e-6
    terminates = False

    def before_step(self, sim):
        pass

    def reward(self, sim, actions):
        uph = sim.qpos[:, 2] / self.model.timestep
        return uph - self.ctrl_cost(actions) - self.contact_cost(sim) + 1.0


class Pusher(GymnasiumTask):
    """the 7-joint arm rewarded for bringing its fingertips to the cylinder and the cylinder to
    the goal, less its control cost; observing the arm's qpos and qvel and the positions of the
    fingertips', the cylinder's and the goal's frames (Gymnasium's get_body_com reads xpos)"""

    xml = "pusher_v5.xml"
    frame_skip = 5
    max_episode_steps = 100
    reward_near_weight = 0.5
    reward_dist_weight = 1.0
    reward_control_weight = 0.1

    def bind(self, model):
        super().bind(model)
        self.bodies = [self._id("body", b) for b in ("tips_arm", "object", "goal")]

    def initial_state(self, env, n):
        """the arm at qpos0 with velocities U(-0.005, 0.005); the cylinder at x U(-0.3, 0), y
        U(-0.2, 0.2) (qpos[-4:-2], redrawn until farther than 0.17 from the goal), the goal at
        0, both at rest"""
        rng, m = env.np_random, self.model
        qpos = np.repeat(np.asarray(m.qpos0, np.float64)[None], n, 0)
        cylinder = np.empty((n, 2))
        todo = np.arange(n)
        while todo.size:
            cylinder[todo, 0] = rng.uniform(-0.3, 0, todo.size)
            cylinder[todo, 1] = rng.uniform(-0.2, 0.2, todo.size)
            todo = todo[np.linalg.norm(cylinder[todo], axis=1) <= 0.17]
        qpos[:, -4:-2], qpos[:, -2:] = cylinder, 0.0
        qvel = rng.uniform(-0.005, 0.005, (n, m.nv))
        qvel[:, -4:] = 0
        return qpos, qvel

    def _positions(self, sim):
        xpos = self.kinematics(sim)["xpos"]
        return [xpos[:, b] for b in self.bodies]

    def reward(self, sim, actions):
        tips, cylinder, goal = self._positions(sim)
        return (-self.reward_near_weight * np.linalg.norm(cylinder - tips, axis=1)
                - self.reward_dist_weight * np.linalg.norm(cylinder - goal, axis=1)
                - self.reward_control_weight * np.square(actions).sum(axis=1))

    def observe(self, sim):
        return np.concatenate([sim.qpos[:, :7], sim.qvel[:, :7], *self._positions(sim)], axis=1)


class InvertedPendulum(GymnasiumTask):
    xml = "inverted_pendulum.xml"
    frame_skip = 2
    reset_noise_scale = 0.01
    terminates = True

    def terminated(self, sim):
        obs = self.observe(sim)
        return ~np.isfinite(obs).all(axis=1) | (np.abs(obs[:, 1]) > 0.2)

    def reward(self, sim, actions):
        return (~self.terminated(sim)).astype(np.float64)

    def observe(self, sim):
        return np.concatenate([sim.qpos, sim.qvel], axis=1)


class InvertedDoublePendulum(GymnasiumTask):
    """the double pendulum on a cart, rewarded for keeping its tip high (10 while the tip is
    above 1, less its squared distance from height 2 and a hundredth of the cart's squared
    offset, less the links' weighted squared speeds), ending when the tip drops to 1;
    observing the cart's position, the sines and cosines of the link angles, the velocities
    and the slider's constraint force (qfrc_constraint, both clipped to [-10, 10])"""

    xml = "inverted_double_pendulum.xml"
    frame_skip = 5
    velocity_noise = "normal"
    healthy_reward = 10.0
    terminates = True
    reads_forces = ("qfrc_constraint",)

    def bind(self, model):
        super().bind(model)
        self.tip = self._id("site", "tip")

    def _tip(self, sim):
        return self.kinematics(sim)["site_xpos"][:, self.tip]

    def terminated(self, sim):
        return ~(self._tip(sim)[:, 2] > 1)

    def reward(self, sim, actions):
        tip = self._tip(sim)
        x, y = tip[:, 0], tip[:, 2]
        v1, v2 = sim.qvel[:, 1], sim.qvel[:, 2]
        dist_penalty = 0.01 * x**2 + (y - 2) ** 2
        vel_penalty = 1e-3 * v1**2 + 5e-3 * v2**2
        return self.healthy_reward * (y > 1) - dist_penalty - vel_penalty

    def observe(self, sim):
        angles = sim.qpos[:, 1:]
        constraint = self.forward_report(sim)["qfrc_constraint"][:, :1]
        return np.concatenate([sim.qpos[:, :1], np.sin(angles), np.cos(angles),
                               np.clip(sim.qvel, -10, 10), np.clip(constraint, -10, 10)],
                              axis=1)


class Reacher(GymnasiumTask):
    xml = "reacher.xml"
    frame_skip = 2
    max_episode_steps = 50
    reward_dist_weight = 1.0
    reward_control_weight = 1.0

    def bind(self, model):
        super().bind(model)
        self.fingertip, self.target = (self._id("body", b) for b in ("fingertip", "target"))

    def initial_state(self, env, n):
        """arm angles qpos0 + U(-0.1, 0.1), a goal uniform in the disc of radius 0.2 (drawn
        uniformly in the square around it until inside), velocities U(-0.005, 0.005) with the
        goal at rest"""
        rng, m = env.np_random, self.model
        qpos = np.asarray(m.qpos0, np.float64) + rng.uniform(-0.1, 0.1, (n, m.nq))
        goal = rng.uniform(-0.2, 0.2, (n, 2))
        while (far := np.linalg.norm(goal, axis=1) >= 0.2).any():
            goal[far] = rng.uniform(-0.2, 0.2, (int(far.sum()), 2))
        qpos[:, -2:] = goal
        qvel = rng.uniform(-0.005, 0.005, (n, m.nv))
        qvel[:, -2:] = 0
        return qpos, qvel

    def _to_target(self, sim):
        xpos = self.kinematics(sim)["xpos"]
        return xpos[:, self.fingertip] - xpos[:, self.target]

    def reward(self, sim, actions):
        return (-self.reward_dist_weight * np.linalg.norm(self._to_target(sim), axis=1)
                - self.reward_control_weight * np.square(actions).sum(axis=1))

    def observe(self, sim):
        theta = sim.qpos[:, :2]
        return np.concatenate([np.cos(theta), np.sin(theta), sim.qpos[:, 2:], sim.qvel[:, :2],
                               self._to_target(sim)[:, :2]], axis=1)


TASKS = {f"{t.__name__}-v5": t for t in (Ant, HalfCheetah, Hopper, Walker2d, Swimmer, Humanoid,
                                          HumanoidStandup, InvertedDoublePendulum, InvertedPendulum, Pusher,
                                          Reacher)}
