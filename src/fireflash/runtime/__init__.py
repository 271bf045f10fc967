"""runtime stage: runs rollout and training concurrently (see README.md in this folder)."""
