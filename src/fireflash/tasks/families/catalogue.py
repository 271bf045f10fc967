"""The catalogue: ``FAMILIES`` in their fixed order, task ids, and ``generate`` (instances drawn by seed).

Each family function's ``__name__`` seeds its draws (``generate``): renaming one changes its tasks; moving it
between modules or in ``FAMILIES`` does not (the order is only the order of the list ``generate`` returns)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from fireflash.tasks.families.draw import Draw, TaskSpec
from fireflash.tasks.families.files import (
    copy_into,
    count_files,
    delete_pattern,
    find_ext,
    find_size,
    make_script,
    move_rename,
    tar_directory,
    tar_extract,
    tar_gz_files,
)
from fireflash.tasks.families.git import git_branch, git_commit_file, git_last_message, git_move, git_tag
from fireflash.tasks.families.python import python_fix_constant, python_fix_operator, python_script
from fireflash.tasks.families.tables import (
    csv_column,
    csv_compare_json,
    csv_filter_python,
    csv_max,
    csv_sum,
    group_totals,
    json_count,
    json_field,
)
from fireflash.tasks.families.text import (
    change_case,
    count_distinct,
    count_lines,
    count_words,
    dedupe_in_order,
    drop_blank,
    grep_count,
    grep_first,
    grep_invert,
    grep_last,
    grep_lines,
    head_lines,
    join_files,
    line_range,
    number_lines,
    prefix_lines,
    replace_word,
    reverse_lines,
    skip_header,
    sort_lines,
    sort_numbers,
    tail_lines,
    top_values,
    unique_lines,
)

ID_PREFIX = "gen-"  # generated task ids: gen-<family>-<index> (seed 0), gen-<family>-s<seed>-<index>
# The last eight (tail_lines ... csv_compare_json) are the first example of each core command's tldr page (tail,
# nl/awk NR, sort | uniq -c, find -size, tar -czf, git tag -a, a group-by, a csv filter): a broad catalogue has
# them, and so do the skills some held-out tasks need. Instances never reuse a held-out task's wording, names,
# contents or constants (tested).
FAMILIES: tuple[Callable[[Draw], TaskSpec], ...] = (
    head_lines, skip_header, grep_last, grep_first, grep_lines, grep_invert, grep_count, count_lines, count_words,
    sort_lines, sort_numbers, unique_lines, count_distinct, dedupe_in_order, change_case, replace_word,
    reverse_lines, line_range, drop_blank, prefix_lines, join_files, csv_column, csv_sum, csv_max,
    csv_filter_python, json_field, json_count, find_ext, count_files, copy_into, move_rename, delete_pattern,
    make_script, tar_directory, tar_extract, git_commit_file, git_branch, git_move, git_last_message,
    python_script, python_fix_constant, python_fix_operator, tail_lines, number_lines, top_values, find_size,
    tar_gz_files, git_tag, group_totals, csv_compare_json,
)


def family_name(family: Callable[[Draw], TaskSpec]) -> str:
    """A family's name as task ids and ``task.toml`` carry it: ``find_size`` → ``find-size``."""
    return family.__name__.replace("_", "-")


def task_id(family: str, index: int, seed: int = 0) -> str:
    """The id of instance ``index`` of ``family`` drawn with ``seed``: ``gen-find-size-3`` for seed 0,
    ``gen-find-size-s13-3`` otherwise, so sources with different seeds can be combined in one run."""
    return f"{ID_PREFIX}{family}-{index}" if seed == 0 else f"{ID_PREFIX}{family}-s{seed}-{index}"


def generate(per_family: int, seed: int = 0, families: Sequence[str] = ()) -> list[tuple[str, TaskSpec]]:
    """``per_family`` instances of every family (or of the named ``families`` only) as ``(task id, spec)``;
    the same arguments give the same tasks, and instance k of a family is the same whatever else is chosen.

    Raises:
        ValueError: a name in ``families`` is not a family.
    """
    known = {family_name(f) for f in FAMILIES}
    unknown = sorted(set(families) - known)
    if unknown:
        raise ValueError(f"unknown task famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
    out = []
    for family in FAMILIES:
        if families and family_name(family) not in families:
            continue
        for k in range(per_family):
            spec = family(Draw(random.Random(f"{seed}:{family.__name__}:{k}")))
            out.append((task_id(spec.family, k, seed), spec))
    return out
