"""Scenario 2, the nightly revenue pipeline, against simulated HTTP services.

Run it once for a date (from the repository root)::

    python -m examples.revenue_pipeline --simulate --date 2026-11-28 --workdir /tmp/revenue

See README.md in this folder for the failures it shows and how to rerun them.
"""
