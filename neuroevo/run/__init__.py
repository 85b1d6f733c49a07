"""A training run, from its config to its run directory.

- :mod:`~neuroevo.run.preflight`: the checks that a run's sizes fit the machine;
- :mod:`~neuroevo.run.assemble`: the env, model, noise table, optimizer and evaluator of a
  config;
- :mod:`~neuroevo.run.trainer`: the ask -> evaluate -> tell -> log -> checkpoint loop;
- :mod:`~neuroevo.run.run_dir`, :mod:`~neuroevo.run.checkpoints`: the run directory (config,
  metrics, TensorBoard, elites) and its checkpoints;
- :mod:`~neuroevo.run.policy`, :mod:`~neuroevo.run.paper_evaluation`: a saved policy played
  again, and the papers' test of it;
- :mod:`~neuroevo.run.progress`, :mod:`~neuroevo.run.video`: the terminal progress and video
  files.
"""
