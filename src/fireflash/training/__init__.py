"""training stage: the policy, its optimizer and checkpoints (see README.md in this folder)."""
