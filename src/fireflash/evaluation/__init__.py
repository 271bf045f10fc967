"""evaluation stage of the FireFlash pipeline (see README.md in this folder)."""
