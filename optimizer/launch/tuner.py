"""NCCL's example tuner plugin CSV for the collectives one configuration issues."""

from __future__ import annotations

from costmodel.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec
from optimizer.launch.flags import job_shape
from optimizer.launch.scripts import comment as _comment


def nccl_tuner_csv(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                   config: ParallelConfig) -> str:
    """NCCL's example tuner plugin configuration (``ext-tuner/example`` in the NCCL sources,
    read from ``NCCL_TUNER_CONFIG_FILE`` when ``NCCL_TUNER_PLUGIN`` loads that plugin) for the
    collectives ``config`` issues, one line per collective with the (algorithm, protocol)
    NCCL's model picks for it (:func:`costmodel.collectives.collective_time_s`, honouring the
    config's ``nccl_algo``/``nccl_proto``).

    Columns (``#`` lines are comments)::

        collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff

    ``collective_type`` is broadcast, reduce, allgather, reducescatter or allreduce;
    ``min_bytes``/``max_bytes`` the inclusive range of NCCL's nBytes around the modelled
    size (a factor of 2 either way, split at the geometric mean between two modelled sizes of
    one communicator, so the ranges of a communicator never overlap); ``algorithm`` tree,
    ring, collnet_direct, collnet_chain, nvls, nvls_tree or pat; ``protocol`` ll, ll128 or
    simple; ``channels`` the count the model's bandwidth assumes (:func:`_channels`; never
    -1, which makes the example plugin run the collective on one channel);
    ``nNodes``/``nRanks`` the communicator; ``numPipeOps`` and ``regBuff`` -1 (any).

    Collectives (the sizes :mod:`costmodel.model` scores): TP (``tp > 1``) one all-reduce of a
    layer's activations ``b x s x h`` x activation bytes, or with sequence parallelism an
    all-gather and a reduce-scatter of that total size; DP (``dp > 1``) the gradient reduction
    in buckets (all-reduce, or reduce-scatter + parameter all-gather with ZeRO): Megatron
    ``max(40M, 1M x dp)`` elements (one bucket without ``overlap_grad_reduce``), DeepSpeed
    ``reduce_bucket_size = h x h`` (500M elements without ZeRO; its BF16_Optimizer, bf16 or fp8
    weights at ZeRO 0/1, all-reduces 500M-element buffers and then all-gathers the updated
    parameters, the stage's partition in one call as the cost model scores it: DeepSpeed's
    all_gather_into_tensor path ignores ``allgather_bucket_size``), FSDP one transformer layer
    (PyTorch DDP's 25 MiB without ZeRO), ZeRO-3 one layer; a bucket never exceeds the stage's
    gradients. Tied embeddings with ``pp > 1``: the embedding-gradient all-reduce between the
    first and last stage. Pipeline send/recv is not in NCCL's table and has no line.
    """
    import numpy as np  # lazy: launch stays importable without the cost model's dependencies

    from costmodel import collectives as coll
    from costmodel import topology
    from costmodel.calibration import FRAMEWORKS
    from costmodel.compute import ACT_BYTES, padded_vocab
    from costmodel.memory import PARAM_BYTES
    from costmodel.model import grad_wire_bytes, uses_bf16_optimizer
    from costmodel.specs import PRECISIONS

    job_shape(cluster, config)
    prec = PRECISIONS.index(config.precision)
    ea, pb = float(ACT_BYTES[prec]), float(PARAM_BYTES[prec])
    gb = float(grad_wire_bytes(FRAMEWORKS[training.framework], prec))  # as the model scores
    t, p, d = config.tp, config.pp, config.dp
    h = float(model.hidden_size)
    lay = topology.layout_topology(cluster, t, p, d)
    vocab = float(padded_vocab(model.vocab_size, np.asarray(t)))
    layer = float(model.params_per_layer) / t
    stage_layers = -(-model.num_layers // p)  # the heaviest stage holds ceil(L/p) layers
    body = stage_layers * layer
    head = 0.0 if (model.tied_embeddings and p == 1) else vocab * h
    first = body + vocab * h / t + (head / t if p == 1 else 0.0)
    psi = max(first, body + head / t if p > 1 else 0.0)  # the largest stage's parameters
    calls: list[tuple[str, str, float, int, int]] = []  # (comment, collective, bytes, n, nodes)
    if t > 1:
        act = config.micro_batch_size * training.seq_length * h * ea
        what = f"a layer's activations (b*s*h*{ea:g} B)"
        if config.sequence_parallel:
            calls.append((f"TP all-gather of {what}", "allgather", act, t, lay.tp.n_nodes))
            calls.append((f"TP reduce-scatter of {what}", "reducescatter", act, t,
                          lay.tp.n_nodes))
        else:
            calls.append((f"TP all-reduce of {what}", "allreduce", act, t, lay.tp.n_nodes))
    if d > 1:
        z, fw = config.zero_stage, training.framework
        bf16_opt = bool(uses_bf16_optimizer(FRAMEWORKS[fw], prec, z))
        if z >= 3 or (fw in ("fsdp", "torchtitan") and z >= 1):
            grad_el = param_el = layer
            src = "one layer (FSDP unit)"
        elif bf16_opt:
            grad_el, param_el = 5e8, psi
            src = "DeepSpeed BF16_Optimizer"
        elif fw == "deepspeed":
            grad_el = param_el = h * h if z >= 1 else 5e8
            src = "DeepSpeed reduce_bucket_size" if z >= 1 else "DeepSpeed allreduce bucket"
        elif fw in ("fsdp", "torchtitan"):
            grad_el = param_el = 25 * 2**20 / gb
            src = "PyTorch DDP bucket_cap_mb=25"
        else:
            grad_el = param_el = max(40e6, 1e6 * d) if training.overlap_grad_reduce else psi
            src = "Megatron DDP bucket" if training.overlap_grad_reduce else "one bucket"
        grad_el, param_el = min(grad_el, psi), min(param_el, psi)
        if z == 0 or bf16_opt:
            calls.append((f"DP gradient all-reduce, {src}", "allreduce", grad_el * gb, d,
                          lay.dp.n_nodes))
        if bf16_opt:
            calls.append((f"DP parameter all-gather, {src}", "allgather", param_el * pb, d,
                          lay.dp.n_nodes))
        elif z > 0:
            calls.append((f"DP gradient reduce-scatter, {src}", "reducescatter", grad_el * gb, d,
                          lay.dp.n_nodes))
            calls.append((f"DP parameter all-gather, {src}", "allgather", param_el * pb, d,
                          lay.dp.n_nodes))
    if model.tied_embeddings and p > 1:
        calls.append(("embedding-gradient all-reduce, first and last stage", "allreduce",
                      vocab * h / t * gb, 2, 2 if lay.pp.crosses_nodes else 1))

    system = coll.nccl_system(cluster)
    names = {"collnetdirect": "collnet_direct", "collnetchain": "collnet_chain",
             "nvlstree": "nvls_tree"}
    lines = [
        _comment(f"NCCL tuner plugin CSV (ext-tuner/example) written by paraplan for tp={t} "
                f"pp={p} dp={d} on {cluster.name}"),
        "# use: NCCL_TUNER_PLUGIN=<path>/libnccl-tuner-example.so "
        "NCCL_TUNER_CONFIG_FILE=<this file>",
        f"# picks from NCCL's {coll.NCCL_VERSION} cost model (NCCL_ALGO={config.nccl_algo}, "
        f"NCCL_PROTO={config.nccl_proto}); sizes are NCCL's nBytes",
        "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,"
        "numPipeOps,regBuff",
    ]
    rows: list[tuple[str, str, int, int, int, str, str, int, float]] = []
    seen: set[tuple[str, int, int, int]] = set()
    for comment, name, nbytes, n, nn in calls:
        size = int(round(nbytes))
        if size < 1 or (name, size, n, nn) in seen:
            continue
        seen.add((name, size, n, nn))
        r = coll.collective_time_s(system, name, float(size), n, nn, config.nccl_algo,
                                   config.nccl_proto)
        algo = str(r.algo_names()[()])
        proto = str(r.proto_names()[()])
        rows.append((comment, name, size, n, nn, names.get(algo, algo), proto,
                     _channels(system, algo, n, nn), float(r.time_s) * 1e6))
    for comment, name, lo, hi, n, nn, algo, proto, ch, us, size in _ranges(rows):
        # the example plugin reads 256-byte lines (MAX_LINE_LENGTH): keep comments short
        lines.append(_comment(f"{comment}: {size} B, predicted {us:.1f} us with {ch} "
                              "channels")[:254])
        lines.append(f"{name},{lo},{hi},{algo},{proto},{ch},{nn},{n},-1,-1")
    return "\n".join(lines) + "\n"


# A matched row covers its message size within this factor either way (bucket remainders,
# padding and the last bucket of a stage differ from the modelled size), split at the
# geometric mean where two modelled sizes of the same communicator are closer.
_RANGE_FACTOR = 2.0


def _channels(system, algo: str, n: int, nn: int) -> int:
    """Channels NCCL runs the collective on in the model: the launched collective channels
    (comm->nChannels, 2 x the ring graph) for Ring/Tree/PAT, the NVLS or CollNet graph's for
    those. Always explicit: the example plugin sets 1 channel unless a row names a count."""
    ppn = max(1, n // max(1, nn))
    pattern = {"nvls": "nvls", "nvlstree": "nvls", "collnetdirect": "collnet",
               "collnetchain": "collnet"}.get(algo)
    if pattern is not None:
        g = system.graph(pattern, ppn, nn).n_channels
        if g > 0:
            return int(g)
    return max(1, int(system.coll_channels(ppn, nn)))


def _ranges(rows):
    """[lo, hi] byte ranges per row: disjoint within a (collective, ranks, nodes) group, each
    around its size; sorted so that the plugin's first match is the nearest modelled size."""
    out = []
    groups: dict[tuple[str, int, int], list] = {}
    for row in rows:
        groups.setdefault((row[1], row[3], row[4]), []).append(row)
    for (_, _, _), group in groups.items():
        group.sort(key=lambda r: r[2])
        sizes = [r[2] for r in group]
        for i, (comment, name, size, n, nn, algo, proto, ch, us) in enumerate(group):
            lo = max(0, int(size / _RANGE_FACTOR))
            hi = int(size * _RANGE_FACTOR)
            if i > 0:
                lo = max(lo, int((sizes[i - 1] * size) ** 0.5) + 1)
            if i + 1 < len(group):
                hi = min(hi, int((sizes[i + 1] * size) ** 0.5))
            out.append((comment, name, lo, hi, n, nn, algo, proto, ch, us, size))
    return out
