"""curation stage of the FireFlash pipeline (see README.md in this folder): which tasks a run trains on, before
and during training (RECIPE.md §2-3): the nine validation gates, grader fuzzing, difficulty probing, the training
pool they leave, and online curation (issues 28, 29)."""
