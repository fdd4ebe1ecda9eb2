"""Helpers for tests that compare Phalanx with other simulators: random states, a
norm-relative closeness check, where reference models are installed, and step-by-step reference
gradients."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pathlib

import numpy as np

from . import step, step_vjp
from ._phalanx import JOINT_TYPES, Model

# the core's joint types (MuJoCo's numbering)
JOINT_FREE, JOINT_BALL, JOINT_SLIDE, JOINT_HINGE = (JOINT_TYPES.index(t)
                                                    for t in ("free", "ball", "slide", "hinge"))


# MuJoCo's sample models (Debian's libmujoco-samples)
MUJOCO_SAMPLES = pathlib.Path("/usr/share/mujoco/model")


def package_dir(name: str) -> pathlib.Path | None:
    """the folder of an installed Python package, or None"""
    spec = importlib.util.find_spec(name)
    return pathlib.Path(spec.submodule_search_locations[0]) if spec else None


def gymnasium_assets_dir() -> pathlib.Path | None:
    """Gymnasium's MuJoCo model files, or None when Gymnasium is not installed"""
    gym = package_dir("gymnasium")
    return gym / "envs" / "mujoco" / "assets" if gym else None


def dm_control_suite_dir() -> pathlib.Path | None:
    """dm_control's suite of model files, or None when dm_control is not installed"""
    dm = package_dir("dm_control")
    return dm / "suite" if dm else None


def dm_control_on_this_mujoco() -> None:
    """Let dm_control build its Physics on the installed MuJoCo: dm_control 1.0.50 (the newest)
    indexes mjModel and mjData fields that MuJoCo 4.0 no longer has (the flex vertex-edge
    arrays), so drop the fields this MuJoCo lacks from its table of array sizes. Idempotent."""
    import mujoco
    from dm_control.mujoco.wrapper.mjbindings import sizes

    m = mujoco.MjModel.from_xml_string("<mujoco/>")
    for name, struct in (("mjmodel", m), ("mjdata", mujoco.MjData(m))):
        for field in [f for f in sizes.array_sizes[name] if not hasattr(struct, f)]:
            del sizes.array_sizes[name][field]


def put_episode_edits(physics, edits: dict) -> None:
    """Write a task's ``episode_edits`` into a dm_control Physics' model: each value at
    ``physics.named.model.<field>[element]``, but a height field's elevation (field
    "hfield_data", element the height field's name), which MuJoCo keeps in one array for all
    height fields, into that height field's block of it."""
    for (field, element), value in edits.items():
        if field == "hfield_data":
            m = physics.model
            h = m.name2id(element, "hfield")
            adr = int(m.hfield_adr[h])
            m.hfield_data[adr:adr + int(m.hfield_nrow[h] * m.hfield_ncol[h])] = value
        else:
            getattr(physics.named.model, field)[element] = value


def example_robot_data_dir() -> pathlib.Path | None:
    """example-robot-data's robots/ folder, found through the installed distribution's files
    (its layout differs between releases), or None when it is not installed"""
    try:
        files = importlib.metadata.distribution("example-robot-data").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.as_posix().endswith("robots/ur_description/urdf/ur5_robot.urdf"):
            return pathlib.Path(f.locate()).parents[2]
    return None


def random_state(
    model: Model,
    nenv: int,
    rng: np.random.Generator,
    *,
    qpos_scale: float = 0.3,
    qvel_scale: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Random float64 states near qpos0: qpos0 plus Gaussian noise of qpos_scale with every
    quaternion normalised again, and Gaussian qvel of qvel_scale -> (qpos (E, nq), qvel (E, nv))."""
    qpos = model.qpos0 + qpos_scale * rng.standard_normal((nenv, model.nq))
    for j, kind in enumerate(model.jnt_type):
        if kind in (JOINT_FREE, JOINT_BALL):
            a = model.jnt_qposadr[j] + (3 if kind == JOINT_FREE else 0)
            qpos[:, a : a + 4] /= np.linalg.norm(qpos[:, a : a + 4], axis=1, keepdims=True)
    qvel = qvel_scale * rng.standard_normal((nenv, model.nv))
    return qpos, qvel


def random_ctrl(
    model: Model, shape: tuple[int, ...], rng: np.random.Generator, *, beyond: float = 1.5
) -> np.ndarray:
    """Random float64 controls of shape (*shape, nu): uniform over ctrlrange widened by the
    factor `beyond` about its centre (so some fall outside the range and are clamped), or
    standard normal for actuators without limits."""
    lo, hi = model.actuator_ctrlrange.T
    centre, half = (lo + hi) / 2, beyond * (hi - lo) / 2
    u = rng.uniform(-1.0, 1.0, (*shape, model.nu))
    limited = model.actuator_ctrllimited.astype(bool)
    return np.where(limited, centre + half * u, rng.standard_normal((*shape, model.nu)))


def actuator_force(model: Model, ctrl: np.ndarray) -> np.ndarray:
    """The generalized force of the motors, gear * clamp(ctrl, ctrlrange) on each
    transmission joint's dof: (..., nu) -> (..., nv)."""
    lo, hi = model.actuator_ctrlrange.T
    ctrl = np.where(model.actuator_ctrllimited.astype(bool), np.clip(ctrl, lo, hi), ctrl)
    force = np.zeros((*ctrl.shape[:-1], model.nv))
    dofs = model.jnt_dofadr[model.actuator_trnid]
    for u, d in enumerate(dofs):
        force[..., d] += model.actuator_gear[u] * ctrl[..., u]
    return force


def relative_error(actual, desired) -> np.ndarray:
    """||actual_e - desired_e|| / ||desired_e|| for each environment e (Frobenius norm over the
    trailing axes; a zero reference counts as 1) -> (E,)."""
    actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
    if actual.shape != desired.shape:
        raise AssertionError(f"shapes differ: {actual.shape} != {desired.shape}")
    diff = np.linalg.norm((actual - desired).reshape(len(desired), -1), axis=1)
    ref = np.linalg.norm(desired.reshape(len(desired), -1), axis=1)
    return diff / np.where(ref > 0, ref, 1.0)


def assert_close(actual, desired, rtol: float, what: str = "") -> float:
    """Assert ||actual_e - desired_e|| <= rtol ||desired_e|| for every environment e (see
    relative_error) and return the worst relative error."""
    err = relative_error(actual, desired)
    worst = float(err.max()) if err.size else 0.0
    if not worst <= rtol:
        e = int(np.argmax(err))
        raise AssertionError(
            f"{what}: relative error {worst:.3e} > {rtol:.1e} in environment {e}\n"
            f"actual  {np.asarray(actual)[e].ravel()[:8]} ...\n"
            f"desired {np.asarray(desired)[e].ravel()[:8]} ..."
        )
    return worst


def chained_vjp(model: Model, qpos, qvel, ctrl, adj_qpos, adj_qvel,
                parameters=()) -> dict[str, np.ndarray]:
    """Gradients of L = <adj_qpos, qpos_T> + <adj_qvel, qvel_T> after the steps of ctrl (E, T, nu)
    by phalanx.step forward and phalanx.step_vjp backward, one step at a time (a reference for
    taped gradients): {"qpos", "qvel", "ctrl" (E, T, nu), and each named parameter summed over
    the environments}."""
    states = [(qpos, qvel)]
    for t in range(ctrl.shape[1]):
        q, v, _ = step(model, *states[-1], ctrl[:, t])
        states.append((q, v))
    gq, gv = np.array(adj_qpos, np.float64), np.array(adj_qvel, np.float64)
    out = {"ctrl": np.zeros(ctrl.shape)}
    out.update({p: 0.0 for p in parameters})
    for t in reversed(range(ctrl.shape[1])):
        g = step_vjp(model, *states[t], np.ascontiguousarray(ctrl[:, t]), gq, gv)
        gq, gv, out["ctrl"][:, t] = g["qpos"], g["qvel"], g["ctrl"]
        for p in parameters:
            out[p] = out[p] + g[p].sum(axis=0)
    out["qpos"], out["qvel"] = gq, gv
    return out


def mujoco_rollout(mj_model, qpos, qvel, ctrl) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo's mj_step through ctrl (T, nu) from (qpos, qvel), the reference trajectory of
    the comparisons -> the states after each step, (T, nq) and (T, nv)"""
    import mujoco

    d = mujoco.MjData(mj_model)
    d.qpos[:], d.qvel[:] = qpos, qvel
    qs, vs = [], []
    for u in ctrl:
        d.ctrl[:] = u
        mujoco.mj_step(mj_model, d)
        qs.append(d.qpos.copy())
        vs.append(d.qvel.copy())
    return np.array(qs), np.array(vs)


def parameter_difference(model: Model, name: str, loss, direction, h: float = 1e-6) -> float:
    """Central difference (loss(p + h d) - loss(p - h d)) / 2h of loss() along a direction d of
    the model's parameter ``name`` (shared by the environments), which is restored after."""
    p0 = np.array(getattr(model, name), np.float64)
    values = []
    for s in (h, -h):
        model.set_parameter(name, p0 + s * direction)
        try:
            values.append(loss())
        finally:
            model.set_parameter(name, p0)
    return (values[0] - values[1]) / (2 * h)


def rollout_gradient_pair(model: Model, qpos, qvel, ctrl, name: str, rng, parameters=(),
                          h: float = 1e-6) -> tuple[float, float]:
    """(adjoint, central difference) of L = <wq, qpos_T> + <wv, qvel_T> after the steps of ctrl
    (E, T, nu), wq and wv standard normal, along a random direction of ``name``: "qpos", "qvel",
    "ctrl" (standard normal) or a model parameter among ``parameters`` (shared by the
    environments; each entry scaled by its magnitude, 0.1 for a zero). The adjoint comes from
    chained_vjp."""
    from . import rollout  # the package's rollout, imported late (phalanx imports this module)

    wq, wv = rng.standard_normal(np.shape(qpos)), rng.standard_normal(np.shape(qvel))
    grads = chained_vjp(model, qpos, qvel, ctrl, wq, wv, parameters)

    def loss(inputs):
        qs, vs, _ = rollout(model, inputs["qpos"], inputs["qvel"], inputs["ctrl"])
        return float((wq * qs[:, -1]).sum() + (wv * vs[:, -1]).sum())

    d, fd = _central_difference(model, loss, {"qpos": qpos, "qvel": qvel, "ctrl": ctrl}, name,
                                rng, h)
    return float((grads[name] * d).sum()), fd


def taped_gradient_pair(model: Model, qpos, qvel, ctrl, name: str, rng, act=None,
                        h: float = 1e-6, checkpoint_every: int = 7,
                        inputs: dict | None = None) -> tuple[float, float, dict]:
    """(adjoint, central difference, the tape's gradients) of L = <wq, qpos_T> + <wv, qvel_T>
    (+ <wa, act_t> summed over the steps, with activations ``act`` (E, na)) after the steps of
    ctrl (E, T, nu), the weights standard normal, along a random direction of ``name`` as
    rollout_gradient_pair takes it ("act" too, and the names of ``inputs``, further keyword
    arguments of phalanx.rollout such as mocap_pos). The adjoint comes from a taped rollout's
    backward pass."""
    from . import Tape, rollout

    E, T = np.shape(ctrl)[:2]
    wq, wv = rng.standard_normal(np.shape(qpos)), rng.standard_normal(np.shape(qvel))
    wa = None if act is None else rng.standard_normal((E, T, np.shape(act)[1]))

    extra = dict(inputs or {})

    def run(inputs, tape=None):
        out = rollout(model, inputs["qpos"], inputs["qvel"], inputs["ctrl"], act=inputs["act"],
                      tape=tape, **{k: inputs[k] for k in extra})
        loss = (wq * out[0][:, -1]).sum() + (wv * out[1][:, -1]).sum()
        return float(loss + ((wa * out[2]).sum() if act is not None else 0))

    inputs = {"qpos": qpos, "qvel": qvel, "ctrl": ctrl, "act": act, **extra}
    tape = Tape(checkpoint_every=checkpoint_every)
    run(inputs, tape)
    adj_q, adj_v = np.zeros((E, T) + np.shape(qpos)[1:]), np.zeros((E, T) + np.shape(qvel)[1:])
    adj_q[:, -1], adj_v[:, -1] = wq, wv
    grads = tape.backward(adj_q, adj_v, **({} if act is None else {"adj_act": wa}))
    d, fd = _central_difference(model, run, inputs, name, rng, h)
    return float((grads[name] * d).sum()), fd, grads


def _central_difference(model: Model, loss, inputs: dict, name: str, rng, h: float):
    """(direction, central difference of loss(inputs) along it) for the input or model parameter
    ``name``: a standard normal direction for an input, each entry scaled by its magnitude (0.1
    for a zero) for a parameter"""
    if name in inputs:
        x0 = inputs[name]
        d = rng.standard_normal(np.shape(x0))
        return d, (loss({**inputs, name: x0 + h * d}) - loss({**inputs, name: x0 - h * d})) / (2 * h)
    p0 = np.asarray(getattr(model, name))
    d = rng.uniform(0.5, 1.5, p0.shape) * np.where(p0 == 0, 0.1, np.abs(p0))
    return d, parameter_difference(model, name, lambda: loss(inputs), d, h=h)


class ThreadCollective:
    """An in-process stand-in for ``phalanx.learn.TorchDistributed``: one member per rank,
    each used by one thread (``run_in_threads``), exchanging tensors through a barrier. Its
    sums add the ranks' tensors in rank order, as gloo's all-reduce of two does, so a run over
    threads reproduces a run over processes."""

    def __init__(self, rank: int, world: int, shared) -> None:
        self.rank, self.world, self._shared = rank, world, shared

    @staticmethod
    def group(world: int) -> list[ThreadCollective]:
        import threading
        from types import SimpleNamespace

        shared = SimpleNamespace(barrier=threading.Barrier(world), slots=[None] * world)
        return [ThreadCollective(rank, world, shared) for rank in range(world)]

    def _exchange(self, x):
        shared = self._shared
        shared.slots[self.rank] = x.detach().clone()
        shared.barrier.wait()
        parts = list(shared.slots)
        shared.barrier.wait()  # every member has read before the next exchange writes
        return parts

    def average(self, parameters) -> None:
        import torch

        from .learn import _scatter

        parts = self._exchange(torch.cat([p.grad.reshape(-1) for p in parameters]))
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        _scatter(total / self.world, parameters)

    def gather(self, x):
        import torch

        return torch.cat(self._exchange(x))


def run_in_threads(functions, group: list[ThreadCollective] | None = None) -> list:
    """each function in its own thread; their results in order. An exception in one breaks
    the group's barrier (the others stop with threading.BrokenBarrierError) and is raised
    here."""
    import threading

    results, errors = [None] * len(functions), []

    def run(i, fn):
        try:
            results[i] = fn()
        except BaseException as error:  # noqa: BLE001  (re-raised below)
            errors.append(error)
            if group:
                group[0]._shared.barrier.abort()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
