"""Task fixtures hold their own test files (run inside sandboxes by the verifier), not tests of FireFlash."""

collect_ignore_glob = ["fixtures/*"]
