"""``python -m neuroevo.evaluate``: score a run's elite as the papers did.

Run, never imported: the command is :mod:`neuroevo.cli.evaluate`.
"""

import sys

if __name__ != "__main__":
    raise ImportError(
        "neuroevo.evaluate is run with python -m; import neuroevo.cli.evaluate instead"
    )

from neuroevo.cli.evaluate import main

sys.exit(main())
