"""The cost model against measurements of real training runs.

:mod:`~optimizer.validation.published` maps the published runs (``../shared/validation``) to
runs, scores them and computes the error metrics of ``optimize validate``
(:mod:`optimizer.cli.validate`); :mod:`~optimizer.validation.compare` checks that two
``optimize validate --json`` documents agree on every figure of the first
(``python -m optimizer.validation.compare BEFORE.json AFTER.json``).
"""
