"""Bounds on every input (issue 26, defects 2, 8, 10, 11).

- a memory limit above the GPU's memory is refused (exit 2, naming the GPU and its memory);
  a limit and a fraction together are refused (give one);
- GPU counts, layer counts, sizes and file sizes are bounded, so nothing hangs or exhausts
  memory; device files and FIFOs are refused without being read;
- seeds are 0..2**32-1 and are checked before a study is created, so a corrected file is not
  refused as "a different definition";
- physically impossible hardware (NVLink at 1e12 GB/s, a 1 ps collective) is refused.
"""

from __future__ import annotations

import time

import pytest
import yaml
from conftest import run_cli

BASE = ["--model", "7b", "--gpus", "8", "-q"]


@pytest.mark.parametrize("gpu, limit", [("a100-sxm-80gb", "200"), ("a100-sxm-80gb", "80.5"),
                                        ("a100-sxm-40gb", "41"), ("h100-sxm-80gb", "1e300")])
def test_memory_limit_above_the_gpu_is_refused(gpu, limit):
    rc, out, err = run_cli(["--model", "7b", "--gpus", "8", "--gpu", gpu,
                            "--memory-limit-gib", limit, "-q"])
    assert rc == 2, err
    assert err.startswith("error: memory_limit_gib:") and gpu in err and "GiB" in err


def test_memory_limit_at_the_gpu_is_accepted():
    rc, out, err = run_cli([*BASE, "--memory-limit-gib", "80", "--json"])
    assert rc == 0, err


def test_memory_limit_and_fraction_must_not_both_be_given():
    rc, out, err = run_cli([*BASE, "--memory-limit-gib", "70", "--memory-fraction", "0.5"])
    assert rc == 2 and "memory_fraction" in err.replace("-", "_"), err


def test_api_memory_limit_above_hbm():
    from costmodel.errors import InputError
    from optimizer.api import optimize

    with pytest.raises(InputError) as e:
        optimize("7b", 8, memory_limit_gib=200)
    assert e.value.field == "memory_limit_gib"
    with pytest.raises(InputError) as e:
        optimize("7b", 8, memory_limit_gib=70, memory_fraction=0.5)
    assert "memory" in e.value.field


@pytest.mark.parametrize("argv", [
    ["--model", "7b", "--gpus", str(10**12), "-q"],
    ["--model", "7b", "--gpus", str(2**20 + 8), "-q"],
    ["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", str(10**12)],
])
def test_huge_gpu_counts_answer_at_once(argv):
    t0 = time.perf_counter()
    rc, out, err = run_cli(argv)
    assert rc == 2 and "gpus" in err, err
    assert time.perf_counter() - t0 < 2


def test_huge_layer_count_answers_at_once(tmp_path):
    m = {"name": "m", "num_layers": 10**10, "hidden_size": 4096, "num_attention_heads": 32,
         "ffn_hidden_size": 11008, "vocab_size": 32000}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(m))
    t0 = time.perf_counter()
    rc, out, err = run_cli(["--model", str(tmp_path / "m.yaml"), "--gpus", "8", "-q"])
    assert rc == 2 and "num_layers" in err, err
    assert time.perf_counter() - t0 < 2


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/dev/null", "/proc/self/fd/0"])
def test_device_files_are_refused_unread(path):
    t0 = time.perf_counter()
    rc, out, err = run_cli(["--model", path, "--gpus", "8", "-q"])
    assert rc == 2 and err.startswith("error: model:") and "regular file" in err, err
    assert time.perf_counter() - t0 < 2


def test_fifo_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "m.yaml"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    for argv in (["--model", str(fifo), "--gpus", "8"], ["--model", "7b", "--cluster", str(fifo)],
                 ["evaluate", str(fifo)], ["--study", str(fifo)]):
        rc, out, err = run_cli(argv)
        assert rc == 2 and "regular file" in err, err
    assert time.perf_counter() - t0 < 2


def test_oversized_file_is_refused_before_reading(tmp_path):
    big = tmp_path / "m.yaml"
    with open(big, "wb") as f:
        f.truncate(64 * 2**30)  # sparse: 64 GiB that would exhaust memory if read
    t0 = time.perf_counter()
    rc, out, err = run_cli(["--model", str(big), "--gpus", "8", "-q"])
    assert rc == 2 and "model" in err and "MiB" in err, err
    assert time.perf_counter() - t0 < 2


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(2**40)])
@pytest.mark.parametrize("sampler", ["tpe", "exhaustive", "auto"])
def test_out_of_range_seed(seed, sampler):
    rc, out, err = run_cli([*BASE, "--sampler", sampler, "--trials", "4", "--seed", seed])
    assert rc == 2 and "seed" in err and "4294967295" in err, err


def test_study_validated_before_it_is_created(tmp_path):
    """A study file with a bad seed is refused before anything is stored; the corrected file
    then runs (not "a different definition")."""
    study = {"schema_version": 1, "name": "v", "model": "7b",
             "cluster": {"gpus": 8, "gpu": "a100-sxm-80gb"},
             "training": {"seq_length": 2048, "global_batch_size": 256},
             "search": {"sampler": "tpe", "trials": 6, "seed": -1}}
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(study))
    rc, out, err = run_cli(["--study", str(path), "-q"])
    assert rc == 2 and "seed" in err, err
    assert not (tmp_path / "v.journal").exists()
    study["search"]["seed"] = 1
    path.write_text(yaml.safe_dump(study))
    rc, out, err = run_cli(["--study", str(path), "-q"])
    assert rc == 0, err


def test_study_failing_late_does_not_poison_storage(tmp_path):
    """Failures found only while searching (e.g. no valid configuration) leave nothing that
    makes the corrected file 'a different definition'."""
    study = {"schema_version": 1, "name": "w", "model": "7b",
             "cluster": {"gpus": 8, "gpu": "a100-sxm-80gb"},
             "training": {"seq_length": 2048, "global_batch_size": 256},
             "space": {"tp": [3]}, "search": {"sampler": "tpe", "trials": 6}}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(study))
    rc, out, err = run_cli(["--study", str(path), "-q"])
    assert rc == 2, err
    study["space"] = {"tp": [1, 2]}
    path.write_text(yaml.safe_dump(study))
    rc, out, err = run_cli(["--study", str(path), "-q"])
    assert rc == 0, err


@pytest.mark.parametrize("value", [1e12, 1e6])
def test_impossible_nvlink_bandwidth(value, tmp_path):
    c = {"num_nodes": 1, "gpus_per_node": 8, "gpu": "a100-sxm-80gb",
         "intra_node": {"fabric": "nvswitch", "bandwidth_GBps": value}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(c))
    rc, out, err = run_cli(["--model", "7b", "--cluster", str(tmp_path / "c.yaml"), "-q"])
    assert rc == 2 and "bandwidth_GBps" in err, err


def test_study_name_without_storage_is_refused():
    rc, out, err = run_cli([*BASE, "--sampler", "tpe", "--trials", "4", "--study-name", "x"])
    assert rc == 2 and "study_name" in err.replace("-", "_"), err


def test_global_batch_size_2_63():
    rc, out, err = run_cli([*BASE, "--global-batch-size", str(2**63)])
    assert rc == 2 and "global_batch_size" in err.replace("-", "_"), err


def test_terminal_escapes_are_not_printed_raw(tmp_path):
    m = {"name": "\x1b[2J\x1b]0;owned\x07", "num_layers": 32, "hidden_size": 4096,
         "num_attention_heads": 32, "ffn_hidden_size": 11008, "vocab_size": 32000}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(m))
    rc, out, err = run_cli(["--model", str(tmp_path / "m.yaml"), "--gpus", "8"])
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert rc == 2


def test_file_contents_are_not_echoed(tmp_path):
    env = tmp_path / ".env"
    env.write_text("API_KEY=sk-live-0123456789abcdefghijklmnopqrstuvwxyz0123456789\n")
    for argv in (["--model", str(env), "--gpus", "8"], ["--study", str(env)],
                 ["--model", "7b", "--cluster", str(env)]):
        rc, out, err = run_cli(argv)
        assert rc == 2
        assert "sk-live" not in err and "0123456789abcdef" not in err, err


@pytest.mark.parametrize("kwargs, field", [
    ({"model": 123}, "model"), ({"gpus": "8"}, "gpus"), ({"gpus": 8.5}, "gpus"),
    ({"seed": "0"}, "seed"), ({"trials": "10"}, "trials"), ({"memory_limit_gib": "76"},
                                                            "memory_limit_gib"),
    ({"space": "tp"}, "space"), ({"training": 5}, "training"), ({"jobs": "2"}, "jobs"),
])
def test_api_wrong_types_raise_input_error(kwargs, field):
    from costmodel.errors import InputError
    from optimizer.api import optimize

    args = {"model": "7b", "gpus": 8, "sampler": "random", "trials": 4, **kwargs}
    with pytest.raises(InputError) as e:
        optimize(**args)
    assert field in e.value.field


def test_calibration_rows_claiming_one_picosecond(tmp_path):
    from test_hostile_corpus import NCCL_LOG

    log = NCCL_LOG.replace("    80.00   13.11", " 0.000001 13.11")
    (tmp_path / "log.txt").write_text(log)
    rc, out, err = run_cli(["nccl", "--collective", "allreduce", "--size", "1GiB", "--gpus", "8",
                            "--nccl-tests", str(tmp_path / "log.txt")])
    assert rc == 2 and "nccl" in err, err
