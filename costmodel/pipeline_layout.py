"""Megatron-Core's explicit pipeline layout (``--pipeline-model-parallel-layout``).

The grammar is Megatron-Core's (core_v0.16.1,
``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
``PipelineParallelLayerLayout.parse_str_to_list``): commas are cosmetic; ``(...)*n`` repeats
the bracketed text n times, then ``x*n`` repeats the character before it; ``|`` separates the
virtual stages; ``E`` is the embedding, ``t`` a decoder (transformer) layer, ``m`` an MTP
module, ``L`` the loss (with the output layer and the final norm). ``Et*4|(t*4|)*14tmL`` is 16
stages: E + 4 layers, 14 stages of 4, then 1 layer, the MTP module and the loss.

Virtual stage ``s`` runs on pipeline rank ``s mod pp`` as that rank's model chunk
``s // pp`` (``PipelineParallelLayerLayout.__init__``: ``layout[vpp_rank * pp + pp_rank]``),
so the layout fixes pp x vpp (Megatron derives vpp = stages / pp; arguments.py). Validity is
Megatron's ``validate_layer_layout``: the embedding first and the loss last, each exactly
once; the decoder layers equal to the model's; MTP modules after every decoder layer and in a
rank's last chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby

import numpy as np

from costmodel.errors import InputError

_CHARS = {"E": "embedding", "L": "loss", "t": "decoder layer", "m": "MTP module"}
_FIELD = "training.pipeline_layout"


def parse_layout(text: str) -> tuple[str, ...]:
    """The virtual stages of a layout string, one string of E/t/m/L characters each (Megatron's
    ``parse_str_to_list``); InputError on a character Megatron does not know, or on anything
    but a non-empty string (checked before the cache, which needs a hashable key)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(_FIELD, f"must be a non-empty layout string, got {text!r}",
                         "e.g. 'Et*4|(t*4|)*14tmL' (Megatron's --pipeline-model-parallel-layout)")
    return _parse_layout(text)


MAX_LAYOUT_CHARS = 100_000  # expanded layout characters (layers + E/m/L/|): far above any
#                            model, and a bound on what a hostile repeat count can allocate


def _expand(pattern: str, s: str, text: str) -> str:
    """One of Megatron's two repetition passes (``(...)*n``, then ``x*n``), refusing before it
    allocates an expansion over MAX_LAYOUT_CHARS."""
    size = len(s)
    for m in re.finditer(pattern, s):
        n = int(m.group(2)) if len(m.group(2)) <= 6 else MAX_LAYOUT_CHARS + 1
        size += len(m.group(1)) * n - len(m.group(0))
        if size > MAX_LAYOUT_CHARS:
            raise InputError(_FIELD, f"{text[:80]!r} expands to more than "
                             f"{MAX_LAYOUT_CHARS:,} characters", "check the repeat counts")
    return re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), s)


@lru_cache(maxsize=256)
def _parse_layout(text: str) -> tuple[str, ...]:
    s = text.replace(",", "").replace(" ", "")
    s = _expand(r"\(([^)]+)\)\*(\d+)", s, text)
    s = _expand(r"(.)\*(\d+)", s, text)
    stages = tuple(s.split("|"))
    for st in stages:
        for ch in st:
            if ch not in _CHARS:
                raise InputError(_FIELD, f"{text!r}: unknown layer character {ch!r} in stage "
                                 f"{st!r}", "known characters: E (embedding), t (decoder "
                                 "layer), m (MTP module), L (loss); | separates stages")
    return stages


@dataclass(frozen=True)
class RankLayout:
    """What each pipeline rank holds under a layout at one pp (all its chunks together)."""

    pp: int
    vpp: int
    layers: tuple[int, ...]  # decoder layers per rank
    mtp: tuple[int, ...]  # MTP modules per rank
    embedding_rank: int
    loss_rank: int


def check_layout(text: str, num_layers: int, mtp_layers: int = 0) -> tuple[str, ...]:
    """The layout's stages after Megatron's ``validate_layer_layout`` checks against a model of
    ``num_layers`` decoder layers and ``mtp_layers`` MTP modules (a layout without ``m`` is
    accepted for a model with MTP: paraplan neither prices nor launches the MTP module)."""
    stages = parse_layout(text)
    flat = "".join(stages)
    if flat.count("E") != 1 or flat[:1] != "E":
        raise InputError(_FIELD, f"{text!r}: the embedding E must come first, exactly once "
                         f"(found {flat.count('E')})")
    if flat.count("L") != 1 or flat[-1:] != "L":
        raise InputError(_FIELD, f"{text!r}: the loss L must come last, exactly once "
                         f"(found {flat.count('L')})")
    n = flat.count("t")
    if n != num_layers:
        raise InputError(_FIELD, f"{text!r} holds {n} decoder layers; the model has "
                         f"{num_layers}", "the t's of all stages must add up to num_layers")
    m = flat.count("m")
    if m and m != mtp_layers:
        raise InputError(_FIELD, f"{text!r} holds {m} MTP modules; the model has {mtp_layers}")
    if m and "t" in flat[flat.index("m"):]:
        raise InputError(_FIELD, f"{text!r}: decoder layers must come before the MTP modules")
    if m and sum(1 for st in stages if "m" in st) > 1:
        raise InputError(_FIELD, f"{text!r}: all MTP modules must be in one virtual stage "
                         "(Megatron's validate_layer_layout)")
    return stages


def fits_ranks(text: str | None, pp: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``fits`` and, per pp of the batch, the rank placement Megatron accepts (an MTP module
    in its rank's last chunk: :func:`rank_layout`), so one pp's refusal marks those
    configurations invalid instead of failing the batch."""
    ok = fits(text, pp, v)
    if text is None:
        return ok
    pp = np.asarray(pp)
    for p in np.unique(pp[ok]):
        try:
            rank_layout(text, int(p))
        except InputError:
            ok = ok & (pp != p)
    return ok


def rank_layout(text: str, pp: int) -> RankLayout:
    """Per-rank layers, MTP modules and the embedding's and loss's ranks of a layout on ``pp``
    ranks; InputError where pp does not divide the stages or an MTP module sits outside its
    rank's last chunk (Megatron's restriction)."""
    stages = parse_layout(text)
    if pp < 1 or len(stages) % pp:
        raise InputError(_FIELD, f"{text!r} has {len(stages)} stages, not a multiple of "
                         f"pp={pp}", "the layout fixes pp x vpp = its number of stages")
    vpp = len(stages) // pp
    layers, mtp = [0] * pp, [0] * pp
    emb = loss = 0
    for s, st in enumerate(stages):
        r, chunk = s % pp, s // pp
        layers[r] += st.count("t")
        mtp[r] += st.count("m")
        if "m" in st and chunk != vpp - 1:
            raise InputError(_FIELD, f"{text!r}: an MTP module must sit in its rank's last "
                             f"chunk (Megatron), found in chunk {chunk} of rank {r}")
        if "E" in st:
            emb = r
        if "L" in st:
            loss = r
    return RankLayout(pp, vpp, tuple(layers), tuple(mtp), emb, loss)


def layout_stages(text: str) -> int:
    return len(parse_layout(text))


def check_fit(text: str, pp: int, chunks: int, field: str = _FIELD) -> RankLayout:
    """The layout's placement on ``pp`` ranks of ``chunks`` model chunks each; InputError
    (naming ``field``) where pp x chunks is not its stage count (Megatron derives vpp from
    the layout, so another count would run another schedule) or Megatron cannot place it."""
    ranks = rank_layout(text, pp)
    n = layout_stages(text)
    if pp * chunks != n:
        raise InputError(field, f"{text!r} has {n} stages; pp={pp} x {chunks} chunk(s) is "
                         f"{pp * chunks}", "set pp x virtual_stages to the layout's stages")
    return ranks


def fits(text: str | None, pp: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Where a configuration's pp x model chunks equals the layout's stages (all True without a
    layout)."""
    pp = np.asarray(pp)
    if text is None:
        return np.ones(pp.shape, bool)
    return pp * np.asarray(v).astype(np.int64) == layout_stages(text)


def write_layout(stages) -> str:
    """A layout string of the given stages in Megatron's repetition grammar: a character
    repeated three times or more as ``x*n``, runs of equal stages as ``(s|)*n``; the last stage
    is written alone. ``parse_layout(write_layout(s)) == tuple(s)``."""
    def stage(st: str) -> str:
        out = []
        for ch, n in ((m.group(0)[0], len(m.group(0))) for m in re.finditer(r"(.)\1*", st)):
            out.append(f"{ch}*{n}" if n >= 3 else ch * n)
        return "".join(out)

    runs = [(st, len(list(g))) for st, g in groupby(stages)]
    out = []
    for i, (st, n) in enumerate(runs):
        last_run = i == len(runs) - 1
        rep = n - 1 if last_run else n
        w = stage(st)
        if rep >= 2:
            out.append(f"({w}|)*{rep}")
        elif rep == 1:
            out.append(f"{w}|")
        if last_run:
            out.append(w)
    return "".join(out)


def without_mtp(text: str) -> str:
    """The layout with its MTP modules removed (what the launch flags train when they do not
    launch the MTP module)."""
    return write_layout([st.replace("m", "") for st in parse_layout(text)])
