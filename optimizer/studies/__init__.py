"""Study files: a search written down once, run or resumed from an Optuna storage, reported.

:mod:`~optimizer.studies.study_file` parses a study file (contract.md section 2) into a
:class:`StudyFile`, runs it (:func:`run_study`) and reports its stored front
(:func:`report_study`). The command line over it is :mod:`optimizer.cli.studies`.
"""

from __future__ import annotations

from optimizer.studies.study_file import (
    NOT_RUN_MESSAGE,
    STUDY_SCHEMA_VERSION,
    StudyFile,
    load_study_file,
    report_stored,
    report_study,
    resolve_storage,
    run_study,
)

__all__ = ["NOT_RUN_MESSAGE", "STUDY_SCHEMA_VERSION", "StudyFile", "load_study_file",
           "report_stored", "report_study", "resolve_storage", "run_study"]
