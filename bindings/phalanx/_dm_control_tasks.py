"""The DeepMind Control Suite's tasks on Phalanx: "dm_control/<domain>-<task>".

Each task reads the suite's own model file (dm_control.suite's XML), its control timestep and
time limit, and computes the suite's reward (with dm_control.utils.rewards.tolerance itself)
and observations, flattened in the suite's order, from the batch's state after the step: body
frames and the centre of mass from ``phalanx.kinematics``. The subtree velocity the suite reads
from its sensor (``torso_subtreelinvel``) is the velocity of the centre of mass of every body
under the torso, which is the whole model's in these domains (checked when the task is made).
Initial states follow the suite's ``initialize_episode``, drawn from the environment's numpy
Generator rather than dm_control's RandomState.
"""

from __future__ import annotations

import numpy as np

from ._tasks import Task, randomize_limited_and_rotational_joints


def _suite():
    try:
        from dm_control import suite
        from dm_control.utils import rewards
    except ImportError as err:
        raise ImportError("phalanx.envs: the dm_control tasks need the dm-control package "
                          "(pip install dm-control)") from err
    return suite, rewards


def _tolerance(x, bounds=(0.0, 0.0), margin=0.0, sigmoid="gaussian", value_at_margin=0.1):
    return _suite()[1].tolerance(np.asarray(x, np.float64), bounds=bounds, margin=margin,
                                 sigmoid=sigmoid, value_at_margin=value_at_margin)


class DmControlTask(Task):
    """A suite task: its domain's model, control timestep (None: the model's timestep) and
    time limit in seconds."""

    domain = ""
    control_timestep: float | None = None
    time_limit = 10.0
    randomize_joints = False  # initial states by randomize_limited_and_rotational_joints

    def __init__(self, task: str) -> None:
        suite, _ = _suite()
        import os

        self.task = task
        self.name = f"dm_control/{self.domain}-{task}"
        super().__init__(os.path.join(os.path.dirname(suite.__file__), f"{self.domain}.xml"))

    def bind(self, model) -> None:
        super().bind(model)
        control = self.control_timestep or model.timestep
        self.frame_skip = int(round(control / model.timestep))
        self.max_episode_steps = int(np.ceil(self.time_limit / control - 1e-9))

    def initial_state(self, env, n):
        """qpos0 at rest (MuJoCo's mj_resetData), its joints randomised if the task does"""
        qpos = np.tile(np.asarray(self.model.qpos0, np.float64), (n, 1))
        if self.randomize_joints:
            randomize_limited_and_rotational_joints(self.model, qpos, env.np_random)
        return qpos, np.zeros((n, self.model.nv))

    def _site_radius(self, site: str) -> float:
        """a spherical site's radius"""
        return float(self._site_shape(self._id("site", site))[1][0])

    def _whole_subtree(self, body: str) -> int:
        """body's id, after checking that every body with mass hangs below it (so that the
        whole model's centre of mass is its subtree's)"""
        b = self._id("body", body)
        parent = np.asarray(self.model.body_parentid).reshape(-1)
        mass = np.asarray(self.model.body_mass).reshape(-1)
        for i in range(1, self.model.nbody):
            j = i
            while j not in (0, b):
                j = int(parent[j])
            if j != b and mass[i] > 0:
                raise ValueError(f"phalanx.envs: task {self.name} reads the subtree of body "
                                 f"{body}, which does not hold body {i}")
        return b


class Cheetah(DmControlTask):
    domain = "cheetah"
    time_limit = 10.0
    speed = 10.0

    def bind(self, model):
        super().bind(model)
        self._whole_subtree("torso")

    def initial_state(self, env, n):
        import phalanx

        qpos, qvel = super().initial_state(env, n)
        limited = np.asarray(self.model.jnt_limited).reshape(-1).astype(bool)
        ranges = np.asarray(self.model.jnt_range, np.float64).reshape(-1, 2)[limited]
        adr = np.asarray(self.model.jnt_qposadr).reshape(-1)[limited]
        qpos[:, adr] = env.np_random.uniform(ranges[:, 0], ranges[:, 1], (n, adr.size))
        # the suite lets the model settle for 200 steps before an episode starts
        qpos, qvel, _ = phalanx.step(self.model, qpos, qvel, np.zeros((n, self.model.nu)),
                                     nstep=200, dtype=env.sim.dtype)
        return qpos, qvel

    def reward(self, sim, actions):
        speed = self.kinematics(sim)["com_vel"][:, 0]
        return _tolerance(speed, bounds=(self.speed, np.inf), margin=self.speed,
                          value_at_margin=0, sigmoid="linear")

    def observe(self, sim):
        return np.concatenate([sim.qpos[:, 1:], sim.qvel], axis=1)


class Walker(DmControlTask):
    domain = "walker"
    control_timestep = 0.025
    time_limit = 25.0
    stand_height = 1.2
    speeds = {"stand": 0.0, "walk": 1.0, "run": 8.0}
    randomize_joints = True

    def bind(self, model):
        super().bind(model)
        self.move_speed = self.speeds[self.task]
        self.torso = self._whole_subtree("torso")

    def reward(self, sim, actions):
        k = self.kinematics(sim)
        standing = _tolerance(k["xpos"][:, self.torso, 2], bounds=(self.stand_height, np.inf),
                              margin=self.stand_height / 2)
        upright = (1 + k["xmat"][:, self.torso, 2, 2]) / 2
        stand_reward = (3 * standing + upright) / 4
        if self.move_speed == 0:
            return stand_reward
        move_reward = _tolerance(k["com_vel"][:, 0], bounds=(self.move_speed, np.inf),
                                 margin=self.move_speed / 2, value_at_margin=0.5,
                                 sigmoid="linear")
        return stand_reward * (5 * move_reward + 1) / 6

    def observe(self, sim):
        k = self.kinematics(sim)
        orientations = k["xmat"][:, 1:, 0, ::2].reshape(sim.num_envs, -1)  # xx, xz per body
        return np.concatenate([orientations, k["xpos"][:, self.torso, 2:3], sim.qvel], axis=1)


class Humanoid(DmControlTask):
    domain = "humanoid"
    control_timestep = 0.025
    time_limit = 25.0
    stand_height = 1.4
    speeds = {"stand": 0.0, "walk": 1.0, "run": 10.0}
    limbs = ("left_hand", "left_foot", "right_hand", "right_foot")

    def bind(self, model):
        super().bind(model)
        self.move_speed = self.speeds[self.task]
        self.torso = self._whole_subtree("torso")
        self.head = self._id("body", "head")
        self.extremities = [self._id("body", b) for b in self.limbs]

    def initial_state(self, env, n):
        """the suite's collision-free random configurations: redraw every state whose
        environment has a contact until none has"""
        import phalanx

        qpos, qvel = super().initial_state(env, n)
        todo = np.arange(n)
        for _ in range(1000):
            q = qpos[todo]
            randomize_limited_and_rotational_joints(self.model, q, env.np_random)
            qpos[todo] = q
            found = phalanx.contacts(self.model, q, qvel[todo], dtype=env.sim.dtype)
            todo = todo[found["count"] > 0]
            if todo.size == 0:
                return qpos, qvel
        raise RuntimeError(f"phalanx.envs: {self.name} found no contact-free initial state "
                           f"for {todo.size} environments in 1000 draws")

    def reward(self, sim, actions):
        k = self.kinematics(sim)
        standing = _tolerance(k["xpos"][:, self.head, 2], bounds=(self.stand_height, np.inf),
                              margin=self.stand_height / 4)
        upright = _tolerance(k["xmat"][:, self.torso, 2, 2], bounds=(0.9, np.inf),
                             sigmoid="linear", margin=1.9, value_at_margin=0)
        stand_reward = standing * upright
        small_control = _tolerance(actions, margin=1, value_at_margin=0,
                                   sigmoid="quadratic").mean(axis=1)
        small_control = (4 + small_control) / 5
        horizontal = k["com_vel"][:, :2]
        if self.move_speed == 0:
            dont_move = _tolerance(horizontal, margin=2).mean(axis=1)
            return small_control * stand_reward * dont_move
        move = _tolerance(np.linalg.norm(horizontal, axis=1), bounds=(self.move_speed, np.inf),
                          margin=self.move_speed, value_at_margin=0, sigmoid="linear")
        return small_control * stand_reward * (5 * move + 1) / 6

    def observe(self, sim):
        k = self.kinematics(sim)
        torso_pos = k["xpos"][:, self.torso]
        torso_mat = k["xmat"][:, self.torso]
        # each limb's offset from the torso in the torso's frame
        limbs = [np.einsum("ei,eij->ej", k["xpos"][:, b] - torso_pos, torso_mat)
                 for b in self.extremities]
        return np.concatenate([sim.qpos[:, 7:], k["xpos"][:, self.head, 2:3], *limbs,
                               torso_mat[:, 2, :], k["com_vel"], sim.qvel], axis=1)


class Hopper(DmControlTask):
    """the planar one-legged hopper: standing (the torso's centre of mass 0.6 above the foot's,
    with small controls) or hopping forward (standing, and the centre of mass moving at 2 m/s or
    faster); observing qpos but x, qvel and the log1p of the toe's and heel's touch sensors"""

    domain = "hopper"
    control_timestep = 0.02
    time_limit = 20.0
    stand_height = 0.6
    hop_speed = 2.0
    randomize_joints = True
    reads_forces = ("contacts",)
    touch_sites = ("touch_toe", "touch_heel")  # the suite's touch sensors, in its order

    def bind(self, model):
        super().bind(model)
        self.hopping = {"stand": False, "hop": True}[self.task]
        self.torso = self._whole_subtree("torso")
        self.foot = self._id("body", "foot")
        self.sites = [self._id("site", s) for s in self.touch_sites]
        self.ipos = np.asarray(model.body_ipos, np.float64).reshape(-1, 3)

    def height(self, sim):
        """the torso's centre of mass above the foot's (MuJoCo's xipos)"""
        return (self.in_world(sim, self.torso, self.ipos[self.torso])[:, 2]
                - self.in_world(sim, self.foot, self.ipos[self.foot])[:, 2])

    def reward(self, sim, actions):
        standing = _tolerance(self.height(sim), (self.stand_height, 2))
        if self.hopping:
            return standing * _tolerance(self.kinematics(sim)["com_vel"][:, 0],
                                         bounds=(self.hop_speed, np.inf),
                                         margin=self.hop_speed / 2, value_at_margin=0.5,
                                         sigmoid="linear")
        small_control = _tolerance(actions, margin=1, value_at_margin=0,
                                   sigmoid="quadratic").mean(axis=1)
        return standing * (small_control + 4) / 5

    def observe(self, sim):
        touch = np.stack([self.touch(sim, s) for s in self.sites], axis=1)
        return np.concatenate([sim.qpos[:, 1:], sim.qvel, np.log1p(touch)], axis=1)


class Cartpole(DmControlTask):
    domain = "cartpole"
    time_limit = 10.0
    cart_range = (-0.25, 0.25)
    angle_cosine_range = (0.995, 1.0)

    def bind(self, model):
        super().bind(model)
        if self.task not in ("balance", "balance_sparse", "swingup", "swingup_sparse"):
            raise ValueError(self.task)
        self.swing_up = self.task.startswith("swingup")
        self.sparse = self.task.endswith("sparse")
        self.slider = int(np.asarray(model.jnt_qposadr).reshape(-1)[self._id("joint", "slider")])

    def initial_state(self, env, n):
        qpos, _ = super().initial_state(env, n)
        rng, nv = env.np_random, self.model.nv
        if self.swing_up:
            qpos[:, self.slider] = 0.01 * rng.standard_normal(n)
            qpos[:, 1] = np.pi + 0.01 * rng.standard_normal(n)
            qpos[:, 2:] = 0.1 * rng.standard_normal((n, nv - 2))
        else:
            qpos[:, self.slider] = rng.uniform(-0.1, 0.1, n)
            qpos[:, 1:] = rng.uniform(-0.034, 0.034, (n, nv - 1))
        return qpos, 0.01 * rng.standard_normal((n, nv))

    def reward(self, sim, actions):
        cosine = self.kinematics(sim)["xmat"][:, 2:, 2, 2]  # each pole's zz
        cart = sim.qpos[:, self.slider]
        if self.sparse:
            return (_tolerance(cart, self.cart_range)
                    * _tolerance(cosine, self.angle_cosine_range).prod(axis=1))
        upright = (cosine + 1) / 2
        centered = (1 + _tolerance(cart, margin=2)) / 2
        small_control = _tolerance(actions[:, 0], margin=1, value_at_margin=0,
                                   sigmoid="quadratic")
        small_control = (4 + small_control) / 5
        small_velocity = (1 + _tolerance(sim.qvel[:, 1:], margin=5).min(axis=1)) / 2
        return upright.mean(axis=1) * small_control * small_velocity * centered

    def observe(self, sim):
        poles = self.kinematics(sim)["xmat"][:, 2:]
        bounded = np.stack([poles[..., 2, 2], poles[..., 0, 2]], axis=-1)  # zz, xz per pole
        return np.concatenate([sim.qpos[:, self.slider:self.slider + 1],
                               bounded.reshape(sim.num_envs, -1), sim.qvel], axis=1)


class Acrobot(DmControlTask):
    domain = "acrobot"
    time_limit = 10.0

    def bind(self, model):
        super().bind(model)
        self.sparse = {"swingup": False, "swingup_sparse": True}[self.task]
        self.arms = [self._id("body", b) for b in ("upper_arm", "lower_arm")]
        self.joints = [int(np.asarray(model.jnt_qposadr).reshape(-1)[self._id("joint", j)])
                       for j in ("shoulder", "elbow")]
        self.target, self.tip = self._id("site", "target"), self._id("site", "tip")
        self.radius = self._site_radius("target")

    def initial_state(self, env, n):
        qpos, qvel = super().initial_state(env, n)
        qpos[:, self.joints] = env.np_random.uniform(-np.pi, np.pi, (n, 2))
        return qpos, qvel

    def reward(self, sim, actions):
        site = self.kinematics(sim)["site_xpos"]
        distance = np.linalg.norm(site[:, self.target] - site[:, self.tip], axis=1)
        return _tolerance(distance, bounds=(0, self.radius), margin=0 if self.sparse else 1)

    def observe(self, sim):
        arms = self.kinematics(sim)["xmat"][:, self.arms]
        return np.concatenate([arms[..., 0, 2], arms[..., 2, 2], sim.qvel], axis=1)


class Pendulum(DmControlTask):
    domain = "pendulum"
    time_limit = 20.0
    cosine_bound = float(np.cos(np.deg2rad(8)))

    def bind(self, model):
        super().bind(model)
        if self.task != "swingup":
            raise ValueError(self.task)
        self.pole = self._id("body", "pole")
        self.hinge = int(np.asarray(model.jnt_qposadr).reshape(-1)[self._id("joint", "hinge")])

    def initial_state(self, env, n):
        qpos, qvel = super().initial_state(env, n)
        qpos[:, self.hinge] = env.np_random.uniform(-np.pi, np.pi, n)
        return qpos, qvel

    def reward(self, sim, actions):
        return _tolerance(self.kinematics(sim)["xmat"][:, self.pole, 2, 2],
                          (self.cosine_bound, 1))

    def observe(self, sim):
        pole = self.kinematics(sim)["xmat"][:, self.pole]
        return np.stack([pole[:, 2, 2], pole[:, 0, 2], sim.qvel[:, self.hinge]], axis=1)


class PointMass(DmControlTask):
    """the point mass reaching its target. "hard" redraws, per episode, the directions in
    which the two actuators push (the suite's random unit vectors in the tendons' wrap_prm, at
    least 0.9 from parallel): the model's tendons pull along x and y, its controls are left
    unclamped, and each environment's actions, clipped to their range, are mixed into them by
    its directions, which applies the same generalized force"""

    domain = "point_mass"
    time_limit = 20.0
    randomize_joints = True

    def load(self):
        if self.task not in ("easy", "hard"):
            raise ValueError(self.task)
        if self.task == "easy":
            return super().load()
        import mujoco

        import phalanx

        spec = mujoco.MjSpec.from_file(self.path)
        spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CLAMPCTRL
        return phalanx.from_mujoco(spec.compile())

    def bind(self, model):
        super().bind(model)
        self.geoms = [self._id("geom", g) for g in ("target", "pointmass")]
        self.size = float(np.asarray(model.geom_size).reshape(-1, 3)[self.geoms[0], 0])
        if self.task == "hard":
            # the tendons as the suite's file has them: t1 along x, t2 along y
            coef = np.asarray(model.wrap_prm, np.float64).reshape(-1)
            if not np.array_equal(coef, [1, 0, 0, 1]):
                raise ValueError(f"phalanx.envs: {self.name} expects the tendons t1 = root_x "
                                 f"and t2 = root_y, got coefficients {coef}")
            self.directions = np.zeros((0, 2, 2))

    def initial_state(self, env, n):
        qpos, qvel = super().initial_state(env, n)
        if self.task == "hard":
            if self.directions.shape[0] != env.num_envs:
                self.directions = np.tile(np.eye(2), (env.num_envs, 1, 1))
            rng = env.np_random
            first = rng.standard_normal((n, 2))
            first /= np.linalg.norm(first, axis=1, keepdims=True)
            second = np.zeros((n, 2))
            todo = np.arange(n)
            while todo.size:  # redraw the second until it is not too parallel to the first
                d = rng.standard_normal((todo.size, 2))
                second[todo] = d / np.linalg.norm(d, axis=1, keepdims=True)
                todo = todo[np.abs((first[todo] * second[todo]).sum(axis=1)) > 0.9]
            self.directions[env.reset_ids] = np.stack([first, second], axis=1)
        return qpos, qvel

    def controls(self, sim, actions):
        if self.task == "easy":
            return actions
        clipped = np.clip(actions, -1.0, 1.0)
        return np.einsum("ek,ekj->ej", clipped, self.directions)

    def _geom_xpos(self, sim, g):
        b = int(np.asarray(self.model.geom_bodyid).reshape(-1)[g])
        return self.in_world(sim, b, np.asarray(self.model.geom_pos).reshape(-1, 3)[g])

    def reward(self, sim, actions):
        distance = np.linalg.norm(self._geom_xpos(sim, self.geoms[0])
                                  - self._geom_xpos(sim, self.geoms[1]), axis=1)
        near_target = _tolerance(distance, bounds=(0, self.size), margin=self.size)
        control = _tolerance(actions, margin=1, value_at_margin=0,
                             sigmoid="quadratic").mean(axis=1)
        return near_target * (control + 4) / 5

    def observe(self, sim):
        return np.concatenate([sim.qpos, sim.qvel], axis=1)


DOMAINS = {t.domain: t for t in (Cheetah, Walker, Hopper, Humanoid, Cartpole, Acrobot,
                                 Pendulum, PointMass)}
TASKS = {"cheetah": ("run",), "walker": ("stand", "walk", "run"), "hopper": ("stand", "hop"),
         "humanoid": ("stand", "walk", "run"),
         "cartpole": ("balance", "balance_sparse", "swingup", "swingup_sparse"),
         "acrobot": ("swingup", "swingup_sparse"), "pendulum": ("swingup",),
         "point_mass": ("easy", "hard")}
