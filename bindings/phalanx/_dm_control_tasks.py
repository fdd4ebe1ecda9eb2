"""The DeepMind Control Suite's tasks on Phalanx: "dm_control/<domain>-<task>".

Each task reads the suite's own model file (dm_control.suite's XML, or the model its
make_model writes for the task), its control timestep and time limit, and computes the suite's
reward (with dm_control.utils.rewards.tolerance itself) and observations, flattened in the
suite's order, from the batch's state after the step: body frames and the centre of mass from
``phalanx.kinematics``; the velocity of a subtree's centre of mass (the suite's subtreelinvel
sensors) from it or from ``phalanx.body_report``; touch sensors by MuJoCo's rule on the
contacts ``phalanx.contacts`` finds in a step from the state (``Task.touch``); accelerometers,
force and torque sensors from the bodies' accelerations and joint forces after the constraint
solve (``phalanx.body_report`` given qacc, ``phalanx.site_sensors``). Contact forces
are Phalanx's (hard contacts solved as an LCP), not MuJoCo's soft ones. Initial states follow
the suite's ``initialize_episode``, drawn from the environment's numpy Generator rather than
dm_control's RandomState; what it changes in the model per episode (targets, the manipulator's
receptacles) is kept per environment (``Task.episode_edits`` lists it as the suite sets it).
"""

from __future__ import annotations

import numpy as np

from . import _phalanx
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
        self.max_episode_steps = (None if np.isinf(self.time_limit)
                                  else int(np.ceil(self.time_limit / control - 1e-9)))

    def initial_state(self, env, n):
        """qpos0 at rest (MuJoCo's mj_resetData), its joints randomised if the task does"""
        qpos = np.tile(np.asarray(self.model.qpos0, np.float64), (n, 1))
        if self.randomize_joints:
            randomize_limited_and_rotational_joints(self.model, qpos, env.np_random)
        return qpos, np.zeros((n, self.model.nv))

    def redraw_touching(self, env, qpos, qvel, draw, model=None) -> None:
        """the suite's rejection of initial states with contacts: ``draw(todo)`` draws the
        states of the environments ``todo`` (indices into qpos (n, nq) and qvel (n, nv)) in
        place, and again for those whose state has a contact (MuJoCo's ncon > 0; detected on
        ``model``: the task's, or a copy whose parameters draw sets to the candidates') until
        none has"""
        import phalanx

        def touching(todo):
            found = phalanx.contacts(self.model if model is None else model, qpos[todo],
                                     forces=False, dtype=env.sim.dtype)
            return found["count"] > 0

        self.redraw(qpos.shape[0], draw, touching, "contact-free")

    def redraw(self, n, draw, rejected, what: str, tries: int = 1000) -> None:
        """``draw(todo)`` draws the initial states of the environments ``todo`` (indices into
        the n) in place, and again for those that ``rejected(todo)`` (bool per index) rejects
        until none is; RuntimeError after ``tries`` draws"""
        todo = np.arange(n)
        for _ in range(tries):
            draw(todo)
            todo = todo[rejected(todo)]
            if todo.size == 0:
                return
        raise RuntimeError(f"phalanx.envs: {self.name} found no {what} initial state for "
                           f"{todo.size} environments in {tries} draws")

    def _random_joints(self, rng, qpos):
        """draw(todo) for redraw_touching: the suite's joint randomiser on qpos[todo]"""
        def draw(todo):
            q = qpos[todo]
            randomize_limited_and_rotational_joints(self.model, q, rng)
            qpos[todo] = q
        return draw

    def world_geom_pos(self, model, geom: int) -> np.ndarray:
        """the position of ``geom``, which must be a geom of the world body (a target the
        suite moves per episode), in world (3,)"""
        if int(np.asarray(model.geom_bodyid).reshape(-1)[geom]) != 0:
            raise ValueError(f"phalanx.envs: {self.name} expects the target to be a geom of "
                             "the world body")
        return np.asarray(model.geom_pos, np.float64).reshape(-1, 3)[geom]

    def _targets(self, num_envs):
        """every environment's target (num_envs, ...), kept in ``targets``: ``target0``, where
        the model puts it, until an episode draws it"""
        if self.targets.shape[0] != num_envs:
            self.targets = np.tile(self.target0, (num_envs, 1))
        return self.targets

    def _target_edit(self, e):
        """the target geom's position for environment e's episode (episode_edits)"""
        pos = self.targets[e] if e < self.targets.shape[0] else self.target0
        return {("geom_pos", "target"): np.array(pos, np.float64)}

    def subtree_linvel(self, sim, body: int) -> np.ndarray:
        """the velocity of the centre of mass of body's subtree (E, 3) (MuJoCo's subtreelinvel
        sensor): the whole model's (kinematics) when the subtree holds every body, else the
        subtree's momentum over its mass, each body's momentum from body_report's cinert and
        cvel (mass times the velocity of the tree's reference point, plus the angular velocity
        crossed with the first mass moment about it)"""
        if not hasattr(self, "_subtrees"):
            self._subtrees = {}
        if body not in self._subtrees:
            parent = np.asarray(self.model.body_parentid).reshape(-1)
            below = [body]
            for b in range(body + 1, self.model.nbody):
                if parent[b] in below:
                    below.append(b)
            self._subtrees[body] = np.array(below)
        subtree = self._subtrees[body]
        if subtree.size == self.model.nbody - 1:
            return self.kinematics(sim)["com_vel"]
        q, v = sim.qpos, sim.qvel
        key = getattr(self, "_vel_key", None)
        if key is None or key[0] is not sim or not (np.array_equal(key[1], q)
                                                    and np.array_equal(key[2], v)):
            import phalanx

            self._velocities = phalanx.body_report(sim.model, q, v, dtype=sim.dtype)
            self._vel_key = (sim, q.copy(), v.copy())
        cinert = np.asarray(self._velocities["cinert"], np.float64)[:, subtree]
        cvel = np.asarray(self._velocities["cvel"], np.float64)[:, subtree]
        mass = cinert[..., 9]
        momentum = mass[..., None] * cvel[..., 3:] + np.cross(cvel[..., :3], cinert[..., 6:9])
        return momentum.sum(axis=1) / mass.sum(axis=1)[:, None]

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

    # the fastest joint or root speed of a settled initial state: the 200 steps leave the
    # cheetah at rest (the largest speed of 40 000 draws was 1.1). About one draw in 20 000
    # folds the back foot (range -230..50 degrees) into the torso and the thigh, a pose where
    # pushing the foot out takes joint speeds of hundreds of rad/s: the hard contacts throw the
    # cheetah off at tens of m/s or to a non-finite state, where MuJoCo's soft ones settle it.
    # Such draws are drawn again
    settled_speed = 5.0

    def initial_state(self, env, n):
        import phalanx

        qpos, qvel = super().initial_state(env, n)
        limited = np.asarray(self.model.jnt_limited).reshape(-1).astype(bool)
        ranges = np.asarray(self.model.jnt_range, np.float64).reshape(-1, 2)[limited]
        adr = np.asarray(self.model.jnt_qposadr).reshape(-1)[limited]
        start, still = qpos.copy(), qvel.copy()

        def draw(todo):
            q = start[todo]
            q[:, adr] = env.np_random.uniform(ranges[:, 0], ranges[:, 1], (todo.size, adr.size))
            # the suite lets the model settle for 200 steps before an episode starts
            zero = np.zeros((todo.size, self.model.nu))
            qpos[todo], qvel[todo], _ = phalanx.step(self.model, q, still[todo], zero,
                                                     nstep=200, dtype=env.sim.dtype)

        def unsettled(todo):
            speed = np.abs(qvel[todo]).max(axis=1)  # NaN where the state diverged
            return ~(np.isfinite(qpos[todo]).all(axis=1) & (speed < self.settled_speed))

        self.redraw(n, draw, unsettled, "settled", tries=100)
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


class Humanoid(DmControlTask):
    """the humanoid standing (its head 1.4 high, its torso upright, and its centre of mass
    still), walking or running (the centre of mass moving horizontally at 1 or 10 m/s or
    faster), with small controls; observing its joint angles, the head's height, the hands'
    and feet's offsets in the torso's frame, the torso's vertical axis, the centre of mass
    velocity and qvel (run_pure_state: qpos and qvel). Initial states: random contact-free
    configurations"""

    domain = "humanoid"
    control_timestep = 0.025
    time_limit = 25.0
    stand_height = 1.4
    speeds = {"stand": 0.0, "walk": 1.0, "run": 10.0, "run_pure_state": 10.0}
    limbs = ("left_hand", "left_foot", "right_hand", "right_foot")
    torso_name = "torso"  # the body whose subtree's centre of mass velocity the suite reads
    up = 2  # the torso's axis that is up when it is upright

    def bind(self, model):
        super().bind(model)
        self.move_speed = self.speeds[self.task]
        self.torso = self._id("body", self.torso_name)
        self.head = self._id("body", "head")
        self.extremities = [self._id("body", b) for b in self.limbs]

    def com_velocity(self, sim):
        """the velocity of the centre of mass of the torso's subtree (E, 3) (the suite's
        subtreelinvel sensor on the torso)"""
        return self.subtree_linvel(sim, self.torso)

    def initial_state(self, env, n):
        """the suite's collision-free random configurations: redraw every state whose
        environment has a contact until none has"""
        qpos, qvel = super().initial_state(env, n)
        self.redraw_touching(env, qpos, qvel, self._random_joints(env.np_random, qpos))
        return qpos, qvel

    def reward(self, sim, actions):
        k = self.kinematics(sim)
        standing = _tolerance(k["xpos"][:, self.head, 2], bounds=(self.stand_height, np.inf),
                              margin=self.stand_height / 4)
        upright = _tolerance(k["xmat"][:, self.torso, 2, self.up], bounds=(0.9, np.inf),
                             sigmoid="linear", margin=1.9, value_at_margin=0)
        stand_reward = standing * upright
        small_control = _tolerance(actions, margin=1, value_at_margin=0,
                                   sigmoid="quadratic").mean(axis=1)
        small_control = (4 + small_control) / 5
        horizontal = self.com_velocity(sim)[:, :2]
        if self.move_speed == 0:
            dont_move = _tolerance(horizontal, margin=2).mean(axis=1)
            return small_control * stand_reward * dont_move
        move = _tolerance(np.linalg.norm(horizontal, axis=1), bounds=(self.move_speed, np.inf),
                          margin=self.move_speed, value_at_margin=0, sigmoid="linear")
        return small_control * stand_reward * (5 * move + 1) / 6

    def observe(self, sim):
        if self.task.endswith("pure_state"):
            return np.concatenate([sim.qpos, sim.qvel], axis=1)
        k = self.kinematics(sim)
        torso_pos = k["xpos"][:, self.torso]
        torso_mat = k["xmat"][:, self.torso]
        # each limb's offset from the torso in the torso's frame
        limbs = [np.einsum("ei,eij->ej", k["xpos"][:, b] - torso_pos, torso_mat)
                 for b in self.extremities]
        return np.concatenate([sim.qpos[:, 7:], k["xpos"][:, self.head, 2:3], *limbs,
                               torso_mat[:, 2, :], self.com_velocity(sim), sim.qvel], axis=1)


class HumanoidCMU(Humanoid):
    """the CMU motion-capture humanoid (56 actuated hinges), its tasks the humanoid's with the
    thorax as torso (its y axis up): the centre of mass the suite reads is the thorax
    subtree's, the upper body's"""

    domain = "humanoid_CMU"
    control_timestep = 0.02
    time_limit = 20.0
    limbs = ("lhand", "lfoot", "rhand", "rfoot")
    torso_name = "thorax"
    up = 1


class Cartpole(DmControlTask):
    """the cart-pole balancing or swinging up its pole (two_poles, three_poles: a chain of two
    or three, swung up; the suite's model of that many poles), rewarded for the poles upright,
    the cart centred, small controls and small angular velocities (sparse: the cart and every
    pole within bounds); observing the cart's position, each pole's zz and xz, and qvel"""

    domain = "cartpole"
    time_limit = 10.0
    cart_range = (-0.25, 0.25)
    angle_cosine_range = (0.995, 1.0)
    poles = {"two_poles": 2, "three_poles": 3}

    def load(self):
        if self.task not in self.poles:
            return super().load()
        import mujoco
        from dm_control.suite import cartpole

        import phalanx

        xml, assets = cartpole.get_model_and_assets(num_poles=self.poles[self.task])
        self.mj_model = mujoco.MjModel.from_xml_string(
            xml if isinstance(xml, str) else xml.decode(), assets)
        return phalanx.from_mujoco(self.mj_model)

    def bind(self, model):
        super().bind(model)
        if self.task not in ("balance", "balance_sparse", "swingup", "swingup_sparse",
                             *self.poles):
            raise ValueError(self.task)
        self.swing_up = self.task.startswith("swingup") or self.task in self.poles
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
        self.mj_model = spec.compile()
        return phalanx.from_mujoco(self.mj_model)

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


class Reacher(DmControlTask):
    """the two-link planar arm touching its target with its fingertip: a sparse reward, 1 while
    the finger's and the target's centres are closer in the plane than the sum of their radii.
    Each episode draws the target's position (uniform in angle, its distance from the centre
    uniform in [0.05, 0.2]), kept per environment in ``targets`` (the suite moves the target
    geom of its model); the task sets the target's radius ("easy" 0.05, "hard" 0.015) in the
    model, as the suite does. Contacts are disabled in this domain, so neither changes the
    physics."""

    domain = "reacher"
    time_limit = 20.0
    randomize_joints = True
    target_sizes = {"easy": 0.05, "hard": 0.015}
    target_distance = (0.05, 0.20)  # the range of the target's distance from the centre

    def load(self):
        if self.task not in self.target_sizes:
            raise ValueError(self.task)
        import mujoco

        import phalanx

        spec = mujoco.MjSpec.from_file(self.path)
        spec.geom("target").size[0] = self.target_sizes[self.task]
        self.mj_model = spec.compile()
        return phalanx.from_mujoco(self.mj_model)

    def bind(self, model):
        super().bind(model)
        target, finger = self._id("geom", "target"), self._id("geom", "finger")
        # where the model puts the target, each environment's before its first episode
        self.target0 = self.world_geom_pos(model, target)[:2]
        sizes = np.asarray(model.geom_size, np.float64).reshape(-1, 3)
        self.radii = float(sizes[target, 0] + sizes[finger, 0])
        self.finger_body = int(np.asarray(model.geom_bodyid).reshape(-1)[finger])
        self.finger_pos = np.asarray(model.geom_pos, np.float64).reshape(-1, 3)[finger]
        self.targets = np.zeros((0, 2))  # each environment's target (x, y) in world

    def initial_state(self, env, n):
        qpos, qvel = super().initial_state(env, n)
        targets = self._targets(env.num_envs)
        angle = env.np_random.uniform(0, 2 * np.pi, n)
        radius = env.np_random.uniform(*self.target_distance, n)
        # the suite's convention: the angle from the y axis towards the x axis
        targets[env.reset_ids] = radius[:, None] * np.stack([np.sin(angle), np.cos(angle)],
                                                            axis=1)
        return qpos, qvel

    def episode_edits(self, e):
        mj = self.mujoco_model()
        pos = np.array(mj.geom("target").pos)
        pos[:2] = self.targets[e] if e < self.targets.shape[0] else self.target0
        return {("geom_pos", "target"): pos,
                ("geom_size", "target"): np.array(mj.geom("target").size)}

    def to_target(self, sim):
        """the target's position minus the finger's, in the plane (E, 2)"""
        finger = self.in_world(sim, self.finger_body, self.finger_pos)[:, :2]
        return self._targets(sim.num_envs) - finger

    def reward(self, sim, actions):
        return _tolerance(np.linalg.norm(self.to_target(sim), axis=1), bounds=(0, self.radii))

    def observe(self, sim):
        return np.concatenate([sim.qpos, self.to_target(sim), sim.qvel], axis=1)


class BallInCup(DmControlTask):
    """the cup on two driven slides catching the ball tied to it by a string (a spatial tendon
    at most 0.3 long): a sparse reward, 1 while the ball lies wholly inside the target box in
    the cup, in x and z. Episodes start at rest with the ball uniform in a rectangle above the
    ground (its slides' x in [-0.2, 0.2], z in [0.2, 0.5]), redrawn while it touches the cup"""

    domain = "ball_in_cup"
    control_timestep = 0.02
    time_limit = 20.0
    ball_range = ((-0.2, 0.2), (0.2, 0.5))  # the ball's slides: (x range, z range)

    def bind(self, model):
        super().bind(model)
        if self.task != "catch":
            raise ValueError(self.task)
        adr = np.asarray(model.jnt_qposadr).reshape(-1)
        self.slides = [int(adr[self._id("joint", j)]) for j in ("ball_x", "ball_z")]
        self.ball = self._id("body", "ball")
        self.target = self._id("site", "target")
        radius = float(np.asarray(model.geom_size).reshape(-1, 3)[self._id("geom", "ball"), 0])
        kind, half = self._site_shape(self.target)
        if kind != "box":
            raise ValueError(f"phalanx.envs: {self.name} expects a box target site, got a "
                             f"{kind}")
        # how far from the target's centre the ball's centre may be, in x and z
        self.slack = half[[0, 2]] - radius

    def initial_state(self, env, n):
        """the ball's position redrawn in every environment where it touches something (the
        cup) until none does"""
        qpos, qvel = super().initial_state(env, n)
        (x0, x1), (z0, z1) = self.ball_range

        def draw(todo):
            qpos[todo, self.slides[0]] = env.np_random.uniform(x0, x1, todo.size)
            qpos[todo, self.slides[1]] = env.np_random.uniform(z0, z1, todo.size)

        self.redraw_touching(env, qpos, qvel, draw)
        return qpos, qvel

    def reward(self, sim, actions):
        k = self.kinematics(sim)
        offset = k["site_xpos"][:, self.target] - k["xpos"][:, self.ball]
        return np.all(np.abs(offset[:, [0, 2]]) < self.slack, axis=1).astype(np.float64)

    def observe(self, sim):
        return np.concatenate([sim.qpos, sim.qvel], axis=1)


class Finger(DmControlTask):
    """the planar two-link finger and the free spinner it pushes (gravity off): spinning it
    (reward 1 while the hinge turns at -15 rad/s or faster, the spin task's hinge damping
    lowered from 0.5 to 0.03 as the suite does) or turning its tip into a target on the circle
    the tip sweeps (reward 1 while the tip site's centre is in the target sphere, of radius 0.07
    or 0.03). Each episode draws the target's angle uniformly (turn tasks, stored per
    environment), then the finger's joints uniformly in their ranges and the spinner's angle in
    [-pi, pi], redrawn until nothing touches. Observations: the finger's joint angles, the tip
    relative to the spinner's hinge (x, z), the three joint velocities, the log1p of the
    fingertip's two touch sensors and, turning, the target relative to the hinge (x, z) and the
    tip's signed distance to the target's surface"""

    domain = "finger"
    control_timestep = 0.02
    time_limit = 20.0
    target_radii = {"spin": None, "turn_easy": 0.07, "turn_hard": 0.03}
    spin_velocity = -15.0  # the hinge's velocity the spin task rewards (and faster)
    spin_damping = 0.03  # the spinner's hinge damping in the spin task
    reads_forces = ("contacts",)
    touch_sites = ("touchtop", "touchbottom")  # the suite's touch sensors, in its order

    def load(self):
        if self.task not in self.target_radii:
            raise ValueError(self.task)
        if self.task != "spin":
            return super().load()
        import mujoco

        import phalanx

        spec = mujoco.MjSpec.from_file(self.path)
        hinge = spec.joint("hinge")
        damping = np.array(hinge.damping)  # MuJoCo's damping coefficients, linear first
        damping[0] = self.spin_damping
        hinge.damping = damping
        self.mj_model = spec.compile()
        return phalanx.from_mujoco(self.mj_model)

    def bind(self, model):
        import phalanx

        super().bind(model)
        self.target_radius = self.target_radii[self.task]
        adr = np.asarray(model.jnt_qposadr).reshape(-1)
        dof = np.asarray(model.jnt_dofadr).reshape(-1)
        joints = [self._id("joint", j) for j in ("proximal", "distal", "hinge")]
        self.finger_q = adr[joints[:2]]
        self.velocities = dof[joints]
        self.hinge_v = int(dof[joints[2]])
        self.spinner = self._id("body", "spinner")
        self.tip = self._id("site", "tip")
        self.sites = [self._id("site", s) for s in self.touch_sites]
        # the target's circle: about the hinge's anchor (fixed, whatever the hinge's angle),
        # with the spinner's reach (cap1's radius and half-length) as radius
        k = phalanx.kinematics(model, np.asarray(model.qpos0, np.float64)[None])
        jnt_pos = np.asarray(model.jnt_pos, np.float64).reshape(-1, 3)[joints[2]]
        self.anchor = (k["xpos"][0, self.spinner] + k["xmat"][0, self.spinner] @ jnt_pos)[::2]
        cap = self._id("geom", "cap1")
        self.reach = float(np.asarray(model.geom_size, np.float64).reshape(-1, 3)[cap, :2].sum())
        self.target = self._id("site", "target")
        self.targets = np.zeros((0, 2))  # each environment's target (x, z) in world

    def initial_state(self, env, n):
        """the target's angle (turn tasks), then joints drawn as the randomiser draws them until
        the state has no contact (the suite's _set_random_joint_angles)"""
        rng = env.np_random
        if self.target_radius is not None:
            angle = rng.uniform(-np.pi, np.pi, n)
            self._targets(env.num_envs)[env.reset_ids] = self.anchor + self.reach * np.stack(
                [np.sin(angle), np.cos(angle)], axis=1)
        qpos, qvel = super().initial_state(env, n)
        self.redraw_touching(env, qpos, qvel, self._random_joints(rng, qpos))
        return qpos, qvel

    def _targets(self, num_envs):
        """each environment's target (x, z) in world (num_envs, 2), the model's until drawn"""
        if self.targets.shape[0] != num_envs:
            site = np.asarray(self.model.site_pos, np.float64).reshape(-1, 3)[self.target]
            self.targets = np.tile(site[::2], (num_envs, 1))
        return self.targets

    def episode_edits(self, e):
        if self.target_radius is None:
            return {("dof_damping", "hinge"): np.array(self.spin_damping)}
        mj = self.mujoco_model()
        pos, size = np.array(mj.site("target").pos), np.array(mj.site("target").size)
        if e < self.targets.shape[0]:
            pos[::2] = self.targets[e]
        size[0] = self.target_radius
        return {("site_pos", "target"): pos, ("site_size", "target"): size}

    def _tip(self, sim):
        """the tip site relative to the spinner's frame origin, (x, z) (E, 2)"""
        k = self.kinematics(sim)
        return (k["site_xpos"][:, self.tip] - k["xpos"][:, self.spinner])[:, ::2]

    def _target(self, sim):
        """the target relative to the spinner's frame origin, (x, z) (E, 2)"""
        return (self._targets(sim.num_envs)
                - self.kinematics(sim)["xpos"][:, self.spinner, ::2])

    def _distance(self, sim):
        """the tip's signed distance to the target's surface, negative inside"""
        return np.linalg.norm(self._target(sim) - self._tip(sim), axis=1) - self.target_radius

    def reward(self, sim, actions):
        if self.target_radius is None:
            return (sim.qvel[:, self.hinge_v] <= self.spin_velocity).astype(np.float64)
        return (self._distance(sim) <= 0).astype(np.float64)

    def observe(self, sim):
        touch = np.stack([self.touch(sim, s) for s in self.sites], axis=1)
        obs = [sim.qpos[:, self.finger_q], self._tip(sim), sim.qvel[:, self.velocities],
               np.log1p(touch)]
        if self.target_radius is not None:
            obs += [self._target(sim), self._distance(sim)[:, None]]
        return np.concatenate(obs, axis=1)


class _PlanarArm(DmControlTask):
    """What the manipulator and the stacker share: the arm, its five touch sensors, the
    suite's model of the task (``model_xml``) with the bodies it moves per episode
    (``moved``) made mocap bodies, and the collision-free initial states: arm angles uniform
    in their ranges (the unlimited root in [-pi, pi]) with the finger mirroring the thumb, and
    the task's props (``draw``), redrawn for every environment whose state has a contact."""

    control_timestep = 0.01
    time_limit = 10.0
    reads_forces = ("contacts",)
    # the suite's touch sensors, in its order
    touch_sites = ("palm_touch", "finger_touch", "thumb_touch", "fingertip_touch",
                   "thumbtip_touch")
    arm_joints = ("arm_root", "arm_shoulder", "arm_elbow", "arm_wrist", "finger", "fingertip",
                  "thumb", "thumbtip")
    moved: tuple[str, ...] = ()

    def model_xml(self) -> tuple[bytes, dict]:
        """the suite's model of the task: its XML and assets"""
        raise NotImplementedError

    def load(self):
        import mujoco

        import phalanx

        xml, assets = self.model_xml()
        spec = mujoco.MjSpec.from_string(xml.decode(), include=assets)
        for body in self.moved:
            spec.body(body).mocap = True
        self.mj_model = spec.compile()
        # a copy of the model for testing candidate initial states, whose mocap poses are set
        # to the candidates' (the environments' own are in the simulator's model)
        self.candidates = phalanx.from_mujoco(self.mj_model)
        return phalanx.from_mujoco(self.mj_model)

    def bind(self, model):
        super().bind(model)
        adr = np.asarray(model.jnt_qposadr).reshape(-1)
        dof = np.asarray(model.jnt_dofadr).reshape(-1)
        joints = [self._id("joint", j) for j in self.arm_joints]
        self.arm_q, self.arm_v = adr[joints], dof[joints]
        self.finger, self.thumb = (int(adr[self._id("joint", j)]) for j in ("finger", "thumb"))
        limited = np.asarray(model.jnt_limited).reshape(-1).astype(bool)[joints]
        ranges = np.asarray(model.jnt_range, np.float64).reshape(-1, 2)[joints]
        self.arm_low = np.where(limited, ranges[:, 0], -np.pi)
        self.arm_high = np.where(limited, ranges[:, 1], np.pi)
        self.hand = self._id("body", "hand")
        self.grasp = self._id("site", "grasp")
        self.sites = [self._id("site", s) for s in self.touch_sites]
        # the moved bodies' mocap indices and their poses in the suite's file
        mocap = np.asarray(model.body_mocapid).reshape(-1)
        self.mocap = {b: int(mocap[self._id("body", b)]) for b in self.moved}
        self.mocap_pos0 = np.zeros((len(self.moved), 3))
        self.mocap_quat0 = np.zeros((len(self.moved), 4))
        for b, m in self.mocap.items():
            self.mocap_pos0[m] = self.mj_model.body(b).pos
            self.mocap_quat0[m] = self.mj_model.body(b).quat
        # each environment's poses of the moved bodies (those of its episode)
        self.poses = (np.zeros((0, len(self.moved), 3)), np.zeros((0, len(self.moved), 4)))

    def draw(self, rng, qpos, qvel, pos, quat) -> None:
        """draw the props of n candidate states in place: qpos (n, nq) with the arm drawn,
        qvel (n, nv), the moved bodies' poses pos (n, nmocap, 3) and quat (n, nmocap, 4)"""
        raise NotImplementedError

    def initial_state(self, env, n):
        """the suite's collision-free random states: redraw every candidate with a contact
        (MuJoCo's ncon > 0) until none has; the moved bodies' poses become the environments'
        mocap poses"""
        rng = env.np_random
        qpos = np.tile(np.asarray(self.model.qpos0, np.float64), (n, 1))
        qvel = np.zeros((n, self.model.nv))
        pos = np.tile(self.mocap_pos0, (n, 1, 1))
        quat = np.tile(self.mocap_quat0, (n, 1, 1))

        def draw(todo):
            q, v, p, r = qpos[todo], qvel[todo], pos[todo], quat[todo]
            q[:, self.arm_q] = rng.uniform(self.arm_low, self.arm_high,
                                           (todo.size, len(self.arm_q)))
            q[:, self.finger] = q[:, self.thumb]  # the hand symmetric
            self.draw(rng, q, v, p, r)
            qpos[todo], qvel[todo], pos[todo], quat[todo] = q, v, p, r
            if self.moved:
                self.candidates.set_parameter("mocap_pos", p)
                self.candidates.set_parameter("mocap_quat", r)

        self.redraw_touching(env, qpos, qvel, draw, self.candidates)
        if self.moved:
            for name, value in (("mocap_pos", pos), ("mocap_quat", quat)):
                values = env.sim.parameter(name)
                values[env.reset_ids] = value
                env.sim.set_parameter(name, values)
            if self.poses[0].shape[0] != env.num_envs:
                self.poses = (np.tile(self.mocap_pos0, (env.num_envs, 1, 1)),
                              np.tile(self.mocap_quat0, (env.num_envs, 1, 1)))
            self.poses[0][env.reset_ids], self.poses[1][env.reset_ids] = pos, quat
        return qpos, qvel

    def episode_edits(self, e):
        if self.poses[0].shape[0] <= e:
            return {}
        edits = {}
        for body, m in self.mocap.items():
            edits[("body_pos", body)] = self.poses[0][e, m].copy()
            edits[("body_quat", body)] = self.poses[1][e, m].copy()
        return edits

    def arm_observations(self, sim) -> list[np.ndarray]:
        """the arm's joints (sin, cos per joint), their velocities, the touch sensors (log1p)
        and the hand's pose"""
        angles = sim.qpos[:, self.arm_q]
        bounded = np.stack([np.sin(angles), np.cos(angles)], axis=2)
        touch = np.stack([self.touch(sim, s) for s in self.sites], axis=1)
        return [bounded.reshape(sim.num_envs, -1), sim.qvel[:, self.arm_v], np.log1p(touch),
                self.pose_2d(sim, [self.hand])]

    def pose_2d(self, sim, bodies, orientation=True) -> np.ndarray:
        """the bodies' x and z in world and, with orientation, their quaternions' w and y
        (E, 4 per body): the planar poses the suite observes"""
        k = self.kinematics(sim)
        pose = k["xpos"][:, bodies][..., ::2]
        if orientation:
            pose = np.concatenate([pose, k["xquat"][:, bodies][..., ::2]], axis=2)
        return pose.reshape(sim.num_envs, -1)

    def site_distance(self, sim, a: int, b: int) -> np.ndarray:
        site = self.kinematics(sim)["site_xpos"]
        return np.linalg.norm(site[:, a] - site[:, b], axis=1)


class Manipulator(_PlanarArm):
    """the arm bringing a ball or a peg to its target (bring_*), which is in a cup or slot in
    the insert tasks (rewarded by closeness of the prop's sites to the target's, or a third of
    it for holding the peg). The target (and receptacle) is drawn per episode at
    x in [-0.4, 0.4], z in [0.1, 0.4], turned by [-pi, pi] (bring) or [-pi/3, pi/3] (insert)
    about y; the prop starts in the hand (probability 0.1), on the target (0.1) or anywhere
    (x in [-0.5, 0.5], z in [0, 0.7], turned by [0, 2 pi], with an x velocity in [-5, 5])"""

    domain = "manipulator"
    close = 0.01  # the distance below which a thing is close
    p_in_hand, p_in_target = 0.1, 0.1

    def __init__(self, task):
        if task not in ("bring_ball", "bring_peg", "insert_ball", "insert_peg"):
            raise ValueError(task)
        super().__init__(task)
        kind, self.prop = task.split("_")
        self.insert, self.peg = kind == "insert", self.prop == "peg"
        self.target = "target_" + self.prop
        receptacle = "slot" if self.peg else "cup"
        self.moved = (self.target, receptacle) if self.insert else (self.target,)

    def model_xml(self):
        from dm_control.suite import manipulator

        return manipulator.make_model(self.peg, self.insert)

    def bind(self, model):
        super().bind(model)
        adr = np.asarray(model.jnt_qposadr).reshape(-1)
        dof = np.asarray(model.jnt_dofadr).reshape(-1)
        joints = [self._id("joint", f"{self.prop}_{axis}") for axis in "xzy"]
        self.prop_q, self.prop_v = adr[joints], dof[joints]
        self.prop_body, self.target_body = (self._id("body", b) for b in (self.prop,
                                                                          self.target))
        site = {s: self._id("site", s) for s in (
            ("peg_grasp", "grasp", "peg_pinch", "pinch", "peg", "target_peg", "peg_tip",
             "target_peg_tip") if self.peg else ("ball", "target_ball"))}
        self.pairs = ([(site["peg_grasp"], site["grasp"]), (site["peg_pinch"], site["pinch"]),
                       (site["peg"], site["target_peg"]), (site["peg_tip"],
                                                            site["target_peg_tip"])]
                      if self.peg else [(site["ball"], site["target_ball"])])

    def draw(self, rng, qpos, qvel, pos, quat):
        import phalanx

        n = qpos.shape[0]
        x, z = rng.uniform(-0.4, 0.4, n), rng.uniform(0.1, 0.4, n)
        bound = np.pi / 3 if self.insert else np.pi
        angle = rng.uniform(-bound, bound, n)
        for body in self.moved:  # the target, and the receptacle under it
            m = self.mocap[body]
            pos[:, m, 0], pos[:, m, 2] = x, z
            quat[:, m, 0], quat[:, m, 2] = np.cos(angle / 2), np.sin(angle / 2)
        kind = rng.choice(3, n, p=[self.p_in_hand, self.p_in_target,
                                   1 - self.p_in_hand - self.p_in_target])
        prop = np.stack([x, z, angle], axis=1)  # in the target (kind 1)
        in_hand = kind == 0
        if in_hand.any():  # at the grasp site, along the hand (no mocap pose moves it)
            k = phalanx.kinematics(self.model, qpos[in_hand])
            grasp, axes = k["site_xpos"][:, self.grasp], k["site_xmat"][:, self.grasp]
            prop[in_hand] = np.stack([grasp[:, 0], grasp[:, 2],
                                      np.pi - np.arctan2(axes[:, 2, 0], axes[:, 0, 0])], axis=1)
        anywhere = kind == 2
        m = int(anywhere.sum())
        prop[anywhere] = np.stack([rng.uniform(-0.5, 0.5, m), rng.uniform(0, 0.7, m),
                                   rng.uniform(0, 2 * np.pi, m)], axis=1)
        # the suite's x velocity stays from an earlier, rejected draw when a later one is not
        # "anywhere": qvel is drawn over, never cleared
        qvel[anywhere, self.prop_v[0]] = rng.uniform(-5, 5, m)
        qpos[:, self.prop_q] = prop

    def reward(self, sim, actions):
        close = [_tolerance(self.site_distance(sim, a, b), (0, self.close), 2 * self.close)
                 for a, b in self.pairs]
        if not self.peg:
            return close[0]
        grasping, bringing = (close[0] + close[1]) / 2, (close[2] + close[3]) / 2
        return np.maximum(bringing, grasping / 3)

    def observe(self, sim):
        return np.concatenate(self.arm_observations(sim) + [
            self.pose_2d(sim, [self.prop_body]), sim.qvel[:, self.prop_v],
            self.pose_2d(sim, [self.target_body])], axis=1)


class Stacker(_PlanarArm):
    """the arm stacking 2 or 4 boxes: rewarded when a box is at the target (a box's size
    above the floor, 1, 3, ... box sizes up to the number of boxes, drawn per episode with x in
    [-0.37, 0.37]) and the hand 0.1 or farther from it. The boxes start at x in [0.1, 0.3],
    z in [0, 0.7], turned by [0, 2 pi]"""

    domain = "stacker"
    moved = ("target",)
    close = 0.01

    def __init__(self, task):
        self.n_boxes = {"stack_2": 2, "stack_4": 4}[task]
        super().__init__(task)

    def model_xml(self):
        from dm_control.suite import stacker

        return stacker.make_model(self.n_boxes)

    def bind(self, model):
        super().bind(model)
        adr = np.asarray(model.jnt_qposadr).reshape(-1)
        dof = np.asarray(model.jnt_dofadr).reshape(-1)
        names = [f"box{b}" for b in range(self.n_boxes)]
        self.boxes = [self._id("body", b) for b in names]
        self.box_sites = [self._id("site", b) for b in names]
        # the positions drawn per box (x, z, angle), the velocities observed per box (x, y, z)
        self.box_q = adr[[self._id("joint", f"{b}_{a}") for b in names for a in "xzy"]]
        self.box_v = dof[[self._id("joint", f"{b}_{a}") for b in names for a in "xyz"]]
        self.target_body, self.target_site = self._id("body", "target"), self._id("site", "target")
        self.box_size = float(np.asarray(model.geom_size).reshape(-1, 3)[
            self._id("geom", "target"), 0])

    def draw(self, rng, qpos, qvel, pos, quat):
        n, t = qpos.shape[0], self.mocap["target"]
        pos[:, t, 2] = self.box_size * (2 * rng.integers(self.n_boxes, size=n) + 1)
        pos[:, t, 0] = rng.uniform(-0.37, 0.37, n)
        boxes = np.stack([rng.uniform(0.1, 0.3, (n, self.n_boxes)),
                          rng.uniform(0, 0.7, (n, self.n_boxes)),
                          rng.uniform(0, 2 * np.pi, (n, self.n_boxes))], axis=2)
        qpos[:, self.box_q] = boxes.reshape(n, -1)

    def reward(self, sim, actions):
        box_to_target = np.min([self.site_distance(sim, b, self.target_site)
                                for b in self.box_sites], axis=0)
        box_is_close = _tolerance(box_to_target, margin=2 * self.box_size)
        hand_is_far = _tolerance(self.site_distance(sim, self.grasp, self.target_site),
                                 bounds=(0.1, np.inf), margin=self.close)
        return box_is_close * hand_is_far

    def observe(self, sim):
        return np.concatenate(self.arm_observations(sim) + [
            self.pose_2d(sim, self.boxes), sim.qvel[:, self.box_v],
            self.pose_2d(sim, [self.target_body], orientation=False)], axis=1)


class Quadruped(DmControlTask):
    """the quadruped walking or running (its torso's forward velocity at least 0.5 or 5 m/s),
    fetching a ball to the arena's centre, or escaping a bowl of rough terrain (its workspace
    at least the terrain's half-width from the origin), upright (escape: within 20 degrees);
    observing its hinges, their velocities and its actuators' activations, the torso's
    velocity, vertical axis and inertial sensors (accelerometer, gyro) and the toes' force and
    torque sensors (arcsinh), for fetch the ball's state and the target's position in the
    torso's frame, and for escape the origin in the torso's frame and the twenty rangefinders
    on its head (tanh of the distance, 1 where a ray meets nothing; phalanx.rangefinders).
    Initial states: a random orientation (fetch: a random heading and place, the ball thrown
    from 2 m), raised in 1 cm steps from the floor until nothing touches. Escape draws each
    environment's terrain per episode as the suite does (a sinusoidal bowl times smooth random
    bumps, rounded to MuJoCo's float32 elevation) into its own copy of the height field
    (``hfield_data``, a per-environment field: 161 KB per environment), kept in ``terrains``.
    The sensors read Phalanx's constraint forces (Task.site_sensors)."""

    domain = "quadruped"
    control_timestep = 0.02
    time_limit = 20.0
    reads_forces = ("contacts", "qfrc_constraint")
    speeds = {"walk": 0.5, "run": 5.0, "fetch": 0.0, "escape": 0.0}
    deviation = {"escape": 20.0}  # the torso's tilt (degrees) with the full upright reward
    bump_scale, smoothness = 2.0, 0.15  # the escape terrain's bumps: size (m), least height
    toes = ("toe_front_left", "toe_front_right", "toe_back_right", "toe_back_left")

    def load(self):
        import mujoco
        from dm_control.suite import common, quadruped

        import phalanx

        if self.task == "fetch":
            xml = quadruped.make_model(walls_and_ball=True)
        elif self.task == "escape":
            xml = quadruped.make_model(floor_size=40, terrain=True, rangefinders=True)
        else:
            xml = quadruped.make_model(floor_size=self.time_limit * self.speeds[self.task])
        self.mj_model = mujoco.MjModel.from_xml_string(xml.decode(), common.ASSETS)
        return phalanx.from_mujoco(self.mj_model)

    def bind(self, model):
        super().bind(model)
        jtype = np.asarray(model.jnt_type).reshape(-1)
        hinges = np.flatnonzero(jtype == _phalanx.JOINT_TYPES.index("hinge"))
        self.hinge_q = np.asarray(model.jnt_qposadr).reshape(-1)[hinges]
        self.hinge_v = np.asarray(model.jnt_dofadr).reshape(-1)[hinges]
        self.root_q = int(np.asarray(model.jnt_qposadr).reshape(-1)[self._id("joint", "root")])
        self.torso = self._id("body", "torso")
        self.torso_site = self._id("site", "torso")
        self.toe_sites = [self._id("site", t) for t in self.toes]
        self.move_speed = self.speeds[self.task]
        if self.task == "escape":
            import mujoco

            import phalanx

            mj = self.mujoco_model()
            terrain = mj.hfield("terrain")
            self.hfield_shape = (int(terrain.nrow[0]), int(terrain.ncol[0]))
            self.terrain_size = float(terrain.size[0])
            self.workspace = self._id("site", "workspace")
            rangefinder = int(mujoco.mjtSensor.mjSENS_RANGEFINDER)
            self.rangefinders = [self._id("site", mj.site(int(mj.sensor_objid[i])).name)
                                 for i in range(mj.nsensor) if mj.sensor_type[i] == rangefinder]
            self.terrains = np.zeros((0, model.nhfielddata), np.float32)
            self.candidates = phalanx.from_mujoco(mj)  # lift_until_free's model
        if self.task == "fetch":
            mj = self.mujoco_model()
            self.ball = self._id("body", "ball")
            ball_joint = self._id("joint", "ball_root")
            self.ball_q = int(np.asarray(model.jnt_qposadr).reshape(-1)[ball_joint])
            self.ball_v = int(np.asarray(model.jnt_dofadr).reshape(-1)[ball_joint])
            self.root_v = int(np.asarray(model.jnt_dofadr).reshape(-1)[self._id("joint", "root")])
            self.workspace = self._id("site", "workspace")
            self.target = self._id("site", "target")
            self.floor_size = float(mj.geom("floor").size[0])
            self.reach_radius = float(mj.site("workspace").size[0] + mj.geom("ball").size[0])
            self.target_radius = float(mj.site("target").size[0])

    def initial_state(self, env, n):
        rng = env.np_random
        qpos, qvel = super().initial_state(env, n)
        root = slice(self.root_q, self.root_q + 7)
        if self.task == "fetch":
            azimuth = rng.uniform(0, 2 * np.pi, n)
            quat = np.stack([np.cos(azimuth / 2), 0 * azimuth, 0 * azimuth,
                             np.sin(azimuth / 2)], axis=1)
            spawn = 0.9 * self.floor_size
            qpos[:, root.start:root.start + 2] = rng.uniform(-spawn, spawn, (n, 2))
        else:
            if self.task == "escape":
                self.draw_terrains(env)
            quat = rng.standard_normal((n, 4))
            quat /= np.linalg.norm(quat, axis=1, keepdims=True)
        qpos[:, root.start + 3:root.stop] = quat
        self.lift_until_free(env, qpos, qvel)
        if self.task == "fetch":
            qpos[:, self.ball_q:self.ball_q + 2] = rng.uniform(-spawn, spawn, (n, 2))
            qpos[:, self.ball_q + 2] = 2
            qvel[:, self.ball_v:self.ball_v + 2] = 5 * rng.standard_normal((n, 2))
        return qpos, qvel

    def draw_terrains(self, env):
        """the suite's escape terrain for each environment reset (env.reset_ids): a sinusoidal
        bowl times bumps drawn uniform in [smoothness, 1] on a grid of bump_scale and zoomed
        to the height field's grid (scipy.ndimage.zoom, as the suite), in float32 as MuJoCo
        keeps it; set as those environments' hfield_data"""
        from scipy import ndimage

        nrow, ncol = self.hfield_shape
        row, col = np.ogrid[-1:1:nrow * 1j, -1:1:ncol * 1j]
        bowl = 0.5 - np.cos(2 * np.pi * np.clip(np.sqrt(col ** 2 + row ** 2), 0.04, 1)) / 2
        nbump = int(2 * self.terrain_size / self.bump_scale)
        if self.terrains.shape[0] != env.num_envs:
            self.terrains = np.zeros((env.num_envs, self.model.nhfielddata), np.float32)
        for e in env.reset_ids:
            bumps = env.np_random.uniform(self.smoothness, 1, (nbump, nbump))
            self.terrains[e] = (bowl * ndimage.zoom(bumps, nrow / nbump)).ravel()
        env.sim.set_parameter("hfield_data", self.terrains.astype(np.float64))

    def lift_until_free(self, env, qpos, qvel):
        """the suite's search for a height with no contact: the torso from the floor (z = 0)
        up in 1 cm steps (accumulated as the suite adds them) until MuJoCo's ncon is 0 (escape:
        on each environment's own terrain)"""
        import phalanx

        z = np.zeros(qpos.shape[0])
        todo = np.arange(qpos.shape[0])
        model, terrain_of = self.model, None
        for _ in range(10000):
            qpos[todo, self.root_q + 2] = z[todo]
            if self.task == "escape" and (terrain_of is None or terrain_of.size != todo.size):
                # a model whose copies of the terrain are the candidates', in order
                model, terrain_of = self.candidates, todo
                model.set_parameter("hfield_data",
                                    self.terrains[env.reset_ids[todo]].astype(np.float64))
            found = phalanx.contacts(model, qpos[todo], forces=False, dtype=env.sim.dtype)
            todo = todo[found["count"] > 0]
            if todo.size == 0:
                return
            z[todo] += 0.01
        raise RuntimeError(f"phalanx.envs: {self.name} found no contact-free height for "
                           f"{todo.size} environments")

    def upright(self, sim):
        """the reward for the torso's z axis near the world's: 1 upright (within the task's
        deviation), 0 upside down"""
        zz = self.kinematics(sim)["xmat"][:, self.torso, 2, 2]
        cos = np.cos(np.deg2rad(self.deviation.get(self.task, 0.0)))
        return _tolerance(zz, bounds=(cos, np.inf), sigmoid="linear", margin=1 + cos,
                          value_at_margin=0)

    def reward(self, sim, actions):
        if self.task == "escape":
            away = np.linalg.norm(self.kinematics(sim)["site_xpos"][:, self.workspace], axis=1)
            return self.upright(sim) * _tolerance(
                away, bounds=(self.terrain_size, np.inf), margin=self.terrain_size,
                value_at_margin=0, sigmoid="linear")
        if self.task != "fetch":
            forward = self.site_sensors(sim, [self.torso_site])["velocimeter"][:, 0, 0]
            move = _tolerance(forward, bounds=(self.move_speed, np.inf), margin=self.move_speed,
                              value_at_margin=0.5, sigmoid="linear")
            return self.upright(sim) * move
        k = self.kinematics(sim)
        ball = k["xpos"][:, self.ball]
        arena = self.floor_size * np.sqrt(2)
        reach = _tolerance(np.linalg.norm((k["site_xpos"][:, self.workspace] - ball)[:, :2],
                                          axis=1),
                           bounds=(0, self.reach_radius), sigmoid="linear", margin=arena,
                           value_at_margin=0)
        fetch = _tolerance(np.linalg.norm((k["site_xpos"][:, self.target] - ball)[:, :2],
                                          axis=1),
                           bounds=(0, self.target_radius), sigmoid="linear", margin=arena,
                           value_at_margin=0)
        return self.upright(sim) * reach * (0.5 + 0.5 * fetch)

    def observe(self, sim):
        k = self.kinematics(sim)
        torso = self.site_sensors(sim, [self.torso_site])
        toes = self.site_sensors(sim, self.toe_sites)
        n = sim.num_envs
        obs = [sim.qpos[:, self.hinge_q], sim.qvel[:, self.hinge_v], sim.act,
               torso["velocimeter"][:, 0], k["xmat"][:, self.torso, 2, 2:3],
               torso["accelerometer"][:, 0], torso["gyro"][:, 0],
               np.arcsinh(toes["force"].reshape(n, -1)),
               np.arcsinh(toes["torque"].reshape(n, -1))]
        if self.task == "fetch":
            frame, pos = k["xmat"][:, self.torso], k["xpos"][:, self.torso]
            ball = np.stack([k["xpos"][:, self.ball] - pos,
                             sim.qvel[:, self.ball_v:self.ball_v + 3]
                             - sim.qvel[:, self.root_v:self.root_v + 3],
                             sim.qvel[:, self.ball_v + 3:self.ball_v + 6]], axis=1)
            obs += [np.einsum("eki,eij->ekj", ball, frame).reshape(n, -1),
                    np.einsum("ei,eij->ej", k["site_xpos"][:, self.target] - pos, frame)]
        if self.task == "escape":
            import phalanx

            frame, pos = k["xmat"][:, self.torso], k["xpos"][:, self.torso]
            rays = phalanx.rangefinders(sim.model, sim.qpos, self.rangefinders,
                                        dtype=sim.dtype)["dist"]
            obs += [np.einsum("ei,eij->ej", -pos, frame), np.where(rays == -1, 1.0, np.tanh(rays))]
        return np.concatenate(obs, axis=1)

    def episode_edits(self, e):
        if self.task != "escape" or e >= self.terrains.shape[0]:
            return {}
        return {("hfield_data", "terrain"): self.terrains[e]}


class Dog(DmControlTask):
    """the dog standing (torso and pelvis at 0.9 of their heights at rest, skull, torso and
    pelvis upright, the touch sensors of its paws bearing its weight), walking, trotting or
    running (its centre of mass forward in the torso's frame at 1, 3 or 9 m/s, up to twice
    that) or fetching a thrown ball to the target; observing its hinges and their velocities,
    the torso's and pelvis' heights, the three bodies' vertical axes in their frames, the
    centre of mass velocity in the torso's frame, the head's accelerometer, velocimeter and
    gyro, the force sensors above its paws, the touch sensors under them, the actuators'
    activations, and for fetch the ball and the target seen from the head. Initial states:
    at rest (qpos0), a random heading, random horizontal root velocities and turn rate,
    activations uniform in the control ranges; fetch throws the ball towards the centre. The
    sensors read Phalanx's constraint forces (Task.site_sensors, Task.touch)."""

    domain = "dog"
    control_timestep = 0.015
    time_limit = 15.0
    reads_forces = ("contacts", "qfrc_constraint")
    speeds = {"stand": 0.0, "walk": 1.0, "trot": 3.0, "run": 9.0, "fetch": 0.0}
    touch_sites = ("palm_L", "palm_R", "sole_L", "sole_R")  # the suite's order
    force_sites = ("foot_anchor_L", "foot_anchor_R", "hand_anchor_L", "hand_anchor_R")
    upright_cosine = np.cos(np.deg2rad(30))

    def load(self):
        import mujoco
        from dm_control.suite import dog

        import phalanx

        if self.task == "fetch":
            xml, assets = dog.get_model_and_assets(remove_ball=False)
        else:
            xml, assets = dog.get_model_and_assets(floor_size=self.time_limit
                                                   * max(self.speeds[self.task], 1.0))
        self.mj_model = mujoco.MjModel.from_xml_string(xml.decode(), assets)
        return phalanx.from_mujoco(self.mj_model)

    def bind(self, model):
        super().bind(model)
        mj = self.mujoco_model()
        jtype = np.asarray(model.jnt_type).reshape(-1)
        hinges = np.flatnonzero(jtype == _phalanx.JOINT_TYPES.index("hinge"))
        self.hinge_q = np.asarray(model.jnt_qposadr).reshape(-1)[hinges]
        self.hinge_v = np.asarray(model.jnt_dofadr).reshape(-1)[hinges]
        self.root_q = int(np.asarray(model.jnt_qposadr).reshape(-1)[self._id("joint", "root")])
        self.root_v = int(np.asarray(model.jnt_dofadr).reshape(-1)[self._id("joint", "root")])
        self.torso, self.pelvis = self._id("body", "torso"), self._id("body", "pelvis")
        self.upright_bodies = [self._id("body", b) for b in ("skull", "torso", "pelvis")]
        self.head = self._id("site", "head")
        self.sites = [self._id("site", s) for s in self.touch_sites]
        self.anchors = [self._id("site", s) for s in self.force_sites]
        self.move_speed = self.speeds[self.task]
        # the heights at rest and the weight the suite measures at every episode's start
        import phalanx

        rest = phalanx.kinematics(model, np.asarray(model.qpos0, np.float64)[None])["xpos"]
        self.stand_height = 0.9 * rest[0, [self.torso, self.pelvis], 2]
        gravity = float(np.asarray(model.gravity).reshape(-1)[2])
        self.body_weight = -gravity * float(mj.body_subtreemass[self.torso])
        ranges = np.asarray(model.actuator_ctrlrange, np.float64).reshape(-1, 2)
        if model.na != model.nu:
            raise ValueError(f"phalanx.envs: {self.name} expects one activation per actuator")
        self.act_low, self.act_high = ranges[:, 0], ranges[:, 1]
        if self.task == "fetch":
            ball_joint = self._id("joint", "ball_root")
            self.ball = self._id("body", "ball")
            self.ball_q = int(np.asarray(model.jnt_qposadr).reshape(-1)[ball_joint])
            self.ball_v = int(np.asarray(model.jnt_dofadr).reshape(-1)[ball_joint])
            self.bites = [self._id("site", s) for s in ("upper_bite", "lower_bite")]
            self.bite_radius = float(mj.site("upper_bite").size[0])
            target = mj.geom("target")
            if mj.geom_bodyid[target.id] != 0:
                raise ValueError(f"phalanx.envs: {self.name} expects a fixed target")
            self.target_pos = np.array(target.pos)
            self.target_radius = float(target.size[0])
            self.floor_size = float(mj.geom("floor").size[0])

    def initial_state(self, env, n):
        rng = env.np_random
        qpos, qvel = super().initial_state(env, n)
        azimuth = rng.uniform(0, 2 * np.pi, n)
        qpos[:, self.root_q + 3] = np.cos(azimuth / 2)
        qpos[:, self.root_q + 4:self.root_q + 6] = 0
        qpos[:, self.root_q + 6] = np.sin(azimuth / 2)
        for k in (0, 1, 5):  # horizontal velocity and turn rate
            qvel[:, self.root_v + k] = 2 * rng.standard_normal(n)
        act = rng.uniform(self.act_low, self.act_high, (n, self.model.nu))
        if self.task == "fetch":
            radius = 0.75 * self.floor_size
            azimuth = rng.uniform(0, 2 * np.pi, n)
            qpos[:, self.ball_q:self.ball_q + 3] = np.stack(
                [radius * np.sin(azimuth), radius * np.cos(azimuth), np.full(n, 0.05)], axis=1)
            up = np.sqrt(2 * -float(np.asarray(self.model.gravity).reshape(-1)[2])
                         * rng.uniform(0, 3, n))
            speed = rng.uniform(0, 5, n)
            direction = np.stack([-np.sin(azimuth) + 0.05 * rng.standard_normal(n),
                                  -np.cos(azimuth) + 0.05 * rng.standard_normal(n)], axis=1)
            qvel[:, self.ball_v:self.ball_v + 3] = np.concatenate(
                [speed[:, None] * direction, up[:, None]], axis=1)
        return qpos, qvel, act

    def com_velocity(self, sim):
        """the centre of mass velocity of the torso's subtree in the torso's frame (E, 3)"""
        frame = self.kinematics(sim)["xmat"][:, self.torso]
        return np.einsum("ei,eij->ej", self.subtree_linvel(sim, self.torso), frame)

    def reward(self, sim, actions):
        k = self.kinematics(sim)
        heights = k["xpos"][:, [self.torso, self.pelvis], 2]
        torso = _tolerance(heights[:, 0], bounds=(self.stand_height[0], np.inf),
                           margin=self.stand_height[0])
        pelvis = _tolerance(heights[:, 1], bounds=(self.stand_height[1], np.inf),
                            margin=self.stand_height[1])
        upright = _tolerance(k["xmat"][:, self.upright_bodies, 2, 2],
                             bounds=(self.upright_cosine, np.inf), sigmoid="linear",
                             margin=self.upright_cosine + 1, value_at_margin=0)
        touch = _tolerance(sum(self.touch(sim, s) for s in self.sites),
                           bounds=(self.body_weight, np.inf), margin=self.body_weight,
                           sigmoid="linear", value_at_margin=0.9)
        reward = torso * pelvis * upright.prod(axis=1) * touch
        if self.task in ("walk", "trot", "run"):
            forward = _tolerance(self.com_velocity(sim)[:, 0],
                                 bounds=(self.move_speed, 2 * self.move_speed),
                                 margin=max(1.0, self.move_speed), value_at_margin=0,
                                 sigmoid="linear")
            reward = reward * (4 * forward + 1) / 5
        elif self.task == "fetch":
            ball = k["xpos"][:, self.ball]
            mouth = np.mean([np.linalg.norm(ball - k["site_xpos"][:, s], axis=1)
                             for s in self.bites], axis=0)
            reach = (6 * _tolerance(mouth, bounds=(0, self.bite_radius), sigmoid="reciprocal",
                                    margin=2) + 1) / 7
            to_target = np.linalg.norm(ball - self.target_pos, axis=1)
            near = _tolerance(to_target, bounds=(0, self.target_radius), sigmoid="reciprocal",
                              margin=self.floor_size)
            reach = np.where(to_target < 2 * self.target_radius, 1.0, reach)
            reward = reward * reach * (near + 1) / 2
        return reward

    def observe(self, sim):
        k = self.kinematics(sim)
        n = sim.num_envs
        head = self.site_sensors(sim, [self.head])
        anchors = self.site_sensors(sim, self.anchors)
        obs = [sim.qpos[:, self.hinge_q], sim.qvel[:, self.hinge_v],
               k["xpos"][:, [self.torso, self.pelvis], 2],
               k["xmat"][:, self.upright_bodies, 2, :].reshape(n, -1), self.com_velocity(sim),
               head["accelerometer"][:, 0], head["velocimeter"][:, 0], head["gyro"][:, 0],
               anchors["force"].reshape(n, -1),
               np.stack([self.touch(sim, s) for s in self.sites], axis=1), sim.act]
        if self.task == "fetch":
            frame, pos = k["site_xmat"][:, self.head], k["site_xpos"][:, self.head]
            ball = k["xpos"][:, self.ball]
            # the ball's velocity in the head's frame, less the head's own (its velocimeter)
            ball_vel = np.einsum("ei,eij->ej", sim.qvel[:, self.ball_v:self.ball_v + 3], frame)
            obs += [np.einsum("ei,eij->ej", ball - pos, frame),
                    ball_vel - head["velocimeter"][:, 0],
                    np.einsum("ei,eij->ej", self.target_pos - pos, frame)]
        return np.concatenate(obs, axis=1)


class Lqr(DmControlTask):
    """a chain of sliders on springs, the first one or two driven (lqr_2_1: two bodies, one
    motor; lqr_6_2: six, two), rewarded 1 - (|qpos|^2 + 0.1 |ctrl|^2) / 2; observing qpos and
    qvel. Episodes have no time limit and end when the state's norm falls below 1e-6. The
    suite draws each model's spring stiffnesses at random: Phalanx's is the one it draws with
    ``random=model_seed`` (0 by default; ``suite.load("lqr", task, task_kwargs={"random":
    model_seed})`` builds the same). Initial states: qpos of norm sqrt(2) in a uniformly random
    direction, at rest."""

    domain = "lqr"
    time_limit = float("inf")
    terminates = True
    sizes = {"lqr_2_1": (2, 1), "lqr_6_2": (6, 2)}
    control_cost = 0.1
    terminal_norm = 1e-6

    def __init__(self, task: str, model_seed: int = 0) -> None:
        super().__init__(task)
        self.model_seed = model_seed

    def load(self):
        import mujoco
        from dm_control.suite import lqr

        import phalanx

        xml, assets = lqr.get_model_and_assets(*self.sizes[self.task],
                                               np.random.RandomState(self.model_seed))
        self.mj_model = mujoco.MjModel.from_xml_string(xml.decode(), assets)
        return phalanx.from_mujoco(self.mj_model)

    def initial_state(self, env, n):
        unit = env.np_random.standard_normal((n, self.model.nq))
        qpos = np.sqrt(2) * unit / np.linalg.norm(unit, axis=1, keepdims=True)
        return qpos, np.zeros((n, self.model.nv))

    def reward(self, sim, actions):
        ctrl = sim.ctrl
        return 1 - 0.5 * ((sim.qpos ** 2).sum(axis=1)
                          + self.control_cost * (ctrl ** 2).sum(axis=1))

    def terminated(self, sim):
        state = np.concatenate([sim.qpos, sim.qvel, sim.act], axis=1)
        return np.linalg.norm(state, axis=1) < self.terminal_norm

    def observe(self, sim):
        return np.concatenate([sim.qpos, sim.qvel], axis=1)


class Swimmer(DmControlTask):
    """the planar swimmer of six or fifteen links (swimmer6, swimmer15) in a dense medium
    (MuJoCo's inertia-box fluid forces), steering its nose to a target: reward
    tolerance(distance, bounds (0, r), margin 5 r, long tail), r the target's radius; observing
    the joint angles, the target in the head's frame (x, y) and each link's velocity in its
    frame (x, y) and angular velocity about z (velocimeter and gyro on the links' sites). Each
    episode draws the joints (the heading uniform, the rest uniform in their ranges) and the
    target, uniform in a square of half-width 0.3 with probability 0.2, else 2, kept per
    environment in ``targets`` (the suite moves the target geom of its model)"""

    domain = "swimmer"
    control_timestep = 0.03
    time_limit = 30.0
    randomize_joints = True
    links = {"swimmer6": 6, "swimmer15": 15}
    close_target = 0.2  # the probability of a target in the small square
    target_box = (0.3, 2.0)  # the squares' half-widths, close and far

    def load(self):
        if self.task not in self.links:
            raise ValueError(self.task)
        import mujoco
        from dm_control.suite import swimmer

        import phalanx

        xml, assets = swimmer.get_model_and_assets(self.links[self.task])
        self.mj_model = mujoco.MjModel.from_xml_string(xml.decode(), assets)
        return phalanx.from_mujoco(self.mj_model)

    def bind(self, model):
        super().bind(model)
        target, nose = self._id("geom", "target"), self._id("geom", "nose")
        self.target0 = self.world_geom_pos(model, target)
        self.targets = np.zeros((0, 3))
        self.head = self._id("body", "head")
        self.nose_pos = np.asarray(model.geom_pos, np.float64).reshape(-1, 3)[nose]
        self.target_size = float(np.asarray(model.geom_size).reshape(-1, 3)[target, 0])
        # the velocimeters' and gyros' sites: the head's, then each link's
        n = self.links[self.task]
        self.sites = [self._id("site", "head")] + [self._id("site", f"site_{i}")
                                                  for i in range(n - 1)]
        self.joints = slice(3, model.nq)  # all but the head's slides and heading

    def initial_state(self, env, n):
        qpos, qvel = super().initial_state(env, n)
        rng = env.np_random
        box = np.where(rng.uniform(size=n) < self.close_target, *self.target_box)
        targets = self._targets(env.num_envs)
        targets[env.reset_ids, :2] = box[:, None] * rng.uniform(-1, 1, (n, 2))
        return qpos, qvel

    def episode_edits(self, e):
        return self._target_edit(e)

    def nose_to_target(self, sim):
        """the target's position less the nose's in the head's frame, x and y (E, 2)"""
        offset = self._targets(sim.num_envs) - self.in_world(sim, self.head, self.nose_pos)
        return np.einsum("ei,eij->ej", offset, self.kinematics(sim)["xmat"][:, self.head])[:, :2]

    def reward(self, sim, actions):
        return _tolerance(np.linalg.norm(self.nose_to_target(sim), axis=1),
                          bounds=(0, self.target_size), margin=5 * self.target_size,
                          sigmoid="long_tail")

    def observe(self, sim):
        sensors = self.site_sensors(sim, self.sites)
        velocities = np.concatenate([sensors["velocimeter"][..., :2],
                                     sensors["gyro"][..., 2:]], axis=2)
        return np.concatenate([sim.qpos[:, self.joints], self.nose_to_target(sim),
                               velocities.reshape(sim.num_envs, -1)], axis=1)


class Fish(DmControlTask):
    """the fish with a free torso, a two-jointed tail and two fins, in a dense medium without
    gravity (MuJoCo's inertia-box fluid forces). upright: reward tolerance(z_z, bounds (1, 1),
    margin 1), z_z the torso's z axis's vertical component; swim: (7 tolerance(|mouth to
    target|, bounds (0, r), margin 2 r) + (z_z + 1) / 2) / 8, r the mouth's and target's radii
    summed. Observations: the seven tail and fin angles, z_z, (swim) the target in the mouth's
    frame, and qvel. Episodes draw the torso's orientation (a normalised Gaussian quaternion)
    and the tail and fin angles uniform in [-0.2, 0.2]; swim also the target (x and y uniform
    in [-0.4, 0.4], z in [0.1, 0.3]), kept per environment in ``targets`` (the suite moves the
    target geom of its model)"""

    domain = "fish"
    control_timestep = 0.04
    time_limit = 40.0
    joint_names = ("tail1", "tail_twist", "tail2", "finright_roll", "finright_pitch",
                   "finleft_roll", "finleft_pitch")
    joint_range = 0.2
    target_range = ((-0.4, 0.4), (-0.4, 0.4), (0.1, 0.3))

    def bind(self, model):
        super().bind(model)
        if self.task not in ("upright", "swim"):
            raise ValueError(self.task)
        adr = np.asarray(model.jnt_qposadr).reshape(-1)
        self.joints = [int(adr[self._id("joint", j)]) for j in self.joint_names]
        self.root = int(adr[self._id("joint", "root")])
        self.torso = self._id("body", "torso")
        target, mouth = self._id("geom", "target"), self._id("geom", "mouth")
        self.target0 = self.world_geom_pos(model, target)
        self.targets = np.zeros((0, 3))
        self.mouth_body = int(np.asarray(model.geom_bodyid).reshape(-1)[mouth])
        self.mouth_pos = np.asarray(model.geom_pos, np.float64).reshape(-1, 3)[mouth]
        import mujoco

        rot = np.zeros(9)  # the mouth's frame in its body's
        mujoco.mju_quat2Mat(rot, np.asarray(model.geom_quat, np.float64).reshape(-1, 4)[mouth])
        self.mouth_rot = rot.reshape(3, 3)
        sizes = np.asarray(model.geom_size, np.float64).reshape(-1, 3)
        self.radii = float(sizes[mouth, 0] + sizes[target, 0])

    def initial_state(self, env, n):
        qpos, qvel = super().initial_state(env, n)
        rng = env.np_random
        quat = rng.standard_normal((n, 4))
        qpos[:, self.root + 3:self.root + 7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
        qpos[:, self.joints] = rng.uniform(-self.joint_range, self.joint_range,
                                           (n, len(self.joints)))
        if self.task == "swim":
            targets = self._targets(env.num_envs)
            for i, (lo, hi) in enumerate(self.target_range):
                targets[env.reset_ids, i] = rng.uniform(lo, hi, n)
        return qpos, qvel

    def episode_edits(self, e):
        return self._target_edit(e) if self.task == "swim" else {}

    def upright(self, sim):
        return self.kinematics(sim)["xmat"][:, self.torso, 2, 2]

    def mouth_to_target(self, sim):
        """the target's position less the mouth's in the mouth's frame (E, 3)"""
        k = self.kinematics(sim)
        offset = self._targets(sim.num_envs) - self.in_world(sim, self.mouth_body,
                                                             self.mouth_pos)
        axes = k["xmat"][:, self.mouth_body] @ self.mouth_rot
        return np.einsum("ei,eij->ej", offset, axes)

    def reward(self, sim, actions):
        upright = self.upright(sim)
        if self.task == "upright":
            return _tolerance(upright, bounds=(1, 1), margin=1)
        in_target = _tolerance(np.linalg.norm(self.mouth_to_target(sim), axis=1),
                               bounds=(0, self.radii), margin=2 * self.radii)
        return (7 * in_target + 0.5 * (upright + 1)) / 8

    def observe(self, sim):
        parts = [sim.qpos[:, self.joints], self.upright(sim)[:, None]]
        if self.task == "swim":
            parts.append(self.mouth_to_target(sim))
        return np.concatenate(parts + [sim.qvel], axis=1)


DOMAINS = {t.domain: t for t in (Cheetah, Walker, Hopper, Humanoid, HumanoidCMU, Cartpole,
                                 Acrobot, Pendulum, PointMass, Reacher, BallInCup, Finger,
                                 Manipulator, Stacker, Quadruped, Dog, Lqr, Swimmer, Fish)}
TASKS = {"cheetah": ("run",), "walker": ("stand", "walk", "run"), "hopper": ("stand", "hop"),
         "humanoid": ("stand", "walk", "run", "run_pure_state"), "humanoid_CMU": ("stand", "walk", "run"),
         "cartpole": ("balance", "balance_sparse", "swingup", "swingup_sparse", "two_poles",
                      "three_poles"),
         "acrobot": ("swingup", "swingup_sparse"), "pendulum": ("swingup",),
         "point_mass": ("easy", "hard"), "reacher": ("easy", "hard"), "ball_in_cup": ("catch",),
         "finger": ("spin", "turn_easy", "turn_hard"),
         "manipulator": ("bring_ball", "bring_peg", "insert_ball", "insert_peg"),
         "stacker": ("stack_2", "stack_4"), "quadruped": ("walk", "run", "fetch", "escape"),
         "dog": ("stand", "walk", "trot", "run", "fetch"), "lqr": ("lqr_2_1", "lqr_6_2"),
         "swimmer": ("swimmer6", "swimmer15"), "fish": ("upright", "swim")}
