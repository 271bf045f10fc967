"""rl stage of the FireFlash pipeline: the RL objective of RECIPE.md §5 as pure tensor functions.

Depends on torch and this package's config only (DESIGN.md). Import from the modules
(``from fireflash.rl.objective import objective_loss``): this file stays empty so that loading the
config tree (``fireflash.config`` imports ``fireflash.rl.config``) does not import torch.
See README.md in this folder.
"""
