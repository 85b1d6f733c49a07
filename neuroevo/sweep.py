"""``python -m neuroevo.sweep``: hyperparameter sweeps and population-based training.

Run, never imported: the command is :mod:`neuroevo.cli.sweep` (``ne.sweep`` is
:func:`neuroevo.sweeps.api.sweep`).
"""

import sys

if __name__ != "__main__":
    raise ImportError("neuroevo.sweep is run with python -m; import neuroevo.cli.sweep instead")

from neuroevo.cli.sweep import main

sys.exit(main())
