"""The one validation of slot indices, episode seeds and integer actions, for every env and model.

Every batched env (Atari, MuJoCo, the gymnasium adapter) and every population model names the
slots it touches with an int32 index vector and starts episodes from int64 seeds. A silent cast
would run the wrong slot (an int64 ``2**32 + 3`` wraps to slot 3, a float ``2.9`` truncates to
slot 2) or merge seeds (``0.2`` and ``0.9`` both become ``0``), so values are never cast down:

* **Host values** (Python ints, lists, numpy arrays) must be integers (``bool`` and floats are
  rejected) whose values fit the target dtype; indices must also be a vector of distinct slot
  ids in ``[0, num_slots)``. Seeds may be any 64-bit integer: unsigned ones are reinterpreted
  as the int64 with the same bits (a seed is a bit pattern). Problems raise
  ``InvalidInputError``, which is both the ``tf.errors.InvalidArgumentError`` the ops raise for
  the same mistakes and a ``ValueError``.
* **Tensors** are passed on unchanged when their dtype is right and rejected with a
  ``TypeError`` otherwise. Their values are checked where they are used: by the C++ ops
  (``ReadIndices`` in ``custom_ops/common/env_pool.h`` and the core matmul ops), by graph
  assertions (``models.layers.checked_indices``) and by the gymnasium adapter's numpy code,
  which calls ``check_indices`` below. A ``tf.function`` therefore never casts either.

The checks cost a few microseconds per call, on the caller's thread; the evaluator's graph
functions run them once, when they are traced.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from neuroevo.core.limits import MAX_SLOTS

__all__ = [
    "MAX_SLOTS",
    "InvalidInputError",
    "check_indices",
    "check_num_slots",
    "float_tensor",
    "index_tensor",
    "int_tensor",
    "seed_array",
    "seed_tensor",
]


class InvalidInputError(tf.errors.InvalidArgumentError, ValueError):
    """Bad indices, seeds or actions, caught before any op runs.

    An ``InvalidArgumentError`` like the ops' own errors for the same mistakes, and a
    ``ValueError`` like every other bad argument of neuroevo's Python API.
    """

    def __init__(self, message: str):
        super().__init__(None, None, message)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return type(self), (self.message,)


def check_num_slots(num_slots: Any) -> int:
    """``num_slots`` as an int after checking it is an integer in ``[1, MAX_SLOTS]``.

    Raises:
        ValueError: naming the value and the allowed range.
    """
    if isinstance(num_slots, bool) or not isinstance(num_slots, int | np.integer):
        raise ValueError(f"num_slots must be an int in [1, {MAX_SLOTS}], got {num_slots!r}")
    if not 1 <= num_slots <= MAX_SLOTS:
        raise ValueError(f"num_slots must be in [1, {MAX_SLOTS}], got {num_slots}")
    return int(num_slots)


def _host_integers(value: Any, what: str) -> np.ndarray:
    """``value`` as a numpy integer array, or InvalidInputError if it holds anything else."""
    try:
        array = np.asarray(value)
    except (OverflowError, ValueError) as exc:  # ragged lists, ints beyond 64 bits
        raise InvalidInputError(f"{what} must be integers, got {value!r} ({exc})") from None
    if array.size == 0:  # [] is float64 to numpy
        return array.astype(np.int64)
    if array.dtype.kind not in "iu":
        kind = "bool" if array.dtype == bool else array.dtype.name
        if array.dtype == object:
            kind = "Python ints beyond 64 bits or mixed objects"
        raise InvalidInputError(
            f"{what} must be integers, got {kind}: neuroevo never rounds or casts them"
        )
    return array


def _shape(shape: Any) -> str:
    """A shape written as the C++ ops write it: ``[2,3]``."""
    return "[" + ",".join(str(d) for d in tuple(shape)) + "]"


def _check_tensor(value: tf.Tensor | tf.Variable, dtype: tf.DType, what: str) -> tf.Tensor:
    if value.dtype != dtype:
        raise TypeError(
            f"{what} must be a tensor of dtype {dtype.name}, got {value.dtype.name}; neuroevo "
            f"never casts them (a cast can wrap or truncate): pass {dtype.name} or numpy values"
        )
    return value


def check_indices(indices: np.ndarray, num_slots: int, what: str = "indices") -> np.ndarray:
    """Checks host slot ids: an integer vector of distinct values in ``[0, num_slots)``.

    The messages read like the C++ ops' (``indices[2] = 9 is out of range: ...``).

    Returns:
        ``indices`` as int32 (a copy only when the dtype differs).

    Raises:
        InvalidInputError: naming the first offending position and value.
    """
    if indices.dtype.kind not in "iu":
        raise InvalidInputError(f"{what} must be integers, got {indices.dtype.name}")
    if indices.ndim != 1:
        raise InvalidInputError(f"{what} must be a vector [k], got shape {_shape(indices.shape)}")
    if indices.size == 0:
        return indices.astype(np.int32, copy=False)
    if indices.min() < 0 or indices.max() >= num_slots:
        i = int(np.flatnonzero((indices < 0) | (indices >= num_slots))[0])
        raise InvalidInputError(
            f"{what}[{i}] = {indices[i]} is out of range: there are {num_slots} slots "
            f"[0, {num_slots})"
        )
    ordered = np.sort(indices)
    if indices.size > 1 and (ordered[1:] == ordered[:-1]).any():
        first_seen: dict[int, int] = {}
        for i, slot in enumerate(indices.tolist()):
            if slot in first_seen:
                raise InvalidInputError(
                    f"{what}[{i}] = {slot} duplicates {what}[{first_seen[slot]}]: each slot "
                    "may appear once per call"
                )
            first_seen[slot] = i
    return indices.astype(np.int32, copy=False)


def index_tensor(indices: Any, num_slots: int, what: str = "indices") -> tf.Tensor:
    """Slot ids as an int32 ``[k]`` tensor, never cast (module docstring).

    Raises:
        InvalidInputError: host values that are not distinct integers in ``[0, num_slots)``.
        TypeError: a tensor whose dtype is not int32.
        ValueError: a tensor whose static rank is not 1.
    """
    if isinstance(indices, tf.Tensor | tf.Variable):
        if indices.shape.rank not in (None, 1):
            # A plain ValueError: raised while tracing, where TF expects builtin exceptions.
            raise ValueError(f"{what} must be a vector [k], got shape {_shape(indices.shape)}")
        return _check_tensor(indices, tf.int32, what)
    return tf.constant(check_indices(_host_integers(indices, what), num_slots, what))


def seed_array(seeds: Any, what: str = "seeds") -> np.ndarray:
    """Host seeds as int64 (any shape); unsigned 64-bit values keep their bits.

    Raises:
        InvalidInputError: non-integers, or integers beyond 64 bits.
    """
    array = _host_integers(seeds, what)
    if array.dtype == np.uint64:
        return array.view(np.int64)
    return array.astype(np.int64, copy=False)


def seed_tensor(seeds: Any, what: str = "seeds") -> tf.Tensor:
    """Episode seeds as an int64 tensor, never rounded (module docstring).

    Raises:
        InvalidInputError: host values that are not 64-bit integers.
        TypeError: a tensor whose dtype is not int64.
    """
    if isinstance(seeds, tf.Tensor | tf.Variable):
        return _check_tensor(seeds, tf.int64, what)
    return tf.constant(seed_array(seeds, what))


def int_tensor(values: Any, dtype: tf.DType, what: str) -> tf.Tensor:
    """Integers (e.g. discrete actions) as a ``dtype`` tensor, only if every value fits.

    Shape and range are left to the op that reads them.

    Raises:
        InvalidInputError: host values that are not integers or do not fit ``dtype``.
        TypeError: a tensor whose dtype is not ``dtype``.
    """
    if isinstance(values, tf.Tensor | tf.Variable):
        return _check_tensor(values, dtype, what)
    array = _host_integers(values, what)
    info = np.iinfo(dtype.as_numpy_dtype)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise InvalidInputError(
            f"{what} must fit {dtype.name} [{info.min}, {info.max}], got values from "
            f"{array.min()} to {array.max()}"
        )
    return tf.constant(array.astype(dtype.as_numpy_dtype, copy=False))


def float_tensor(values: Any, what: str) -> tf.Tensor:
    """Numbers (e.g. continuous actions) as a float32 tensor; shape is left to the op.

    Raises:
        InvalidInputError: values that are not numbers (strings, objects, bools).
    """
    if isinstance(values, tf.Tensor | tf.Variable):
        if not (values.dtype.is_floating or values.dtype.is_integer):
            raise TypeError(f"{what} must be a numeric tensor, got {values.dtype.name}")
        return tf.cast(values, tf.float32)
    try:
        array = np.asarray(values)
    except (OverflowError, ValueError) as exc:
        raise InvalidInputError(f"{what} must be numbers, got {values!r} ({exc})") from None
    if array.dtype.kind not in "fiu":
        raise InvalidInputError(f"{what} must be numbers, got {array.dtype.name}")
    return tf.constant(array.astype(np.float32, copy=False))
