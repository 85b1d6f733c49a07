"""``python -m neuroevo.play``: replay a run's elite.

Run, never imported: the command is :mod:`neuroevo.cli.play`.
"""

import sys

if __name__ != "__main__":
    raise ImportError("neuroevo.play is run with python -m; import neuroevo.cli.play instead")

from neuroevo.cli.play import main

sys.exit(main())
