"""Loading the real clients for the real-client test layer (tests/clients/).

Nothing is installed here: a client that is not importable makes its tests skip with the
reason. Megatron-LM has no PyPI package with ``megatron/training``; its source tree is found
through ``PARAPLAN_MEGATRON_TREE`` (a directory holding ``megatron/training``) or extracted
once from ``../shared/clients/megatron-lm-core_v0.16.1.tar.gz`` (beside the repository) into
a cache directory (``PARAPLAN_CLIENT_CACHE``, default ``~/.cache/paraplan-clients``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import tarfile
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_CLIENTS = REPO.parent / "shared" / "clients"
MEGATRON_TARBALL = SHARED_CLIENTS / "megatron-lm-core_v0.16.1.tar.gz"
MEGATRON_TAG = "core_v0.16.1"
# The Transformer Engine version validate_args is told it runs with (TE is CUDA-only).
TE_VERSION = "2.10.0"


def missing(reason: str) -> None:
    """Skip for a missing client, or fail where CI requires the clients
    (``PARAPLAN_REQUIRE_CLIENTS=1``, set by ``.ci/run``)."""
    if os.environ.get("PARAPLAN_REQUIRE_CLIENTS") == "1":
        pytest.fail(f"PARAPLAN_REQUIRE_CLIENTS=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require(module: str) -> Any:
    """Import ``module`` or skip the test, naming what is missing."""
    try:
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - an import of a client may fail in many ways
        missing(f"client {module!r} not importable ({type(e).__name__}: {e}); "
                "install the 'clients' extra (see docs/launch-targets.md)")


def _cache_dir() -> Path:
    return Path(os.environ.get("PARAPLAN_CLIENT_CACHE",
                               Path.home() / ".cache" / "paraplan-clients"))


def megatron_tree() -> Path | None:
    """A Megatron-LM source tree (the directory that holds ``megatron/training``)."""
    env = os.environ.get("PARAPLAN_MEGATRON_TREE")
    if env:
        p = Path(env)
        return p if (p / "megatron" / "training" / "arguments.py").is_file() else None
    if not MEGATRON_TARBALL.is_file():
        return None
    dest = _cache_dir() / f"megatron-lm-{MEGATRON_TAG}"
    done = dest / ".extracted"
    if not done.is_file():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        with tarfile.open(MEGATRON_TARBALL) as tf:
            tf.extractall(tmp, filter="data")
        (tmp / ".extracted").write_text(MEGATRON_TAG)
        with contextlib.suppress(OSError):
            tmp.rename(dest)
    roots = [p.parent.parent for p in dest.glob("*/megatron/training")]
    roots += [dest] if (dest / "megatron" / "training").is_dir() else []
    return roots[0] if roots else None


class _Device:
    """Stands in for ``torch.cuda.get_device_properties`` on a CPU-only machine."""

    def __init__(self, cc: int) -> None:
        self.major, self.minor = divmod(int(cc), 10)
        self.name = f"sm{cc}"
        self.total_memory = 80 * 2**30


@contextlib.contextmanager
def gpu_facts(cc: int) -> Iterator[None]:
    """The GPU facts the clients read (CUDA present, compute capability), for a GPU of
    compute capability ``cc`` (e.g. 90): Megatron's validate_args and torchtitan's Float8
    converter (SM89+) ask for them."""
    import torch

    dev = _Device(cc)
    saved = {n: getattr(torch.cuda, n) for n in
             ("get_device_properties", "get_device_capability", "device_count",
              "is_available")}
    torch.cuda.get_device_properties = lambda *a, **k: dev
    torch.cuda.get_device_capability = lambda *a, **k: (dev.major, dev.minor)
    torch.cuda.device_count = lambda: 8
    torch.cuda.is_available = lambda: True
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.cuda, n, f)


@contextlib.contextmanager
def environment(env: Mapping[str, str], argv: Sequence[str]) -> Iterator[None]:
    saved_env, saved_argv = dict(os.environ), sys.argv
    os.environ.update(env)
    sys.argv = list(argv)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv


_MEGATRON: dict[str, Any] = {}


def megatron() -> Any:
    """``megatron.training.arguments`` of the source tree, or skip.

    The archive ships ``megatron/training``, ``core`` and ``legacy`` but not ``megatron/rl``,
    which ``megatron/training/training.py`` imports at module level (for RL runs only); an
    empty stand-in package takes its place. Nothing of the argument validation is replaced.
    """
    if "arguments" in _MEGATRON:
        return _MEGATRON["arguments"]
    require("torch")
    tree = megatron_tree()
    if tree is None:
        missing(f"no Megatron-LM tree: set PARAPLAN_MEGATRON_TREE or provide "
                f"{MEGATRON_TARBALL}")
    if "megatron.rl" not in sys.modules:
        rl = types.ModuleType("megatron.rl")
        rl.__path__ = []
        pu = types.ModuleType("megatron.rl.parallel_utils")

        def build_inference_pg_collection(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError("megatron.rl is not in the test archive")

        pu.build_inference_pg_collection = build_inference_pg_collection
        sys.modules["megatron.rl"] = rl
        sys.modules["megatron.rl.parallel_utils"] = pu
    sys.path.insert(0, str(tree))
    import warnings

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            arguments = importlib.import_module("megatron.training.arguments")
            core_utils = importlib.import_module("megatron.core.utils")
        except Exception as e:  # noqa: BLE001
            missing(f"Megatron-LM tree at {tree} does not import: {type(e).__name__}: {e}")
    from packaging.version import Version

    core_utils._te_version = Version(TE_VERSION)  # Transformer Engine is CUDA-only
    # Transformer Engine's fused RoPE kernel, which TransformerConfig asks for by default
    # (apply_rope_fusion): present wherever TE is; a placeholder that is never called here.
    rope_utils = importlib.import_module("megatron.core.models.common.embeddings.rope_utils")
    if rope_utils.fused_apply_rotary_pos_emb is None:
        def _te_kernel(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError("Transformer Engine stand-in: not callable on a CPU")

        rope_utils.fused_apply_rotary_pos_emb = _te_kernel
    _MEGATRON["arguments"] = arguments
    _MEGATRON["tree"] = tree
    return arguments


def megatron_validate(argv: Sequence[str], env: Mapping[str, str], world_size: int,
                      compute_capability: int) -> tuple[Any, Any]:
    """Run ``parse_args`` + ``validate_args`` + ``core_transformer_config_from_args`` of the
    tree on ``argv`` with the bundle's environment, as rank 0 of ``world_size`` ranks on a
    GPU of ``compute_capability``. Returns (args, TransformerConfig)."""
    arguments = megatron()
    import warnings

    full_env = {"WORLD_SIZE": str(world_size), "RANK": "0", "LOCAL_RANK": "0", **env}
    if "CUDA_DEVICE_MAX_CONNECTIONS" not in env:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    out = io.StringIO()
    with environment(full_env, ["pretrain_gpt.py", *argv]), gpu_facts(compute_capability), \
            warnings.catch_warnings(), contextlib.redirect_stdout(out):
        warnings.simplefilter("ignore")
        args = arguments.parse_args()
        arguments.validate_args(args)
        cfg = arguments.core_transformer_config_from_args(args)
    return args, cfg


NCCL_TUNER_DIR = SHARED_CLIENTS / "nccl-tuner-example"


def nccl_tuner_plugin() -> Path:
    """NCCL's example tuner plugin compiled with ``cc`` (cached), or skip."""
    import shutil
    import subprocess

    src = NCCL_TUNER_DIR / "plugin.c"
    if not src.is_file():
        missing(f"no NCCL example tuner plugin at {NCCL_TUNER_DIR}")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        missing("no C compiler (cc) to build NCCL's example tuner plugin")
    out = _cache_dir() / "nccl-tuner-example" / "libnccl-tuner-example.so"
    if not out.is_file() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-I", str(NCCL_TUNER_DIR / "nccl"),
                        "-o", str(tmp), str(src)], check=True, capture_output=True)
        tmp.replace(out)
    return out
