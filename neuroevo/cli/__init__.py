"""The command lines: argument parsing, one-line error messages and exit codes, nothing else.

One module per command (``train``, ``play``, ``evaluate``, ``plot``, ``doctor``), each with a
``main(argv) -> int``, run by the thin ``python -m neuroevo.<command>`` modules at the
package's root; :mod:`neuroevo.cli.common` holds what they share. The work itself is done by
:mod:`neuroevo.run` and below.
"""
