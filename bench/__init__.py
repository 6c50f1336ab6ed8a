"""Benchmarks for cairn: standalone programs that print ratios measured in one run.

Run them as modules from the project root, e.g. ``.venv/bin/python -m bench.step_overhead``.
They are never timed assertions in the test suite: a shared machine is too noisy
for that. See ``bench/README.md``.
"""
