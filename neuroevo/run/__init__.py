"""A training run, from its config to its run directory.

- :mod:`~neuroevo.run.plan`: ``plan(config, run_dir) -> RunPlan``, every check of a start and
  every derived value, once (the size checks are :mod:`~neuroevo.run.preflight`'s);
- :mod:`~neuroevo.run.build`: the env, model and optimizer of a config, by their registries;
- :mod:`~neuroevo.run.assemble`: ``assemble(plan) -> RunParts``, every part of a planned run;
- :mod:`~neuroevo.run.trainer`: the ask -> evaluate -> tell -> log -> checkpoint loop;
- :mod:`~neuroevo.run.run_dir`, :mod:`~neuroevo.run.checkpoints`: the run directory (config,
  metrics, TensorBoard, elites) and its checkpoints;
- :mod:`~neuroevo.run.policy`, :mod:`~neuroevo.run.paper_evaluation`: a saved policy played
  again, and the papers' test of it;
- :mod:`~neuroevo.run.plots`, :mod:`~neuroevo.run.progress`, :mod:`~neuroevo.run.video`:
  learning curves and archives, the terminal progress, video files.
"""
