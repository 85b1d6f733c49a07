"""A training run: :func:`open_run` assembles the parts of a planned run
(:mod:`neuroevo.run.plan`, :mod:`neuroevo.run.assemble`) and picks the checkpoint to resume;
:class:`Trainer` loops ask -> evaluate -> tell -> log -> checkpoint until the budget is spent.

The loop is deterministic given the config: every random choice comes from the optimizer's
seeded state and every episode from a seed it hands out, so a run resumed from a checkpoint
produces the same genomes and returns as one never stopped. Wall time is the only thing that
differs.

With observation normalisation (MuJoCo, as in the ES paper), a generation's networks all see
the same statistics; the observations of a seeded sample of its episodes are merged into them
after the generation, and the statistics are saved with each checkpoint and with the elite.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from neuroevo.algorithms import GenerationSummary
from neuroevo.config.schema import config_to_dict
from neuroevo.evaluation.obs_norm import RunningObsStats
from neuroevo.evaluation.request import EvalRequest, draw_obs_sample
from neuroevo.genomes.genome import genome_to_dict
from neuroevo.loggers import Trackers, start_trackers
from neuroevo.run import checkpoints as checkpoint
from neuroevo.run.assemble import RunParts, assemble
from neuroevo.run.build import build_optimizer, normalizes_observations
from neuroevo.run.checkpoints import CheckpointScan
from neuroevo.run.paper_evaluation import config_for_test, run_test
from neuroevo.run.plan import RunPlan, no_checkpoint_message
from neuroevo.run.policy import ElitePlayer
from neuroevo.run.progress import ProgressBar
from neuroevo.run.run_dir import RunDir, RunDirError, first_missing_generation


def open_run(plan: RunPlan, *, quiet: bool = False) -> Trainer:
    """Assembles a planned run's parts and returns its trainer.

    Args:
        plan: the checked run (:func:`neuroevo.run.plan.plan`) with its run directory.
        quiet: no progress bar or summary lines.

    Raises:
        RunDirError: on resume, no checkpoint's content fits the run and ``plan.start_over``
            is not set, or another process trains the run (:meth:`RunDir.claim`). Nothing
            is written then.
        ValueError: an env, model or optimizer rejects the config.
        TrackerError: a tracker of ``logging.wandb`` / ``logging.mlflow`` cannot start
            (:mod:`neuroevo.loggers`). The run directory is created or rewritten only once
            every part exists and the trackers have started.
    """
    if plan.run is None:
        raise ValueError("a training run needs a run directory: plan(config, run_dir)")
    parts = assemble(plan)
    trackers = Trackers(())
    try:
        resumed = None
        if plan.resume:
            plan.run.claim()  # before its checkpoints are read or its config rewritten
            resumed = _checkpoint_to_resume(plan, _state_check(parts))
        cfg = plan.config
        trackers = start_trackers(cfg.logging, config_to_dict(cfg), plan.run.path, plan.resume)
        # Only now that every part exists is the run directory touched, so bad input (an
        # unknown game, say) leaves nothing behind.
        plan.run.create(cfg, resume=plan.resume)
        plan.run.claim()  # a new run's directory exists only now
        trackers.save_ids(plan.run.path)
        return Trainer(
            parts, plan.run, resumed=resumed, restart=plan.resume, quiet=quiet, trackers=trackers
        )
    except BaseException:
        trackers.close()
        parts.close()
        plan.run.release()
        raise


def _state_check(parts: RunParts) -> Callable[[Path, dict], None]:
    """The content check of a checkpoint against this run's parts (``latest_checkpoint``)."""
    obs_stats = normalizes_observations(parts.model)
    shape = tuple(parts.env.observation_spec.shape)

    def check(path: Path, state: dict) -> None:
        """Raises CheckpointError unless ``state`` (at ``path``) can be resumed by this run:
        every section present, every counter of its type, arrays of the shapes this model and
        optimizer use, the saved policy files present. Loads nothing into the run."""
        try:
            _check_sections(state, obs_stats, parts.reference_batch)
            # Loading checks every key, type, dtype and shape (algorithms.state_io); into a
            # scratch optimizer, so a refused state leaves the run's own untouched.
            build_optimizer(parts.cfg, parts.model, parts.noise).load_state_dict(state["optimizer"])
            if obs_stats:
                RunningObsStats(shape).load_state_dict(state["obs_stats"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise checkpoint.CheckpointError(f"its state does not fit this run: {exc}") from None
        for name in state.get("policy_files", ()):
            if checkpoint.checkpoint_file(path, name) is None:
                raise checkpoint.CheckpointError(f"{name}, listed in its state, is missing")

    return check


def _checkpoint_to_resume(
    plan: RunPlan, validate: Callable[[Path, dict], None]
) -> tuple[int, dict] | None:
    """The newest checkpoint whose content fits the run and that precedes every metrics row
    missing or cut short (:func:`_before_missing_metrics`); None (start over) only when the
    plan allows it."""
    found, skipped = _before_missing_metrics(plan.run, plan.checkpoints, validate)
    if found is not None and skipped:
        warnings.warn(
            f"resuming {plan.run.path} from ckpt-{found[0]:06d}, skipping {'; '.join(skipped)}",
            stacklevel=3,
        )
    if found is not None or plan.start_over:
        return found
    raise RunDirError(no_checkpoint_message(plan.run, skipped))


def _before_missing_metrics(
    run: RunDir, checkpoints: CheckpointScan, validate: Callable[[Path, dict], None]
) -> tuple[tuple[int, dict] | None, list[str]]:
    """The newest valid checkpoint at or before the first generation whose metrics row is
    missing or cut short (damaged outside neuroevo), so that the resumed run logs that row
    again, and the reasons checkpoints were skipped. When no valid checkpoint precedes it,
    the newest valid one, with a warning that the row stays missing."""
    missing = first_missing_generation(run.metrics_path)

    def valid_before_missing(path: Path, state: dict) -> None:
        validate(path, state)
        if checkpoint.step_of(path) > missing:
            raise checkpoint.CheckpointError(
                f"{run.metrics_path.name} lacks the row of generation {missing} (cut short or "
                "damaged), which resuming from an earlier checkpoint writes again"
            )

    skipped: list[str] = []
    found = checkpoints.newest(valid_before_missing, skipped)
    if found is not None:
        return found, skipped
    skipped = []
    found = checkpoints.newest(validate, skipped)
    if found is not None:
        warnings.warn(
            f"{run.metrics_path} lacks the row of generation {missing} (cut short or damaged) "
            f"and no checkpoint precedes it: resuming from ckpt-{found[0]:06d}, that row stays "
            "missing (--start-over runs the whole run again)",
            stacklevel=4,
        )
    return found, skipped


def _check_sections(state: dict, obs_stats: bool, reference_batch: np.ndarray | None) -> None:
    """Raises ValueError unless a checkpoint state has every section a run of this config
    writes, with counters of their types and the reference batch of this model's shape."""
    sections = ["config", "optimizer", "counters"]
    sections += ["obs_stats"] if obs_stats else []
    sections += ["reference_batch"] if reference_batch is not None else []
    missing = [name for name in sections if name not in state]
    if missing:
        raise ValueError(f"it has no {', '.join(missing)} section")
    counters = state["counters"]
    fields = {field.name: field.type for field in dataclasses.fields(Counters)}
    required = set(fields) - LATER_COUNTERS
    if (
        not isinstance(counters, dict)
        or not required <= set(counters)
        or not set(counters) <= set(fields)
    ):
        raise ValueError(f"counters must be a mapping of {sorted(fields)}, got {counters!r}")
    for name, value in counters.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        whole = fields[name] == "int"
        if not number or (whole and not isinstance(value, int)):
            raise ValueError(
                f"counters.{name} must be {'an int' if whole else 'a number'}, got {value!r}"
            )
        if name != "best_return" and not (0 <= value < float("inf")):
            raise ValueError(f"counters.{name} must be finite and >= 0, got {value!r}")
        if value != value:  # NaN would never compare with a return again
            raise ValueError(f"counters.{name} must be a number, got {value!r}")
    best = state.get("best_score")
    if best is not None and (isinstance(best, bool) or not isinstance(best, int | float)):
        raise ValueError(f"best_score must be a number or null, got {best!r}")
    files = state.get("policy_files", [])
    if not isinstance(files, list) or not set(files) <= {"elite.npz", "best.npz"}:
        raise ValueError(f"policy_files must list elite.npz and/or best.npz, got {files!r}")
    if reference_batch is not None:
        batch = state["reference_batch"]
        if (
            not isinstance(batch, np.ndarray)
            or batch.shape != reference_batch.shape
            or batch.dtype != reference_batch.dtype
        ):
            raise ValueError(
                f"reference_batch must be {reference_batch.dtype} {reference_batch.shape}, got "
                f"{getattr(batch, 'dtype', type(batch).__name__)} {getattr(batch, 'shape', '')}"
            )


LATER_COUNTERS = {"best_return"}
"""Counters added after the first checkpoints were written: older ones lack them and resume
from the default."""


@dataclasses.dataclass
class Counters:
    """Run totals carried across resumes (wall time includes time before a resume)."""

    frames: int = 0
    steps: int = 0
    episodes: int = 0
    wall_time_s: float = 0.0
    best_return: float = float("-inf")


class Trainer:
    """One training run: loops ask -> evaluate -> tell -> log -> checkpoint until the budget
    is spent (:meth:`train`). Build it with :func:`open_run`.

    Args:
        parts: the run's env, model, optimizer and evaluator (:func:`~neuroevo.run.assemble.
            assemble`); the trainer closes them.
        run: the run directory, already created.
        resumed: ``(generations completed, state)`` of the checkpoint to continue from.
        restart: the run directory held an earlier attempt: without ``resumed``, its logged
            points are discarded.
        quiet: no progress bar or summary lines.
        trackers: the started W&B / MLflow trackers (:mod:`neuroevo.loggers`), which get
            every logged row and, when training ends, the policies; the trainer ends them.
    """

    def __init__(
        self,
        parts: RunParts,
        run: RunDir,
        *,
        resumed: tuple[int, dict] | None = None,
        restart: bool = False,
        quiet: bool = False,
        trackers: Trackers | None = None,
    ):
        self.parts = parts
        self.cfg = parts.cfg
        self.run = run
        self.env, self.model = parts.env, parts.model
        self.optimizer, self.evaluator = parts.optimizer, parts.evaluator
        self.counters = Counters()
        self.best_score: float | None = None  # validation score of the elite in best.npz
        self.obs_stats: RunningObsStats | None = None
        if normalizes_observations(self.model):
            self.obs_stats = RunningObsStats(tuple(self.env.observation_spec.shape))
        resume_generation = resume_step = None
        if resumed is not None:
            completed, state = resumed  # checkpoints are numbered by generations completed
            resume_generation = completed - 1
            if "policy_files" in state:  # older checkpoints saved no policy files
                self.run.restore_policies(
                    self.run.checkpoint_dir / f"ckpt-{completed:06d}", state["policy_files"]
                )
            self.optimizer.load_state_dict(state["optimizer"])
            self.counters = Counters(**state["counters"])
            resume_step = self.counters.frames
            if self.obs_stats is not None:
                self.obs_stats.load_state_dict(state["obs_stats"])
                self._apply_obs_stats()
            self.best_score = state.get("best_score")
        elif restart:  # starting over: drop every point the earlier attempt logged
            resume_step = -1
        self.metrics = self.run.metrics_writer(resume_generation=resume_generation)
        self.tensorboard = None
        if self.cfg.logging.tensorboard:
            self.tensorboard = self.run.tensorboard_writer(resume_step)
        self.trackers = Trackers(()) if trackers is None else trackers
        self.progress = ProgressBar(live=self.cfg.logging.progress, quiet=quiet)
        self._last_checkpoint = time.monotonic()
        self._test_player: ElitePlayer | None = None  # built at the first test, then reused

    def budget_left(self) -> bool:
        """Whether another generation may start."""
        budget = self.cfg.budget
        return not (
            (budget.generations is not None and self.optimizer.generation >= budget.generations)
            or (budget.frames is not None and self.counters.frames >= budget.frames)
            or (budget.hours is not None and self.counters.wall_time_s >= budget.hours * 3600)
            or (
                budget.target_return is not None
                and self.counters.best_return >= budget.target_return
            )
        )

    def run_generation(self) -> GenerationSummary:
        """Runs every phase of one generation and logs it."""
        generation = self.optimizer.generation
        start = time.monotonic()
        frames_before = self.counters.frames
        summary = None
        flagged = 0
        observed = None if self.obs_stats is None else RunningObsStats(self.obs_stats.shape)
        for request_index in itertools.count():
            request = self.optimizer.ask()
            if observed is not None:
                fraction = self.cfg.model.obs_stats_fraction
                sample = draw_obs_sample(request, fraction, self.cfg.seed, request_index)
                request = request.with_obs_sample(sample)
            results = self._evaluate(request).with_reward_decrease(
                self.cfg.env.decrease_training_rewards_by
            )
            self.counters.frames += results.total_frames
            self.counters.steps += results.total_steps
            self.counters.episodes += results.num_episodes
            flagged += results.flagged_episodes
            if results.obs_stats is not None:
                observed.merge(results.obs_stats)
            summary = self.optimizer.tell(request, results)
            if summary is not None:
                break
        elapsed = time.monotonic() - start
        self.counters.wall_time_s += elapsed
        if np.isfinite(summary.best):
            self.counters.best_return = max(self.counters.best_return, float(summary.best))
        frames_per_s = (self.counters.frames - frames_before) / max(elapsed, 1e-9)
        self._save_elite(summary)  # with the statistics its score was measured under
        self._log(summary, frames_per_s, flagged, self._test_if_due(generation))
        if observed is not None:
            self.obs_stats.merge(observed)
            self._apply_obs_stats()
        self._save_checkpoint(generation)
        return summary

    def train(self, on_generation: Callable[[GenerationSummary], None] | None = None) -> None:
        """Trains until the budget is spent; each finished generation is checkpointed."""
        finished = False
        try:
            while self.budget_left():
                summary = self.run_generation()
                if on_generation is not None:
                    on_generation(summary)
            finished = True
        finally:
            self.close(finished)

    def close(self, finished: bool = False) -> None:
        """Releases the run's parts and ends its tracker runs, which get the elite and best
        policies when training ``finished`` (the budget was spent)."""
        self.trackers.close((self.run.elite_path, self.run.best_path) if finished else ())
        if self._test_player is not None:
            self._test_player.close()
            self._test_player = None
        self.parts.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        self.run.release()

    def _evaluate(self, request: EvalRequest):
        self.progress.start(request.generation, request.num_episodes)
        return self.evaluator.evaluate(
            request, progress=lambda p: self.progress.update(p.episodes_done, p.frames)
        )

    def _apply_obs_stats(self) -> None:
        self.evaluator.set_obs_stats(self.obs_stats.mean, self.obs_stats.std)

    def _test_if_due(self, generation: int) -> float | None:
        """Runs the paper's test of the best or current elite (``test.policy``) when ``test``
        asks for one now; returns its mean return, or None."""
        test = self.cfg.test
        due = (
            test.every_generations is not None and (generation + 1) % test.every_generations == 0
        ) or (test.at_end and not self.budget_left())
        current = test.policy == "elite"
        path = self.run.elite_path if current else self.run.best_path
        if not due or not path.is_file():
            return None
        if self._test_player is None:
            tested = config_for_test(self.cfg, None, test.max_episode_steps)
            self._test_player = ElitePlayer(tested, test.episodes)
        result = run_test(
            self.run,
            self.cfg,
            test.episodes,
            None,
            test.max_episode_steps,
            current,
            self._test_player,
        )
        return result["mean"]

    def _log(
        self, summary: GenerationSummary, frames_per_s: float, flagged: int, test_mean: float | None
    ) -> None:
        row = {
            "generation": summary.generation,
            "frames": self.counters.frames,
            "episodes": self.counters.episodes,
            "wall_time_s": round(self.counters.wall_time_s, 3),
            "best": summary.best,
            "mean": summary.mean,
            "median": summary.median,
            "elite_score": summary.elite_score,
            "best_elite_score": self.best_score,
            "sigma": summary.sigma,
            **summary.extras,
            "test_mean": test_mean,
            "nan_count": summary.nan_count,
            "flagged_episodes": flagged,
            "frames_per_s": round(frames_per_s, 1),
        }
        self.metrics.write(row)
        if self.tensorboard is not None:
            self.tensorboard.scalars(
                self.counters.frames,
                {k: v for k, v in row.items() if k not in ("generation", "frames")},
            )
        self.trackers.scalars(self.counters.frames, row)
        self.progress.summary_line(
            f"{summary} | frames {self.counters.frames:,} | {frames_per_s:,.0f} frames/s"
        )

    def _save_elite(self, summary: GenerationSummary) -> None:
        """Writes ``elite.npz``, and ``best.npz`` when the elite's score beats every earlier
        elite's (the best validated elite of the run, as the papers report)."""
        elite = self.optimizer.elite
        if elite is None:
            return
        weights = np.asarray(self.optimizer.decoder.decode(elite), np.float32)
        obs_stats = None
        if self.obs_stats is not None:  # those the evaluated networks used
            obs_stats = (self.obs_stats.mean, self.obs_stats.std)
        genome = genome_to_dict(elite)
        policy = {"obs_stats": obs_stats, "reference_batch": self.parts.reference_batch}
        self.run.save_elite(genome, weights, **policy)
        score = summary.elite_score
        if (
            score is not None
            and np.isfinite(score)
            and (self.best_score is None or score > self.best_score)
        ):
            self.best_score = float(score)
            record = {**genome, "generation": summary.generation, "score": self.best_score}
            self.run.save_elite(record, weights, **policy, best=True)

    def _save_checkpoint(self, generation: int) -> None:
        logging_cfg = self.cfg.logging
        every = logging_cfg.checkpoint_every_generations
        minutes = logging_cfg.checkpoint_every_minutes
        due = (every is not None and (generation + 1) % every == 0) or (
            minutes is not None and time.monotonic() - self._last_checkpoint >= minutes * 60
        )
        if due or not self.budget_left():
            # The elite and best policies go into the checkpoint too: a resume puts them back,
            # so they always belong to the generation the run continues from.
            policies = {
                path.name: path
                for path in (self.run.elite_path, self.run.best_path)
                if path.is_file()
            }
            checkpoint.save_checkpoint(
                self.run.checkpoint_dir,
                generation + 1,
                {
                    "config": config_to_dict(self.cfg),
                    "policy_files": list(policies),
                    "optimizer": self.optimizer.state_dict(),
                    "counters": dataclasses.asdict(self.counters),
                    "best_score": self.best_score,
                    **(
                        {}
                        if self.parts.reference_batch is None
                        else {"reference_batch": self.parts.reference_batch}
                    ),
                    **(
                        {} if self.obs_stats is None else {"obs_stats": self.obs_stats.state_dict()}
                    ),
                },
                keep=logging_cfg.keep_checkpoints,
                files=policies,
            )
            self._last_checkpoint = time.monotonic()
