"""harness stage of the FireFlash pipeline: the agent loop that turns a task into a ``Trajectory``.

``run_attempt`` is the single entry point for training rollouts, difficulty probing and evaluation
(RECIPE.md §4: the harness is part of the model). See README.md in this folder for the files.
"""

from fireflash.harness.agent import run_attempt
from fireflash.harness.config import HarnessConfig, SamplingConfig

__all__ = ["HarnessConfig", "SamplingConfig", "run_attempt"]
