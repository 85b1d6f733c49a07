"""Throughput benchmarks behind ``python -m benchmarks {envs,forward,e2e}``, run from a clone.

They are not part of the installed package (the wheel holds ``neuroevo`` only). Every
benchmark that needs fresh processes runs them through ``common.Child``, and every one that
waits for a quiet machine uses ``common.wait_for_quiet``.

Machines here are shared and noisy, so every benchmark measures ours and its baselines side by
side in one run, repeats each measurement and reports the median, and prints ratios next to
the absolute figures. Results go to a table on stdout and to JSON.
"""
