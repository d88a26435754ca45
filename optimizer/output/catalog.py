"""Rows for `optimize models | gpus | clusters`."""

from __future__ import annotations


def listing(kind: str) -> tuple[tuple[str, ...], list[tuple]]:
    if kind == "models":
        from costmodel.models_catalog import list_models

        rows = [(name, ", ".join(aliases), f"{params / 1e9:.2f}B")
                for name, aliases, params in list_models()]
        return ("name", "aliases", "params"), rows
    if kind == "gpus":
        from costmodel.hardware import get_gpu, list_gpus

        rows = []
        for name in list_gpus():
            g = get_gpu(name)
            pk = g.peak_flops_per_s
            rows.append((name, f"{pk.get('bf16', pk.get('fp16', 0)) / 1e12:.0f}",
                         f"{pk['fp8'] / 1e12:.0f}" if "fp8" in pk else "-",
                         f"{g.memory_bytes / 2**30:.1f}", f"{g.memory_bandwidth_bytes_per_s / 1e9:.0f}",
                         f"{g.nvlink_bandwidth_bytes_per_s / 1e9:.0f}"))
        return ("gpu", "bf16/fp16 TFLOP/s", "fp8 TFLOP/s", "HBM GiB", "HBM GB/s",
                "NVLink GB/s/dir"), rows
    from costmodel.hardware import get_cluster_preset, list_cluster_presets

    rows = []
    for name in list_cluster_presets():
        c = get_cluster_preset(name, 1)
        rows.append((name, c.gpu.name, c.gpus_per_node, c.intra_node.fabric,
                     f"{c.intra_node.bandwidth_bytes_per_s / 1e9:.0f}",
                     f"{c.inter_node.nics_per_node}x{c.inter_node.nic_bandwidth_bytes_per_s * 8 / 1e9:.0f} Gb/s {c.inter_node.fabric}"))
    return ("cluster", "gpu", "gpus/node", "intra", "GB/s/GPU/dir", "inter-node"), rows
