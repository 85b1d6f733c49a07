"""NS-ES, NSR-ES and NSRA-ES of Conti et al. 2018, "Improving Exploration in Evolution
Strategies for Deep Reinforcement Learning via a Population of Novelty-Seeking Agents".

A meta-population of M ES centres explores together through a shared novelty archive of
behaviour characterisations (BCs). As in Uber's ``es_distributed/nses.py``:

1. Phase "archive" (once, at the start of generation 0): every centre plays
   ``center_episodes`` episodes; each centre's mean BC is archived, and a centre is drawn.
2. Phase "population": mirrored perturbations of the drawn centre m are evaluated. Each
   perturbation's novelty is the mean distance of its BC to the k nearest archived BCs. The
   update is OpenAI ES's (Adam, L2 decay) on shaped scores:

   - NS-ES: centred ranks of novelty (``centered_rank`` and ``centered_sign_rank`` both rank
     the novelty values: Uber's workers put the novelty where ES keeps the sign returns, so
     its ``centered_sign_rank`` ranks novelty);
   - NSR-ES: the mean of the novelty ranks and the centred ranks of the returns (Uber's
     ``algo_type: nsr`` ranks the raw returns whatever ``return_proc_mode`` says);
   - NSRA-ES: ``w * reward ranks + (1 - w) * novelty ranks``, with an adaptive w.

3. Phase "center": every centre plays ``center_episodes`` episodes. The updated centre's mean
   BC joins the archive; then each centre's novelty against the archive gives the probability
   of drawing it next generation (``P(m) = novelty_m / sum novelty``; uniform if all are 0).

NSRA-ES's weight (Algorithm 4 of the paper): it starts at ``initial_weight``; when the updated
centre's mean return beats the best seen, ``w = min(1, w + weight_delta)`` and the stagnation
counter resets; otherwise the counter grows, and after ``stagnation_generations`` generations
without improvement ``w = max(0, w - weight_delta)`` and the counter resets.

Each centre keeps its own Adam moments and step count (Uber keeps one optimizer per centre).
The elite is the centre with the best last evaluated mean return.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from neuroevo.algorithms.base import (
    GenerationSummary,
    PhaseResult,
    Stream,
)
from neuroevo.algorithms.es import ES, ESParams
from neuroevo.algorithms.novelty import DEFAULT_K, NoveltyArchive
from neuroevo.algorithms.shaping import SHAPING
from neuroevo.core.params import check
from neuroevo.evaluation.request import EvalRequest, Phase
from neuroevo.genomes.genome import ESGenome

__all__ = [
    "NSES",
    "NSRAES",
    "NSRES",
    "NSESParams",
    "NSRAESParams",
    "NoveltyESState",
    "nsra_weight_step",
]


@dataclass(frozen=True)
class NSESParams(ESParams):
    """NS-ES / NSR-ES hyperparameters (``algorithm.ns_es``, ``algorithm.nsr_es``).

    Defaults follow Uber's ``frostbite_nses.json`` where it differs from ES: M = 3 centres,
    k = 10, one episode per centre evaluation. The ES fields are those of
    :class:`~neuroevo.algorithms.es.ESParams`; ``center_episodes`` is also the number of
    episodes averaged into a centre's BC (Uber's ``num_rollouts``).

    Attributes:
        meta_population: M, the number of centres.
        k: Nearest neighbours in the novelty score.
    """

    needs_behavior = True

    meta_population: int = 3
    k: int = DEFAULT_K

    def _validate(self) -> None:
        super()._validate()
        check(self.meta_population >= 1, "meta_population", self.meta_population, ">= 1")
        check(self.k >= 1, "k", self.k, ">= 1")
        check(
            self.center_episodes >= 1,
            "center_episodes",
            self.center_episodes,
            ">= 1 (the centres' behaviours feed the archive)",
        )


@dataclass(frozen=True)
class NSRAESParams(NSESParams):
    """NSRA-ES hyperparameters (``algorithm.nsra_es``): NS-ES's plus the adaptive weight.

    Attributes:
        initial_weight: w at the start (1 = reward only, 0 = novelty only).
        weight_delta: How much w moves at each change.
        stagnation_generations: Generations without a better centre before w decreases.
    """

    initial_weight: float = 1.0
    weight_delta: float = 0.05
    stagnation_generations: int = 50

    def _validate(self) -> None:
        super()._validate()
        check(0 <= self.initial_weight <= 1, "initial_weight", self.initial_weight, "in [0, 1]")
        check(0 < self.weight_delta <= 1, "weight_delta", self.weight_delta, "in (0, 1]")
        stagnation = self.stagnation_generations
        check(stagnation >= 1, "stagnation_generations", stagnation, ">= 1")


def nsra_weight_step(
    weight: float, stagnation: int, best: float, score: float, params: NSRAESParams
) -> tuple[float, int, float]:
    """One step of NSRA-ES's weight schedule after the updated centre scored ``score``.

    Returns:
        (new weight, new stagnation counter, new best score).
    """
    if score > best:
        return min(1.0, weight + params.weight_delta), 0, score
    stagnation += 1
    if stagnation >= params.stagnation_generations:
        return max(0.0, weight - params.weight_delta), 0, best
    return weight, stagnation, best


@dataclass(frozen=True, eq=False)
class NoveltyESState:
    """Everything that changes during a novelty-ES run.

    Attributes:
        generation: Current generation.
        phase: Phase whose results ``tell`` expects next.
        centers: float32 [M, P], the centres.
        center_ids: int64 [M], the id each centre is registered under with the decoder.
        adam_m, adam_v: float32 [M, P], each centre's Adam moments.
        adam_steps: int64 [M], Adam steps taken by each centre.
        scores: float64 [M], each centre's last evaluated mean return (NaN before).
        current: The centre perturbed this generation.
        archive: The novelty archive (its rows are part of the checkpoint).
        weight: NSRA-ES's reward weight w (unused by NS-ES and NSR-ES, whose weights are
            fixed: 0 and 0.5).
        stagnation: Generations since the best centre score last improved (NSRA-ES).
        best_score: Best updated-centre score so far (NSRA-ES); -inf before.
        pending: Partial summary of the current generation, set between phases.
    """

    generation: int
    phase: Phase
    centers: np.ndarray
    center_ids: np.ndarray
    adam_m: np.ndarray
    adam_v: np.ndarray
    adam_steps: np.ndarray
    scores: np.ndarray
    current: int
    archive: NoveltyArchive
    weight: float
    stagnation: int = 0
    best_score: float = float("-inf")
    pending: GenerationSummary | None = None


def _best_of(scores: np.ndarray) -> int:
    """Index of the best score, ignoring NaN (0 when all are NaN)."""
    return 0 if np.all(np.isnan(scores)) else int(np.nanargmax(scores))


class NSES(ES):
    """NS-ES (Conti et al. 2018); see the module docstring. Needs per-episode behaviours."""

    name = "ns_es"
    params_class = NSESParams
    _params: NSESParams
    _state: NoveltyESState  # type: ignore[assignment]

    @property
    def elite(self) -> ESGenome:
        """The centre with the best last evaluated mean return (the first before any)."""
        return ESGenome(int(self._state.center_ids[self._best_center()]), 0, 0, 0.0)

    @property
    def elite_score(self) -> float | None:
        """The elite centre's last mean return, or None before the centres are evaluated."""
        score = self._state.scores[self._best_center()]
        return None if np.isnan(score) else float(score)

    @property
    def center(self) -> np.ndarray:
        """float32 [P], read-only view of the centre perturbed this generation."""
        view = self._state.centers[self._state.current].view()
        view.flags.writeable = False
        return view

    @property
    def archive(self) -> NoveltyArchive:
        """The novelty archive (read it, do not add to it)."""
        return self._state.archive

    def _best_center(self) -> int:
        return _best_of(self._state.scores)

    def _reward_weight(self, state: NoveltyESState) -> float:
        """Weight of the reward ranks in the update (novelty gets the rest)."""
        return 0.0

    def _init_state(self) -> NoveltyESState:
        params = self._params
        count, size = params.meta_population, self._num_params
        rng = self._rng(0, Stream.INIT)
        indices = self._noise.sample_indices(rng, size, count)
        centers = np.stack([self._decoder.scales * self._noise.get(i, size) for i in indices])
        state = NoveltyESState(
            generation=0,
            phase=Phase.ARCHIVE,
            centers=centers.astype(np.float32),
            center_ids=np.arange(count, dtype=np.int64),
            adam_m=np.zeros((count, size), np.float32),
            adam_v=np.zeros((count, size), np.float32),
            adam_steps=np.zeros(count, np.int64),
            scores=np.full(count, np.nan),
            current=0,
            archive=NoveltyArchive(params.k),
            weight=getattr(params, "initial_weight", 0.0),
        )
        self._register_centers(state)
        return state

    def _restored(self, state: NoveltyESState) -> None:
        self._register_centers(state)

    def _register_centers(self, state: NoveltyESState) -> None:
        for center_id, center in zip(state.center_ids.tolist(), state.centers, strict=True):
            self._decoder.set_center(center_id, center, keep=len(state.centers))

    def _ask(self) -> EvalRequest:
        state, params = self._state, self._params
        if state.phase is Phase.POPULATION:
            return self._population_request(state, int(state.center_ids[state.current]))
        centers = tuple(ESGenome(int(i), 0, 0, 0.0) for i in state.center_ids.tolist())
        return self._request_for(centers, params.center_episodes, state.phase)

    def _draw_center(self, archive: NoveltyArchive, behaviors: np.ndarray, generation: int) -> int:
        """Draws the next centre with probability proportional to its novelty."""
        novelty = archive.novelty(behaviors)
        total = novelty.sum()
        probabilities = novelty / total if total > 0 else None
        rng = self._rng(generation, Stream.SELECTION)
        return int(rng.choice(len(novelty), p=probabilities))

    def _tell(
        self, state: NoveltyESState, result: PhaseResult
    ) -> tuple[NoveltyESState, GenerationSummary | None]:
        behavior = result.behavior
        assert behavior is not None
        if state.phase is Phase.ARCHIVE:
            state.archive.add(behavior, state.generation)
            current = self._draw_center(state.archive, behavior, state.generation)
            seeded = result.summary(state.generation, self._params.sigma)  # counts episodes
            return dataclasses.replace(
                state,
                phase=Phase.POPULATION,
                scores=result.raw.copy(),
                current=current,
                pending=seeded,
            ), None
        if state.phase is Phase.POPULATION:
            return self._population_step(state, result), None
        assert state.pending is not None
        m = state.current
        state.archive.add(behavior[m], state.generation)
        weight, stagnation, best = state.weight, state.stagnation, state.best_score
        if isinstance(self._params, NSRAESParams):
            weight, stagnation, best = nsra_weight_step(
                weight, stagnation, best, float(result.fitness[m]), self._params
            )
        generation = state.generation + 1
        next_state = dataclasses.replace(
            state,
            generation=generation,
            phase=Phase.POPULATION,
            scores=result.raw.copy(),
            current=self._draw_center(state.archive, behavior, generation),
            weight=weight,
            stagnation=stagnation,
            best_score=best,
            pending=None,
        )
        score = next_state.scores[_best_of(next_state.scores)]
        extras = {**state.pending.extras, "archive_size": float(len(state.archive))}
        summary = result.added_to(state.pending, elite_score=float(score), extras=extras)
        return next_state, summary

    def _fitness_to_shape(self, result: PhaseResult) -> np.ndarray:
        """The reward term always ranks the returns, never the sign returns (Uber's nses.py)."""
        return result.fitness

    def _population_step(self, state: NoveltyESState, result: PhaseResult) -> NoveltyESState:
        """The population phase: novelty, shaping and one Adam step of the drawn centre."""
        assert result.behavior is not None
        shaping = SHAPING[self._params.fitness_shaping]
        novelty = state.archive.novelty(result.behavior)
        reward_weight = self._reward_weight(state)
        shaped = (1 - reward_weight) * shaping(novelty)
        if reward_weight > 0:
            shaped += reward_weight * shaping(self._fitness_to_shape(result))
        m = state.current
        step = int(state.adam_steps[m]) + 1
        adam = (state.adam_m[m], state.adam_v[m])
        center, adam_m, adam_v, extras = self._ascent_step(
            shaped, self._noise_indices(state.generation), state.centers[m], adam, step
        )
        centers, ms, vs = state.centers.copy(), state.adam_m.copy(), state.adam_v.copy()
        centers[m], ms[m], vs[m] = center, adam_m, adam_v
        ids, steps = state.center_ids.copy(), state.adam_steps.copy()
        ids[m], steps[m] = ids.max() + 1, step
        extras |= {
            "center": float(m),
            "novelty_mean": float(novelty.mean()),
            "novelty_max": float(novelty.max()),
            "reward_weight": reward_weight,
        }
        next_state = dataclasses.replace(
            state,
            phase=Phase.CENTER,
            centers=centers,
            center_ids=ids,
            adam_m=ms,
            adam_v=vs,
            adam_steps=steps,
            pending=self._population_summary(state, result, extras),
        )
        self._register_centers(next_state)
        return next_state

    def _population_summary(
        self, state: NoveltyESState, result: PhaseResult, extras: dict[str, float]
    ) -> GenerationSummary:
        """The population phase's summary, plus the archive phase's episodes if it ran."""
        summary = result.summary(state.generation, self._params.sigma, extras)
        if state.pending is None:
            return summary
        return dataclasses.replace(
            summary,
            nan_count=summary.nan_count + state.pending.nan_count,
            episodes=summary.episodes + state.pending.episodes,
        )


class NSRES(NSES):
    """NSR-ES: the update follows the average of reward and novelty ranks."""

    name = "nsr_es"

    def _reward_weight(self, state: NoveltyESState) -> float:
        return 0.5


class NSRAES(NSES):
    """NSRA-ES: the update follows ``w * reward + (1 - w) * novelty`` ranks, w adapted."""

    name = "nsra_es"
    params_class = NSRAESParams
    _params: NSRAESParams

    def _reward_weight(self, state: NoveltyESState) -> float:
        return state.weight
