"""What the standard tasks of ``phalanx.envs.make`` share: the Task base class, the kinematics of
the batch each task reads, and dm_control's initial-state randomiser.

A Task turns a model file of a suite into a ``VectorEnv``: its timing (physics steps per
action, steps per episode), its initial states, and its reward, termination and observations as
functions of the whole batch (E environments at once). One Task object serves one environment
(some keep per-step state, such as the position before a step).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _phalanx

_HINGE, _SLIDE, _BALL, _FREE = (_phalanx.JOINT_TYPES.index(t)
                                 for t in ("hinge", "slide", "ball", "free"))


class Task:
    """One standard task. Subclasses set ``frame_skip`` and ``max_episode_steps`` and define
    ``initial_state``, ``reward``, ``observe`` and, where episodes end early, ``terminated``;
    ``bind`` looks up the names they read in the model."""

    name = ""  # "suite/task", the name make() takes
    frame_skip = 1
    max_episode_steps = 1000
    terminates = False  # whether terminated() is defined
    # the constraint forces the task reads from forward_report, by MuJoCo's names (cfrc_ext,
    # qfrc_constraint)
    reads_forces: tuple[str, ...] = ()

    def __init__(self, path) -> None:
        self.path = path
        self._kin_key: Any = None
        self._kin: dict[str, np.ndarray] = {}
        self._report_key: Any = None
        self._report: dict[str, np.ndarray] = {}

    def make(self, num_envs: int, **kwargs):
        """the VectorEnv of this task; keyword arguments go to VectorEnv (dtype, device,
        max_episode_steps, randomize, ...)"""
        from .envs import VectorEnv

        model = self.load()
        self.bind(model)
        options: dict[str, Any] = dict(
            frame_skip=self.frame_skip, max_episode_steps=self.max_episode_steps,
            reward_fn=self.reward, obs_fn=self.observe, reset_fn=self._initial_state,
            before_step_fn=self.before_step,
            terminated_fn=self.terminated if self.terminates else None,
            ctrl_fn=self.controls if type(self).controls is not Task.controls else None)
        options.update(kwargs)
        env = VectorEnv(model, num_envs, **options)
        env.task = self
        return env

    # --- what subclasses define -----------------------------------------------------------

    def load(self):
        """the task's model (phalanx.load_model of its file); a task that edits the file's
        model keeps MuJoCo's compiled model of the edit in ``mj_model``"""
        import phalanx

        return phalanx.load_model(self.path)

    def mujoco_model(self):
        """MuJoCo's compiled model of the task (``mj_model``, else the file's), for what
        Phalanx's model does not keep (site shapes)"""
        if getattr(self, "mj_model", None) is None:
            import mujoco

            self.mj_model = mujoco.MjModel.from_xml_path(self.path)
        return self.mj_model

    def episode_edits(self, e: int) -> dict[tuple[str, str], np.ndarray]:
        """the model values the suite sets for environment e's current episode, by MjModel
        field and element name (a target it moves, a radius it sets): what the suite's
        episode start writes into its model, for comparing with it; empty when it writes
        none"""
        return {}

    def bind(self, model) -> None:
        """look up the bodies, sites and joints the task reads (KeyError-free: a ValueError
        naming what the model lacks)"""
        self.model = model

    def initial_state(self, env, n: int) -> tuple[np.ndarray, ...]:
        """n initial states (qpos (n, nq), qvel (n, nv)) and, for a task that draws them, the
        activations (n, na): VectorEnv's reset_fn"""
        raise NotImplementedError

    def before_step(self, sim) -> None:
        pass

    def controls(self, sim, actions) -> np.ndarray:
        """the controls (E, nu) the physics is given for the actions (VectorEnv's ctrl_fn)"""
        return actions

    def reward(self, sim, actions) -> np.ndarray:
        raise NotImplementedError

    def terminated(self, sim) -> np.ndarray:
        raise NotImplementedError

    def observe(self, sim) -> np.ndarray:
        raise NotImplementedError

    # --- helpers -------------------------------------------------------------------------

    def kinematics(self, sim) -> dict[str, np.ndarray]:
        """phalanx.kinematics of the batch's state (xpos, xmat, site_xpos, com, com_vel, ...),
        computed once per state: the reward, termination and observations of a step share it"""
        q, v = sim.qpos, sim.qvel
        key = self._kin_key
        if key is None or key[0] is not sim or not (np.array_equal(key[1], q)
                                                    and np.array_equal(key[2], v)):
            import phalanx

            self._kin = phalanx.kinematics(sim.model, q, v, dtype=sim.dtype)
            self._kin_key = (sim, q.copy(), v.copy())
        return self._kin

    def in_world(self, sim, body: int, local) -> np.ndarray:
        """the point at ``local`` (3,) in body ``body``'s frame, in world at the batch's state
        (E, 3), e.g. a geom's position (geom_pos)"""
        k = self.kinematics(sim)
        return k["xpos"][:, body] + k["xmat"][:, body] @ np.asarray(local, np.float64)

    def forward_report(self, sim) -> dict[str, np.ndarray]:
        """what MuJoCo's mj_forward (and mj_rnePostConstraint) reports at the batch's state with
        its controls held: the contacts and the constraint force in joint space
        (phalanx.contacts: qfrc_constraint), the actuators' generalized force
        (qfrc_actuator), the acceleration with the constraint forces (qacc) and the
        per-body quantities with the contacts' wrenches (phalanx.body_report: subtree_com,
        cinert, cvel, cfrc_ext, cacc, cfrc_int), computed once per state and controls"""
        q, v, u = sim.qpos, sim.qvel, sim.ctrl
        act = sim.act if sim.model.na > 0 else None
        state = (q, v, u) if act is None else (q, v, u, act)
        key = self._report_key
        if key is None or key[0] is not sim or not all(np.array_equal(a, b)
                                                       for a, b in zip(key[1], state)):
            import phalanx

            model, dtype = sim.model, sim.dtype
            found = phalanx.contacts(model, q, v, u, act=act, dtype=dtype)
            report = dict(found)
            report["qfrc_actuator"] = phalanx.actuator_forces(model, q, v, u, act=act,
                                                              dtype=dtype)
            qacc = None
            if "qfrc_constraint" in found:
                qacc = phalanx.forward_dynamics(model, q, v, u, act=act, dtype=dtype,
                                                qfrc=found["qfrc_constraint"])
                report["qacc"] = qacc
            report.update(phalanx.body_report(model, q, v, found, qacc=qacc, dtype=dtype))
            self._report = report
            self._report_key = (sim, tuple(a.copy() for a in state))
        return self._report

    def site_sensors(self, sim, sites) -> dict[str, np.ndarray]:
        """MuJoCo's gyro, velocimeter, accelerometer, force and torque sensors on the sites
        (ids) at the batch's state, each (E, S, 3) in the site's frame (phalanx.site_sensors of
        forward_report)"""
        import phalanx

        return phalanx.site_sensors(sim.model, self.kinematics(sim), self.forward_report(sim),
                                    sites)

    def touch(self, sim, site: int) -> np.ndarray:
        """MuJoCo's touch sensor on ``site`` at the batch's state (E,): the normal forces of the
        contacts of forward_report that involve the site's body and lie in the site's volume,
        MuJoCo's rule: a contact counts when the ray from its point along its normal (turned
        away from the site's body when that is geom 2's) meets the site's shape. The site must
        be a sphere, an ellipsoid or a box."""
        kind, size = self._site_shape(site)
        found = self.forward_report(sim)
        body = int(np.asarray(self.model.site_bodyid).reshape(-1)[site])
        geom_body = np.asarray(self.model.geom_bodyid).reshape(-1)[found["geom"]]  # (E, C, 2)
        live = np.arange(found["pos"].shape[1])[None, :] < found["count"][:, None]
        normal = found["force"][..., 0]
        of_site = live & (normal > 0) & ((geom_body[..., 0] == body)
                                         | (geom_body[..., 1] == body))
        direction = found["frame"][..., 0, :] * np.where(geom_body[..., 1] == body, -1.0,
                                                         1.0)[..., None]
        k = self.kinematics(sim)
        centre, axes = k["site_xpos"][:, site], k["site_xmat"][:, site]  # (E, 3), (E, 3, 3)
        # the ray in the site's frame
        origin = np.einsum("eci,eij->ecj", found["pos"] - centre[:, None], axes)
        ray = np.einsum("eci,eij->ecj", direction, axes)
        if kind == "box":
            with np.errstate(divide="ignore", invalid="ignore"):
                t1, t2 = (-size - origin) / ray, (size - origin) / ray
            inside = np.abs(origin) <= size
            parallel = ray == 0  # a slab the ray runs along: all or nothing
            lo = np.where(parallel, np.where(inside, -np.inf, np.inf), np.minimum(t1, t2))
            hi = np.where(parallel, np.where(inside, np.inf, -np.inf), np.maximum(t1, t2))
            near, far = lo.max(axis=-1), hi.min(axis=-1)
            hit = (far >= near) & (far >= 0)
        else:  # sphere or ellipsoid: the unit sphere in coordinates scaled by the sizes
            origin, ray = origin / size, ray / size
            a = (ray * ray).sum(-1)
            b = (ray * origin).sum(-1)
            c = (origin * origin).sum(-1) - 1
            det = b * b - a * c
            hit = (det >= 0) & (-b + np.sqrt(np.maximum(det, 0)) >= 0)
        return np.where(of_site & hit, normal, 0.0).sum(axis=1)

    def _site_shape(self, site: int) -> tuple[str, np.ndarray]:
        """a site's type and its sizes (3,) (Phalanx's model keeps no site shapes: MuJoCo's
        compiled model has them)"""
        if not hasattr(self, "_site_shapes"):
            import mujoco

            mj = self.mujoco_model()
            kinds = {int(mujoco.mjtGeom.mjGEOM_SPHERE): "sphere",
                     int(mujoco.mjtGeom.mjGEOM_ELLIPSOID): "ellipsoid",
                     int(mujoco.mjtGeom.mjGEOM_BOX): "box"}
            self._site_shapes = [(kinds.get(int(t)), np.array(mj.site_size[i]))
                                 for i, t in enumerate(mj.site_type)]
        kind, size = self._site_shapes[site]
        if kind is None:
            raise NotImplementedError(f"phalanx.envs: task {self.name} reads a touch sensor on "
                                      f"site {site}, whose shape is not a sphere, an ellipsoid "
                                      "or a box")
        if kind == "sphere":
            size = np.full(3, size[0])
        return kind, size

    def _initial_state(self, env, n: int):
        self._kin_key = self._report_key = None
        return self.initial_state(env, n)

    def _id(self, kind: str, name: str) -> int:
        try:
            return int(getattr(self.model, f"{kind}_id")(name))
        except Exception as err:  # the model's own error names what is missing
            raise ValueError(f"phalanx.envs: task {self.name} needs {kind} '{name}' in "
                             f"{self.path}: {err}") from None


def randomize_limited_and_rotational_joints(model, qpos: np.ndarray,
                                            rng: np.random.Generator) -> None:
    """dm_control's initial-state randomiser, on a batch qpos (n, nq) in place: a limited hinge
    or slide uniform in its range, an unlimited hinge uniform in [-pi, pi], an unlimited ball
    joint a uniformly random unit quaternion, and a free joint's orientation rand(4) normalised
    (dm_control keeps that non-uniform draw for its benchmarks' sake); free joints' positions
    and unlimited slides are left as they are."""
    n = qpos.shape[0]
    types = np.asarray(model.jnt_type).reshape(-1)
    limited = np.asarray(model.jnt_limited).reshape(-1).astype(bool)
    ranges = np.asarray(model.jnt_range, np.float64).reshape(-1, 2)
    adr = np.asarray(model.jnt_qposadr).reshape(-1)
    for j, kind in enumerate(types):
        a = int(adr[j])
        if limited[j] and kind in (_HINGE, _SLIDE):
            qpos[:, a] = rng.uniform(ranges[j, 0], ranges[j, 1], n)
        elif limited[j] and kind == _BALL:
            raise NotImplementedError("phalanx.envs: randomising a limited ball joint")
        elif kind == _HINGE:
            qpos[:, a] = rng.uniform(-np.pi, np.pi, n)
        elif kind == _BALL:
            quat = rng.standard_normal((n, 4))
            qpos[:, a:a + 4] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
        elif kind == _FREE:
            quat = rng.random((n, 4))
            qpos[:, a + 3:a + 7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
