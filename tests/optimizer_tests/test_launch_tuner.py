"""NCCL's example tuner plugin CSV for a run file (optimizer.launch.tuner,
``optimize nccl --tuner-csv RUN``): the collectives and sizes the cost model scores."""

from __future__ import annotations

from conftest import DATA, run_cli

from costmodel import collectives as coll
from costmodel.loaders import load_cluster

_CSV_ALGOS = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
_CSV_COLLS = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}


def _csv_rows(text: str) -> list[list[str]]:
    rows = [line.split(",") for line in text.splitlines() if line and not line.startswith("#")]
    for r in rows:
        assert len(r) == 10, r
        assert r[0] in _CSV_COLLS and r[3] in _CSV_ALGOS and r[4] in {"ll", "ll128", "simple"}
        # channels explicit (the example plugin runs a row's collective on ONE channel for -1)
        assert int(r[1]) <= int(r[2]) and int(r[5]) >= 1 and r[8] == r[9] == "-1"
    return rows


def _covering(rows, coll_name, size, nodes, ranks):
    """The rows whose range holds ``size`` for that collective and communicator."""
    return [r for r in rows if r[0] == coll_name and int(r[1]) <= size <= int(r[2])
            and (int(r[6]), int(r[7])) == (nodes, ranks)]


def _sizes(rows, expected):
    """The subset of expected (collective, size, nodes, ranks) each covered by exactly one row,
    with every row covering one of them."""
    got = {e for e in expected if len(_covering(rows, *e)) == 1}
    assert len(rows) == len(expected)
    return got


def test_tuner_csv_llama65b_run():
    rc, out, err = run_cli(["nccl", "--tuner-csv", str(DATA / "run-llama65b.yaml")])
    assert rc == 0, err
    assert ("# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,"
            "numPipeOps,regBuff") in out
    rows = _csv_rows(out)
    # tp=4 pp=4 dp=1, no SP: one TP all-reduce of b*s*h*2 = 1 x 2048 x 8192 x 2 = 33554432 B
    # on 4 ranks of one node; dp=1: no DP line
    assert len(rows) == 1
    r = rows[0]
    assert r[0] == "allreduce" and r[6:8] == ["1", "4"]
    assert int(r[1]) <= 33554432 <= int(r[2])  # a range around the modelled size
    assert (int(r[1]), int(r[2])) == (33554432 // 2, 33554432 * 2)
    system = coll.nccl_system(load_cluster(DATA / "cluster-2x-dgx-a100.yaml"))
    pick = coll.collective_time_s(system, "allreduce", 33554432, 4, 1)
    assert (r[3], r[4]) == (str(pick.algo_names()[()]), str(pick.proto_names()[()]))


def test_tuner_csv_sp_zero1_multinode(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("model: llama-7b\ncluster: dgx-h100\n"
                   "training: {seq_length: 4096, global_batch_size: 512}\n"
                   "parallel: {tp: 8, pp: 2, dp: 4, micro_batch_size: 1, "
                   "sequence_parallel: true, zero_stage: 1}\n")
    from optimizer.launch import nccl_tuner_csv

    rc, out, _ = run_cli(["nccl", "--tuner-csv", str(run)])
    assert rc == 0
    rows = _csv_rows(out)
    expected = {("allgather", 33554432, 1, 8), ("reducescatter", 33554432, 1, 8),
                ("reducescatter", 160_000_000, 4, 4), ("allgather", 80_000_000, 4, 4)}
    got = _sizes(rows, expected)
    # SP: all-gather + reduce-scatter of 1 x 4096 x 4096 x 2 = 33554432 B on 8 ranks, 1 node;
    # ZeRO-1 DP over 4 nodes: Megatron bucket max(40M, 1M x 4) = 40M elements,
    # x 4 B fp32 grads = 160e6 B reduce-scatter, x 2 B bf16 params = 80e6 B all-gather
    assert got == expected
    from costmodel.loaders import load_run

    r = load_run(run)
    assert nccl_tuner_csv(r.model, r.cluster, r.training, r.parallel) == out


def test_tuner_csv_deepspeed_bf16_optimizer(tmp_path):
    # DeepSpeed with bf16 weights at ZeRO 0/1 runs BF16_Optimizer: it all-reduces the 16-bit
    # gradients in 500M-element buffers and all-gathers the updated bf16 parameters, as the
    # cost model scores it (model.uses_bf16_optimizer); fp16 keeps the engine's plain paths
    from optimizer.launch import nccl_tuner_csv

    def rows(precision, zero):
        run = tmp_path / f"run-{precision}-{zero}.yaml"
        run.write_text("model: llama-7b\ncluster: dgx-h100\n"
                       "training: {seq_length: 4096, global_batch_size: 512, "
                       "framework: deepspeed}\n"
                       f"parallel: {{tp: 8, pp: 1, dp: 4, micro_batch_size: 1, "
                       f"precision: {precision}, zero_stage: {zero}}}\n")
        rc, out, err = run_cli(["nccl", "--tuner-csv", str(run)])
        assert rc == 0, err
        from costmodel.loaders import load_run

        r = load_run(run)
        assert nccl_tuner_csv(r.model, r.cluster, r.training, r.parallel) == out
        got = [x for x in _csv_rows(out) if int(x[7]) == 4]
        return {(x[0], int(x[2]) // 2) for x in got}  # one row per collective: [s/2, 2s]

    # llama-7b on tp 8: 32 layers x 202,383,360 / 8 = 809,533,440 layer parameters, plus the
    # untied embedding and output layer, each 32768 (vocabulary padded to 128 x 8) x 4096 / 8:
    # 843,087,872 bf16 parameters gathered (2 B each); gradients in 500M-element buffers
    for zero in (0, 1):
        assert rows("bf16", zero) == {("allreduce", 1_000_000_000),
                                      ("allgather", 2 * 843_087_872)}
    assert {c for c, _ in rows("fp16", 0)} == {"allreduce"}
    assert {c for c, _ in rows("fp16", 1)} == {"reducescatter", "allgather"}


def test_tuner_csv_forced_invalid_pair(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("model: llama-7b\ncluster: dgx-h100\n"
                   "parallel: {tp: 8, pp: 1, dp: 1, sequence_parallel: true, nccl_algo: tree}\n")
    rc, _, err = run_cli(["nccl", "--tuner-csv", str(run)])
    # SP issues all-gathers, which Tree cannot run (ecosystem.md §2.5): NCCL >= 2.24 fails
    assert rc == 2 and err.startswith("error: parallel.nccl_algo:") and "allgather" in err
