"""``python -m neuroevo.sweep``: the sweep command (:mod:`neuroevo.cli.sweep`)."""

import sys

from neuroevo.cli.sweep import main

if __name__ == "__main__":
    sys.exit(main())
