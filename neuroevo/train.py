"""``python -m neuroevo.train``: start, resume and watch a training run.

``neuroevo.train`` is the function :func:`neuroevo.api.train`; this module is run, never
imported (importing it would shadow the function), and holds no code of its own.
"""

import sys

if __name__ != "__main__":
    raise ImportError("neuroevo.train is run with python -m; import neuroevo.cli.train instead")

from neuroevo.cli.train import main

sys.exit(main())
