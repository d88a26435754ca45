"""NCCL collectives one at a time: predictions through NCCL's own model, calibration.

- :mod:`~optimizer.nccl.predict`: sizes, NCCL's choice and the runnable alternatives, sweeps
  and crossovers (the library behind ``optimize nccl``);
- :mod:`~optimizer.nccl.calibrate`: fit the NCCL model's scales to nccl-tests measurements and
  store them with the cluster.
"""
