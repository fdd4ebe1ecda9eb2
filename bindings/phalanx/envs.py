"""Gymnasium vector environments on a ``phalanx.Simulator``: ``phalanx.envs.VectorEnv``, and
the standard tasks of the DeepMind Control Suite and Gymnasium's MuJoCo environments on it
(``phalanx.envs.make``).

    import phalanx.envs
    envs = phalanx.envs.make("dm_control/cheetah-run", num_envs=256)  # a suite's task
    envs = phalanx.envs.cartpole(num_envs=256)            # a ready-made example task
    obs, info = envs.reset(seed=0)                         # (256, 4) float32
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())

``VectorEnv`` is a ``gymnasium.vector.VectorEnv`` (Gymnasium 1.x API): ``single_observation_space``
and ``single_action_space`` describe one environment, ``observation_space`` and
``action_space`` the batch (leading dimension num_envs), and ``reset(seed=..., options=...)`` /
``step(actions)`` take and return whole batches. All environments are one ``Simulator``
(``env.sim``), stepped by one call to the kernels.

A task is three functions of the simulator after a step: ``reward_fn(sim, actions)`` -> (E,),
``terminated_fn(sim)`` -> (E,) bool (default: never), ``obs_fn(sim)`` -> (E, d) (default:
``concatenate([qpos, qvel], axis=1)``); ``actions`` is the (E, nu) batch just applied.
Optionally ``before_step_fn(sim)`` runs before each step (to keep what a reward compares
against, such as the position before the step), ``ctrl_fn(sim, actions)`` -> (E, nu) gives the
controls the physics is given for the actions (default: the actions themselves; the reward
still sees the actions), and ``reset_fn(env, n)`` -> (qpos (n, nq), qvel (n, nv)) draws n
initial states from ``env.np_random`` in place of the default noise, for the environments
``env.reset_ids`` (n,); a third entry act (n, na), if it returns one, sets the activations
(otherwise zero).

Standard tasks. ``make(name, num_envs, **kwargs)`` builds the VectorEnv of a task of
``task_names()``: "dm_control/<domain>-<task>" (all of the suite's tasks: acrobot, ball_in_cup, cartpole, cheetah, dog, finger, fish, hopper, humanoid, humanoid_CMU,
lqr, manipulator, pendulum, point_mass, quadruped, reacher, stacker, swimmer, walker)
and "gymnasium/<Name>-v5" (Ant, HalfCheetah, Hopper, Walker2d, Swimmer, Humanoid,
HumanoidStandup, InvertedPendulum, InvertedDoublePendulum, Pusher, Reacher), with the suite's
model file, control timestep, episode length, initial-state distribution, reward, termination
and observations (tests/python/test_tasks.py holds each to the suite's own code at the same
physics state). dm_control's time limits become truncation (the lqr's, infinite, none); its
observation dictionaries are concatenated in their order.
Observations are returned as ``obs_dtype`` (float32 by default, what RL code expects) while the
physics runs in ``dtype`` (float64 by default). Rewards are float64 and terminated / truncated
bool arrays of shape (E,).

Actions. ``action_space`` is a float32 Box per actuator: ``actuator_ctrlrange`` where the
actuator is control-limited, [-1, 1] where it is not (a nominal range; the actions are passed
on unchanged). Actions go to ``sim.ctrl`` and are held for ``frame_skip`` physics steps; the
physics clamps limited actuators to their range. Actions of the wrong shape and actions with
NaN or inf raise ``ValueError`` before anything is stepped.

Autoreset: ``metadata["autoreset_mode"]`` is ``gymnasium.vector.AutoresetMode.NEXT_STEP`` by
default, as Gymnasium's own vector environments. When step t returns terminated or truncated
for environment i, the next ``step`` ignores i's action, resets it and returns its first
observation with reward 0, terminated False and truncated False; the other environments step
as usual. With ``autoreset_mode=AutoresetMode.SAME_STEP`` (what batched RL libraries such as
skrl expect) step t itself resets i and returns its first observation, with the observation
that ended the episode in ``info["final_obs"]`` (an object array, set where
``info["_final_obs"]``), as Gymnasium's SyncVectorEnv in that mode.
``reset(options={"reset_mask": mask})`` resets only the environments of a boolean mask (E,), as
``gymnasium.vector.SyncVectorEnv`` does. Episodes are truncated after
``max_episode_steps`` steps (never when it is None). An environment whose physics stops (a
``phalanx.STATUS_NAN_*`` bit, e.g. a diverging state) is reported terminated and so reset on
the next step; ``info["status"]`` holds every environment's status bits since its reset.

Resets. ``reset(seed=s)`` seeds the environment's numpy Generator (``env.np_random``); it draws
every reset's noise, so a seed and a sequence of actions determine everything that follows. A
reset puts an environment at ``init_qpos`` + U(-scale, scale) per coordinate (quaternions of
free and ball joints renormalised) and ``init_qvel`` + U(-scale, scale), scale =
``reset_noise_scale``, with zero controls. ``randomize={"body_mass": (0.8, 1.2), ...}``
redraws those parameters' scale factors (``Simulator.randomize``: per environment, per entry,
uniform in [low, high) times the nominal value) at every reset of an environment; note that the
model is shared and modified (see ``phalanx.Simulator``), and that each such change recompiles
the model on the next step (about a millisecond or more: noticeable for frequent resets of
small models).

Not provided: rendering, and per-environment seed lists (``seed`` is an int or None).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from . import _phalanx
from .simulator import Simulator

__all__ = ["VectorEnv", "cartpole", "example_model_path", "make", "task_names"]

_FREE, _BALL = (_phalanx.JOINT_TYPES.index(t) for t in ("free", "ball"))  # jnt_type values


def _default_obs(sim: Simulator) -> np.ndarray:
    return np.concatenate([sim.qpos, sim.qvel], axis=1)


class VectorEnv(gymnasium.vector.VectorEnv):
    """num_envs copies of one model as a Gymnasium vector environment (see the module
    docstring for the contract).

    ``model``: a ``phalanx.Model`` (shared with the caller and modified by ``randomize``) or a
    path to an MJCF / URDF file. ``reward_fn(sim, actions)``, ``terminated_fn(sim)`` and
    ``obs_fn(sim)`` define the task. ``frame_skip`` physics steps per ``step``;
    ``max_episode_steps`` steps per episode before truncation (None: none). ``init_qpos`` (nq,) and
    ``init_qvel`` (nv,) centre the reset distribution (defaults: model.qpos0 and zero).
    ``dtype`` is the physics' scalar type, ``obs_dtype`` the observations'.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, model, num_envs: int, reward_fn: Callable, terminated_fn=None,
                 obs_fn=None, *, frame_skip: int = 1, max_episode_steps: int | None = 1000,
                 reset_noise_scale: float = 0.01, init_qpos=None, init_qvel=None,
                 randomize: Mapping[str, tuple[Any, Any]] | None = None, dtype=np.float64,
                 obs_dtype=np.float32, device: str = "cpu", reset_fn=None,
                 before_step_fn=None, ctrl_fn=None,
                 autoreset_mode=AutoresetMode.NEXT_STEP) -> None:
        self.sim = Simulator(model, num_envs, device=device, dtype=dtype)
        self.model = self.sim.model
        self.num_envs = self.sim.num_envs
        if not callable(reward_fn):
            raise TypeError("phalanx.envs.VectorEnv: reward_fn must be callable "
                            "(reward_fn(sim, actions) -> (num_envs,))")
        self.reward_fn = reward_fn
        self.terminated_fn = terminated_fn
        self.reset_fn = reset_fn
        self.before_step_fn = before_step_fn
        self.ctrl_fn = ctrl_fn
        self.reset_ids = np.zeros(0, np.int64)
        if autoreset_mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"phalanx.envs.VectorEnv: autoreset_mode must be "
                             f"AutoresetMode.NEXT_STEP or SAME_STEP, got {autoreset_mode!r}")
        self.metadata = {**self.metadata, "autoreset_mode": autoreset_mode}
        self.obs_fn = _default_obs if obs_fn is None else obs_fn
        self.frame_skip = _positive("frame_skip", frame_skip)
        self.max_episode_steps = (None if max_episode_steps is None
                                  else _positive("max_episode_steps", max_episode_steps))
        self.reset_noise_scale = float(reset_noise_scale)
        if not self.reset_noise_scale >= 0:
            raise ValueError(f"phalanx.envs.VectorEnv: reset_noise_scale must be >= 0, got "
                             f"{reset_noise_scale}")
        m = self.model
        self.init_qpos = self._vector("init_qpos", m.qpos0 if init_qpos is None else init_qpos,
                                      "nq", m.nq)
        self.init_qvel = self._vector("init_qvel", np.zeros(m.nv) if init_qvel is None
                                      else init_qvel, "nv", m.nv)
        self.randomize = {}
        for name, (low, high) in (randomize or {}).items():
            self.sim.parameter(name)  # the simulator's ValueError for an unknown name
            self.randomize[name] = (low, high)
        self.obs_dtype = np.dtype(obs_dtype)
        self.dt = m.timestep * self.frame_skip

        # spaces: one environment, then the batch
        limited = np.asarray(m.actuator_ctrllimited, bool).reshape(-1)
        ctrlrange = np.asarray(m.actuator_ctrlrange, np.float64).reshape(-1, 2)
        low = np.where(limited, ctrlrange[:, 0], -1.0).astype(np.float32)
        high = np.where(limited, ctrlrange[:, 1], 1.0).astype(np.float32)
        self.single_action_space = spaces.Box(low, high, dtype=np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.sim.reset(qpos=self.init_qpos, qvel=self.init_qvel)
        obs = self._observe()
        self.single_observation_space = spaces.Box(-np.inf, np.inf, shape=obs.shape[1:],
                                                   dtype=self.obs_dtype)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        self.elapsed_steps = np.zeros(self.num_envs, np.int64)
        self._autoreset = np.zeros(self.num_envs, bool)
        self._needs_reset = True

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every environment, or those of ``options["reset_mask"]`` (a bool array (E,)),
        drawing the noise from ``np_random`` (re-seeded when ``seed`` is given). Returns
        (observations (E, d), info)."""
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise ValueError(f"phalanx.envs.VectorEnv: seed must be an int or None, got "
                             f"{seed!r} (per-environment seed lists are not supported)")
        super().reset(seed=None if seed is None else int(seed))
        mask = np.ones(self.num_envs, bool)
        if options is not None and "reset_mask" in options:
            mask = options["reset_mask"]
            if not (isinstance(mask, np.ndarray) and mask.dtype == np.bool_
                    and mask.shape == (self.num_envs,)):
                raise ValueError(f"phalanx.envs.VectorEnv: options['reset_mask'] must be a "
                                 f"numpy bool array of shape ({self.num_envs},), got {mask!r}")
            if not mask.any():
                raise ValueError("phalanx.envs.VectorEnv: options['reset_mask'] selects no "
                                 "environment")
        self._reset_envs(np.flatnonzero(mask))
        self._autoreset[mask] = False
        self._needs_reset = False
        return self._observe(), self._info()

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                     dict[str, Any]]:
        """Apply actions (E, nu) for frame_skip physics steps; environments that ended on the
        previous step are reset instead (NEXT_STEP autoreset). Returns (observations (E, d),
        rewards (E,) float64, terminated (E,) bool, truncated (E,) bool, info)."""
        if self._needs_reset:
            raise RuntimeError("phalanx.envs.VectorEnv: call reset() before step()")
        actions = self._check_actions(actions)
        sim = self.sim
        resetting = self._autoreset.copy()
        if self.before_step_fn is not None:
            self.before_step_fn(sim)
        ctrl = actions
        if self.ctrl_fn is not None:
            ctrl = self._batch("ctrl_fn's controls", self.ctrl_fn(sim, actions), self.num_envs,
                               self.model.nu)
        sim.step(ctrl, nstep=self.frame_skip)
        self.elapsed_steps += 1
        reward = self._per_env("reward_fn", self.reward_fn(sim, actions), np.float64)
        if self.terminated_fn is None:
            terminated = np.zeros(self.num_envs, bool)
        else:
            terminated = self._per_env("terminated_fn", self.terminated_fn(sim), bool)
        terminated |= sim.stopped
        truncated = (np.zeros(self.num_envs, bool) if self.max_episode_steps is None
                     else self.elapsed_steps >= self.max_episode_steps)
        if resetting.any():
            self._reset_envs(np.flatnonzero(resetting))
            reward[resetting] = 0.0
            terminated[resetting] = False
            truncated[resetting] = False
        done = terminated | truncated
        obs, info = self._observe(), self._info()
        if self.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP:
            if done.any():
                final = np.full(self.num_envs, None, dtype=object)
                for e in np.flatnonzero(done):
                    final[e] = obs[e]
                info.update(final_obs=final, _final_obs=done)
                self._reset_envs(np.flatnonzero(done))
                obs = self._observe()
        else:
            self._autoreset = done
        return obs, reward, terminated, truncated, info

    # --- helpers ------------------------------------------------------------------------

    def _reset_envs(self, ids: np.ndarray) -> None:
        """reset the environments ids with noise and, if asked, new parameters"""
        n, rng, scale = ids.size, self.np_random, self.reset_noise_scale
        self.reset_ids = ids
        act = None
        if self.reset_fn is not None:
            drawn = self.reset_fn(self, n)
            qpos = self._batch("reset_fn's qpos", drawn[0], n, self.model.nq)
            qvel = self._batch("reset_fn's qvel", drawn[1], n, self.model.nv)
            if len(drawn) > 2:
                act = self._batch("reset_fn's act", drawn[2], n, self.model.na)
        else:
            qpos = self.init_qpos + rng.uniform(-scale, scale, (n, self.model.nq))
            qvel = self.init_qvel + rng.uniform(-scale, scale, (n, self.model.nv))
        for j, kind in enumerate(np.asarray(self.model.jnt_type).reshape(-1)):
            if kind in (_FREE, _BALL):
                a = int(self.model.jnt_qposadr[j]) + (3 if kind == _FREE else 0)
                qpos[:, a:a + 4] /= np.linalg.norm(qpos[:, a:a + 4], axis=1, keepdims=True)
        for name, (low, high) in self.randomize.items():
            self.sim.randomize(name, low, high, rng=rng, env_ids=ids)
        self.sim.reset(ids, qpos=qpos, qvel=qvel, act=act)
        self.elapsed_steps[ids] = 0

    def _observe(self) -> np.ndarray:
        obs = np.array(self.obs_fn(self.sim), dtype=self.obs_dtype, copy=True)
        if obs.ndim != 2 or obs.shape[0] != self.num_envs:
            raise ValueError(f"phalanx.envs.VectorEnv: obs_fn must return shape (num_envs, d) "
                             f"= ({self.num_envs}, d), got {obs.shape}")
        space = getattr(self, "single_observation_space", None)
        if space is not None and obs.shape[1:] != space.shape:
            raise ValueError(f"phalanx.envs.VectorEnv: obs_fn returned shape {obs.shape}, but "
                             f"the observation space is {(self.num_envs, *space.shape)}")
        return obs

    def _info(self) -> dict[str, Any]:
        return {"status": self.sim.status.copy(), "_status": np.ones(self.num_envs, bool)}

    def _check_actions(self, actions) -> np.ndarray:
        actions = np.asarray(actions)
        shape = (self.num_envs, self.model.nu)
        if actions.shape != shape:
            raise ValueError(f"phalanx.envs.VectorEnv: actions must have shape (num_envs, nu) "
                             f"= {shape}, got {actions.shape}")
        if not (np.issubdtype(actions.dtype, np.floating)
                or np.issubdtype(actions.dtype, np.integer)):
            raise ValueError(f"phalanx.envs.VectorEnv: actions must be a real array, got "
                             f"dtype {actions.dtype}")
        bad = ~np.isfinite(actions).all(axis=1)
        if bad.any():
            envs = np.flatnonzero(bad)
            raise ValueError(f"phalanx.envs.VectorEnv: actions contain NaN or inf in "
                             f"{envs.size} environment(s): {envs[:10].tolist()}")
        return actions

    def _per_env(self, name: str, value, dtype) -> np.ndarray:
        value = np.array(value, dtype=dtype, copy=True)
        if value.shape != (self.num_envs,):
            raise ValueError(f"phalanx.envs.VectorEnv: {name} must return shape (num_envs,) = "
                             f"({self.num_envs},), got {value.shape}")
        return value

    @staticmethod
    def _batch(name: str, value, n: int, d: int) -> np.ndarray:
        value = np.array(value, dtype=np.float64, copy=True)
        if value.shape != (n, d):
            raise ValueError(f"phalanx.envs.VectorEnv: {name} must have shape {(n, d)}, got "
                             f"{value.shape}")
        return value

    @staticmethod
    def _vector(name: str, value, symbol: str, n: int) -> np.ndarray:
        value = np.asarray(value, dtype=np.float64)
        if value.shape != (n,):
            raise ValueError(f"phalanx.envs.VectorEnv: {name} must have shape ({symbol},) = "
                             f"({n},), got {value.shape}")
        return value.copy()


def _positive(name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"phalanx.envs.VectorEnv: {name} must be a positive integer, got {n!r}")
    return int(n)


# --- a ready-made task --------------------------------------------------------------------

def example_model_path(name: str) -> Path:
    """The path of a bundled model, ``examples/models/<name>``, of the source tree this package
    runs from or was installed from (pip records it). FileNotFoundError if neither has it."""
    candidates = [Path(__file__).resolve().parents[2] / "examples" / "models" / name]
    try:
        import importlib.metadata

        url = json.loads(importlib.metadata.distribution("phalanx").read_text(
            "direct_url.json") or "{}").get("url", "")
        if url.startswith("file://"):
            candidates.append(Path(url[len("file://"):]) / "examples" / "models" / name)
    except (importlib.metadata.PackageNotFoundError, ValueError, OSError):
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"phalanx.envs: the bundled model {name} was not found (looked in "
        f"{', '.join(os.fspath(p.parent) for p in candidates)}); pass its path as path=")


def cartpole(num_envs: int, *, task: str = "balance", path=None, **kwargs) -> VectorEnv:
    """Cart-pole (examples/models/cartpole.xml: a motor pushes a 1 kg cart along a rail,
    action in [-1, 1] times 20 N; a 0.6 m pole swings on a hinge, upright at angle 0) at 50 Hz
    (frame_skip 2 of the model's 10 ms steps), 500 steps (10 s) per episode.

    ``task="balance"``: start within 0.05 of upright and at rest (uniform noise); reward 1 per
    step; terminated when the pole leans more than 0.2 rad or the cart leaves |x| <= 1 m.
    Observations (x, angle, x velocity, angular velocity).

    ``task="swingup"``: start hanging down (angle pi) with noise 0.05; reward
    (1 + cos angle) / 2 - 0.01 action^2 (1 upright, 0 hanging); never terminated, only
    truncated. Observations (x, cos angle, sin angle, x velocity, angular velocity).

    Other keyword arguments go to ``VectorEnv`` (e.g. ``max_episode_steps``, ``randomize``,
    ``dtype``); ``path`` overrides the model file.
    """
    path = example_model_path("cartpole.xml") if path is None else path
    options: dict[str, Any] = {"frame_skip": 2, "max_episode_steps": 500,
                               "reset_noise_scale": 0.05}
    if task == "balance":
        def reward(sim, actions):
            return np.ones(sim.num_envs)

        def terminated(sim):
            return (np.abs(sim.qpos[:, 1]) > 0.2) | (np.abs(sim.qpos[:, 0]) > 1.0)

        options.update(reward_fn=reward, terminated_fn=terminated)
    elif task == "swingup":
        def reward(sim, actions):
            return 0.5 * (1 + np.cos(sim.qpos[:, 1])) - 0.01 * np.square(actions[:, 0])

        def observe(sim):
            x, angle = sim.qpos[:, 0], sim.qpos[:, 1]
            return np.stack([x, np.cos(angle), np.sin(angle), sim.qvel[:, 0], sim.qvel[:, 1]],
                            axis=1)

        options.update(reward_fn=reward, obs_fn=observe, init_qpos=np.array([0.0, np.pi]))
    else:
        raise ValueError(f"phalanx.envs.cartpole: task must be 'balance' or 'swingup', got "
                         f"{task!r}")
    options.update(kwargs)
    return VectorEnv(path, num_envs, **options)


# --- the standard tasks -------------------------------------------------------------------

def task_names() -> list[str]:
    """The names ``make`` takes: "dm_control/<domain>-<task>" for the DeepMind Control Suite's
    tasks and "gymnasium/<Name>-v5" for Gymnasium's MuJoCo tasks, those whose models and
    observations Phalanx has."""
    from . import _dm_control_tasks as dm
    from . import _gymnasium_tasks as gym

    return ([f"dm_control/{d}-{t}" for d, tasks in dm.TASKS.items() for t in tasks]
            + [f"gymnasium/{n}" for n in gym.TASKS])


def make(name: str, num_envs: int, **kwargs) -> VectorEnv:
    """A standard task as a ``VectorEnv`` of num_envs environments: ``name`` is one of
    ``task_names()``, e.g. "dm_control/cheetah-run" or "gymnasium/HalfCheetah-v5" (the
    "gymnasium/" prefix may be left out). The task's model, timing, initial states, reward,
    termination and observations are those of its suite (dm_control or Gymnasium, which must
    be installed: the model files are theirs); keyword arguments go to ``VectorEnv`` (dtype,
    device, obs_dtype, max_episode_steps, randomize, ...). ``env.task`` is the task object."""
    from . import _dm_control_tasks as dm
    from . import _gymnasium_tasks as gym

    if not isinstance(name, str):
        raise TypeError(f"phalanx.envs.make: name must be a string, got {type(name).__name__}")
    suite, _, rest = name.partition("/")
    if not rest:
        suite, rest = "gymnasium", name
    task = None
    if suite == "dm_control":
        domain, _, task_name = rest.partition("-")
        if task_name in dm.TASKS.get(domain, ()):
            task = dm.DOMAINS[domain](task_name)
    elif suite == "gymnasium" and rest in gym.TASKS:
        task = gym.TASKS[rest]()
    if task is None:
        raise ValueError(f"phalanx.envs.make: unknown task {name!r}; the tasks are "
                         f"{', '.join(task_names())}")
    return task.make(num_envs, **kwargs)
