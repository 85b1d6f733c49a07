"""``python -m neuroevo.doctor``: what a bug report needs to know about this installation.

Run, never imported: the command is :mod:`neuroevo.cli.doctor`.
"""

import sys

if __name__ != "__main__":
    raise ImportError("neuroevo.doctor is run with python -m; import neuroevo.cli.doctor instead")

from neuroevo.cli.doctor import main

sys.exit(main())
