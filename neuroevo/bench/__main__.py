"""``python -m neuroevo.bench {envs,forward,e2e,distributed} [options]``: run one benchmark."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "envs": "neuroevo.bench.envs",
    "forward": "neuroevo.bench.forward",
    "e2e": "neuroevo.bench.e2e",
    "distributed": "neuroevo.bench.distributed",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(
            f"usage: python -m neuroevo.bench {{{','.join(BENCHMARKS)}}} [--help]",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(BENCHMARKS[argv[0]])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
