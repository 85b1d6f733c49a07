"""The configuration of a training run: the schema (:mod:`~neuroevo.config.schema`, the
:class:`~neuroevo.config.schema.Config` tree and its loading), the algorithm, env and model
sections as tagged unions (:mod:`~neuroevo.config.sections`), YAML as configs read it
(:mod:`~neuroevo.config.yaml`) and ``--set`` overrides (:mod:`~neuroevo.config.overrides`).

Each section is declared by its component (an optimizer's Params, an env's or model's options,
the evaluator's behaviour options); this package only composes them. Loading a config imports
no TensorFlow.
"""
