"""bench/bench_gpu.py, the GPU benchmark: without a CUDA device it says so, writes nothing and
exits 0; on the emulated device of a PHX_CUDA_EMULATION build (scripts/test_cuda_emulation.sh)
it refuses to time the CPU unless told, and with --emulated measures tiny sizes end to end."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

import phalanx

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_gpu.py"


@pytest.fixture
def bench():
    if str(BENCH.parent) not in sys.path:
        sys.path.insert(0, str(BENCH.parent))  # its shared module, bench/_common.py
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = ["--envs", "3", "5", "--steps", "4", "--chunk", "2", "--grad-steps", "3", "--horizon",
        "3", "--repeats", "1", "--no-references"]


def test_without_a_gpu_it_says_so_and_exits_0(bench, tmp_path, capsys):
    out = tmp_path / "gpu.json"
    code = bench.main(TINY + ["--out", str(out)])
    text = capsys.readouterr().out
    if phalanx.cuda_available() and not phalanx.cuda_emulated():
        pytest.skip("a GPU is present: the benchmark measures it (not a test)")
    assert code == 0 and not out.exists()
    if phalanx.cuda_emulated():
        assert "emulation" in text
    else:
        assert "no CUDA device" in text


@pytest.mark.skipif(not phalanx.cuda_emulated(), reason="needs the emulated CUDA device")
def test_on_the_emulated_device_it_measures_every_size(bench, tmp_path):
    out = tmp_path / "gpu.json"
    assert bench.main(TINY + ["--emulated", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["emulated"] and sorted(result["sizes"]) == ["3", "5"]
    for nenv, row in result["sizes"].items():
        # every figure measured and consistent with its own definition (no timing is asserted:
        # at these sizes on a busy CPU they are noise)
        assert row["rollout_env_steps_per_s"] > 0 and row["mppi_iteration_s"] > 0
        assert row["backward_over_forward"] > 0
        assert row["mppi_sample_steps_per_s"] == pytest.approx(
            int(nenv) * 3 / row["mppi_iteration_s"])
