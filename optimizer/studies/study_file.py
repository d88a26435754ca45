"""Study files: a search written down once, run or resumed from an Optuna storage, reported.

A study file (``studies/*.yaml``, contract.md section 2) names the model, the cluster, the
training settings, the searched space, the objectives, the memory constraint, the sampler
settings and where the Optuna study lives::

    schema_version: 1
    name: llama65b-16xa100
    model: llama-65b                      # catalog name, inline mapping, or a path
    cluster: {gpus: 16, gpu: a100-sxm-80gb, gpus_per_node: 8}
    training: {seq_length: 2048, global_batch_size: 1024}
    space: {tp: [1, 2, 4, 8], recompute: [none, selective, full]}   # omitted -> defaults
    objectives: [maximize tokens_per_s, minimize peak_memory_bytes]
    constraints: {memory_limit_gib: 76}   # or memory_fraction: 0.9
    search: {sampler: auto, trials: 300, seed: 0, batch_size: 32}
    storage: llama65b-16xa100.journal     # default <stem>.journal beside the file; or a URL
    study_name: llama65b-16xa100          # default: name

Relative paths (model, cluster, journal file, ``sqlite:///`` database) resolve against the
study file's directory. Parsing is ``yaml.safe_load``-equivalent (:mod:`costmodel.loaders`);
unknown keys are errors naming ``study.<section>.<key>`` with a did-you-mean hint. The tool
never writes the study file.

Running a study stores the final front document in the Optuna study's user attributes
(:func:`optimizer.storage.save_result`); running it again prints that document without
recomputation, and ``optimize report`` renders it from storage alone. The definition's
SHA-256 is stored with it, so a stored front that no longer matches the file is detected.
Same file, same versions => same front (ecosystem.md section 1.9; style.md section 6.7).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costmodel.errors import InfeasibleError, InputError, check_keys, did_you_mean
from costmodel.loaders import expand_user
from costmodel.specs import ClusterSpec, ModelSpec, TrainingSpec

STUDY_SCHEMA_VERSION = 1
STUDY_KEYS = ("schema_version", "name", "description", "model", "cluster", "training",
              "space", "objectives", "constraints", "search", "storage", "study_name")
CLUSTER_SHORT_KEYS = ("gpus",)  # added to the cluster short form: sizes the cluster
CONSTRAINT_KEYS = ("memory_limit_gib", "memory_fraction")
SEARCH_KEYS = ("sampler", "trials", "seed", "batch_size", "allow_cross_node_tp")
SEARCH_DEFAULTS: Mapping[str, Any] = {"sampler": "auto", "trials": 300, "seed": 0,
                                      "batch_size": 32, "allow_cross_node_tp": False}
#: The objectives paraplan optimises (metric -> its only sensible direction). For now both
#: are always optimised; the front is throughput versus peak memory per GPU.
OBJECTIVES: Mapping[str, str] = {"tokens_per_s": "maximize", "peak_memory_bytes": "minimize"}
DEFAULT_OBJECTIVES: tuple[tuple[str, str], ...] = (("tokens_per_s", "maximize"),
                                                    ("peak_memory_bytes", "minimize"))
DIRECTIONS = ("maximize", "minimize")
JOURNAL_SUFFIX = ".journal"
NOT_RUN_MESSAGE = "no results in storage yet; run optimize --study FILE first"
STUDY_ATTR = "paraplan_study"  # study user attribute: name, file, definition SHA-256
RENAME_HINT = ("the study file changed since it was run: give it a new study_name (or "
               "--study-name), or remove the old storage")


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyFile:
    """A validated study file with its inputs resolved to specs.

    ``space`` is the resolved :class:`search_spaces.space.SearchSpace` (the file's ``space``
    section over the default space); ``storage`` is an Optuna URL or an absolute journal file
    path; ``fingerprint`` is the SHA-256 of the resolved definition (everything that changes
    the front: inputs, space, objectives, constraint, search settings; not the storage).
    """

    path: Path
    name: str
    description: str
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    space: Any  # search_spaces.space.SearchSpace
    objectives: tuple[tuple[str, str], ...]
    memory_limit_gib: float | None
    memory_fraction: float
    sampler: str
    trials: int
    seed: int
    batch_size: int
    allow_cross_node_tp: bool
    storage: str
    study_name: str
    fingerprint: str

    def problem(self):
        """The :class:`optimizer.api.Problem` this study searches."""
        from optimizer.core.problem import resolve_problem

        try:
            return resolve_problem(model=self.model, cluster=self.cluster,
                                   training=self.training,
                                   memory_limit_gib=self.memory_limit_gib,
                                   memory_fraction=(None if self.memory_limit_gib is not None
                                                    else self.memory_fraction),
                                   allow_cross_node_tp=self.allow_cross_node_tp)
        except InputError as e:
            raise _prefixed(e, "study.constraints.") from None

    def definition(self) -> dict[str, Any]:
        """The resolved definition as JSON-ready data (what :attr:`fingerprint` hashes)."""
        return _definition(self.problem(), self.space, self.objectives, self._search())

    def _search(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "trials": self.trials, "seed": self.seed,
                "batch_size": self.batch_size, "allow_cross_node_tp": self.allow_cross_node_tp}


# ---------------------------------------------------------------------------------------------
def _prefixed(err: InputError, prefix: str = "study.") -> InputError:
    """``err`` with its field placed under the study file's namespace (``model.x`` ->
    ``study.model.x``); fields already under ``study`` are kept."""
    field = err.field or ""
    if field == "study" or field.startswith("study."):
        return err
    return InputError(prefix + field if field else prefix.rstrip("."), err.message, err.hint)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _section(data: Mapping[str, Any], key: str, allowed: Sequence[str] | None = None
             ) -> dict[str, Any]:
    """``data[key]`` as a mapping with string keys (empty when absent or null)."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"study.{key}", f"must be a mapping, got {type(value).__name__} "
                                         f"{_short(value)}")
    for k in value:
        if not isinstance(k, str):
            raise InputError(f"study.{key}.{k}", "keys must be strings",
                             did_you_mean(str(k), allowed or ()))
    out = dict(value)
    if allowed is not None:
        check_keys(f"study.{key}", out, allowed)
    return out


def _int(field: str, value: Any, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"must be an integer, got {_short(value)}")
    if minimum is not None and value < minimum:
        raise InputError(field, f"must be >= {minimum}, got {value!r}")
    return value


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"must be a non-empty string, got {_short(value)}")
    return value.strip()


def _objectives(raw: Any) -> tuple[tuple[str, str], ...]:
    """``[maximize tokens_per_s, minimize peak_memory_bytes]`` (strings ``DIRECTION METRIC``)
    or mappings ``{metric: ..., direction: ...}``; exactly the two supported objectives."""
    if raw is None:
        return DEFAULT_OBJECTIVES
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise InputError("study.objectives", f"must be a list, got {type(raw).__name__} "
                                             f"{_short(raw)}",
                         "e.g. [maximize tokens_per_s, minimize peak_memory_bytes]")
    out: list[tuple[str, str]] = []
    for i, item in enumerate(raw):
        field = f"study.objectives[{i}]"
        if isinstance(item, str):
            parts = item.split()
            if len(parts) != 2:
                raise InputError(field, f"expected 'DIRECTION METRIC', got {item!r}",
                                 "e.g. 'maximize tokens_per_s'")
            direction, metric = parts
        elif isinstance(item, Mapping):
            check_keys(field, dict(item), ("metric", "direction"))
            metric = item.get("metric")
            direction = item.get("direction", OBJECTIVES.get(str(metric), "maximize"))
            if not isinstance(metric, str):
                raise InputError(f"{field}.metric", f"must be a metric name, got "
                                                    f"{_short(metric)}",
                                 did_you_mean(str(metric), OBJECTIVES))
        else:
            raise InputError(field, f"must be 'DIRECTION METRIC' or a mapping, got "
                                    f"{type(item).__name__} {_short(item)}")
        if direction not in DIRECTIONS:
            raise InputError(field, f"unknown direction {direction!r}",
                             did_you_mean(str(direction), DIRECTIONS))
        if metric not in OBJECTIVES:
            raise InputError(field, f"unsupported objective metric {metric!r}",
                             did_you_mean(metric, OBJECTIVES) + "; only tokens_per_s and "
                             "peak_memory_bytes are supported for now")
        if direction != OBJECTIVES[metric]:
            raise InputError(field, f"{metric} can only be {OBJECTIVES[metric]}d, got "
                                    f"{direction!r}")
        if any(m == metric for m, _ in out):
            raise InputError(field, f"{metric} is listed twice")
        out.append((metric, direction))
    if {m for m, _ in out} != set(OBJECTIVES):
        missing = [m for m in OBJECTIVES if m not in {m for m, _ in out}]
        raise InputError("study.objectives", f"missing {', '.join(missing)}",
                         "the front is always tokens_per_s (maximize) versus "
                         "peak_memory_bytes (minimize) for now")
    return tuple(out)


def _search(raw: dict[str, Any]) -> dict[str, Any]:
    from optimizer.search.engine import SAMPLERS

    out = dict(SEARCH_DEFAULTS)
    out.update(raw)
    sampler = out["sampler"]
    if not isinstance(sampler, str) or sampler.strip().lower() not in SAMPLERS:
        raise InputError("study.search.sampler", f"unknown sampler {_short(sampler)}",
                         did_you_mean(str(sampler), SAMPLERS))
    out["sampler"] = sampler.strip().lower()
    out["trials"] = _int("study.search.trials", out["trials"], minimum=1)
    out["seed"] = _int("study.search.seed", out["seed"])
    out["batch_size"] = _int("study.search.batch_size", out["batch_size"], minimum=1)
    from optimizer.search.engine import check_settings

    check_settings(sampler=out["sampler"], trials=out["trials"], seed=out["seed"],
                   batch_size=out["batch_size"], prefix="study.search.")
    if not isinstance(out["allow_cross_node_tp"], bool):
        raise InputError("study.search.allow_cross_node_tp",
                         f"must be true or false, got {_short(out['allow_cross_node_tp'])}")
    return out


def _constraints(raw: dict[str, Any]) -> tuple[float | None, float]:
    if "memory_limit_gib" in raw and "memory_fraction" in raw:
        raise InputError("study.constraints", "give memory_limit_gib or memory_fraction, "
                                              "not both")
    limit = raw.get("memory_limit_gib")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float)
                              or not 0 < limit < float("inf")):
        raise InputError("study.constraints.memory_limit_gib",
                         f"must be a positive number of GiB per GPU, got {_short(limit)}")
    from costmodel.memory_verdict import DEFAULT_MEMORY_FRACTION

    fraction = raw.get("memory_fraction", DEFAULT_MEMORY_FRACTION)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) \
            or not 0 < fraction <= 1:
        raise InputError("study.constraints.memory_fraction",
                         f"must be in (0, 1], got {_short(fraction)}")
    return (None if limit is None else float(limit)), float(fraction)


def resolve_storage(spec: str, base_dir: Path | None) -> str:
    """An Optuna URL, or a journal file path made absolute against ``base_dir``.

    ``sqlite:///relative.db`` also resolves against ``base_dir`` (``sqlite:////abs.db`` is
    absolute); other URLs (``postgresql+psycopg2://``, ``mysql+pymysql://``, ``redis://``)
    are kept as given.
    """
    if "://" in spec:
        prefix = "sqlite:///"
        if spec.startswith(prefix) and base_dir is not None:
            rest = spec[len(prefix):]
            if rest and rest != ":memory:" and not rest.startswith("/") \
                    and not Path(rest).is_absolute():
                return prefix + str((base_dir / rest).resolve())
        return spec
    p = expand_user(spec, "storage")
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return str(p.resolve())


def _cluster(raw: Any, base_dir: Path) -> ClusterSpec:
    from costmodel.loaders import load_cluster

    default_gpus = None
    ref = raw
    if isinstance(raw, Mapping) and "gpus" in raw:
        ref = {k: v for k, v in raw.items() if k != "gpus"}
        default_gpus = _int("study.cluster.gpus", raw["gpus"], minimum=1)
        from costmodel import limits

        limits.check_count("study.cluster.gpus", default_gpus, maximum=limits.MAX_GPUS)
        if not ref:
            raise InputError("study.cluster.gpu", "missing required key",
                             "e.g. cluster: {gpus: 16, gpu: a100-sxm-80gb}")
    try:
        return load_cluster(ref, default_gpus=default_gpus, base_dir=base_dir)
    except InputError as e:
        if e.field == "gpus":
            raise InputError("study.cluster.gpus", e.message, e.hint) from None
        raise _prefixed(e) from None


def _definition(problem, space, objectives, search: Mapping[str, Any]) -> dict[str, Any]:
    inputs = problem.inputs_json()

    return {"schema_version": STUDY_SCHEMA_VERSION, "inputs": inputs,
            "space": {k: list(v) for k, v in space.fingerprint_dict().items()},
            "objectives": [list(o) for o in objectives], "search": dict(search)}


def _sha256(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
def _check_inside(storage: str, base_dir: Path, allow_external: bool) -> str:
    """A study file's journal or SQLite file must lie in the study file's folder (or below):
    a shared or downloaded study file must not make paraplan write elsewhere (``../..``,
    ``/etc``) unless the user says so (``--allow-external-storage``)."""
    if allow_external:
        return storage
    if "://" in storage:
        if not storage.startswith("sqlite:///"):
            return storage  # a database server: nothing is written on this machine's disk
        rest = storage[len("sqlite:///"):]
        if not rest or rest == ":memory:":
            return storage
        target = Path(rest)
    else:
        target = Path(storage)
    base = base_dir.resolve()
    if not target.resolve().is_relative_to(base):
        raise InputError("study.storage", f"{target} is outside the study file's folder "
                         f"{base}", "keep the storage beside the study file, give --storage "
                         "on the command line, or pass --allow-external-storage")
    return storage


def load_study_file(path: str | Path, *, allow_external_storage: bool = False) -> StudyFile:
    """Read, validate and resolve a study file (raises InputError naming ``study.<field>``).

    The file is only read (never written). YAML is parsed with safe-load semantics and
    duplicate keys are errors; JSON files (``.json``) are parsed as strict JSON.
    """
    from costmodel.loaders import load_model, read_document
    from search_spaces.space import default_space, space_from_mapping

    p = expand_user(path, "study")
    data = read_document(p, field="study")
    if not isinstance(data, Mapping):
        raise InputError("study", f"{p} must hold a mapping (the study document), got "
                                  f"{type(data).__name__} {_short(data)}")
    for k in data:
        if not isinstance(k, str):
            raise InputError(f"study.{k}", "unknown key", did_you_mean(str(k), STUDY_KEYS))
    data = dict(data)
    check_keys("study", data, STUDY_KEYS)
    base_dir = p.resolve().parent

    if "schema_version" not in data:
        raise InputError("study.schema_version", "missing required key",
                         f"add schema_version: {STUDY_SCHEMA_VERSION}")
    version = data["schema_version"]
    if isinstance(version, bool) or version != STUDY_SCHEMA_VERSION:
        raise InputError("study.schema_version", f"unsupported version {_short(version)}",
                         f"this paraplan reads schema_version {STUDY_SCHEMA_VERSION}")
    if "name" not in data:
        raise InputError("study.name", "missing required key", f"e.g. name: {p.stem}")
    name = _text("study.name", data["name"])
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise InputError("study.description", f"must be a string, got {_short(description)}")
    for key in ("model", "cluster"):
        if data.get(key) is None:
            raise InputError(f"study.{key}", "missing required section",
                             f"{key}: a catalog name, an inline mapping or a path")

    try:
        model = load_model(data["model"], base_dir=base_dir)
    except InputError as e:
        raise _prefixed(e) from None
    cluster = _cluster(data["cluster"], base_dir)

    train_raw = _section(data, "training", TrainingSpec.__dataclass_fields__)
    try:
        training = TrainingSpec(**train_raw)
    except InputError as e:
        raise _prefixed(e) from None

    space_raw = _section(data, "space")
    try:
        space = space_from_mapping(space_raw or None, default_space(model, cluster, training))
    except InputError as e:
        raise _prefixed(e) from None

    objectives = _objectives(data.get("objectives"))
    limit_gib, fraction = _constraints(_section(data, "constraints", CONSTRAINT_KEYS))
    search = _search(_section(data, "search", SEARCH_KEYS))

    storage_raw = data.get("storage")
    if storage_raw is None:
        storage = str(p.resolve().with_suffix(JOURNAL_SUFFIX))
    else:
        storage = _check_inside(resolve_storage(_text("study.storage", storage_raw), base_dir),
                                base_dir, allow_external_storage)
    study_name = name if data.get("study_name") is None else \
        _text("study.study_name", data["study_name"])

    study = StudyFile(path=p.resolve(), name=name, description=description.strip(),
                      model=model, cluster=cluster, training=training, space=space,
                      objectives=objectives, memory_limit_gib=limit_gib,
                      memory_fraction=fraction, sampler=search["sampler"],
                      trials=search["trials"], seed=search["seed"],
                      batch_size=search["batch_size"],
                      allow_cross_node_tp=search["allow_cross_node_tp"], storage=storage,
                      study_name=study_name, fingerprint="")
    problem = study.problem()  # validates the constraint against the GPU
    fingerprint = _sha256(_definition(problem, space, objectives, study._search()))
    object.__setattr__(study, "fingerprint", fingerprint)
    return study


# ---------------------------------------------------------------------------------------------
def _study_section(study: StudyFile, study_name: str) -> dict[str, Any]:
    return {"name": study.name, "study_name": study_name, "file": study.path.name,
            "definition_sha256": study.fingerprint}


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    from optimizer.core.problem import tool_version

    out = {"paraplan": tool_version()}
    for pkg in ("optuna", "numpy", "networkx"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # pragma: no cover
            out[pkg] = "not installed"
    return out


def _stored(doc: dict[str, Any] | None, study: StudyFile, study_name: str,
            storage: str) -> dict[str, Any] | None:
    """The stored document if it belongs to this definition; InputError if it does not."""
    if doc is None:
        return None
    stored_sha = (doc.get("study") or {}).get("definition_sha256")
    if stored_sha != study.fingerprint:
        raise InputError("study", f"storage {_redact(storage)} already holds a result for "
                                  f"study {study_name!r} from a different definition "
                                  f"({stored_sha} != {study.fingerprint})", RENAME_HINT)
    return doc


def _raise_if_infeasible(doc: dict[str, Any]) -> dict[str, Any]:
    err = doc.get("error")
    if isinstance(err, Mapping) and err.get("code") == 3:
        raise InfeasibleError(str(err.get("message", "no configuration fits")), payload=doc)
    return doc


def _redact(url: str) -> str:
    """A storage URL without its password (safe to print)."""
    from optimizer.storage import redact

    return redact(url) or url


def run_study(study: StudyFile, *, storage_override: str | None = None,
              study_name_override: str | None = None, jobs: int = 1,
              progress: bool = False) -> dict[str, Any]:
    """Run (or resume) ``study`` and return its front document (contract.md section 4).

    If the storage already holds a finished result for this definition, it is returned as
    stored, without recomputation. Otherwise the Optuna study is created (or loaded: Optuna
    samplers resume its trials; an exhaustive study has no trials but still exists, so that
    ``report`` works), the search runs, and the document is saved in the study's user
    attributes before it is returned. A study created from a different definition is refused
    (InputError). When nothing fits the memory limit, the least-violating document is stored
    too and InfeasibleError is raised (exit 3), now and on every re-run.
    """
    from optimizer import search
    from optimizer.api import finish
    from optimizer.storage import (
        load_result,
        open_storage,
        open_study,
        save_result,
    )

    storage_spec = storage_override or study.storage
    study_name = study_name_override or study.study_name
    with _location_errors(storage_override, study_name_override):
        storage = open_storage(storage_spec)
        done = _stored(load_result(storage, study_name), study, study_name, storage_spec)
        if done is not None:
            return _raise_if_infeasible(done)
        problem = study.problem()
        section = _study_section(study, study_name)
        attrs = {"fingerprint": problem.fingerprint(), STUDY_ATTR: section,
                 "versions": _versions()}
        import optuna

        existed = study_name in optuna.get_all_study_names(storage=storage)
        handle = open_study(storage, study_name, None, attrs)
    recorded = handle.user_attrs.get(STUDY_ATTR)
    if isinstance(recorded, Mapping) and recorded.get("definition_sha256") != study.fingerprint:
        raise InputError("study", f"storage {_redact(storage_spec)} already holds study "
                                  f"{study_name!r} started from a different definition "
                                  f"({recorded.get('definition_sha256')} != "
                                  f"{study.fingerprint})", RENAME_HINT)

    t0 = time.perf_counter()
    with _location_errors(storage_override, study_name_override):
        try:
            outcome = search.run(problem, space=study.space, sampler=study.sampler,
                                 trials=study.trials, seed=study.seed, jobs=jobs,
                                 batch_size=study.batch_size, storage=storage_spec,
                                 study_name=study_name, progress=progress)
        except InputError as e:
            if not existed:  # leave no half-made study that would refuse the fixed file
                _forget_new_study(storage, study_name)
            if e.field in SEARCH_KEYS:
                raise _prefixed(e, "study.search.") from None
            if e.field == "space":
                raise _prefixed(e) from None
            raise
    try:
        doc = finish(problem, outcome, t0).to_dict()
    except InfeasibleError as e:
        payload = dict(e.payload) if isinstance(e.payload, Mapping) else {}
        payload["study"] = section
        save_result(handle, payload)
        raise InfeasibleError(str(e), payload=payload) from None
    doc["study"] = section
    save_result(handle, doc)
    return doc


def _forget_new_study(storage, study_name: str) -> None:
    """Delete the study this run created when the search refused its input before any trial
    was finished, so the corrected study file is not refused as "a different definition"."""
    import optuna

    from optimizer.storage import count_finished

    try:
        handle = optuna.load_study(study_name=study_name, storage=storage)
        if count_finished(handle) == 0 and not handle.get_trials(deepcopy=False):
            optuna.delete_study(study_name=study_name, storage=storage)
    except Exception:  # best effort: the original error is the one to report
        pass


@contextmanager
def _location_errors(storage_override: str | None, study_name_override: str | None):
    """Name storage errors after where the location came from: ``--storage`` /
    ``--study-name`` when given on the command line, else ``study.storage`` /
    ``study.study_name``."""
    try:
        yield
    except InputError as e:
        where = {"storage": "--storage" if storage_override else "study.storage",
                 "study_name": "--study-name" if study_name_override else "study.study_name"}
        if e.field in where:
            raise InputError(where[e.field], e.message, e.hint) from None
        raise


def report_study(study: StudyFile, *, storage_override: str | None = None,
                 study_name_override: str | None = None) -> dict[str, Any]:
    """The stored front document of ``study``, from storage alone (nothing is recomputed).

    Raises InputError("study", ...) when the study has not been run yet; InfeasibleError when
    the stored run found nothing that fits. A journal file or SQLite database that does not
    exist is not created.
    """
    from optimizer.storage import load_result, open_storage

    storage_spec = storage_override or study.storage
    study_name = study_name_override or study.study_name
    if _missing_local_storage(storage_spec):
        raise InputError("study", NOT_RUN_MESSAGE, f"storage {storage_spec} does not exist")
    doc = load_result(open_storage(storage_spec, read_only=True), study_name)  # never writes
    if doc is None:
        raise InputError("study", NOT_RUN_MESSAGE,
                         f"study {study_name!r} in {_redact(storage_spec)}")
    stored_sha = (doc.get("study") or {}).get("definition_sha256")
    if stored_sha != study.fingerprint:
        print(f"warning: study file {study.path.name} changed since this result was stored "
              f"({stored_sha} != {study.fingerprint}); showing the stored result",
              file=sys.stderr)
    return _raise_if_infeasible(doc)


def report_stored(storage_spec: str, study_name: str | None = None) -> dict[str, Any]:
    """The result document an ad-hoc ``optimize --model ... --storage URL`` run stored
    (:func:`optimizer.api.optimize`), from storage alone: study ``study_name``, or, when no
    name is given, the one study of the storage that holds a result (InputError naming the
    candidates when there are several). Nothing is recomputed or written."""
    import optuna

    from optimizer.storage import RESULT_ATTR, load_result, open_storage

    hint = "run optimize --model ... --gpus ... --storage URL first"
    if _missing_local_storage(storage_spec):
        raise InputError("--storage", f"storage {storage_spec} does not exist", hint)
    storage = open_storage(storage_spec, read_only=True)
    if study_name is None:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage, False)
                 if RESULT_ATTR in s.user_attrs]
        if len(names) != 1:
            listed = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
            raise InputError("--study-name", f"{_redact(storage_spec)} holds "
                             f"{len(names)} studies with a result{': ' + listed if names else ''}",
                             "name one with --study-name" if names else hint)
        study_name = names[0]
    doc = load_result(storage, study_name)
    if doc is None:
        raise InputError("--study-name", f"no result stored for study {study_name!r} in "
                         f"{_redact(storage_spec)}", hint)
    return _raise_if_infeasible(doc)


def _missing_local_storage(spec: str) -> bool:
    if "://" not in spec:
        return not Path(spec).exists()
    if spec.startswith("sqlite:///"):
        rest = spec[len("sqlite:///"):]
        return bool(rest) and rest != ":memory:" and not Path(rest).exists()
    return False
