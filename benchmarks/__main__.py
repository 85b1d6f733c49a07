"""``python -m benchmarks NAME [options]``: run one benchmark (``BENCHMARKS`` lists the names)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "envs": "benchmarks.envs",
    "forward": "benchmarks.forward",
    "dense": "benchmarks.dense",
    "e2e": "benchmarks.e2e",
    "distributed": "benchmarks.distributed",
    "memory": "benchmarks.memory",
    "compare": "benchmarks.compare",
    "reproduce": "benchmarks.reproduce",
    "sweep": "benchmarks.sweep",
    "qd_sphere": "benchmarks.qd_sphere",
    "restarts": "benchmarks.restarts",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(
            f"usage: python -m benchmarks {{{','.join(BENCHMARKS)}}} [--help]",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(BENCHMARKS[argv[0]])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
