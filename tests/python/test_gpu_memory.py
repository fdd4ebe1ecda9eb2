"""The scratch trace behind bench/gpu_memory.py: tracing changes no result (so the kernels write
their scratch before they read it: the traced run starts from a byte pattern, the untraced one
from whatever the last launch left), the counts are bounded by the scratch given and grow with
what a step does, and the report runs on small sizes."""

import os
import sys

import numpy as np
import pytest

import phalanx
from conftest import HUMANOID

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))


def humanoid_state(model, nenv, nstep, dtype, seed=0):
    rng = np.random.default_rng(seed)
    qpos = np.repeat(model.qpos0[None], nenv, axis=0).astype(dtype)
    qvel = rng.uniform(-0.5, 0.5, (nenv, model.nv)).astype(dtype)
    ctrl = rng.uniform(-0.4, 0.4, (nenv, nstep, model.nu)).astype(dtype)
    return qpos, qvel, ctrl


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tracing_changes_no_result(dtype):
    model = phalanx.load_model(HUMANOID)
    qpos, qvel, ctrl = humanoid_state(model, 3, 60, dtype)
    ref = phalanx.rollout(model, qpos, qvel, ctrl)
    phalanx._phalanx.scratch_trace(True)
    try:
        traced = phalanx.rollout(model, qpos, qvel, ctrl)
    finally:
        counts = phalanx._phalanx.scratch_trace(False)
    for a, b in zip(ref, traced):
        np.testing.assert_array_equal(a, b)
    assert 0 < counts["written_reals"] <= counts["given_reals"]
    assert 0 < counts["written_ints"] <= counts["given_ints"]
    # nothing is traced once it is off
    phalanx.rollout(model, qpos, qvel, ctrl)
    assert phalanx._phalanx.scratch_trace(False)["given_reals"] == 0


def test_contacts_write_more_scratch():
    # the humanoid falling onto the floor writes contact rows and the LCP's matrices that the
    # same fall without contacts does not
    model = phalanx.load_model(HUMANOID)
    qpos, qvel, ctrl = humanoid_state(model, 2, 150, np.float64)

    def written(contact):
        model.contact = contact
        phalanx._phalanx.scratch_trace(True)
        phalanx.rollout(model, qpos, qvel, ctrl)
        return phalanx._phalanx.scratch_trace(False)["written_reals"]
    assert written(True) > written(False) + 1000


def test_report_runs(tmp_path):
    import gpu_memory
    out = tmp_path / "gpu_memory.json"
    assert gpu_memory.main(["--envs", "2", "--steps", "20", "--out", str(out)]) == 0
    import json
    result = json.loads(out.read_text())
    for name, k in result["kernels"].items():
        assert k["scratch_written_bytes"] <= k["scratch_given_bytes"], name
        per_env, coalesced = k["bytes_per_env_step"].values()
        # the per-environment layout moves a 32-byte sector per float
        assert per_env - k["io_bytes"] == pytest.approx(8 * (coalesced - k["io_bytes"]))
