"""curation stage of the FireFlash pipeline (see README.md in this folder): the nine validation gates, grader
fuzzing, difficulty probing and the training pool they leave (RECIPE.md §2-3)."""
