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


def assert_rows_given(model, counts, adjoint=False):
    """The arrays a step lays out as rows, for some capacity nefcmax: per row J and Y (nv each),
    A's row, b, lo, hi, mu, PGS's 4, the previous impulse, and findex, key_prev, class_prev and
    4 of span; and the exact solvers' storage (phalanx._phalanx.lcp_storage). The step's
    adjoint adds its own: adj_J (nv per row), the adjoints of the impulses, b and mu, the
    bounces, dl/dv, the impulses' copy and adj_A's four factors (10 per row), two classes per
    row, and the contacts' adjoints (13 per contact: point, frame, distance)."""
    given_rows, given_irows = counts["given_rows"], counts["given_irows"]
    per_row = (3 if adjoint else 2) * model.nv + 9 + (10 if adjoint else 0)
    per_contact = 13 if adjoint else 0
    int_rows = 9 if adjoint else 7
    matches = []
    for nefcmax in range(1, given_irows // int_rows + 1):
        reals, ints = phalanx._phalanx.lcp_storage(nefcmax)
        if (given_irows == int_rows * nefcmax + ints
                and given_rows == nefcmax * (per_row + nefcmax) + per_contact * model.nconmax
                + reals):
            matches.append(nefcmax)
    assert len(matches) == 1, (given_rows, given_irows, matches)
    return matches[0]


def traced(run):
    phalanx._phalanx.scratch_trace(True)
    try:
        out = run()
    finally:
        counts = phalanx._phalanx.scratch_trace(False)
    return out, counts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tracing_changes_no_result(dtype):
    # traced, the scratch is split as the CUDA backend splits it (the workspaces sized by the
    # model alone a block of their own), so this also holds the split layout to the CPU's
    model = phalanx.load_model(HUMANOID)
    qpos, qvel, ctrl = humanoid_state(model, 3, 60, dtype)
    ref = phalanx.rollout(model, qpos, qvel, ctrl)
    traced_out, counts = traced(lambda: phalanx.rollout(model, qpos, qvel, ctrl))
    for a, b in zip(ref, traced_out):
        np.testing.assert_array_equal(a, b)
    assert 0 < counts["written_reals"] <= counts["given_reals"]
    assert 0 < counts["written_ints"] <= counts["given_ints"]
    # the rollout lays its constraint rows J and Y and its LCP's matrix, b and bounds out apart
    # (interleaved on CUDA), sized for nefcmax rows, of which the fall onto the floor writes
    # some; and their integers (friction links, spans, the previous step's keys and classes,
    # the exact solvers' index sets)
    assert 0 < counts["written_rows"] < counts["given_rows"] < counts["given_reals"]
    nefcmax = assert_rows_given(model, counts)
    assert 0 < counts["written_irows"] < counts["given_irows"]
    # it holds the contacts for its launch in fixed storage (local memory on CUDA), of which
    # the fall writes those it finds: their integers (counts, geoms, the rows' classes and
    # keys) are the rest of the forward's scratch's
    held = 13 * model.nconmax + nefcmax  # the contacts' reals: pos, frame, dist; efc_force
    assert counts["given_ifixed"] == 7 + 2 * model.nconmax + 2 * nefcmax
    assert counts["given_irows"] + counts["given_ifixed"] == counts["given_ints"]
    assert 0 < counts["written_ifixed"] < counts["given_ifixed"]
    # the stages of fixed structure write their whole workspace (the tendon arrays of this
    # model without tendons are empty) and the state, none of it the LCP's
    assert 0 < counts["written_fixed"] <= counts["given_fixed"] < counts["written_reals"]
    assert counts["written_fixed"] > 0.9 * (counts["given_fixed"] - held)
    # a step holds the state alone: it is given the rollout's scratch less the held contacts
    _, step_counts = traced(lambda: phalanx.step(model, qpos, qvel, ctrl[:, 0], nstep=5))
    assert step_counts["given_ifixed"] == 0
    assert step_counts["given_fixed"] == counts["given_fixed"] - held
    assert step_counts["given_rows"] == counts["given_rows"]
    # nothing is traced once it is off
    phalanx.rollout(model, qpos, qvel, ctrl)
    assert phalanx._phalanx.scratch_trace(False)["given_reals"] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_scratch_gives_the_same_gradients(dtype):
    # the reverse kernels over the split scratch: a taped rollout's backward and a step's
    # vector-Jacobian product, bit for bit
    model = phalanx.load_model(HUMANOID)
    qpos, qvel, ctrl = humanoid_state(model, 3, 40, dtype, seed=1)
    rng = np.random.default_rng(2)
    adj = (rng.standard_normal((3, 40, model.nq)).astype(dtype),
           rng.standard_normal((3, 40, model.nv)).astype(dtype))

    def backward():
        tape = phalanx.Tape(checkpoint_every=8)
        phalanx.rollout(model, qpos, qvel, ctrl, tape=tape)
        return tape.backward(*adj)

    # the step's vjp from a state of the fall with contacts (the first environment's step 35 has
    # 18 rows)
    qs, vs, _ = phalanx.rollout(model, qpos, qvel, ctrl)

    def vjp():
        return phalanx.step_vjp(model, qs[:, 34], vs[:, 34], ctrl[:, 35], adj[0][:, 35],
                                adj[1][:, 35])
    for run in (backward, vjp):
        ref = run()
        out, counts = traced(run)
        assert counts["written_fixed"] > 0
        # both lay out the rows of the steps they replay as the forward kernels do, and their
        # own beside them (the step's vjp exactly those; the rollout's also its tape's slots)
        if run is vjp:
            assert_rows_given(model, counts, adjoint=True)
        assert 0 < counts["written_rows"] < counts["given_rows"]
        assert 0 < counts["written_irows"] < counts["given_irows"]
        for key in ref:
            np.testing.assert_array_equal(ref[key], out[key], err_msg=key)


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
        local, written = k["local_written_bytes"], k["scratch_written_bytes"]
        rows = k["rows_written_bytes"]
        assert 0 < local and local + rows <= written <= k["scratch_given_bytes"], name
        # every kernel but the detection writes rows once the fall reaches the floor (the taped
        # rollout's reverse kernel in its recomputed steps and its tape's slots too)
        assert (rows == 0) == ("detection" in name), name
        blocks, backend, coalesced = k["bytes_per_env_step"].values()
        # the per-environment layout moves a 32-byte sector per float, local memory and the
        # interleaved rows coalesce
        io = k["io_bytes"]
        assert blocks - io == pytest.approx(8 * (coalesced - io))
        assert backend - io == pytest.approx(blocks - io - 7 * 2 * (local + rows))
    # the step from each of the rollout's 20 states: the median one is a state of the fall, and
    # writes no more than the rollout, whose launch counts every entry any of its steps wrote;
    # and a step's vjp no more than the taped rollout's reverse pass
    kernels = result["kernels"]
    assert (kernels["step (median state)"]["scratch_written_bytes"]
            <= kernels["rollout"]["scratch_written_bytes"])
    assert (kernels["step_vjp reverse (median state)"]["scratch_written_bytes"]
            <= kernels["rollout reverse (Tape.backward)"]["scratch_written_bytes"])
