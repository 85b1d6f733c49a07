"""Throughput benchmarks behind ``python -m neuroevo.bench {envs,forward,e2e}``.

Machines here are shared and noisy, so every benchmark measures ours and its baselines side by
side in one run, repeats each measurement and reports the median, and prints ratios next to
the absolute figures. Results go to a table on stdout and to JSON.
"""
