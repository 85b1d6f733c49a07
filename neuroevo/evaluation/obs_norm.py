"""Running mean and standard deviation of observations, for observation normalisation.

Salimans et al. (2017) normalise MuJoCo observations inside the policy with statistics
gathered during evaluation: ``(obs - mean) / std``, where mean and std are running estimates
over (a sample of) the observations seen so far, refreshed between generations and saved with
the policy. ``RunningObsStats`` is that accumulator; the model applies the numbers (its
``set_obs_stats(mean, std)``) and checkpoints store ``state_dict()``.

Counts, means and squared deviations are kept in float64 and merged with Chan et al.'s
parallel update, which stays accurate over billions of observations where running sums of
squares would cancel. Rows holding a NaN or infinity (a physics blow-up) are skipped, so one
bad episode cannot poison the statistics.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RunningObsStats"]


class RunningObsStats:
    """Accumulates per-feature mean and std of observation batches.

    Args:
        shape: shape of one observation, e.g. ``(17,)``.
        min_std: lower bound of the reported std, so near-constant features are not blown up
            by the division (0.1, the variance floor 1e-2 of the ES paper's code).
    """

    def __init__(self, shape: tuple[int, ...], min_std: float = 0.1) -> None:
        if min_std <= 0:
            raise ValueError(f"min_std must be > 0, got {min_std}")
        self.shape = tuple(shape)
        self.min_std = float(min_std)
        self._count = 0
        self._mean = np.zeros(self.shape, np.float64)
        self._m2 = np.zeros(self.shape, np.float64)  # sum of squared deviations from the mean

    @property
    def count(self) -> int:
        """Number of observations accumulated."""
        return self._count

    @property
    def mean(self) -> np.ndarray:
        """float32 ``shape``: mean of the observations so far (0 before any)."""
        return self._mean.astype(np.float32)

    @property
    def std(self) -> np.ndarray:
        """float32 ``shape``: standard deviation, at least ``min_std`` (1 before any data)."""
        if self._count == 0:
            return np.ones(self.shape, np.float32)
        std = np.sqrt(self._m2 / self._count)
        return np.maximum(std, self.min_std).astype(np.float32)

    def update(self, batch: np.ndarray) -> None:
        """Adds observations ``[n, *shape]``; rows with a non-finite value are skipped.

        Raises:
            ValueError: the trailing shape of ``batch`` is not ``shape``.
        """
        batch = np.asarray(batch, np.float64)
        if batch.shape[1:] != self.shape:
            raise ValueError(f"batch must have shape [n, {self.shape}], got {batch.shape}")
        batch = batch[np.isfinite(batch.reshape(len(batch), -1)).all(axis=1)]
        if len(batch):
            batch_mean = batch.mean(axis=0)
            self.add_moments(len(batch), batch_mean, np.square(batch - batch_mean).sum(axis=0))

    def add_moments(self, count: int, mean: np.ndarray, m2: np.ndarray) -> None:
        """Adds a group of ``count`` observations given by its mean and summed squared
        deviations (Chan et al.'s merge); how the evaluator adds each sampled episode.

        Raises:
            ValueError: ``mean`` or ``m2`` is not of ``shape``.
        """
        mean = np.asarray(mean, np.float64)
        m2 = np.asarray(m2, np.float64)
        if mean.shape != self.shape or m2.shape != self.shape:
            raise ValueError(
                f"moments of shape {mean.shape} / {m2.shape} do not fit observations {self.shape}"
            )
        if count <= 0:
            return
        total = self._count + count
        delta = mean - self._mean
        self._mean += delta * (count / total)
        self._m2 += m2 + np.square(delta) * (self._count * count / total)
        self._count = total

    def merge(self, other: RunningObsStats) -> None:
        """Adds everything ``other`` has accumulated."""
        self.add_moments(other._count, other._mean, other._m2)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Arrays that restore the accumulator exactly (for checkpoints)."""
        return {
            "count": np.array(self._count, np.int64),
            "mean": self._mean.copy(),
            "m2": self._m2.copy(),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restores ``state_dict()`` output.

        Raises:
            ValueError: missing keys or arrays of another shape.
        """
        missing = {"count", "mean", "m2"} - set(state)
        if missing:
            raise ValueError(f"observation stats state lacks {sorted(missing)}")
        mean = np.asarray(state["mean"], np.float64)
        m2 = np.asarray(state["m2"], np.float64)
        if mean.shape != self.shape or m2.shape != self.shape:
            raise ValueError(
                f"observation stats of shape {mean.shape} do not fit observations {self.shape}"
            )
        self._count = int(state["count"])
        self._mean = mean.copy()
        self._m2 = m2.copy()
