"""``cairn demo``: a batch killed part way and run again, offline, in seconds.

The agent and the ad platform it reviews are simulated in-process: no network,
no LLM, no account needed.
"""

from __future__ import annotations

from cairn.demo.run import run_demo

__all__ = ["run_demo"]
