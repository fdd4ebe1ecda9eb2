"""Phalanx: batched rigid-body dynamics on the CPU and on CUDA GPUs.

Every batched array is (E, ...) with E the number of environments, taken from ``qpos``. Arrays
are numpy; with ``device="cuda"`` they are copied to the GPU and the results copied back.

The scalar type of a call is ``dtype``. With ``dtype=None`` it is the dtype of ``qpos``, which
must be float32 or float64, and every other array must have exactly that dtype (no silent
conversions). An explicit ``dtype`` converts all inputs to it. On the CPU, C-contiguous inputs
of the right dtype are read in place; results are always new arrays.

Wrong shapes and dtypes raise ``ValueError`` naming the expected shape, e.g.
``ctrl must have shape (E, nu) = (4, 21) ...``. An unavailable device raises ``RuntimeError``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.metadata
import operator
import os

import numpy as np

from . import _phalanx
from ._phalanx import (
    COUNT_CONTACTS,
    COUNT_EPA_ITERATIONS,
    COUNT_GJK_ITERATIONS,
    COUNT_OVERFLOW,
    COUNT_ROWS,
    COUNT_SET_HIT,
    COUNT_WARM_ROWS,
    GEOM_TYPES,
    JOINT_TYPES,
    LCP_SOLVERS,
    NUM_COUNTS,
    STATUS_BITS,
    STATUS_CONTACT_OVERFLOW,
    STATUS_LCP_NOT_CONVERGED,
    STATUS_NAN_CTRL,
    STATUS_NAN_RESULT,
    STATUS_NAN_STATE,
    STATUS_STOP_MASK,
    Model,
    cuda_available,
    cuda_emulated,
    idle_host_bytes,
    num_threads,
    pack_stats,
    release_host_memory,
    set_num_threads,
)
from ._exclusive import exclusive, exclusive_use
from .simulator import Simulator

__all__ = [
    "Model",
    "Simulator",
    "load_model",
    "from_mujoco",
    "mass_matrix",
    "bias_forces",
    "kinematics",
    "kinematics_vjp",
    "contacts",
    "body_report",
    "site_sensors",
    "rangefinders",
    "ENV_FIELDS",
    "actuator_forces",
    "forward_dynamics",
    "inverse_dynamics",
    "step",
    "rollout",
    "step_vjp",
    "step_jacobians",
    "step_jacobians_fd",
    "Tape",
    "bytes_per_env",
    "cuda_available",
    "cuda_emulated",
    "num_threads",
    "pack_stats",
    "release_host_memory",
    "idle_host_bytes",
    "set_num_threads",
    "STATUS_NAN_STATE",
    "STATUS_NAN_CTRL",
    "STATUS_NAN_RESULT",
    "STATUS_CONTACT_OVERFLOW",
    "STATUS_LCP_NOT_CONVERGED",
    "STATUS_STOP_MASK",
    "STATUS_BITS",
    "JOINT_TYPES",
    "GEOM_TYPES",
    "LCP_SOLVERS",
    "raise_if_stopped",
    "model_parameters",
    "PARAMETERS",
    "COUNT_CONTACTS",
    "COUNT_ROWS",
    "COUNT_WARM_ROWS",
    "COUNT_SET_HIT",
    "COUNT_OVERFLOW",
    "COUNT_GJK_ITERATIONS",
    "COUNT_EPA_ITERATIONS",
    "NUM_COUNTS",
]

try:
    __version__ = importlib.metadata.version("phalanx")
except importlib.metadata.PackageNotFoundError:  # imported from a build tree
    __version__ = "0+unknown"

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def raise_if_stopped(status, what: str = "step") -> None:
    """Raise RuntimeError naming the environments whose status has a stopping bit (a NaN or
    inf in the state, the control or the result) and the causes; return quietly otherwise.
    Contact overflow and an unconverged LCP do not stop an environment and are not raised."""
    status = np.asarray(status)
    stopped = np.flatnonzero(status & STATUS_STOP_MASK)
    if stopped.size == 0:
        return
    labels = [(STATUS_NAN_STATE, "NaN/inf state"), (STATUS_NAN_CTRL, "NaN/inf ctrl"),
              (STATUS_NAN_RESULT, "NaN/inf result")]
    causes = [f"{e} ({', '.join(label for bit, label in labels if status[e] & bit)})"
              for e in stopped[:10]]
    more = f" and {stopped.size - 10} more" if stopped.size > 10 else ""
    raise RuntimeError(f"phalanx: the {what} stopped in {stopped.size} of {status.size} "
                       f"environment(s): {'; '.join(causes)}{more}")


def load_model(path: str | os.PathLike) -> Model:
    """Load a model from an MJCF (.xml, .mjcf) or URDF (.urdf) file.

    MJCF is compiled by MuJoCo's compiler (libmujoco of the ``mujoco`` package) and converted as
    ``from_mujoco`` converts: meshes (as their convex hulls), height fields, includes and
    defaults are MuJoCo's. MuJoCo's compiler warnings are listed in ``Model.ignored``.

    Raises FileNotFoundError for a missing file, RuntimeError for malformed or unsupported input:
    for MJCF "<path>: <MuJoCo's message>" (it names the element and line) or from_mujoco's
    refusal of physics Phalanx does not simulate (naming the element); for URDF the message names
    the file, line and element. RuntimeError also when phalanx was built without MuJoCo and the
    file is MJCF.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "phalanx: no such model file", path)
    return _phalanx.load_model(path)


def from_mujoco(mj_model) -> Model:
    """Convert a compiled ``mujoco.MjModel`` into a Model, as MJX's and MuJoCo Warp's
    ``put_model`` do: what MuJoCo's compiler computed (frames, inertias, defaults, meshes' convex
    hulls, height fields) is taken as compiled. ``load_model`` of an MJCF file is MuJoCo's compiler
    followed by this conversion.

    Meshes become their convex hulls (hull vertices, vertex adjacency, faces counter-clockwise
    about their outward normals). Taken as well: sites, mocap bodies, dof friction loss, fixed
    and spatial tendons (springs, dampers, limits, friction loss), equality constraints
    (connect, weld, joint, fixed tendon) as hard rows, and actuators (motor, position, velocity,
    intvelocity, damper, muscle, general with fixed, affine or muscle gain and bias; no,
    integrator, filter or muscle dynamics; joint, tendon or slider-crank transmission).
    Disabled contacts, limits, springs, dampers, gravity, friction loss, equality constraints
    and control clamping (``<flag>``) are applied.

    Raises TypeError unless ``mj_model`` is a ``mujoco.MjModel``; RuntimeError when the imported
    mujoco is not the version phalanx was built against, when phalanx was built without MuJoCo,
    or for physics Phalanx does not simulate (equality constraints of spatial tendons, dcmotor
    or pid actuators, actuator delay or gravity compensation, actuators on free or ball joints,
    explicit contact pairs, flexes, plugins, fluid shapes (the ellipsoid fluid model), ...; the
    message names the element). The medium's density,
    viscosity and wind are taken (MuJoCo's inertia-box fluid model). What is dropped or
    approximated (cameras, lights, sensors, solver parameters: constraints are hard; RK4,
    stepped as Euler) is listed in ``Model.ignored``.
    """
    convert = getattr(_phalanx, "from_mujoco", None)
    if convert is None:
        raise RuntimeError("phalanx.from_mujoco: this phalanx was built without MuJoCo (cmake "
                           "found neither PHX_MUJOCO_DIR nor the mujoco Python package)")
    return convert(mj_model)


def mass_matrix(model: Model, qpos, *, dtype=None, device: str = "cpu") -> np.ndarray:
    """Joint-space inertia M(q), armature included on the diagonal -> (E, nv, nv)."""
    return _phalanx.mass_matrix(model, qpos, dtype, device)


def bias_forces(model: Model, qpos, qvel, *, dtype=None, device: str = "cpu") -> np.ndarray:
    """Bias forces c(q, qvel): Coriolis, centrifugal and gravity (MuJoCo's qfrc_bias) -> (E, nv)."""
    return _phalanx.bias_forces(model, qpos, qvel, dtype, device)


def kinematics(model: Model, qpos, qvel=None, *, dtype=None, device: str = "cpu") -> dict:
    """Body frames and the centre of mass of E states -> dict with ``xpos`` (E, nbody, 3),
    ``xquat`` (E, nbody, 4) and ``xmat`` (E, nbody, 3, 3) (MuJoCo's body frames in world,
    quaternions w x y z, rotation matrices taking body to world coordinates), ``site_xpos``
    (E, nsite, 3) and ``site_xmat`` (E, nsite, 3, 3) (the sites' frames, MuJoCo's site_xpos
    and site_xmat; ``model.site_id(name)`` gives a site's index), ``ten_length`` (E, ntendon)
    (the tendons' lengths, MuJoCo's ten_length), ``com`` (E, 3) (the centre of mass of all
    bodies, MuJoCo's subtree_com of the world) and, when qvel is given, ``com_vel`` (E, 3) (its
    velocity, MuJoCo's subtree_linvel of the world)."""
    xpos, xquat, com, com_vel, site_xpos, site_xmat, ten_length, xmat = _phalanx.kinematics(
        model, qpos, qvel, dtype, device)
    out = dict(xpos=xpos, xquat=xquat, xmat=xmat, site_xpos=site_xpos, site_xmat=site_xmat,
               ten_length=ten_length, com=com)
    if com_vel is not None:
        out["com_vel"] = com_vel
    return out


def kinematics_vjp(model: Model, qpos, qvel=None, *, xpos=None, xmat=None, site_xpos=None,
                   site_xmat=None, com=None, com_vel=None, dtype=None,
                   device: str = "cpu") -> dict:
    """The vector-Jacobian product of ``kinematics``: given the adjoints (gradients of a scalar)
    of its ``xpos`` (E, nbody, 3), ``xmat`` (E, nbody, 3, 3), ``site_xpos`` (E, nsite, 3),
    ``site_xmat`` (E, nsite, 3, 3), ``com`` (E, 3) and, with qvel, ``com_vel`` (E, 3) (each
    None: zero), the adjoints of the state -> dict with ``qpos`` (E, nq) and, with qvel,
    ``qvel`` (E, nv). The derivative with respect to qpos is the one of the coordinates as
    given (a free or ball joint's quaternion enters normalised, so its gradient has no part
    along it). ``phalanx.torch.kinematics`` is the autograd function built on it."""
    adj_qpos, adj_qvel = _phalanx.kinematics_vjp(model, qpos, qvel, xpos, xmat, site_xpos,
                                                 site_xmat, com, com_vel, dtype, device)
    out = dict(qpos=adj_qpos)
    if adj_qvel is not None:
        out["qvel"] = adj_qvel
    return out


def contacts(model: Model, qpos, qvel=None, ctrl=None, *, act=None, forces: bool = True,
             dtype=None, device: str = "cpu") -> dict:
    """The contacts Phalanx detects at E states and the forces its constraint solve applies
    through them in a step from there (ctrl held; qvel, ctrl and act zero when not given).
    With ``forces=False`` the contacts alone, from the narrowphase without a step (MuJoCo's
    mj_collision; far cheaper where many contacts would make a large LCP): no ``force`` nor
    ``qfrc_constraint``, and ``overflow`` (E,), the contacts found beyond ``model.nconmax``.

    Returns a dict with ``count`` (E,) (contacts found, at most ``model.nconmax``), ``pos``
    (E, nconmax, 3) (points in world), ``frame`` (E, nconmax, 3, 3) (rows: the normal, from
    geom 1 to geom 2, and the two tangents), ``dist`` (E, nconmax) (signed distance, negative
    when penetrating), ``geom`` (E, nconmax, 2) (the two geoms, lower geom type first) and
    ``force`` (E, nconmax, 3) (the force on geom 2's body in the contact frame: normal, tangent
    1, tangent 2, in N; geom 1's body takes its opposite; the tangential entries are zero for
    frictionless contacts). Entries past ``count`` are zero. ``qfrc_constraint`` (E, nv) is the
    step's constraint force in joint space, J^T f / dt over all its rows (contacts, joint and
    tendon limits, friction loss, equality constraints): MuJoCo's qfrc_constraint, from
    Phalanx's impulses f; absent for a model stepped by XPBD, which has no such rows."""
    from . import _phalanx

    qpos = np.atleast_2d(np.asarray(qpos))
    n = qpos.shape[0]
    if not forces:
        count, overflow, pos, frame, dist, geom = _phalanx.detect(model, qpos, dtype, device)
        return dict(count=count.astype(np.int64), pos=pos, frame=frame, dist=dist, geom=geom,
                    overflow=overflow)
    if qvel is None:
        qvel = np.zeros((n, model.nv))
    if ctrl is None:
        ctrl = np.zeros((n, model.nu))
    if act is None and model.na > 0:
        act = np.zeros((n, model.na))
    warm = _phalanx.WarmStart()
    lcp_rows = model.solver != "xpbd"
    *_, qfrc_constraint = _phalanx.step(model, qpos, qvel, ctrl, 1, None, dtype, device, None,
                                        act, warm_start=warm, constraint_force=lcp_rows)
    state = warm.state()
    count = state["ncon"][:, 0].astype(np.int64)
    geom = state["geom"].reshape(n, -1, 2)
    live = np.arange(geom.shape[1])[None, :] < count[:, None]
    geom = np.where(live[..., None], geom, 0)
    # the rows of each contact, in contact order: its normal, then two friction rows when
    # either geom has condim > 1 (include/phalanx/constraint.h)
    condim = np.asarray(model.geom_condim)
    nrow = np.where(live, np.where(np.maximum(condim[geom[..., 0]], condim[geom[..., 1]]) > 1,
                                   3, 1), 0)
    first = np.cumsum(nrow, axis=1) - nrow
    impulse = state["efc_force"]
    force = np.zeros(geom.shape[:2] + (3,), impulse.dtype)
    for k in range(3):
        has = nrow > k
        rows = np.where(has, first + k, 0)
        force[..., k] = np.where(has, np.take_along_axis(impulse, rows, axis=1), 0)
    force /= model.timestep

    def held(a, *shape):  # the entries of the contacts found, zero past them
        a = a.reshape((n, -1) + shape)
        return np.where(live.reshape(live.shape + (1,) * len(shape)), a, 0)

    found = dict(count=count, pos=held(state["pos"], 3), frame=held(state["frame"], 3, 3),
                 dist=held(state["dist"]), geom=held(state["geom"], 2), force=force)
    if lcp_rows:
        found["qfrc_constraint"] = qfrc_constraint
    return found


def body_report(model: Model, qpos, qvel=None, contacts: dict | None = None, *, qacc=None,
                dtype=None, device: str = "cpu") -> dict:
    """Per-body quantities at E states in MuJoCo's convention, as Gymnasium's MuJoCo tasks read
    them from MjData: ``subtree_com`` (E, nbody, 3) (the centre of mass of each body and its
    descendants; the world's is that of all bodies) and, about the centre of mass of each
    body's tree (``subtree_com[body_rootid]``) in world axes, ``cinert`` (E, nbody, 10) (the
    spatial inertia: Ixx Iyy Izz Ixy Ixz Iyz, mass times the offset of the body's centre of
    mass, mass), with qvel ``cvel`` (E, nbody, 6) (angular, then linear velocity of the body
    point at the reference) and, with ``contacts`` (a dict as :func:`contacts` returns it),
    ``cfrc_ext`` (E, nbody, 6) (torque, then force: the wrench of the contact forces on each
    body, MuJoCo's cfrc_ext without equality constraints and applied forces). The world's
    cinert, cvel and cfrc_ext are zero.

    With qvel and ``qacc`` (E, nv), the acceleration the constraint forces took part in
    (:func:`forward_dynamics` given ``qfrc=contacts(...)["qfrc_constraint"]``), also what
    MuJoCo's mj_rnePostConstraint computes after the constraint solve, about the same points:
    ``cacc`` (E, nbody, 6) (angular, then linear acceleration; the world's is minus gravity,
    which every body's includes) and ``cfrc_int`` (E, nbody, 6) (torque, then force: the
    wrench the parent exerts on the body through its joints; with ``contacts`` the contact
    wrenches of its subtree are subtracted; the world's sums its children's, each about its
    own point, as MuJoCo does). Accelerometers, force and torque sensors read
    these (:func:`site_sensors`)."""
    from . import _phalanx

    if contacts is None:
        given = (None,) * 5
    else:
        given = (np.asarray(contacts["count"], np.int32), contacts["pos"], contacts["frame"],
                 contacts["force"], np.asarray(contacts["geom"], np.int32))
    if qacc is not None and qvel is None:
        raise ValueError("phalanx.body_report: qacc needs qvel")
    names = ("subtree_com", "cinert", "cvel", "cfrc_ext", "cacc", "cfrc_int")
    values = _phalanx.body_report(model, qpos, qvel, *given, qacc=qacc, dtype=dtype,
                                  device=device)
    return {k: v for k, v in zip(names, values) if v is not None}


def site_sensors(model: Model, kinematics: dict, report: dict, sites) -> dict:
    """MuJoCo's sensors on sites at E states, from what :func:`kinematics` and
    :func:`body_report` report there: for the sites ``sites`` (S ids), each (E, S, 3) in the
    site's frame, ``gyro`` and ``velocimeter`` (the angular velocity of the site's body and the
    linear velocity of the site's point), and, when ``report`` holds ``cacc`` and
    ``cfrc_int`` (body_report given qacc), ``accelerometer`` (the point's linear acceleration
    with gravity's reaction, as an accelerometer at rest reads +g up), ``force`` and
    ``torque`` (the wrench the body's parent exerts on it through its joints, the torque
    about the site; with contacts given to body_report, net of its subtree's contact
    wrenches, as MuJoCo's force and torque sensors read it)."""
    sites = np.asarray(sites, np.int64).reshape(-1)
    if sites.size and (sites.min() < 0 or sites.max() >= model.nsite):
        raise ValueError(f"phalanx.site_sensors: sites must be in [0, nsite = {model.nsite}), "
                         f"got {sites.tolist()}")
    if "cvel" not in report:
        raise ValueError("phalanx.site_sensors: report must be body_report's given qvel (it "
                         "holds no cvel)")
    body = np.asarray(model.site_bodyid, np.int64).reshape(-1)[sites]
    root = np.asarray(model.body_rootid, np.int64).reshape(-1)[body]
    pos, axes = kinematics["site_xpos"][:, sites], kinematics["site_xmat"][:, sites]
    # from the centre of mass of the body's tree, where the report's quantities are taken
    offset = pos - report["subtree_com"][:, root]

    def local(v):  # world axes (E, S, 3) into each site's frame
        return np.einsum("esi,esij->esj", v, axes)

    def motion(v):  # a motion vector (E, S, 6) at the site: (angular, linear), world axes
        return v[..., :3], v[..., 3:] - np.cross(offset, v[..., :3])

    ang, lin = motion(report["cvel"][:, body])
    out = dict(gyro=local(ang), velocimeter=local(lin))
    if "cacc" in report:
        _, acc_lin = motion(report["cacc"][:, body])
        out["accelerometer"] = local(acc_lin + np.cross(ang, lin))
        f = report["cfrc_int"][:, body]
        out["force"] = local(f[..., 3:])
        out["torque"] = local(f[..., :3] - np.cross(offset, f[..., 3:]))
    return out


def rangefinders(model: Model, qpos, sites, *, dtype=None, device: str = "cpu") -> dict:
    """MuJoCo's rangefinder sensors at E configurations: a ray from each of ``sites`` (ids or
    names) along the site's z axis, against every geom that is drawn (its colour's or its
    material's alpha above 0, ``model.geom_visible``) except those of the site's own body, as
    MuJoCo's ``mj_ray`` casts it. Meshes are cast against their convex hulls, which Phalanx
    keeps of them. -> dict with ``dist`` (E, len(sites)): the distance to the nearest surface,
    -1 where the ray meets nothing (MuJoCo's sensordata), and ``geom`` (E, len(sites)) int32:
    the geom met, -1 where none. Height fields and other per-environment fields
    (``model.set_parameter``) are each environment's own."""
    ids = [model.site_id(s) if isinstance(s, str) else int(s) for s in sites]
    for s, i in zip(sites, ids):
        if isinstance(s, str) and i < 0:
            raise ValueError(f"phalanx.rangefinders: the model has no site named {s!r}")
    dist, geom = _phalanx.rangefinders(model, qpos, ids, dtype, device)
    return {"dist": dist, "geom": geom}


def forward_dynamics(
    model: Model, qpos, qvel, ctrl, *, act=None, qfrc=None, dtype=None, device: str = "cpu"
) -> np.ndarray:
    """Acceleration without constraints, (M + diag(armature)) qacc = passive + actuation + qfrc
    - c.

    MuJoCo's qacc with contacts and limits disabled -> (E, nv). ``act`` (E, na) holds the
    activations the actuators with dynamics read (None: zero, MuJoCo's initial act). ``qfrc``
    (E, nv), if given, is a generalized force added (MuJoCo's qfrc_applied); given the
    constraint force of :func:`contacts`, qacc is MuJoCo's with the constraints.
    """
    if act is None and model.na > 0:
        act = np.zeros((np.shape(qpos)[0] if np.ndim(qpos) > 1 else 1, model.na))
    return _phalanx.forward_dynamics(model, qpos, qvel, ctrl, dtype, device, act, qfrc)


def actuator_forces(
    model: Model, qpos, qvel, ctrl, *, act=None, dtype=None, device: str = "cpu"
) -> np.ndarray:
    """The actuators' generalized force: gear times each actuator's force along its
    transmission, MuJoCo's qfrc_actuator -> (E, nv). ``act`` (E, na) holds the activations the
    actuators with dynamics read (None: zero)."""
    if act is None and model.na > 0:
        act = np.zeros((np.shape(qpos)[0] if np.ndim(qpos) > 1 else 1, model.na))
    return _phalanx.actuator_forces(model, qpos, qvel, ctrl, dtype, device, act)


def inverse_dynamics(
    model: Model, qpos, qvel, qacc, *, dtype=None, device: str = "cpu"
) -> np.ndarray:
    """The generalized force that produces qacc: M qacc + c - passive, armature in M.

    MuJoCo's qfrc_inverse without constraints; inverts forward_dynamics for the actuation force
    -> (E, nv).
    """
    return _phalanx.inverse_dynamics(model, qpos, qvel, qacc, dtype, device)


def step(
    model: Model, qpos, qvel, ctrl, *, nstep: int = 1, qfrc=None, xfrc=None, act=None,
    dtype=None, device: str = "cpu"
) -> tuple[np.ndarray, ...]:
    """Advance nstep semi-implicit Euler steps (MuJoCo's Euler integrator) with ctrl held.

    ``qfrc`` (E, nv), if given, is a generalized force added to the applied forces at every
    step (MuJoCo's qfrc_applied); ``xfrc`` (E, nbody, 6), if given, holds a force and a torque
    in world on each body, the force acting at the body's centre of mass (MuJoCo's
    xfrc_applied), turned into generalized forces at each step's configuration; a non-finite
    one sets STATUS_NAN_CTRL.
    Returns new arrays (qpos (E, nq), qvel (E, nv), status (E,) uint32); the inputs are not
    modified. status holds STATUS_* bits; an environment stops at the step that set one.
    A model whose actuators have dynamics (``model.na > 0``: integrator, filter, filterexact)
    carries their activations as state: pass ``act`` (E, na) (zeros start at rest) and the
    result is (qpos, qvel, act, status).
    """
    return _phalanx.step(model, qpos, qvel, ctrl, _count("nstep", nstep), qfrc, dtype, device,
                         xfrc, act)


def rollout(
    model: Model, qpos, qvel, ctrl, *, out=None, counts=None, tape: Tape | None = None,
    act=None, mocap_pos=None, mocap_quat=None, dtype=None, device: str = "cpu"
) -> tuple[np.ndarray, ...]:
    """T steps driven by ctrl (E, T, nu), one row of controls per step.

    Returns (qpos (E, T, nq), qvel (E, T, nv), status (E,) uint32) with the state after each
    step. An environment whose status gets a stopping bit (STATUS_NAN_*) stops and repeats its
    last state; STATUS_CONTACT_OVERFLOW and STATUS_LCP_NOT_CONVERGED are warnings.
    ``out=(qpos_out, qvel_out)`` writes the trajectories into the caller's C-contiguous arrays
    of those shapes and the call's dtype (reused across calls, no allocation) and returns them.
    ``counts``, an int32 array (E, T, NUM_COUNTS), receives per step the numbers indexed by
    COUNT_CONTACTS, COUNT_ROWS (constraint rows), COUNT_WARM_ROWS (rows warm-started from the
    previous impulses), COUNT_SET_HIT (1 when the previous clamping set solved the LCP),
    COUNT_OVERFLOW (contacts beyond model.nconmax, not resolved), and COUNT_GJK_ITERATIONS and
    COUNT_EPA_ITERATIONS (the convex narrowphase's iterations, summed over its pairs).
    ``tape``, a phalanx.Tape, records the rollout for ``tape.backward`` (replacing what the tape
    held before). With activation state (``model.na > 0``) pass the initial ``act`` (E, na);
    the result is then (qpos, qvel, act (E, T, na), status).
    ``mocap_pos`` (E, T, nmocap, 3) and ``mocap_quat`` (E, T, nmocap, 4), each optional, move
    the mocap bodies during the rollout: step t runs with the poses of row t (as MuJoCo steps
    with the mocap_pos and mocap_quat set before mj_step) in place of the model's parameters of
    those names, and a taped rollout's backward pass returns their gradients per step. A
    non-finite pose or a zero quaternion stops its environment with STATUS_NAN_CTRL.
    """
    qpos_out, qvel_out = (None, None) if out is None else out
    if tape is not None and not isinstance(tape, _phalanx.Tape):
        raise TypeError("phalanx: tape must be a phalanx.Tape")
    with contextlib.ExitStack() as held:
        if tape is not None:
            held.enter_context(exclusive_use(tape, "phalanx.Tape"))
        return _phalanx.rollout(model, qpos, qvel, ctrl, qpos_out, qvel_out, counts, tape, dtype,
                                device, act, mocap_pos, mocap_quat)


class Tape(_phalanx.Tape):
    """Checkpoints of a rollout for its backward pass (reverse-mode gradients of a whole rollout).

    ``phalanx.rollout(..., tape=tape)`` records: every ``checkpoint_every`` steps the state and
    the contact warm start of each environment, and the controls. ``tape.backward`` then
    recomputes each segment from its checkpoint and walks it backward, so memory grows as
    T / K + K records per environment instead of T. ``checkpoint_every=1`` keeps every step (no
    recomputation); ``0`` (the default) picks ceil(sqrt(T)), on the CPU at most the steps whose
    recomputation a group of environments keeps in cache (but not below 4), or, with
    ``memory_budget`` in bytes, every step when that fits and otherwise the spacing of least memory (a budget too
    small even for that is a ValueError). With segments to recompute, the tape also logs each
    step's contact impulses (room for a quarter of the rows a step may have, at most 64 a step,
    or what ``memory_budget`` leaves after the checkpoints), so that recomputing a step skips
    the contact solver. Gradients are bit-identical for every spacing and log size.
    ``nbytes`` is the memory the recorded tape holds. While it recomputes a segment, the
    backward pass also keeps what each of its K steps' reverse passes read, with room for
    ``peak`` = (contacts, rows), the most of any step of the rollout (about 28 KB per step for
    the humanoid in float32), so that no step is computed a third time.
    """

    @exclusive("phalanx.Tape")
    def backward(self, adj_qpos=None, adj_qvel=None, *, adj_act=None, grads=None,
                 complementarity_aware: bool = False,
                 bounce_correction: bool = False) -> dict[str, np.ndarray]:
        """Gradients of a loss L through the recorded rollout.

        adj_qpos (E, T, nq) and adj_qvel (E, T, nv) are dL/d(state after each step), as
        rollout returned it; None is zero. Returns a dict: ``qpos`` (E, nq) and ``qvel``
        (E, nv) for the initial state, ``ctrl`` (E, T, nu) and the per-environment parameter
        gradients of step_vjp (sum over E for parameters shared by all environments). The
        contact options are those of step_vjp. Environments whose rollout stopped (a
        STATUS_NAN_* bit) get zeros. With activation state, ``adj_act`` (E, T, na) is dL/d(act
        after each step) (None: zero) and the dict holds ``act`` (E, na), the gradient of the
        initial activations. A rollout given mocap poses per step has ``mocap_pos``
        (E, T, nmocap, 3) and ``mocap_quat`` (E, T, nmocap, 4), the gradients of each step's
        poses, for those it was given, in place of the parameters' gradients.

        ``grads``, a sequence of the dict's names, computes those gradients alone (None: all of
        them). A policy or an open-loop optimisation needs ``("ctrl",)`` or ``("qpos", "qvel",
        "ctrl")``; the parameters' gradients it then skips cost about 4 to 7% of the backward pass
        of MuJoCo's humanoid with contacts.
        """
        return self._backward(adj_qpos, adj_qvel,
                              _gradient_flags(complementarity_aware, bounce_correction), adj_act,
                              grads)


def step_vjp(
    model: Model, qpos, qvel, ctrl, adj_qpos_next, adj_qvel_next, *, dtype=None,
    complementarity_aware: bool = False, bounce_correction: bool = False, qfrc=None,
    xfrc=None, act=None, adj_act_next=None, device: str = "cpu", grads=None
) -> dict[str, np.ndarray]:
    """Vector-Jacobian product of one step at (qpos, qvel, ctrl) and the added forces ``qfrc``
    (E, nv) and ``xfrc`` (E, nbody, 6) as phalanx.step takes them (None: zero). With activation
    state, ``act`` (E, na) is required, ``adj_act_next`` (E, na) is the gradient with respect
    to the activations after the step (None: zero), and the dict holds ``act`` (E, na).

    Given the gradients of a loss with respect to the next state, adj_qpos_next (E, nq) and
    adj_qvel_next (E, nv), returns a dict of the gradients with respect to ``qpos`` (E, nq),
    ``qvel`` (E, nv), ``ctrl`` (E, nu), ``qfrc`` (E, nv), ``xfrc`` (E, nbody, 6; when given)
    and, per environment, the model
    parameters
    ``body_mass`` (E, nbody), ``body_inertia`` (E, nbody, 3), ``dof_damping`` (E, nv),
    ``dof_armature`` (E, nv), ``jnt_stiffness`` (E, njnt), ``actuator_gear`` (E, nu),
    ``body_ipos`` (E, nbody, 3; centres of mass), ``actuator_gainprm`` and ``actuator_biasprm``
    (E, nu, 9; a position servo's kp is gainprm[0] and -biasprm[1], its kv -biasprm[2]),
    ``geom_friction`` (E, ngeom, 3; sliding
    column), ``geom_restitution`` (E, ngeom) and ``geom_size`` (E, ngeom, 3; through the contact
    geometry only, not through masses); sum over E for a parameter shared by all environments.
    Quaternion coordinates are differentiated as the four numbers stored in qpos (the step
    normalises them).

    With contacts or joint limits the step is replayed from a cold start (no warm start from a
    previous step) and differentiated through the LCP on its clamping set (Nimble); the result
    is exact for ``model.lcp_solver`` "pgs_stabilized" or "dantzig" at states where no contact
    appears, vanishes or changes class under a small perturbation.

    Nimble's options (both off by default, which differentiates the branch the step took):
    ``complementarity_aware`` also differentiates the LCP on the loss-driven classification
    (a contact the loss wants to open is held at its impulse) and keeps whichever gives the
    larger gradient, so a robot resting on the ground gets a gradient towards lifting off;
    ``bounce_correction`` makes d qpos'/d(qpos, qvel) at a bouncing contact continuous time's
    -e (restitution) instead of the discrete step's +1, along the contact normal.

    ``grads``, a sequence of the dict's names, computes those gradients alone (None: all).
    """
    flags = _gradient_flags(complementarity_aware, bounce_correction)
    return _phalanx.step_vjp(model, qpos, qvel, ctrl, adj_qpos_next, adj_qvel_next, flags, qfrc,
                             dtype, device, xfrc, act, adj_act_next, grads)


def _parameter_shape(count: str, width: int):
    """the shape of a parameter of `width` numbers for each of the model's `count` entities"""
    return lambda m: (getattr(m, count),) if width == 1 else (getattr(m, count), width)


# the differentiable parameters in the core's order (phx::Param), each with its shape in a
# model; the core exports (name, count, width)
_PARAMETERS = [(name, _parameter_shape(count, width))
               for name, count, width in _phalanx.PARAMETERS]
# names of the differentiable model parameters (model.set_parameter, gradients)
PARAMETERS = tuple(name for name, _ in _PARAMETERS)
# every field model.set_parameter takes per environment: the parameters, then fields without
# gradients (a height field's elevation, hfield_data, for terrain redrawn per episode)
_BATCHED_FIELDS = _PARAMETERS + [(name, _parameter_shape(count, width))
                                 for name, count, width in _phalanx.ENV_FIELDS]
ENV_FIELDS = tuple(name for name, _ in _BATCHED_FIELDS[len(_PARAMETERS):])


def step_jacobians(
    model: Model, qpos, qvel, ctrl, *, parameters: bool = False, dtype=None,
    complementarity_aware: bool = False, bounce_correction: bool = False, qfrc=None,
    device: str = "cpu"
) -> dict[str, np.ndarray]:
    """The one-step Jacobians (Werling et al. 2021) at (qpos, qvel, ctrl) and an added generalized
    force ``qfrc`` (E, nv) as phalanx.step takes it (None: zero), batched over E.

    Computed from the adjoints: the step is replayed once from a cold start (as phalanx.step
    runs it), then one reverse pass per entry of qvel' reuses that replay, and the rows of qpos'
    follow by the chain rule through the position update (with a contact option, whose
    reverse pass depends on its seed, they get reverse passes of their own); each row equals
    step_vjp with that unit seed to rounding (the rows share the factorisations that step_vjp
    computes per call). Returns ``dqpos_dqpos`` (E, nq, nq),
    ``dqpos_dqvel`` (E, nq, nv), ``dqvel_dqpos`` (E, nv, nq), ``dqvel_dqvel`` (E, nv, nv),
    ``dqpos_dctrl`` / ``dqvel_dctrl`` (E, n, nu), and ``dqpos_dqfrc`` / ``dqvel_dqfrc`` (E, n, nv)
    with respect to that added force (Nimble's dqd'/dtau). With
    ``parameters=True`` also ``parameters``: a dict of the model parameters of step_vjp, each
    (E, nq + nv, *shape) with rows (qpos', qvel'). Quaternion coordinates are differentiated
    as the numbers stored in qpos. The contact options are those of step_vjp.
    """
    flags = _gradient_flags(complementarity_aware, bounce_correction)
    parameters = bool(parameters)
    out, jac_param = _phalanx.step_jacobian(model, qpos, qvel, ctrl, parameters, flags, qfrc,
                                            dtype, device)
    if parameters:
        nq, nv = model.nq, model.nv
        out["parameters"], k = {}, 0
        for name, shape in _PARAMETERS:
            shape = shape(model)
            n = int(np.prod(shape))
            out["parameters"][name] = jac_param[:, :, k:k + n].reshape(
                jac_param.shape[0], nq + nv, *shape)
            k += n
    return out


def step_jacobians_fd(
    model: Model, qpos, qvel, ctrl, *, qfrc=None, method: str = "central", h: float = 1e-6,
    wrt=None
) -> dict[str, np.ndarray]:
    """Reference one-step Jacobians by finite differences of phalanx.step in double: the state,
    control and added-force (qfrc) blocks of step_jacobians (no parameter blocks), at an added
    generalized force ``qfrc`` (E, nv) as phalanx.step takes it (None: zero). ``method`` is
    "central" (step h; h / model.timestep for the force columns) or "ridders" (Ridders'
    extrapolation from h0 = 1e3 h, shrinking by 1.4, keeping per entry the estimate of least
    estimated error; Numerical Recipes, section 5.7).
    All perturbed states of one step size go to phalanx.step as one batch.
    ``wrt`` (None: all four) names the inputs to perturb, one of or a sequence of "qpos",
    "qvel", "ctrl" and "qfrc": only their columns are computed, and only their blocks returned
    (Nimble's Table III times each Jacobian this way, by its own perturbations)."""
    if method not in ("central", "ridders"):
        raise ValueError(f"phalanx: method must be 'central' or 'ridders', got {method!r}")
    cols = _jacobian_columns(model)
    names = list(cols) if wrt is None else [wrt] if isinstance(wrt, str) else list(wrt)
    unknown = [n for n in names if n not in cols]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"phalanx: wrt must name distinct inputs among {list(cols)}, got {wrt!r}")
    _phalanx.step(model, qpos, qvel, ctrl, 0, qfrc, np.float64)  # checks the arrays' shapes
    E, nq, nv, nu = np.shape(qpos)[0], model.nq, model.nv, model.nu
    x = [np.asarray(a, np.float64) for a in (qpos, qvel, ctrl)]
    x.append(np.zeros((E, nv)) if qfrc is None else np.asarray(qfrc, np.float64))
    dirs, scale = _fd_directions(model.nq, model.nv, model.nu, model.timestep,
                                 tuple(n in names for n in cols))
    m = len(scale)

    def central(hh):
        # (E, nq + nv, m): one batch of 2 m E perturbed states
        part = [a[None] + (hh * d)[:, None, :] for a, d in zip(x, dirs)]  # (2 m, E, n)
        q, v, _ = _phalanx.step(model, *(p.reshape(2 * m * E, p.shape[2]) for p in part[:3]), 1,
                                part[3].reshape(2 * m * E, nv))
        out = np.empty((E, nq + nv, m))
        denom = (2 * hh * scale)[:, None, None]
        for y, r in ((q.reshape(2, m, E, nq), slice(0, nq)),
                     (v.reshape(2, m, E, nv), slice(nq, None))):
            out[:, r] = ((y[0] - y[1]) / denom).transpose(1, 2, 0)
        return out

    if method == "central":
        jac = central(h)
    else:
        con, con2, ntab, safe = 1.4, 1.4 * 1.4, 10, 2.0
        hh = 1e3 * h
        a = [[None] * ntab for _ in range(ntab)]
        a[0][0] = jac = central(hh)
        err = np.full(jac.shape, np.inf)
        for i in range(1, ntab):
            hh /= con
            a[0][i] = central(hh)
            fac = con2
            for j in range(1, i + 1):
                a[j][i] = (a[j - 1][i] * fac - a[j - 1][i - 1]) / (fac - 1)
                fac *= con2
                errt = np.maximum(np.abs(a[j][i] - a[j - 1][i]), np.abs(a[j][i] - a[j - 1][i - 1]))
                better = errt <= err
                err = np.where(better, errt, err)
                jac = np.where(better, a[j][i], jac)
            if np.all(np.abs(a[i][i] - a[i - 1][i - 1]) >= safe * err):
                break
    # its blocks by name, as step_jacobians names them
    jac = np.ascontiguousarray(jac)
    if wrt is None:
        return _phalanx.jacobian_blocks(jac, nq, nv, nu)
    out, k = {}, 0
    for n in (n for n in cols if n in names):  # the columns' order
        w = cols[n].stop - cols[n].start
        out[f"dqpos_d{n}"] = jac[:, :nq, k:k + w]
        out[f"dqvel_d{n}"] = jac[:, nq:, k:k + w]
        k += w
    return out


@functools.lru_cache(maxsize=64)
def _fd_directions(nq: int, nv: int, nu: int, timestep: float, chosen: tuple) -> tuple:
    """step_jacobians_fd's perturbations of the inputs (qpos, qvel, ctrl, qfrc) chosen by the
    flags `chosen`: their m columns in that order, per input its directions (2 m, n) of the 2 m
    perturbed states (+ then - per column) and the columns' scales (m): a force column's step is
    h / timestep, which moves qvel' about as much as a step h of qvel (a step h of force would
    leave the change of qpos' near its rounding). Read-only arrays, shared by calls."""
    widths = (nq, nv, nu, nv)
    m = sum(w for w, c in zip(widths, chosen) if c)
    dirs, scale, k = [], np.empty(m), 0
    for i, (w, c) in enumerate(zip(widths, chosen)):
        d = np.zeros((2 * m, w))
        if c:
            s = 1 / timestep if i == 3 else 1.0
            d[np.arange(k, k + w), np.arange(w)] = s
            d[np.arange(m + k, m + k + w), np.arange(w)] = -s
            scale[k:k + w] = s
            k += w
        d.flags.writeable = False
        dirs.append(d)
    scale.flags.writeable = False
    return dirs, scale


def _jacobian_columns(model: Model) -> dict[str, slice]:
    """The column blocks of a one-step Jacobian (the core's layout): qpos, qvel, ctrl, qfrc."""
    nq, nv, nu = model.nq, model.nv, model.nu
    return {"qpos": slice(0, nq), "qvel": slice(nq, nq + nv), "ctrl": slice(nq + nv, nq + nv + nu),
            "qfrc": slice(nq + nv + nu, nq + 2 * nv + nu)}


@contextlib.contextmanager
def model_parameters(model: Model, values: dict):
    """Context manager: set the model parameters in ``values`` (name -> array, as
    model.set_parameter takes it) where they differ from the model's, and restore the old
    values on exit."""
    changed = {}
    try:
        for name, value in values.items():
            value = np.asarray(value, dtype=np.float64)
            current = model.parameter(name)
            if not np.array_equal(current, value):
                changed[name] = current
                model.set_parameter(name, value)
        yield
    finally:
        for name, value in changed.items():
            model.set_parameter(name, value)


def bytes_per_env(model: Model, *, dtype=np.float64, device: str = "cpu") -> int:
    """Bytes of device memory one environment uses: its state plus the workspace of a step."""
    dtype = np.dtype(dtype)
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"phalanx: dtype must be float32 or float64, got {dtype}")
    f = _phalanx.bytes_per_env_float32 if dtype == np.float32 else _phalanx.bytes_per_env_float64
    return f(model, device)


def _gradient_flags(complementarity_aware: bool, bounce_correction: bool) -> int:
    """the core's contact-gradient flags of Nimble's two options"""
    return (_phalanx.GRAD_COMPLEMENTARITY_AWARE if complementarity_aware else 0) | (
        _phalanx.GRAD_BOUNCE_CORRECTION if bounce_correction else 0)


def _count(name: str, n, least: int = 0, owner: str = "phalanx") -> int:
    """n as an int >= least (0 or 1), else a ValueError from owner."""
    kind = "a positive" if least == 1 else "a non-negative"
    try:
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"{owner}: {name} must be {kind} integer, got {n!r}") from None
    if n < least:
        raise ValueError(f"{owner}: {name} must be {kind} integer, got {n}")
    return n
