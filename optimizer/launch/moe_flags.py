"""Megatron-LM flags of a Mixture-of-Experts / MLA model and its expert grid.

Names checked against Megatron-LM core_v0.16.1 ``megatron/training/arguments.py``
(``_add_moe_args``: ``--num-experts``, ``--moe-layer-freq``; ``_add_mla_args``: ``--q-lora-rank``
... ``--v-head-dim``) and the ``TransformerConfig`` / ``ModelParallelConfig`` fields that
``ArgumentGroupFactory`` turns into ``--field-name`` flags (``--moe-router-topk``,
``--expert-model-parallel-size``, ``--expert-tensor-parallel-size``, ``--moe-grouped-gemm``,
``--moe-token-dispatcher-type``, ``--moe-ffn-hidden-size``,
``--moe-shared-expert-intermediate-size``, ``--moe-shared-expert-gate``,
``--moe-router-score-function``, ``--multi-latent-attention``);
modern-training.md sections 2.5 and 2.6.
"""

from __future__ import annotations

from costmodel.moe_overlap import applies_to, unmet
from costmodel.specs import ClusterSpec, ModelSpec, ParallelConfig, TrainingSpec


def _dispatcher(config: ParallelConfig, training: TrainingSpec | None,
                cluster: ClusterSpec | None, padded: bool) -> list[str]:
    """Megatron's token dispatcher as scored: ``allgather`` without EP (``alltoall`` when
    padded to capacity), else the spec's
    ``moe_dispatcher`` (``alltoall``, or ``flex`` with its backend: HybridEP inside a
    multi-host NVLink domain, the only flex backend with multi-node NVLink, and wherever the
    experts are padded to capacity, which core_v0.16.1 refuses with DeepEP; DeepEP, Megatron's
    default backend, elsewhere; modern-training.md section 2)."""
    if config.ep <= 1 and not padded:
        return ["--moe-token-dispatcher-type", "allgather"]
    if config.ep <= 1:
        # padded to capacity: the alltoall dispatcher sets the padded counts on the host (no
        # sync, as priced); the allgather one copies its counts to the host whatever the
        # padding (core_v0.16.1 token_dispatcher.py)
        return ["--moe-token-dispatcher-type", "alltoall"]
    if training is None or training.moe_dispatcher != "flex":
        return ["--moe-token-dispatcher-type", "alltoall"]
    mnnvl = cluster is not None and cluster.domain_gpus > cluster.gpus_per_node
    return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend",
            "hybridep" if mnnvl or padded else "deepep"]


def megatron_moe_args(model: ModelSpec, config: ParallelConfig,
                      training: TrainingSpec | None = None,
                      cluster: ClusterSpec | None = None) -> list[str]:
    """The MoE and MLA tokens (none for a dense model with MHA/GQA). The expert-TP size is
    always written: Megatron's default is TP, paraplan's 1. With ``training.moe_ep_overlap``,
    ``--overlap-moe-expert-parallel-comm`` where the cost model applies it
    (:func:`costmodel.moe_overlap.applies_to`: where core_v0.16.1's ``TransformerConfig``
    accepts it); elsewhere nothing (:func:`megatron_moe_notes` says why)."""
    a: list[str] = []
    m = model.moe
    if m is not None:
        a += ["--num-experts", str(m.num_experts),
              "--moe-router-topk", str(m.top_k),
              "--moe-ffn-hidden-size", str(m.expert_ffn_hidden_size),
              "--expert-model-parallel-size", str(config.ep),
              "--expert-tensor-parallel-size", str(config.etp),
              "--moe-grouped-gemm",
              *_dispatcher(config, training, cluster, m.capacity_factor is not None)]
        freq = m.megatron_layer_freq(model.num_layers)
        if freq != 1:
            a += ["--moe-layer-freq", str(freq)]
        if m.shared_experts:
            a += ["--moe-shared-expert-intermediate-size", str(m.shared_ffn_hidden_size)]
            if m.shared_expert_gate:
                a.append("--moe-shared-expert-gate")
        if m.router != "softmax":
            a += ["--moe-router-score-function", m.router]
        if m.capacity_factor is not None:
            # the spec's capacity factor is the padded variant the cost model prices (no
            # dispatcher sync: costmodel.moe.moe_host_stall_s)
            a += ["--moe-expert-capacity-factor", str(m.capacity_factor),
                  "--moe-pad-expert-input-to-capacity"]
        if training is not None and applies_to(training, config):
            # core_v0.16.1 ModelParallelConfig.overlap_moe_expert_parallel_comm
            a.append("--overlap-moe-expert-parallel-comm")
        # MTP modules (--mtp-num-layers) are not scored, so not emitted: the flags train the
        # model that was scored
    la = model.mla
    if la is not None:
        a += ["--multi-latent-attention", "--kv-lora-rank", str(la.kv_lora_rank),
              "--qk-head-dim", str(la.qk_nope_head_dim),
              "--qk-pos-emb-head-dim", str(la.qk_rope_head_dim),
              "--v-head-dim", str(la.v_head_dim)]
        if la.q_lora_rank is not None:
            a += ["--q-lora-rank", str(la.q_lora_rank)]
    return a


def megatron_moe_notes(model: ModelSpec, config: ParallelConfig,
                       training: TrainingSpec | None) -> list[str]:
    """Launch warnings of the MoE flags: the EP overlap asked for (``training.moe_ep_overlap``)
    where Megatron-Core does not run it (not emitted, and not scored)."""
    if model.moe is None or training is None:
        return []
    need = unmet(training, config)
    if not need:
        return []
    return ["moe_ep_overlap: --overlap-moe-expert-parallel-comm is not emitted (and not "
            "scored) for this configuration: Megatron-Core core_v0.16.1 needs "
            + "; ".join(need)]


def torchtitan_moe_args(config: ParallelConfig) -> list[str]:
    """torchtitan 0.3's expert-parallel degree (``ParallelismConfig.expert_parallel_degree``,
    ``torchtitan/config/configs.py``; 1 = off). torchtitan 0.3 has no expert-TP degree: its
    sparse mesh is efsdp x ep over the dense dp_shard x cp x tp ranks."""
    return ["--parallelism.expert_parallel_degree", str(config.ep)] if config.ep > 1 else []


def torchtitan_moe_refusal(model: ModelSpec, config: ParallelConfig, shard: int) -> list[str]:
    """What torchtitan 0.3 cannot express of a scored MoE layout (``shard``: the
    data_parallel_shard_degree the launch args write)."""
    r: list[str] = []
    if model.moe is None:
        return r
    r.append(f"torchtitan: the emitted config builds torchtitan's dense Llama 3 model, not "
             f"the {model.moe.num_experts}-expert MoE scored (torchtitan 0.3's deepseek_v3 / "
             "qwen3 / gpt_oss model modules are not generated)")
    if config.etp > 1:
        r.append(f"torchtitan: etp={config.etp} has no torchtitan 0.3 field (no expert tensor "
                 "parallel degree; experts are not TP-split under EP)")
    dense = shard * config.cp * config.tp
    if config.ep > 1 and dense % config.ep:
        r.append(f"torchtitan: expert_parallel_degree {config.ep} must divide "
                 f"dp_shard x cp x tp = {dense} (torchtitan's mesh: dp_shard*cp*tp == "
                 "efsdp*ep)")
    return r


__all__ = ["megatron_moe_args", "megatron_moe_notes", "torchtitan_moe_args", "torchtitan_moe_refusal"]
