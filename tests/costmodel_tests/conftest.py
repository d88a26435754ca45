"""Fixtures shared by the cost-model tests."""

from __future__ import annotations

import pytest

from optimizer.api import resolve_problem


@pytest.fixture(scope="module")
def llama70b():
    """Llama 2 70B on 64 H100, seq 4096, global batch 128 (the memory-lever problems)."""
    return resolve_problem(model="70b", gpus=64, gpu="h100-sxm-80gb", seq_length=4096,
                           global_batch_size=128)
