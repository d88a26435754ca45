"""``optimize calibrate``: fit the cluster's efficiency scales to measured steps.

    optimize calibrate --runs my_runs.yaml [--save-cluster OUT.yaml] [--params gemm,host]
        [--fit-all] [--json]

The runs file format is in :mod:`optimizer.calibrate`. The fitted scales go into the cluster
file's ``calibration:`` mapping (beside ``optimize nccl --save-cluster``'s NCCL scales); give
that file to ``optimize --cluster OUT.yaml`` and every prediction uses them. The kernel sweep
(``benchmarks/gpu/kernel_sweep.py``) writes a measurements file this command reads too
(``--kernels FILE``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from costmodel.errors import InputError
from optimizer.cli.common import Parser, emit, emit_document


def _parser() -> Parser:
    p = Parser(prog="optimize calibrate",
               description="Fit per-cluster efficiency scales (GEMM, attention, host, "
               "communication) to measured step times by least squares on log step time; "
               "print the residuals before and after and store the scales in a cluster file.")
    p.add_argument("--runs", metavar="RUNS.yaml",
                   help="measured steps: a 'runs:' list in the run-file format, each with "
                   "'measured: {step_time_s, peak_memory_gib}' (see docs/calibration.md)")
    p.add_argument("--kernels", metavar="SWEEP.json",
                   help="kernel_sweep.py measurements (GEMM and attention throughput) for "
                   "the same GPU; fits gemm and attention from kernels alone when no --runs")
    p.add_argument("--cluster", metavar="CLUSTER",
                   help="with --kernels and no --runs: the cluster file or preset to store the "
                   "scales with (default: 8 of the sweep's GPU per node, the default fabric)")
    p.add_argument("--save-cluster", metavar="OUT.yaml",
                   help="write the cluster file with the fitted scales (default: only print)")
    p.add_argument("--params", default="gemm,attention,host,comm",
                   help="the scales to fit, comma-separated (default: %(default)s)")
    p.add_argument("--fit-all", action="store_true",
                   help="fit every scale in --params the runs depend on (default: only the "
                   "subset that predicts left-out runs better than no change; see "
                   "docs/calibration.md)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return p


def run(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    if not args.runs and not args.kernels:
        raise InputError("--runs", "missing", "optimize calibrate --runs my_runs.yaml")
    params = [s.strip() for s in str(args.params).split(",") if s.strip()]
    from optimizer import calibrate as cal
    from optimizer.core.problem import SCHEMA_VERSION, tool_version
    from optimizer.core.serialize import cluster_to_dict
    from optimizer.output.tables import fmt_table

    for n in params:
        if n not in cal.EFFICIENCY_PARAMETERS:
            raise InputError("--params", f"unknown parameter {n!r}",
                             f"valid: {', '.join(cal.EFFICIENCY_PARAMETERS)}")
    if args.kernels:
        from optimizer.kernel_calibration import fit_kernels, load_sweep

        sweep = load_sweep(args.kernels)
    else:
        sweep = None
    if args.runs:
        obs = cal.load_runs(args.runs)
        if sweep is not None:  # kernels first, then the rest from the steps
            kres = fit_kernels(sweep, obs[0].cluster)
            obs = [dataclasses.replace(o, cluster=cal._with_scales(o.cluster, kres.scales))
                   for o in obs]
            params = [n for n in params if n not in kres.scales]
        result = cal.fit(obs, parameters=params, select=not args.fit_all)
        if sweep is not None:
            result = dataclasses.replace(result, kernels=kres.to_dict())
        cluster = obs[0].cluster
        source = args.runs
    else:
        from optimizer.nccl.predict import resolve_cluster

        cluster = resolve_cluster(args.cluster, sweep.gpu, 8, 1)
        result = fit_kernels(sweep, cluster).as_fit_result()
        source = args.kernels
    doc_cal: dict[str, Any] = result.to_dict()
    if args.save_cluster:
        path = cal.save_cluster(cluster, result, args.save_cluster, header=[
            "Cluster written by 'optimize calibrate --save-cluster' (paraplan); sized by "
            "--gpus (no num_nodes).", f"Efficiency scales fitted to {source}:",
            *cal.describe(result)])
        doc_cal["saved_cluster"] = str(path)
    if args.json:
        emit_document({"schema_version": SCHEMA_VERSION,
                       "tool": {"name": "paraplan", "version": tool_version()},
                       "inputs": {"runs": args.runs, "kernels": args.kernels,
                                  "params": params, "fit_all": bool(args.fit_all), "cluster": cluster_to_dict(cluster)},
                       "efficiency_calibration": doc_cal})
        return 0
    (ph, pr), (rh, rr) = cal.tables(result)
    out = fmt_table(ph, pr, title="efficiency scales")
    if rr:
        out += fmt_table(rh, rr, title="measured vs predicted step time")
    lines = cal.describe(result)
    if args.save_cluster:
        lines.append(f"wrote {doc_cal['saved_cluster']} (use it: optimize --cluster "
                     f"{doc_cal['saved_cluster']} --gpus N ...)")
    emit(out + "\n".join(lines))
    print("", file=sys.stderr, end="")
    return 0
