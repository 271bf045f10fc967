"""Generated task families: many small instances of everyday shell and Python idioms (issue #10).

    from fireflash.tasks.families.catalogue import generate
    from fireflash.tasks.families.writer import write_tasks
    pairs = generate(per_family=6, seed=0)      # [(task id, TaskSpec)], deterministic in (per_family, seed)
    dirs = write_tasks(6, Path("runs/gen"))     # Harbor task directories; or "generated:6" in any task list

Forty-odd hand-written training tasks teach a 135M model their own answers, not the commands behind
them: after the warm-up it wrote ``awk '{print NR}'`` for "the last 3 lines". A family is one idiom
(``tail -n +K``, ``grep -c``, ``cut -d, -f``, ``tar -xzf -C``, ``git mv``, a Python ``csv`` filter, ...)
drawn with random file names, directories, contents, constants and one of several phrasings, so the
model sees the idiom in many contexts. Each instance is a real task: an environment, a reference
``solution/solve.sh``, and checks that compute the expected values from pristine copies of the inputs in
``tests/data/``, like the bundled tasks (``fireflash sft`` keeps only oracle replays the checks pass).

Which held-out skills the catalogue covers, said plainly: a first catalogue (the 42 families before
``tail_lines``) left out every shape of the bundled ``heldout`` tasks, and the warm policy still solved 0
of 55 held-out trials. The last eight families were then added knowing which skills the held-out tasks
test: the first example of each core command's tldr page (``tail -n``, numbering lines, ``sort | uniq -c``,
``find -size``, ``tar -czf``, ``git tag -a``, a group-by, a CSV filter to JSON), the skills 8 of the 11
held-out tasks need; the three ``swe-*`` fixes have no family. No instance shares a held-out task's
wording, names, contents or constants (``tests/tasks/test_families.py`` checks the wording), so held-out
results after training on them measure new instances of practised skills, and should say so.

Modules: ``draw`` (``TaskSpec``, ``Draw``, word pools), ``checks`` (the checks file's header and one-check shapes),
one per family group (``text``, ``tables``, ``files``, ``git``, ``python``), ``catalogue`` (``FAMILIES``, ids,
``generate``) and ``writer`` (Harbor directories, the manifest). Nothing is re-exported here: import names
from the module that defines them.
"""
