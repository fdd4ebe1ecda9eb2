"""The ``phalanx`` command line (phalanx.cli): info, bench and demo through ``main(argv)``, their
numbers checked against the library, errors as one line and exit status 2, and the module
entry point ``python -m phalanx``."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest

import phalanx
from phalanx import cli

from conftest import EXAMPLES, HUMANOID

CARTPOLE = EXAMPLES / "models" / "cartpole.xml"


def run(capsys, *argv):
    """main(argv) -> (exit status, stdout, stderr)"""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_info_names_tendon_transmissions_and_dynamics(capsys, tmp_path):
    path = tmp_path / "arm.xml"
    path.write_text("""<mujoco><worldbody><body><joint name="a"/><geom size="0.1"/>
      <body pos="0 0 -0.3"><joint name="b"/><geom size="0.1"/></body></body></worldbody>
      <tendon><fixed name="t"><joint joint="a" coef="1"/><joint joint="b" coef="-1"/></fixed>
      </tendon><actuator><motor name="m" tendon="t"/>
      <general name="f" joint="b" dyntype="filter" dynprm="0.1"/></actuator></mujoco>""")
    info = run_json(capsys, "info", str(path))
    assert [(a["joint"], a["tendon"], a["dynamics"]) for a in info["actuators"]] == [
        (None, 0, "none"), ("b", None, "filter")]
    assert (info["counts"]["na"], info["counts"]["ntendon"]) == (1, 1)


@pytest.mark.parametrize("path", [HUMANOID, CARTPOLE], ids=["humanoid", "cartpole"])
def test_info_json_matches_the_model(capsys, path):
    info = run_json(capsys, "info", path)
    model = phalanx.load_model(path)
    assert info["name"] == model.name
    assert info["counts"] == {k: getattr(model, k) for k in
                              ("nq", "nv", "nu", "na", "nbody", "njnt", "ngeom", "ntendon",
                               "nsite", "neq", "npair", "nconmax")}
    assert info["ignored"] == list(model.ignored)
    o = info["options"]
    assert o["timestep"] == model.timestep and o["gravity"] == list(model.gravity)
    assert (o["contact"], o["limit"], o["lcp_solver"], o["lcp_iterations"]) == (
        model.contact, model.limit, model.lcp_solver, model.lcp_iterations)
    assert sum(info["joints"]["by_type"].values()) == model.njnt
    assert info["joints"]["limited"] == int(np.sum(model.jnt_limited))
    assert sum(info["geoms"]["by_type"].values()) == model.ngeom
    assert [a["name"] for a in info["actuators"]] == list(model.actuator_names)
    assert [a["gear"] for a in info["actuators"]] == list(model.actuator_gear)
    assert [a["joint"] for a in info["actuators"]] == [
        model.joint_names[j] for j in model.actuator_trnid]
    assert [a["ctrlrange"] for a in info["actuators"]] == [
        list(r) if lim else None
        for r, lim in zip(model.actuator_ctrlrange, model.actuator_ctrllimited)]
    assert info["parameters"] == {n: list(model.parameter(n).shape) for n in phalanx.PARAMETERS}
    assert info["bytes_per_env"] == {
        "float32": phalanx.bytes_per_env(model, dtype=np.float32),
        "float64": phalanx.bytes_per_env(model, dtype=np.float64)}


def test_info_humanoid_facts_and_text(capsys):
    info = run_json(capsys, "info", HUMANOID)
    assert info["joints"]["by_type"] == {"free": 1, "hinge": 21}
    assert info["ignored"], "the humanoid has visual and asset elements the loader skips"
    code, out, err = run(capsys, "info", HUMANOID)
    assert code == 0 and err == ""
    assert "nq 28  nv 27  nu 21" in out
    assert f"ignored    {len(info['ignored'])} kind(s)" in out
    for item in info["ignored"]:
        assert f"  {item}\n" in out


def test_info_reports_the_medium(capsys, tmp_path):
    # a model with a medium: its options in the JSON and a "medium" line in the text; none
    # without one (the humanoid above)
    path = tmp_path / "float.xml"
    path.write_text("""<mujoco><option density="1000" viscosity="0.002" wind="1 0 -0.5"/>
      <worldbody><body><freejoint/><geom size="0.1"/></body></worldbody></mujoco>""")
    o = run_json(capsys, "info", str(path))["options"]
    assert (o["density"], o["viscosity"], o["wind"]) == (1000, 0.002, [1, 0, -0.5])
    code, out, _ = run(capsys, "info", str(path))
    assert code == 0
    assert "medium     density 1000 kg/m^3, viscosity 0.002 Pa s, wind (1, 0, -0.5) m/s" in out
    assert "medium" not in run(capsys, "info", HUMANOID)[1]


def test_bench_json_is_consistent(capsys):
    # 8 envs x 20 steps in chunks of 7 (7 + 7 + 6: the short last chunk has its own buffers)
    r = run_json(capsys, "bench", "--envs", 8, "--steps", 20, "--chunk", 7, "--repeats", 3,
                 "--dtype", "float64")
    assert (r["envs"], r["steps"], r["chunk"], r["repeats"]) == (8, 20, 7, 3)
    assert r["dtype"] == "float64" and r["device"] == "cpu"
    assert r["model"] == str(HUMANOID)
    assert r["env_steps"] == 8 * 20
    assert len(r["seconds"]) == 3 and r["median_seconds"] == statistics.median(r["seconds"])
    assert r["env_steps_per_second"] == pytest.approx(r["env_steps"] / r["median_seconds"],
                                                      rel=1e-12)
    assert r["simulated_seconds_per_env"] == pytest.approx(20 * 0.005)
    model = phalanx.load_model(HUMANOID)
    assert r["bytes_per_env"] == phalanx.bytes_per_env(model, dtype=np.float64)
    assert set(r["status"]) == {name for name, _ in cli.STATUS_BITS}
    assert r["stopped"] == 0


def test_bench_contacts_match_a_direct_rollout(capsys):
    # one chunk of 60 steps (0.3 s: the humanoid starts with its feet 0.27 m above the floor);
    # the bench's controls are then one draw of default_rng(seed) inside ctrlrange
    r = run_json(capsys, "bench", "--envs", 8, "--steps", 60, "--repeats", 1, "--seed", 3)
    assert r["dtype"] == "float32"
    model = phalanx.load_model(HUMANOID)
    lo, hi = model.actuator_ctrlrange.T
    ctrl = np.random.default_rng(3).uniform(lo, hi, size=(8, 60, model.nu)).astype(np.float32)
    qpos = np.repeat(model.qpos0[None].astype(np.float32), 8, axis=0)
    counts = np.zeros((8, 60, phalanx.NUM_COUNTS), np.int32)
    _, _, status = phalanx.rollout(model, qpos, np.zeros((8, model.nv), np.float32), ctrl,
                                   counts=counts)
    assert counts[..., phalanx.COUNT_CONTACTS].sum() > 0  # the feet reach the floor
    assert r["contacts_per_step"] == pytest.approx(counts[..., phalanx.COUNT_CONTACTS].mean())
    assert r["max_contacts"] == counts[..., phalanx.COUNT_CONTACTS].max()
    assert r["rows_per_step"] == pytest.approx(counts[..., phalanx.COUNT_ROWS].mean())
    assert r["status"] == cli.status_summary(status)


def test_bench_threads_are_set_and_restored(capsys):
    before = phalanx.num_threads()
    r = run_json(capsys, "bench", CARTPOLE, "--envs", 4, "--steps", 5, "--repeats", 1,
                 "--threads", 1)
    assert r["threads"] == 1
    assert r["contacts_per_step"] == 0 and r["rows_per_step"] >= 0
    assert phalanx.num_threads() == before
    phalanx.set_num_threads(1)
    assert phalanx.num_threads() == 1
    phalanx.set_num_threads(before)
    with pytest.raises(ValueError, match="number of threads must be >= 1"):
        phalanx.set_num_threads(0)


def test_bench_text(capsys):
    code, out, err = run(capsys, "bench", "--envs", 4, "--steps", 10, "--repeats", 1)
    assert code == 0 and err == ""
    assert "median " in out and " env-steps/s" in out and "status: " in out


def test_demo_reports_the_simulated_time(capsys, tmp_path):
    r = run_json(capsys, "demo", "--envs", 4, "--seconds", 0.1, "--out", tmp_path)
    model = phalanx.load_model(HUMANOID)
    assert r["mode"] == "drop" and r["envs"] == 4
    assert r["steps"] == round(0.1 / model.timestep)
    assert r["simulated_seconds"] == r["steps"] * model.timestep
    assert r["progress"][-1]["step"] == r["steps"]
    assert r["progress"][-1]["time"] == r["simulated_seconds"]
    assert r["realtime_factor"] == pytest.approx(r["simulated_seconds"] / r["wall_seconds"])
    assert 0 <= r["fallen"] <= 1
    assert r["fallen_threshold"] == pytest.approx(0.5 * model.qpos0[2])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert r["plot"] is None
    else:
        assert (tmp_path / "demo_drop.png").is_file() and r["plot"] == str(
            tmp_path / "demo_drop.png")


def test_demo_text(capsys):
    code, out, err = run(capsys, "demo", "--envs", 2, "--seconds", 0.05)
    assert code == 0 and err == ""
    assert "fallen" in out and "simulated s per wall s" in out


def test_drop_poses_are_valid(rng):
    model = phalanx.load_model(HUMANOID)
    q = cli.drop_poses(model, 16, rng)
    np.testing.assert_allclose(np.linalg.norm(q[:, 3:7], axis=1), 1, atol=1e-12)
    assert np.all(q[:, 2] >= model.qpos0[2])
    limited = np.flatnonzero(model.jnt_limited)
    adr = model.jnt_qposadr[limited]
    assert np.all(q[:, adr] >= model.jnt_range[limited, 0])
    assert np.all(q[:, adr] <= model.jnt_range[limited, 1])


@pytest.mark.parametrize("argv, message", [
    (["info", "/no/such/model.xml"], "phalanx: no such model file: /no/such/model.xml"),
    (["bench", "/no/such/model.xml"], "phalanx: no such model file: /no/such/model.xml"),
    (["bench", "--envs", "0"], "argument --envs: expected a positive integer, got 0"),
    (["bench", "--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["demo", "--seconds", "-1"], "argument --seconds: expected a positive number"),
    (["demo", "--model", str(CARTPOLE)], "needs a model whose first joint is free"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "the following arguments are required: COMMAND"),
])
def test_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert message in err and err.count("\n") == 1, err


def test_missing_default_model(capsys, monkeypatch):
    monkeypatch.setattr(cli, "HUMANOID", "/no/such/humanoid.xml")
    code, _, err = run(capsys, "bench")
    assert code == 2 and "/no/such/humanoid.xml" in err and "libmujoco-samples" in err


def test_module_entry_point():
    p = subprocess.run([sys.executable, "-m", "phalanx", "info", str(CARTPOLE), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["counts"]["nq"] == 2
    p = subprocess.run([sys.executable, "-m", "phalanx", "info", "/no/such/model.xml"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == "phalanx: no such model file: /no/such/model.xml\n"


# an ellipsoid that may touch the floor: it loads, but its collision is not implemented
ELLIPSOID_ON_FLOOR = """<mujoco><worldbody><geom name="floor" type="plane" size="1 1 .1"/>
  <body pos="0 0 1"><freejoint/><geom name="egg" type="ellipsoid" size=".1 .2 .3"/></body>
</worldbody></mujoco>"""


def test_info_of_a_model_with_an_ellipsoid(capsys, tmp_path):
    """info counts the geoms by type and reports the memory the library computes"""
    path = tmp_path / "egg.xml"
    path.write_text(ELLIPSOID_ON_FLOOR)
    model = phalanx.load_model(path)
    info = run_json(capsys, "info", path)
    assert info["geoms"]["by_type"] == {"plane": 1, "ellipsoid": 1}
    assert info["bytes_per_env"] == {"float32": phalanx.bytes_per_env(model, dtype=np.float32),
                                     "float64": phalanx.bytes_per_env(model, dtype=np.float64)}

