"""``python -m neuroevo.plot``: learning curves and novelty archives.

Run, never imported: the command is :mod:`neuroevo.cli.plot`.
"""

import sys

if __name__ != "__main__":
    raise ImportError("neuroevo.plot is run with python -m; import neuroevo.cli.plot instead")

from neuroevo.cli.plot import main

sys.exit(main())
