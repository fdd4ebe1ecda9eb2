"""The model's arrays and counts as Python sees them: every array of the core's table is a
read-only property of the shape its docstring names, (count,) or (count, width), with count the
model's own."""

import re
from pathlib import Path

import mujoco
import numpy as np
import pytest

import phalanx

HUMANOID = "/usr/share/mujoco/model/humanoid/humanoid.xml"
SHAPE = re.compile(r"\((n\w+),(?: (\d+))?\)$")


def arrays(model):
    """(name, array, count name, width) of every array property"""
    out = []
    for name in dir(type(model)):
        doc = getattr(type(model), name).__doc__ or ""
        match = SHAPE.search(doc.strip())
        if match and isinstance(getattr(model, name), np.ndarray):
            out.append((name, getattr(model, name), match.group(1), int(match.group(2) or 1)))
    return out


def test_every_array_has_the_shape_of_its_count():
    model = phalanx.load_model(HUMANOID)
    found = arrays(model)
    names = {name for name, *_ in found}
    assert {"qpos0", "body_mass", "jnt_range", "geom_size", "pair_geom", "exclude_bodies",
            "actuator_ctrlrange"} <= names
    assert len(found) >= 47
    for name, a, count, width in found:
        n = getattr(model, count)
        assert a.shape == ((n,) if width == 1 else (n, width)), name
        assert not a.flags.writeable, name
    # a few by hand
    assert model.body_inertia.shape == (model.nbody, 3)
    assert model.pair_geom.shape == (model.npair, 2)
    assert model.exclude_bodies.shape == (model.nexclude, 2)
    assert model.nbody == 17 and model.nq == 28 and model.nv == 27


@pytest.mark.parametrize("name", ["body_mass", "geom_friction", "dof_damping"])
def test_parameters_are_arrays_of_the_table(name):
    model = phalanx.load_model(HUMANOID)
    assert name in phalanx.PARAMETERS
    np.testing.assert_array_equal(model.parameter(name), getattr(model, name))


@pytest.mark.parametrize("path", [HUMANOID, "examples/models/sysid_scene.xml",
                                  "examples/models/cartpole.xml"])
def test_parameter_table_names_each_parameters_count_and_width(path):
    # the core's (name, count, width) of every parameter gives the shape of its model array,
    # of model.parameter and of its gradient
    model = phalanx.load_model(Path(__file__).parents[2] / path)
    table = phalanx._phalanx.PARAMETERS
    assert [name for name, _, _ in table] == list(phalanx.PARAMETERS)
    assert ("body_inertia", "nbody", 3) in table and ("dof_damping", "nv", 1) in table
    shapes = dict(phalanx._PARAMETERS)
    qpos = np.tile(model.qpos0, (2, 1))
    grads = phalanx.step_vjp(model, qpos, np.zeros((2, model.nv)), np.zeros((2, model.nu)),
                             np.ones((2, model.nq)), np.ones((2, model.nv)))
    for name, count, width in table:
        n = getattr(model, count)
        shape = (n,) if width == 1 else (n, width)
        assert getattr(model, name).shape == shape == shapes[name](model), name
        assert model.parameter(name).shape == shape, name
        assert grads[name].shape == (2, *shape), name


def test_joint_types_in_python_are_the_cores():
    # the modules that test joint types take the numbers from the core's names
    import phalanx.cli as cli
    import phalanx.envs as envs
    assert (cli._JOINT_FREE, cli._JOINT_SLIDE, cli._JOINT_HINGE) == (0, 2, 3)
    assert (envs._FREE, envs._BALL) == (0, 1)
    assert list(phalanx.load_model(Path(__file__).parents[2] / "examples/models/cartpole.xml")
                .jnt_type) == [phalanx.JOINT_TYPES.index("slide"),
                               phalanx.JOINT_TYPES.index("hinge")]


def test_status_bits_and_type_names_come_from_the_core():
    # the core's table: five bits in report order, the first three stop an environment
    assert [name for name, _ in phalanx.STATUS_BITS] == [
        "nan_state", "nan_ctrl", "nan_result", "contact_overflow", "lcp_not_converged"]
    assert [bit for _, bit in phalanx.STATUS_BITS] == [1, 2, 4, 8, 16]
    assert phalanx.STATUS_STOP_MASK == (phalanx.STATUS_NAN_STATE | phalanx.STATUS_NAN_CTRL
                                        | phalanx.STATUS_NAN_RESULT) == 7
    assert phalanx.STATUS_LCP_NOT_CONVERGED == 16
    # MuJoCo's numbering (mjtJoint, mjtGeom)
    for t, name in enumerate(phalanx.JOINT_TYPES):
        assert int(getattr(mujoco.mjtJoint, f"mjJNT_{name.upper()}")) == t
    for t, name in enumerate(phalanx.GEOM_TYPES):
        assert int(getattr(mujoco.mjtGeom, f"mjGEOM_{name.upper()}")) == t


def test_lcp_solver_names_are_the_cores_and_set_the_option():
    """model.lcp_solver reads and writes the core's solver by its exported name, and a wrong
    name is refused with the list of names"""
    model = phalanx.load_model(Path(__file__).parents[2] / "examples/models/cartpole.xml")
    assert phalanx.LCP_SOLVERS == ("pgs", "pgs_stabilized", "dantzig")
    for name in phalanx.LCP_SOLVERS:
        model.lcp_solver = name
        assert model.lcp_solver == name
    with pytest.raises(ValueError, match=r"lcp_solver must be 'pgs', 'pgs_stabilized' or "
                                         r"'dantzig', got 'lemke'"):
        model.lcp_solver = "lemke"

