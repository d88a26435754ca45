"""What the optimizer prints: tables, reports, plots, the JSON documents' schema, diagnosis.

- :mod:`~optimizer.output.tables`: aligned text tables (rich on a terminal);
- :mod:`~optimizer.output.report`: the front table, the recommendation, an evaluation;
- :mod:`~optimizer.output.nccl_report`: ``optimize nccl``'s document and text;
- :mod:`~optimizer.output.catalog`: rows of ``optimize models | gpus | clusters``;
- :mod:`~optimizer.output.diagnose`: the bottleneck findings of one scored configuration;
- :mod:`~optimizer.output.plot`: the Pareto plot (matplotlib, optional);
- :mod:`~optimizer.output.schemas`: the JSON Schema of the documents (``optimizer/schema.json``).

Nothing is imported here: each module is imported where it is used (fast CLI start-up).
"""
