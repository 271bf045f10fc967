"""rollout stage of the FireFlash pipeline (see README.md in this folder): one scored attempt (fork the task's
sandbox, run the harness against an engine, grade on a fork, retries and failure accounting) and trials of N
attempts. Training, probing, evaluation and the SFT oracle all go through it."""
