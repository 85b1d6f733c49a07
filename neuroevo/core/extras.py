"""Optional dependencies: one check, before any work, naming the extra that installs them.

``pip install .`` installs what training needs; plots, videos and sweeps need the ``plot``,
``video`` and ``sweep`` extras (``pyproject.toml``), the experiment trackers the ``wandb`` and
``mlflow`` ones. Entry points call ``require`` first, so a
missing package is one line (``pip install "neuroevo[plot]"``) instead of a ``ModuleNotFoundError``
after minutes of work.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtraError", "require"]

# extra -> the top-level modules it provides.
EXTRAS: dict[str, tuple[str, ...]] = {
    "plot": ("matplotlib",),
    "video": ("imageio", "imageio_ffmpeg"),
    "sweep": ("ray", "fsspec", "pyarrow", "pandas"),  # what ray.tune imports
    "wandb": ("wandb",),
    "mlflow": ("mlflow",),
}


class MissingExtraError(ValueError):
    """An optional dependency is not installed; the message names the pip command."""


def require(extra: str, feature: str) -> None:
    """Checks that every module of ``extra`` can be imported, without importing it.

    Args:
        extra: a key of ``EXTRAS``.
        feature: what needs it, for the message, e.g. ``"python -m neuroevo.plot"``.

    Raises:
        MissingExtraError: a module is missing; the message is one line with the fix.
    """
    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{feature} needs {', '.join(missing)}, which is not installed: "
            f'pip install "neuroevo[{extra}]"'
        )
