"""FireFlash: long-horizon agentic RL (RECIPE.md) — full-parameter GRPO, async rollouts, sandboxes, validated graders."""

__version__ = "0.1.0"
