"""Task curation (RECIPE.md §2): which tasks a run trains on, before and during training (issue 29)."""
