"""A stateful batch of environments: ``phalanx.Simulator``.

    import numpy as np, phalanx
    sim = phalanx.Simulator("examples/models/cartpole.xml", num_envs=1024)
    sim.ctrl[:] = np.random.uniform(-1, 1, sim.ctrl.shape)   # write the controls in place
    sim.step(nstep=2)                                         # qpos, qvel advance in place
    qs, vs = sim.rollout(ctrl_seq)                            # (E, T, nq), (E, T, nv)
    sim.reset(env_ids=np.flatnonzero(sim.stopped))            # back to model.qpos0

The simulator owns its state: ``qpos`` (E, nq), ``qvel`` (E, nv) and ``ctrl`` (E, nu) are numpy
arrays of the simulator's dtype (float32 or float64) that the properties return themselves, not
copies, so a user writes ``sim.ctrl[:] = u`` or ``sim.qpos[3] = q`` and the next step reads it;
assigning ``sim.qpos = x`` copies x into the same array (views taken earlier stay valid). A model
whose actuators have dynamics (``model.na > 0``) adds ``act`` (E, na), their activations, to
the state, held and advanced the same way.
``step`` and ``rollout`` write the new state into these arrays through the DLPack entry points
of the extension (``step_into``, ``rollout_into``), without allocating the state anew.

Status. ``status`` (E,) uint32 accumulates (bitwise OR) the ``phalanx.STATUS_*`` bits of every
step since an environment's last reset. An environment with a stopping bit (``STATUS_NAN_STATE``,
``STATUS_NAN_CTRL``, ``STATUS_NAN_RESULT``; ``stopped`` is the mask) is frozen: the kernels leave
its state at the last finite one, later steps leave its state and time unchanged, and only
``reset`` clears it. The warning bits (``STATUS_CONTACT_OVERFLOW``, ``STATUS_LCP_NOT_CONVERGED``)
are recorded but do not freeze. ``time`` (E,) float64 is the simulated time since each
environment's reset (a call in which an environment stops counts in full).

Contacts. The simulator keeps each environment's contact rows and impulses between calls (a
``_phalanx.WarmStart``), so every step is warm-started from the previous one as inside one
rollout: T calls of ``step`` and one ``rollout`` of T steps give identical results, contacts
included, on either device. ``reset`` starts the reset environments' contact solver cold.

Parameters. ``set_parameter``, ``randomize`` and ``restore_parameters`` write the model's
parameters (``phalanx.PARAMETERS``) with ``model.set_parameter``, per environment or shared.
**The model object is shared, not copied**: the values stay in the model, every other Simulator
and functional call using the same model sees them, and a parameter set per environment in the
model by someone else applies to this simulator too (environment e uses copy ``e % nbatch``).
Load the model once per simulator (or pass a path) to keep simulators independent.
Mocap bodies' poses (``mocap_pos``, ``mocap_quat``) are such parameters: set them between
steps, per environment, through the properties of the same names.

Devices. The simulator always keeps host (numpy) arrays. ``device="cpu"`` runs the kernels on
them in place. ``device="cuda"`` is passed through the functional numpy API
(``phalanx.step(..., device="cuda")``, ``phalanx.rollout(..., device="cuda")``): every call copies
the state to the GPU and the result back into the host arrays, so it is a convenience, not a
zero-copy GPU path (for that, use ``phalanx.torch`` on CUDA tensors). On a machine or build
without CUDA the constructor raises the extension's ``RuntimeError``.

Wrong shapes raise ``ValueError`` naming the expected shape.

Threads. The kernels run without the GIL, so simulators in different threads step at once (a
shared model included). One simulator belongs to one thread at a time: a call from a second
thread while another is inside raises ``RuntimeError``.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from . import _phalanx
from ._exclusive import exclusive, exclusive_use

_SIM = "phalanx.Simulator"

__all__ = ["Simulator"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def env_indices(env_ids, E: int, owner: str) -> np.ndarray:
    """env_ids of a batch of E environments (None: all; an index, indices or a boolean mask
    (E,)) as an int array of distinct indices; a ValueError from owner otherwise"""
    if env_ids is None:
        return np.arange(E)
    ids = np.asarray(env_ids)
    if ids.dtype == np.bool_:
        if ids.shape != (E,):
            raise ValueError(f"{owner}: a boolean env_ids mask must have shape "
                             f"(E,) = ({E},), got {ids.shape}")
        return np.flatnonzero(ids)
    if ids.size == 0:
        return np.zeros(0, np.intp)
    if not np.issubdtype(ids.dtype, np.integer) or ids.ndim > 1:
        raise ValueError(f"{owner}: env_ids must be an index, a sequence of "
                         f"indices or a boolean mask of shape ({E},), got {env_ids!r}")
    ids = ids.reshape(-1).astype(np.intp)
    if ids.min() < 0 or ids.max() >= E:
        raise ValueError(f"{owner}: env_ids must lie in [0, {E}), got "
                         f"{ids[(ids < 0) | (ids >= E)][:5].tolist()}")
    if np.unique(ids).size != ids.size:
        raise ValueError(f"{owner}: env_ids has repeated indices")
    return ids


class Simulator:
    """E environments of one model, stepped in lockstep, with their state held in place.

    ``model`` is a ``phalanx.Model`` (shared, see the module docstring) or a path to an MJCF or
    URDF file (loaded for this simulator alone). ``num_envs`` is E; ``dtype`` float32 or
    float64 is the scalar type of the state and of the kernels; ``device`` "cpu" or "cuda".
    Every environment starts at ``model.qpos0``, zero velocity and zero control.
    """

    def __init__(self, model, num_envs: int, device: str = "cpu", dtype=np.float64) -> None:
        # deferred: phalanx/__init__.py imports this module
        import phalanx

        if isinstance(model, (str, os.PathLike)):
            model = phalanx.load_model(model)
        if not isinstance(model, phalanx.Model):
            raise TypeError(f"phalanx.Simulator: model must be a phalanx.Model or a path, got "
                            f"{type(model).__name__}")
        num_envs = phalanx._count("num_envs", num_envs, 1, "phalanx.Simulator")
        dtype = np.dtype(dtype)
        if dtype not in _FLOATS:
            raise ValueError(f"phalanx.Simulator: dtype must be float32 or float64, got {dtype}")
        if not isinstance(device, str):
            raise ValueError(f"phalanx.Simulator: device must be 'cpu' or 'cuda', got "
                             f"{device!r}")
        # compiles the model for the device: the extension's ValueError for an unknown device
        # name, its RuntimeError for a device this build or machine does not have
        phalanx.bytes_per_env(model, dtype=dtype, device=device)

        self._phalanx = phalanx
        self._model = model
        self._E = num_envs
        self._dtype = dtype
        self._device = device
        E, nq, nv, nu = num_envs, model.nq, model.nv, model.nu
        self._qpos = np.empty((E, nq), dtype)
        self._qvel = np.empty((E, nv), dtype)
        self._ctrl = np.zeros((E, nu), dtype)
        self._act = np.zeros((E, model.na), dtype)
        self._status = np.zeros(E, np.uint32)
        self._time = np.zeros(E, np.float64)
        self._call_status = np.zeros(E, np.int32)  # step_into writes int32
        self._warm = _phalanx.WarmStart()  # contact rows carried from call to call
        # the parameters as the model holds them now (shared or nbatch copies): what
        # randomize scales and restore_parameters puts back
        self._nominal = {name: model.parameter(name)
                         for name in phalanx.PARAMETERS + phalanx.ENV_FIELDS}
        self.reset()

    # --- state --------------------------------------------------------------------------

    @property
    def model(self):
        """the phalanx.Model (shared: parameter changes go into it)"""
        return self._model

    @property
    def num_envs(self) -> int:
        return self._E

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def device(self) -> str:
        return self._device

    @property
    def qpos(self) -> np.ndarray:
        """(E, nq), the simulator's own array (write in place; assignment copies into it)"""
        return self._qpos

    @qpos.setter
    @exclusive(_SIM)
    def qpos(self, value) -> None:
        self._assign("qpos", "nq", self._qpos, value)

    @property
    def qvel(self) -> np.ndarray:
        """(E, nv), the simulator's own array"""
        return self._qvel

    @qvel.setter
    @exclusive(_SIM)
    def qvel(self, value) -> None:
        self._assign("qvel", "nv", self._qvel, value)

    @property
    def act(self) -> np.ndarray:
        """(E, na), the actuators' activations (state of actuators with dynamics; na may be 0)"""
        return self._act

    @act.setter
    @exclusive(_SIM)
    def act(self, value) -> None:
        self._assign("act", "na", self._act, value)

    @property
    def ctrl(self) -> np.ndarray:
        """(E, nu), the controls the next ``step()`` applies (held for all its nstep steps)"""
        return self._ctrl

    @ctrl.setter
    @exclusive(_SIM)
    def ctrl(self, value) -> None:
        self._assign("ctrl", "nu", self._ctrl, value)

    @property
    def status(self) -> np.ndarray:
        """(E,) uint32: the OR of the STATUS_* bits since each environment's reset"""
        return self._status

    @property
    def stopped(self) -> np.ndarray:
        """(E,) bool: environments with a stopping status bit (frozen until reset)"""
        return (self._status & _phalanx.STATUS_STOP_MASK) != 0

    @property
    def time(self) -> np.ndarray:
        """(E,) float64: simulated time since each environment's reset"""
        return self._time

    def __repr__(self) -> str:
        return (f"phalanx.Simulator({self._model.name!r}, num_envs={self._E}, "
                f"device={self._device!r}, dtype={self._dtype.name})")

    # --- stepping -----------------------------------------------------------------------

    @exclusive(_SIM)
    def step(self, ctrl=None, nstep: int = 1, *, qfrc=None, xfrc=None) -> None:
        """Advance every environment nstep steps with its controls held, in place.

        ``ctrl`` (E, nu), if given, is first copied into ``sim.ctrl`` (converted to the
        simulator's dtype); otherwise ``sim.ctrl`` as it is. ``qfrc`` (E, nv) and ``xfrc``
        (E, nbody, 6), if given, are forces added at every one of these steps as
        ``phalanx.step`` adds them (MuJoCo's qfrc_applied and xfrc_applied). The kernels'
        status bits are ORed into ``sim.status``; frozen (stopped) environments keep their
        state and time.
        """
        nstep = self._phalanx._count("nstep", nstep)
        if ctrl is not None:
            self._assign("ctrl", "nu", self._ctrl, ctrl)
        # (DLPack exports writable arrays only: a read-only input, e.g. a broadcast, is copied)
        qfrc, xfrc = (None if f is None else np.require(f, self._dtype, ["C", "W"])
                      for f in (qfrc, xfrc))
        frozen, kept = self._freeze()
        act = self._act if self._model.na > 0 else None
        if self._device == "cpu":
            _phalanx.step_into(self._model, self._qpos, self._qvel, self._ctrl, self._qpos,
                               self._qvel, self._call_status, nstep, self._warm, act, qfrc, xfrc)
            call_status = self._call_status.view(np.uint32)
        else:
            out = _phalanx.step(self._model, self._qpos, self._qvel, self._ctrl, nstep=nstep,
                                qfrc=qfrc, xfrc=xfrc, act=act, device=self._device,
                                warm_start=self._warm)
            self._qpos[...], self._qvel[...] = out[0], out[1]
            if act is not None:
                self._act[...] = out[2]
            call_status = out[-1]
        self._thaw(frozen, kept, call_status)
        self._advance_time(frozen, kept, nstep)

    @exclusive(_SIM)
    def rollout(self, ctrl, *, tape=None, mocap_pos=None, mocap_quat=None) -> tuple[np.ndarray, ...]:
        """T steps driven by ctrl (E, T, nu), one row of controls per step.

        Returns new arrays (qpos (E, T, nq), qvel (E, T, nv)), the state after each step, as
        ``phalanx.rollout`` (with activation state also act (E, T, na) after qvel); the final
        state stays in the simulator and ``sim.ctrl`` becomes the last row of controls. A
        frozen environment's trajectory repeats its frozen state.
        ``tape``, a ``phalanx.Tape``, records the rollout for ``tape.backward`` (as the kernels
        ran it: a frozen environment's record, and so its gradients, are not meaningful).
        ``mocap_pos`` (E, T, nmocap, 3) and ``mocap_quat`` (E, T, nmocap, 4), each optional, are
        the mocap bodies' poses of each step, as ``phalanx.rollout`` takes them, in place of
        ``sim.mocap_pos`` / ``sim.mocap_quat``, which stay as they were.
        """
        E, nu = self._E, self._model.nu
        ctrl = np.asarray(ctrl)
        T = ctrl.shape[1] if ctrl.ndim == 3 else None
        self._check_shape("ctrl", ctrl, [("E", E), ("T", T), ("nu", nu)])
        ctrl = np.ascontiguousarray(ctrl, dtype=self._dtype)
        poses = {}
        for name, given, width in (("mocap_pos", mocap_pos, 3), ("mocap_quat", mocap_quat, 4)):
            if given is not None:
                given = np.asarray(given)
                self._check_shape(name, given, [("E", E), ("T", T),
                                                ("nmocap", self._model.nmocap), (str(width), width)])
                poses[name] = np.ascontiguousarray(given, dtype=self._dtype)
        if tape is not None and not isinstance(tape, _phalanx.Tape):
            raise TypeError("phalanx.Simulator: tape must be a phalanx.Tape")
        frozen, kept = self._freeze()
        na = self._model.na
        act = self._act if na > 0 else None
        with contextlib.ExitStack() as held:
            if tape is not None:
                held.enter_context(exclusive_use(tape, "phalanx.Tape"))
            qs, vs, acts, call_status = self._rollout(ctrl, tape, act, poses)
        if T > 0:
            self._qpos[...] = qs[:, -1]
            self._qvel[...] = vs[:, -1]
            if na > 0:
                self._act[...] = acts[:, -1]
            self._ctrl[...] = ctrl[:, -1]
        self._thaw(frozen, kept, call_status)
        if kept is not None:
            qs[frozen] = kept[0][:, None]
            vs[frozen] = kept[1][:, None]
            if na > 0:
                acts[frozen] = kept[2][:, None]
        self._advance_time(frozen, kept, T)
        return (qs, vs, acts) if na > 0 else (qs, vs)

    def _rollout(self, ctrl, tape, act, poses):
        """the kernels of rollout: (qs, vs, acts, status of the call)"""
        E, T, na = self._E, ctrl.shape[1], self._model.na
        if self._device == "cpu":
            qs = np.empty((E, T, self._model.nq), self._dtype)
            vs = np.empty((E, T, self._model.nv), self._dtype)
            acts = np.empty((E, T, na), self._dtype)
            _phalanx.rollout_into(self._model, self._qpos, self._qvel, ctrl, qs, vs,
                                  self._call_status, tape, self._warm, act,
                                  acts if na > 0 else None, **poses)
            return qs, vs, acts, self._call_status.view(np.uint32)
        out = _phalanx.rollout(self._model, self._qpos, self._qvel, ctrl, tape=tape, act=act,
                               device=self._device, warm_start=self._warm, **poses)
        return out[0], out[1], out[2] if na > 0 else None, out[-1]

    @exclusive(_SIM)
    def reset(self, env_ids=None, qpos=None, qvel=None, act=None) -> None:
        """Reset the environments ``env_ids`` (None: all; an index, a sequence of indices or a
        boolean mask (E,)) to ``qpos`` (default model.qpos0), ``qvel`` and ``act`` (default
        zero), each either shared, (nq,) / (nv,) / (na,), or one row per selected environment,
        (n, nq) / (n, nv) / (n, na) in the order of env_ids. Their controls, status and time
        become zero."""
        ids = self._env_ids(env_ids)
        n = ids.size
        model = self._model
        for name, array, value, default, width in [
                ("qpos", self._qpos, qpos, model.qpos0, ("nq", model.nq)),
                ("qvel", self._qvel, qvel, None, ("nv", model.nv)),
                ("act", self._act, act, None, ("na", model.na))]:
            if value is None:
                array[ids] = 0 if default is None else default
                continue
            value = np.asarray(value)
            if value.shape != (width[1],) and value.shape != (n, width[1]):
                raise ValueError(
                    f"phalanx.Simulator: reset's {name} must have shape ({width[0]},) = "
                    f"({width[1]},) (shared) or (len(env_ids), {width[0]}) = ({n}, {width[1]}), "
                    f"got {value.shape}")
            array[ids] = value
        self._ctrl[ids] = 0
        self._status[ids] = 0
        self._time[ids] = 0
        self._warm.cold_start(ids)

    # --- mocap bodies --------------------------------------------------------------------

    @property
    def mocap_pos(self) -> np.ndarray:
        """The mocap bodies' positions in world each environment uses now, (E, nmocap, 3), a
        copy: the model's parameter ``mocap_pos``. Assigning (E, nmocap, 3) or (nmocap, 3)
        moves them for the next steps (``set_parameter``, so the shared model holds them)."""
        return self.parameter("mocap_pos")

    @mocap_pos.setter
    def mocap_pos(self, value) -> None:
        self.set_parameter("mocap_pos", value)

    @property
    def mocap_quat(self) -> np.ndarray:
        """The mocap bodies' orientations (w, x, y, z; normalised where read), (E, nmocap, 4),
        as ``mocap_pos``."""
        return self.parameter("mocap_quat")

    @mocap_quat.setter
    def mocap_quat(self, value) -> None:
        self.set_parameter("mocap_quat", value)

    # --- parameters ---------------------------------------------------------------------

    def parameter(self, name: str) -> np.ndarray:
        """The values of parameter ``name`` each environment uses now: (E, *shape), a copy."""
        self._parameter_shape(name)
        return self._per_env(name, self._model.parameter(name))

    @exclusive(_SIM)
    def set_parameter(self, name: str, values) -> None:
        """Set a parameter of ``phalanx.PARAMETERS`` (or a field of ``phalanx.ENV_FIELDS``,
        such as a height field's elevation) in the (shared) model: ``values`` of the
        parameter's shape (e.g. body_mass (nbody,)) for every environment, or (E, *shape), one
        row per environment. The model checks the values (finite, masses >= 0, ...)."""
        shape = self._parameter_shape(name)
        values = np.asarray(values, dtype=np.float64)
        if values.shape != shape and values.shape != (self._E, *shape):
            raise ValueError(
                f"phalanx.Simulator: parameter {name} must have shape {shape} (shared) or "
                f"{(self._E, *shape)} (E = {self._E} environments), got {values.shape}")
        self._model.set_parameter(name, values)

    @exclusive(_SIM)
    def randomize(self, name: str, low, high, rng=None, env_ids=None) -> np.ndarray:
        """Domain randomisation: set parameter ``name`` of the environments ``env_ids`` (None:
        all) to its nominal value (the model's when this simulator was created) times a scale
        factor drawn uniformly from [low, high) per entry, independently per environment.
        ``low`` and ``high`` are scalars or arrays that broadcast to the parameter's shape.
        Other environments keep their current values. ``rng`` is a numpy Generator (or a seed
        for one). Returns the (E, *shape) values now set."""
        shape = self._parameter_shape(name)
        ids = self._env_ids(env_ids)
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        try:
            low = np.broadcast_to(np.asarray(low, np.float64), shape)
            high = np.broadcast_to(np.asarray(high, np.float64), shape)
        except ValueError:
            raise ValueError(f"phalanx.Simulator: randomize's low and high must broadcast to "
                             f"the shape of {name}, {shape}") from None
        values = self.parameter(name)
        nominal = self._per_env(name, self._nominal[name])
        values[ids] = nominal[ids] * rng.uniform(low, high, (ids.size, *shape))
        self.set_parameter(name, values)
        return values

    @exclusive(_SIM)
    def restore_parameters(self, names=None) -> None:
        """Put back the nominal values (those of the model when this simulator was created) of
        the parameters ``names`` (None: all), per environment as they were then."""
        if isinstance(names, str):
            names = [names]
        for name in self._phalanx.PARAMETERS if names is None else names:
            self._parameter_shape(name)
            self._model.set_parameter(name, self._nominal[name])

    # --- helpers ------------------------------------------------------------------------

    def _freeze(self):
        """the mask of stopped environments and a copy of their state, to put back after the
        kernels ran on every environment"""
        frozen = self.stopped
        if not frozen.any():
            return frozen, None
        return frozen, (self._qpos[frozen], self._qvel[frozen], self._act[frozen])

    def _thaw(self, frozen, kept, call_status) -> None:
        if kept is None:
            self._status |= call_status
            return
        self._qpos[frozen], self._qvel[frozen], self._act[frozen] = kept
        self._status |= np.where(frozen, np.uint32(0), call_status).astype(np.uint32)

    def _advance_time(self, frozen, kept, nstep: int) -> None:
        if kept is None:
            self._time += nstep * self._model.timestep
        else:
            self._time[~frozen] += nstep * self._model.timestep

    def _assign(self, name: str, symbol: str, array: np.ndarray, value) -> None:
        value = np.asarray(value)
        self._check_shape(name, value, [("E", self._E), (symbol, array.shape[1])])
        if not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)
                or value.dtype == np.bool_):
            raise ValueError(f"phalanx.Simulator: {name} must be a real array, got dtype "
                             f"{value.dtype}")
        if value is not array:
            np.copyto(array, value, casting="unsafe")

    @staticmethod
    def _check_shape(name, value, dims) -> None:
        shape = tuple(n for _, n in dims)
        if value.shape != shape or None in shape:
            symbols = ", ".join(s for s, _ in dims)
            sizes = ", ".join(s if n is None else str(n) for s, n in dims)
            raise ValueError(f"phalanx.Simulator: {name} must have shape ({symbols}) = "
                             f"({sizes}), got {value.shape}")

    def _env_ids(self, env_ids) -> np.ndarray:
        """env_ids (None, an index, indices or a boolean mask) as an int array of indices"""
        return env_indices(env_ids, self._E, _SIM)

    def _parameter_shape(self, name: str) -> tuple:
        shapes = dict(self._phalanx._BATCHED_FIELDS)
        if name not in shapes:
            raise ValueError(f"phalanx.Simulator: unknown parameter {name!r}; the parameters "
                             f"are {', '.join(self._phalanx.PARAMETERS)}, and the other "
                             f"per-environment fields {', '.join(self._phalanx.ENV_FIELDS)}")
        return tuple(shapes[name](self._model))

    def _per_env(self, name: str, value: np.ndarray) -> np.ndarray:
        """a parameter as the model returns it (shared or nbatch copies) -> (E, *shape)"""
        shape = self._parameter_shape(name)
        value = np.asarray(value, dtype=np.float64)
        if value.shape == shape:
            return np.repeat(value[None], self._E, axis=0)
        return value[np.arange(self._E) % value.shape[0]].copy()

