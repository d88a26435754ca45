"""`optimize models | gpus | clusters` list the catalogs (table and --json)."""

import json

from optimizer.cli import main


def test_gpus_listing_shows_memory_in_gib(capsys):
    assert main(["gpus", "--json"]) == 0
    rows = {r["gpu"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["a100-sxm-80gb"]["HBM GiB"] == "80.0"  # nvidia-smi 81920 MiB
    assert rows["h100-sxm-80gb"]["fp8 TFLOP/s"] == "1979"
    assert rows["a100-sxm-80gb"]["fp8 TFLOP/s"] == "-"


def test_models_and_clusters_listings(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "llama-65b" in out and "65b" in out and "gpt3-175b" in out
    assert main(["clusters", "--json"]) == 0
    names = {r["cluster"] for r in json.loads(capsys.readouterr().out)}
    assert {"dgx-a100-80gb", "dgx-h100", "pcie-roce-a100"} <= names
