"""Generated task families: many small instances of everyday shell and Python idioms (issue #10).

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
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fireflash.tasks.words import DIR_WORDS, FILE_STEMS

ID_PREFIX = "gen-"  # generated task ids: gen-<family>-<index> (seed 0), gen-<family>-s<seed>-<index>
WORDS = (
    "alpha", "amber", "anchor", "apple", "arrow", "basil", "beacon", "birch", "bridge", "cable", "canyon",
    "cedar", "cloud", "comet", "copper", "coral", "delta", "ember", "falcon", "fern", "forest", "garnet",
    "glacier", "harbor", "hazel", "indigo", "island", "jasper", "lantern", "lemon", "maple", "meadow",
    "nickel", "ocean", "olive", "orbit", "pepper", "pine", "prairie", "quartz", "raven", "river", "saffron",
    "silver", "summit", "thunder", "timber", "tulip", "valley", "violet", "willow", "winter", "zephyr",
)
LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
NAMES = ("ana", "ben", "carla", "dev", "eli", "fay", "gus", "hana", "ivan", "jo", "kim", "leo", "mia", "noor")
CITIES = ("oslo", "lima", "rome", "kyiv", "doha", "quito", "perth", "cairo", "dakar", "hanoi")


@dataclass
class TaskSpec:
    """One generated task: what the agent is told, the files it starts with, the answer, the checks.

    ``files`` maps paths relative to ``/app`` to their contents; ``setup`` are Dockerfile ``RUN`` lines
    after the copy (e.g. ``git init``); ``checks`` is the body of ``tests/test_outputs.py``.
    """

    family: str
    category: str
    instruction: str
    files: dict[str, str]
    solution: str
    checks: str
    setup: list[str] = field(default_factory=list)
    git: bool = False


class _Draw:
    """Random names for one instance: distinct file stems and directory words."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.stems = rng.sample(FILE_STEMS, 6)
        self.dirs = rng.sample(DIR_WORDS, 3)

    def file(self, i: int, ext: str = "txt") -> str:
        return f"{self.stems[i]}.{ext}"

    def words(self, n: int) -> list[str]:
        return [self.rng.choice(WORDS) for _ in range(n)]

    def lines(self, n: int, lo: int = 2, hi: int = 6) -> list[str]:
        return [" ".join(self.words(self.rng.randint(lo, hi))) for _ in range(n)]

    def pick(self, *phrasings: str) -> str:
        return self.rng.choice(phrasings)


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


_CHECKS_HEADER = """\"\"\"Checks for a generated task. Expected values are computed from pristine copies of the inputs in /tests/data.\"\"\"

import csv
import json
from pathlib import Path

APP = Path("/app")
DATA = Path("/tests/data")


def text(name):
    return (DATA / name).read_text()


def lines(name):
    return text(name).splitlines()


def rows(name):
    return list(csv.reader(lines(name)))[1:]


def unchanged(*names):
    for name in names:
        assert (APP / name).read_text() == text(name), f"/app/{name} was modified"
"""


def _checks(*tests: str) -> str:
    return _CHECKS_HEADER + "".join("\n\n" + t.strip("\n") + "\n" for t in tests)


def _checks_lines(out: str, expected: str, inputs: tuple[str, ...] = ()) -> str:
    """One check: ``/app/<out>`` holds the lines the Python expression ``expected`` computes; inputs unchanged.

    A single check, so an untouched, emptied or placeholder workspace scores 0 (gate 6).
    """
    keep = f"\n    unchanged({', '.join(map(repr, inputs))})" if inputs else ""
    return _checks(f"""
def test_exact_output():
    out = APP / {out!r}
    assert out.is_file(), f"{{out}} was not written"
    assert out.read_text().splitlines() == {expected}{keep}""")


def _checks_value(out: str, expected: str) -> str:
    """One check: ``/app/<out>`` holds ``str(expected)`` (surrounding whitespace ignored)."""
    return _checks(f"""
def test_value():
    out = APP / {out!r}
    assert out.is_file(), f"{{out}} was not written"
    assert out.read_text().strip() == str({expected})""")


# ---------------------------------------------------------------------------------------------- text


def head_lines(d: _Draw) -> TaskSpec:
    src, out, n = d.file(0), d.file(1), d.rng.randint(2, 7)
    lines = d.lines(d.rng.randint(n + 3, n + 9))
    ins = d.pick(f"Write the first {n} lines of `/app/{src}` to `/app/{out}`.",
                 f"Save the top {n} lines of `/app/{src}` as `/app/{out}`, unchanged.",
                 f"Copy only the first {n} lines of `/app/{src}` into a new file `/app/{out}`.")
    return TaskSpec("head-lines", "text-processing", ins, {src: _text(lines)},
                    f"head -n {n} /app/{src} > /app/{out}", _checks_lines(out, f"lines({src!r})[:{n}]", (src,)))


def skip_header(d: _Draw) -> TaskSpec:
    src, out, k = d.file(0, "csv"), d.file(1, "csv"), d.rng.randint(1, 3)
    lines = [",".join(d.words(3)) for _ in range(d.rng.randint(5, 9))]
    what = "header line" if k == 1 else f"{k} header lines"
    ins = d.pick(f"`/app/{src}` starts with {'a ' if k == 1 else ''}{what}. Write every line after "
                 f"{'it' if k == 1 else 'them'} to `/app/{out}`.",
                 f"Write `/app/{src}` without its first {k} line{'s' if k > 1 else ''} to `/app/{out}`.")
    return TaskSpec("skip-header", "text-processing", ins, {src: _text(lines)},
                    f"tail -n +{k + 1} /app/{src} > /app/{out}", _checks_lines(out, f"lines({src!r})[{k}:]", (src,)))


def _log_lines(d: _Draw, n: int) -> list[str]:
    return [f"2024-05-{d.rng.randint(1, 28):02d} {d.rng.choice(LEVELS)} {' '.join(d.words(3))}" for _ in range(n)]


def grep_last(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "log"), d.file(1)
    level, n = d.rng.choice(("ERROR", "WARN")), d.rng.randint(2, 4)
    lines = _log_lines(d, 14)
    lines[d.rng.randrange(14)] = f"2024-05-01 {level} {' '.join(d.words(3))}"
    lines[d.rng.randrange(14)] = f"2024-05-02 {level} {' '.join(d.words(3))}"
    ins = d.pick(f"Write the last {n} lines of `/app/{src}` that contain `{level}` to `/app/{out}`, oldest first.",
                 f"From `/app/{src}`, keep only the lines with `{level}` and save the final {n} of them in "
                 f"`/app/{out}`.")
    return TaskSpec("grep-last", "log-analysis", ins, {src: _text(lines)},
                    f"grep '{level}' /app/{src} | tail -n {n} > /app/{out}",
                    _checks_lines(out, f"[x for x in lines({src!r}) if {level!r} in x][-{n}:]"))


def grep_first(d: _Draw) -> TaskSpec:
    src, out, word, n = d.file(0), d.file(1), d.rng.choice(WORDS[:20]), d.rng.randint(1, 3)
    lines = d.lines(12)
    for i in d.rng.sample(range(12), 4):
        lines[i] = f"{lines[i]} {word}"
    ins = d.pick(f"Write the first {n} lines of `/app/{src}` that contain the word `{word}` to `/app/{out}`.",
                 f"Find the lines of `/app/{src}` mentioning `{word}` and save the first {n} of them to `/app/{out}`.")
    return TaskSpec("grep-first", "text-processing", ins, {src: _text(lines)},
                    f"grep '{word}' /app/{src} | head -n {n} > /app/{out}",
                    _checks_lines(out, f"[x for x in lines({src!r}) if {word!r} in x][:{n}]"))


def grep_lines(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "log"), d.file(1)
    level = d.rng.choice(LEVELS)
    lines = _log_lines(d, 12)
    lines[3] = f"2024-05-03 {level} {' '.join(d.words(3))}"
    ins = d.pick(f"Copy every line of `/app/{src}` whose level is `{level}` to `/app/{out}`, in order.",
                 f"Extract the `{level}` lines of `/app/{src}` into `/app/{out}`.")
    return TaskSpec("grep-lines", "log-analysis", ins, {src: _text(lines)},
                    f"grep ' {level} ' /app/{src} > /app/{out}",
                    _checks_lines(out, f"[x for x in lines({src!r}) if x.split()[1] == {level!r}]", (src,)))


def grep_invert(d: _Draw) -> TaskSpec:
    src, out, word = d.file(0), d.file(1), d.rng.choice(("TODO", "DRAFT", "SKIP", "OLD"))
    lines = d.lines(10)
    for i in d.rng.sample(range(10), 3):
        lines[i] = f"{word} {lines[i]}"
    ins = d.pick(f"Write `/app/{src}` to `/app/{out}` without the lines that contain `{word}`.",
                 f"Remove every line containing `{word}` from a copy of `/app/{src}` saved as `/app/{out}`; "
                 "keep the original.")
    return TaskSpec("grep-invert", "text-processing", ins, {src: _text(lines)},
                    f"grep -v '{word}' /app/{src} > /app/{out}",
                    _checks_lines(out, f"[x for x in lines({src!r}) if {word!r} not in x]", (src,)))


def grep_count(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "log"), d.file(1)
    level = d.rng.choice(LEVELS)
    lines = _log_lines(d, d.rng.randint(8, 20))
    lines[0] = f"2024-05-01 {level} {' '.join(d.words(3))}"
    ins = d.pick(f"How many lines of `/app/{src}` have the level `{level}`? Write just the number to `/app/{out}`.",
                 f"Count the `{level}` lines in `/app/{src}` and write the count to `/app/{out}`.")
    return TaskSpec("grep-count", "log-analysis", ins, {src: _text(lines)},
                    f"grep -c ' {level} ' /app/{src} > /app/{out}",
                    _checks_value(out, f"sum(x.split()[1] == {level!r} for x in lines({src!r}))"))


def count_lines(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(d.rng.randint(3, 25))
    ins = d.pick(f"Write the number of lines in `/app/{src}` to `/app/{out}` (just the number).",
                 f"Count the lines of `/app/{src}`; save the count in `/app/{out}`.")
    return TaskSpec("count-lines", "text-processing", ins, {src: _text(lines)},
                    f"wc -l < /app/{src} > /app/{out}", _checks_value(out, f"len(lines({src!r}))"))


def count_words(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(d.rng.randint(3, 9))
    ins = d.pick(f"Write the number of words in `/app/{src}` to `/app/{out}`.",
                 f"Count all whitespace-separated words in `/app/{src}` and write the number to `/app/{out}`.")
    return TaskSpec("count-words", "text-processing", ins, {src: _text(lines)},
                    f"wc -w < /app/{src} > /app/{out}", _checks_value(out, f"len(text({src!r}).split())"))


def sort_lines(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    items = d.rng.sample(WORDS, d.rng.randint(5, 10))
    desc = d.rng.random() < 0.4
    order = "reverse alphabetical" if desc else "alphabetical"
    ins = d.pick(f"Sort the lines of `/app/{src}` in {order} order and write them to `/app/{out}`.",
                 f"Write the lines of `/app/{src}` to `/app/{out}`, sorted in {order} order.")
    return TaskSpec("sort-lines", "text-processing", ins, {src: _text(items)},
                    f"sort {'-r ' if desc else ''}/app/{src} > /app/{out}",
                    _checks_lines(out, f"sorted(lines({src!r}), reverse={desc})", (src,)))


def sort_numbers(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    nums = [str(x) for x in d.rng.sample(range(1, 999), d.rng.randint(5, 10))]
    desc = d.rng.random() < 0.5
    ins = d.pick(f"`/app/{src}` holds one integer per line. Write them to `/app/{out}` sorted numerically, "
                 f"{'largest' if desc else 'smallest'} first.",
                 f"Sort the numbers in `/app/{src}` {'in descending' if desc else 'in ascending'} numeric order "
                 f"into `/app/{out}`.")
    return TaskSpec("sort-numbers", "text-processing", ins, {src: _text(nums)},
                    f"sort -n{'r' if desc else ''} /app/{src} > /app/{out}",
                    _checks_lines(out, f"[str(v) for v in sorted(map(int, lines({src!r})), reverse={desc})]"))


def unique_lines(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    pool = d.rng.sample(WORDS, 5)
    items = [d.rng.choice(pool) for _ in range(12)]
    ins = d.pick(f"Write the distinct lines of `/app/{src}` to `/app/{out}`, sorted, each once.",
                 f"`/app/{src}` has repeated lines. Save each different line once, in sorted order, to `/app/{out}`.")
    return TaskSpec("unique-lines", "text-processing", ins, {src: _text(items)},
                    f"sort -u /app/{src} > /app/{out}", _checks_lines(out, f"sorted(set(lines({src!r})))"))


def count_distinct(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    pool = d.rng.sample(WORDS, d.rng.randint(3, 7))
    items = pool + [d.rng.choice(pool) for _ in range(8)]
    d.rng.shuffle(items)
    ins = d.pick(f"How many different lines does `/app/{src}` contain? Write the number to `/app/{out}`.",
                 f"Count the distinct values (one per line) in `/app/{src}` and save the count in `/app/{out}`.")
    return TaskSpec("count-distinct", "text-processing", ins, {src: _text(items)},
                    f"sort -u /app/{src} | wc -l > /app/{out}", _checks_value(out, f"len(set(lines({src!r})))"))


def dedupe_in_order(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    pool = d.rng.sample(WORDS, 6)
    items = [d.rng.choice(pool) for _ in range(12)]
    ins = d.pick(f"Copy `/app/{src}` to `/app/{out}` keeping only the first occurrence of each line, in the "
                 "original order.",
                 f"Remove duplicate lines from `/app/{src}` (keep first occurrences, do not sort); write the "
                 f"result to `/app/{out}`.")
    return TaskSpec("dedupe-in-order", "text-processing", ins, {src: _text(items)},
                    f"awk '!seen[$0]++' /app/{src} > /app/{out}", _checks_lines(out, f"list(dict.fromkeys(lines({src!r})))"))


def change_case(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(5)
    upper = d.rng.random() < 0.5
    if not upper:
        lines = [x.title() for x in lines]
    case = "upper case" if upper else "lower case"
    ins = d.pick(f"Write `/app/{src}` converted to {case} to `/app/{out}`.",
                 f"Create `/app/{out}`: the text of `/app/{src}` with every letter in {case}.")
    tr = "a-z A-Z" if upper else "A-Z a-z"
    return TaskSpec("change-case", "text-processing", ins, {src: _text(lines)},
                    f"tr {tr} < /app/{src} > /app/{out}",
                    _checks_lines(out, f"[x.{'upper' if upper else 'lower'}() for x in lines({src!r})]", (src,)))


def replace_word(d: _Draw) -> TaskSpec:
    src = d.file(0)
    old, new = d.rng.sample(WORDS, 2)
    lines = d.lines(8)
    lines[d.rng.randrange(8)] += f" {old}"
    lines[d.rng.randrange(8)] = f"{old} " + lines[d.rng.randrange(8)]
    inplace = d.rng.random() < 0.5
    out = src if inplace else d.file(1)
    if inplace:
        ins = d.pick(f"In `/app/{src}`, replace every `{old}` with `{new}` (edit the file in place).",
                     f"Edit `/app/{src}` so that each occurrence of `{old}` becomes `{new}`.")
        sol = f"sed -i 's/{old}/{new}/g' /app/{src}"
    else:
        ins = d.pick(f"Write a copy of `/app/{src}` to `/app/{out}` with every `{old}` replaced by `{new}`.",
                     f"Save `/app/{src}` as `/app/{out}`, changing all occurrences of `{old}` to `{new}`.")
        sol = f"sed 's/{old}/{new}/g' /app/{src} > /app/{out}"
    want = f"[x.replace({old!r}, {new!r}) for x in lines({src!r})]"
    return TaskSpec("replace-word", "text-processing", ins, {src: _text(lines)}, sol, _checks_lines(out, want))


def reverse_lines(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(d.rng.randint(4, 9))
    ins = d.pick(f"Write the lines of `/app/{src}` in reverse order (last line first) to `/app/{out}`.",
                 f"Create `/app/{out}` holding the lines of `/app/{src}` from the bottom up.")
    return TaskSpec("reverse-lines", "text-processing", ins, {src: _text(lines)},
                    f"tac /app/{src} > /app/{out}", _checks_lines(out, f"lines({src!r})[::-1]"))


def line_range(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(14)
    a = d.rng.randint(2, 6)
    b = a + d.rng.randint(1, 5)
    ins = d.pick(f"Write lines {a} to {b} (inclusive, counting from 1) of `/app/{src}` to `/app/{out}`.",
                 f"Extract lines {a} through {b} of `/app/{src}` into `/app/{out}`.")
    return TaskSpec("line-range", "text-processing", ins, {src: _text(lines)},
                    f"sed -n '{a},{b}p' /app/{src} > /app/{out}", _checks_lines(out, f"lines({src!r})[{a - 1}:{b}]"))


def drop_blank(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(8)
    for i in sorted(d.rng.sample(range(9), 3), reverse=True):
        lines.insert(i, "")
    ins = d.pick(f"Write `/app/{src}` to `/app/{out}` without its empty lines.",
                 f"Remove the blank lines of `/app/{src}`; save the rest, in order, as `/app/{out}`.")
    return TaskSpec("drop-blank", "text-processing", ins, {src: _text(lines)},
                    f"grep -v '^$' /app/{src} > /app/{out}", _checks_lines(out, f"[x for x in lines({src!r}) if x]"))


def prefix_lines(d: _Draw) -> TaskSpec:
    src, out, mark = d.file(0), d.file(1), d.rng.choice(("> ", "- ", "# ", "* "))
    lines = d.lines(6)
    ins = d.pick(f"Write `/app/{src}` to `/app/{out}` with `{mark}` (including the space) added at the start of "
                 "every line.",
                 f"Prefix each line of `/app/{src}` with `{mark.strip()}` and a space; save it as `/app/{out}`.")
    sed_mark = mark.replace("*", "\\*")
    return TaskSpec("prefix-lines", "text-processing", ins, {src: _text(lines)},
                    f"sed 's/^/{sed_mark}/' /app/{src} > /app/{out}",
                    _checks_lines(out, f"[{mark!r} + x for x in lines({src!r})]"))


def join_files(d: _Draw) -> TaskSpec:
    a, b, out = d.file(0), d.file(1), d.file(2)
    la, lb = d.lines(3), d.lines(4)
    ins = d.pick(f"Concatenate `/app/{a}` and then `/app/{b}` into `/app/{out}`.",
                 f"Create `/app/{out}` with the contents of `/app/{a}` followed by those of `/app/{b}`.")
    return TaskSpec("join-files", "file-manipulation", ins, {a: _text(la), b: _text(lb)},
                    f"cat /app/{a} /app/{b} > /app/{out}", _checks_lines(out, f"lines({a!r}) + lines({b!r})"))


# ----------------------------------------------------------------------------------------------- csv


def _table(d: _Draw, n: int) -> tuple[list[str], list[list[str]]]:
    header = ["name", "city", "qty", "price"]
    rows = [[d.rng.choice(NAMES), d.rng.choice(CITIES), str(d.rng.randint(1, 40)), str(d.rng.randint(2, 90))]
            for _ in range(n)]
    return header, rows


def _csv(header: list[str], rows: list[list[str]]) -> str:
    return _text([",".join(header)] + [",".join(r) for r in rows])


def csv_column(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1)
    header, rows = _table(d, d.rng.randint(4, 8))
    col = d.rng.randrange(4)
    ins = d.pick(f"`/app/{src}` is a CSV file with the header `{','.join(header)}`. Write the values of the "
                 f"`{header[col]}` column (without the header) to `/app/{out}`, one per line.",
                 f"Extract the `{header[col]}` column of `/app/{src}` (comma-separated, one header line) into "
                 f"`/app/{out}`, skipping the header.")
    return TaskSpec("csv-column", "csv-json", ins, {src: _csv(header, rows)},
                    f"tail -n +2 /app/{src} | cut -d, -f{col + 1} > /app/{out}",
                    _checks_lines(out, f"[r[{col}] for r in rows({src!r})]"))


def csv_sum(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1)
    header, rows = _table(d, d.rng.randint(4, 9))
    col = d.rng.choice((2, 3))
    ins = d.pick(f"`/app/{src}` has the columns `{','.join(header)}`. Write the sum of the `{header[col]}` column "
                 f"to `/app/{out}`.",
                 f"Add up the `{header[col]}` values in the CSV `/app/{src}` (it has a header line) and write the "
                 f"total to `/app/{out}`.")
    return TaskSpec("csv-sum", "csv-json", ins, {src: _csv(header, rows)},
                    f"awk -F, 'NR > 1 {{s += ${col + 1}}} END {{print s}}' /app/{src} > /app/{out}",
                    _checks_value(out, f"sum(int(r[{col}]) for r in rows({src!r}))"))


def csv_max(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1)
    header, rows = _table(d, d.rng.randint(4, 9))
    values = d.rng.sample(range(1, 90), len(rows))
    for r, v in zip(rows, values):
        r[3] = str(v)
    ins = d.pick(f"In `/app/{src}` (columns `{','.join(header)}`), which row has the highest `price`? Write its "
                 f"`name` to `/app/{out}`.",
                 f"Write the `name` of the row with the largest `price` in the CSV `/app/{src}` to `/app/{out}`.")
    return TaskSpec("csv-max", "csv-json", ins, {src: _csv(header, rows)},
                    f"tail -n +2 /app/{src} | sort -t, -k4,4 -n | tail -n 1 | cut -d, -f1 > /app/{out}",
                    _checks_value(out, f"max(rows({src!r}), key=lambda r: int(r[3]))[0]"))


def csv_filter_python(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1, "json")
    header, rows = _table(d, 9)
    city = rows[d.rng.randrange(9)][1]
    ins = d.pick(f"`/app/{src}` has the columns `{','.join(header)}`. Write to `/app/{out}` a JSON list of the "
                 f"`name` of every row whose `city` is `{city}`, in file order.",
                 f"Using Python, read the CSV `/app/{src}` and save a JSON array with the names of the rows in "
                 f"city `{city}` (in order) as `/app/{out}`.")
    sol = (f"python3 - <<'EOF'\nimport csv, json\nrows = list(csv.DictReader(open(\"/app/{src}\")))\n"
           f"names = [r[\"name\"] for r in rows if r[\"city\"] == \"{city}\"]\n"
           f"json.dump(names, open(\"/app/{out}\", \"w\"))\nEOF")
    checks = _checks(f"""
def test_json_list():
    assert json.loads((APP / {out!r}).read_text()) == [r[0] for r in rows({src!r}) if r[1] == {city!r}]""")
    return TaskSpec("csv-filter-python", "csv-json", ins, {src: _csv(header, rows)}, sol, checks)


def json_field(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "json"), d.file(1)
    key = d.rng.choice(("owner", "region", "tier", "status"))
    data = {"id": d.rng.randint(100, 999), key: d.rng.choice(WORDS), "tags": d.words(2)}
    ins = d.pick(f"Write the value of the `{key}` field of the JSON object in `/app/{src}` to `/app/{out}`.",
                 f"`/app/{src}` holds a JSON object. Save its `{key}` value (plain text, no quotes) in `/app/{out}`.")
    sol = f"python3 -c \"import json; print(json.load(open('/app/{src}'))['{key}'])\" > /app/{out}"
    return TaskSpec("json-field", "csv-json", ins, {src: json.dumps(data, indent=2) + "\n"}, sol,
                    _checks_value(out, f"json.loads(text({src!r}))[{key!r}]"))


def json_count(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "json"), d.file(1)
    items = [{"name": n, "active": d.rng.random() < 0.5} for n in d.rng.sample(NAMES, d.rng.randint(4, 9))]
    items[0]["active"] = True
    ins = d.pick(f"`/app/{src}` is a JSON list of objects with an `active` flag. Write how many are active to "
                 f"`/app/{out}`.",
                 f"Count the objects in the JSON list `/app/{src}` whose `active` is true; write the number to "
                 f"`/app/{out}`.")
    sol = (f"python3 -c \"import json; print(sum(1 for x in json.load(open('/app/{src}')) if x['active']))\" "
           f"> /app/{out}")
    return TaskSpec("json-count", "csv-json", ins, {src: json.dumps(items, indent=1) + "\n"}, sol,
                    _checks_value(out, f"sum(1 for x in json.loads(text({src!r})) if x['active'])"))


# --------------------------------------------------------------------------------------------- files


def _tree(d: _Draw, root: str, exts: tuple[str, ...], n: int) -> dict[str, str]:
    files = {}
    for i in range(n):
        sub = f"{d.dirs[1]}/" if i % 3 == 2 else ""
        files[f"{root}/{sub}{d.stems[i % 6]}_{i}.{d.rng.choice(exts)}"] = " ".join(d.words(3)) + "\n"
    return files


def find_ext(d: _Draw) -> TaskSpec:
    root, out = d.dirs[0], d.file(5)
    ext = d.rng.choice(("ini", "md", "cfg", "csv"))  # not .py: gate 2 parses python files under tests/
    files = _tree(d, root, (ext, "txt", "log"), 9)
    files[f"{root}/{d.stems[0]}_x.{ext}"] = "x\n"
    ins = d.pick(f"List every `.{ext}` file under `/app/{root}` (subdirectories included) as absolute paths, one "
                 f"per line, sorted, in `/app/{out}`.",
                 f"Write the full paths of all files ending in `.{ext}` anywhere below `/app/{root}` to "
                 f"`/app/{out}`, sorted alphabetically.")
    return TaskSpec("find-ext", "file-manipulation", ins, files,
                    f"find /app/{root} -type f -name '*.{ext}' | sort > /app/{out}",
                    _checks_lines(out, f"sorted(str(APP / p.relative_to(DATA)) for p in (DATA / {root!r}).rglob('*.{ext}'))"))


def count_files(d: _Draw) -> TaskSpec:
    root, out = d.dirs[0], d.file(5)
    ext = d.rng.choice(("log", "txt", "json"))
    files = {f"{root}/{d.stems[i % 6]}{i}.{ext if i % 2 else 'dat'}": "x\n" for i in range(d.rng.randint(4, 11))}
    ins = d.pick(f"How many `.{ext}` files are in `/app/{root}`? Write the number to `/app/{out}`.",
                 f"Count the files directly in `/app/{root}` whose names end in `.{ext}`; save the count in "
                 f"`/app/{out}`.")
    return TaskSpec("count-files", "file-manipulation", ins, files,
                    f"ls /app/{root}/*.{ext} | wc -l > /app/{out}",
                    _checks_value(out, f"len(list((DATA / {root!r}).glob('*.{ext}')))"))


def copy_into(d: _Draw) -> TaskSpec:
    src, dst = d.file(0), d.dirs[0]
    text = _text(d.lines(3))
    ins = d.pick(f"Copy `/app/{src}` into a new directory `/app/{dst}` (keep the original and the file name).",
                 f"Create the directory `/app/{dst}` and put a copy of `/app/{src}` in it.")
    checks = _checks(f"""
def test_copied():
    assert (APP / {dst!r} / {src!r}).read_text() == text({src!r})
    unchanged({src!r})""")
    return TaskSpec("copy-into", "file-manipulation", ins, {src: text},
                    f"mkdir -p /app/{dst} && cp /app/{src} /app/{dst}/", checks)


def move_rename(d: _Draw) -> TaskSpec:
    src, new = d.file(0), d.file(1, d.rng.choice(("txt", "bak", "old")))
    text = _text(d.lines(2))
    ins = d.pick(f"Rename `/app/{src}` to `/app/{new}`.", f"Move `/app/{src}` to `/app/{new}`; the old name must "
                 "no longer exist.")
    checks = _checks(f"""
def test_moved():
    assert (APP / {new!r}).read_text() == text({src!r})


def test_old_gone():
    assert (APP / {new!r}).is_file() and not (APP / {src!r}).exists()""")
    return TaskSpec("move-rename", "file-manipulation", ins, {src: text}, f"mv /app/{src} /app/{new}", checks)


def delete_pattern(d: _Draw) -> TaskSpec:
    root, ext = d.dirs[0], d.rng.choice(("tmp", "bak", "swp"))
    files = {f"{root}/{d.stems[i % 6]}{i}.{ext if i % 2 else 'txt'}": "x\n" for i in range(8)}
    ins = d.pick(f"Delete every `.{ext}` file in `/app/{root}`; leave the other files alone.",
                 f"Remove the `*.{ext}` files from `/app/{root}` and nothing else.")
    checks = _checks(f"""
def test_deleted():
    gone = [p.relative_to(DATA) for p in (DATA / {root!r}).glob('*.{ext}')]
    assert gone and not any((APP / p).exists() for p in gone)


def test_others_kept():
    test_deleted()
    kept = [p.relative_to(DATA) for p in (DATA / {root!r}).iterdir() if p.suffix != '.{ext}']
    assert all((APP / p).is_file() for p in kept)""")
    return TaskSpec("delete-pattern", "file-manipulation", ins, files, f"rm /app/{root}/*.{ext}", checks)


def make_script(d: _Draw) -> TaskSpec:
    name, word = d.file(0, "sh"), d.rng.choice(WORDS)
    ins = d.pick(f"Write an executable bash script `/app/{name}` that prints `{word}`.",
                 f"Create `/app/{name}`, a bash script that outputs the line `{word}`, and make it executable.")
    checks = "\n".join(["import os", "import subprocess", "", "", "def test_executable():",
                        f"    assert os.access('/app/{name}', os.X_OK)", "", "", "def test_output():",
                        f"    out = subprocess.run(['/app/{name}'], capture_output=True, text=True, timeout=10).stdout",
                        f"    assert out.strip() == {word!r}", ""])
    sol = f"printf '#!/bin/bash\\necho {word}\\n' > /app/{name}\nchmod +x /app/{name}"
    return TaskSpec("make-script", "shell-scripting", ins, {}, sol, checks)


def tar_directory(d: _Draw) -> TaskSpec:
    root, name = d.dirs[0], d.stems[5]
    files = _tree(d, root, ("txt", "cfg"), 4)
    ins = d.pick(f"Create a tar archive `/app/{name}.tar` (not compressed) of the directory `/app/{root}`, so that "
                 f"its entries start with `{root}/`.",
                 f"Pack the folder `/app/{root}` into the uncompressed tarball `/app/{name}.tar`, with paths "
                 f"relative to `/app` (like `{root}/...`).")
    checks = _checks(f"""
def test_members():
    import tarfile

    with tarfile.open(APP / '{name}.tar') as t:
        names = sorted(m.name.removeprefix('./') for m in t.getmembers() if m.isfile())
    assert names == sorted(str(p.relative_to(DATA)) for p in (DATA / {root!r}).rglob('*') if p.is_file())""")
    return TaskSpec("tar-directory", "file-manipulation", ins, files, f"tar -cf /app/{name}.tar -C /app {root}", checks)


def tar_extract(d: _Draw) -> TaskSpec:
    root, dst, name = d.dirs[0], d.dirs[2], d.stems[5]
    files = _tree(d, root, ("txt", "cfg"), 4)
    ins = d.pick(f"Unpack the gzip-compressed tarball `/app/{name}.tar.gz` into the directory `/app/{dst}` "
                 "(create it).",
                 f"Extract `/app/{name}.tar.gz` so that its files end up under `/app/{dst}`.")
    checks = _checks(f"""
def test_extracted():
    inner = [p.relative_to(DATA / {root!r}) for p in (DATA / {root!r}).rglob('*') if p.is_file()]
    assert inner and all((APP / {dst!r} / p).read_text() == text(f"{root}/{{p}}") for p in inner)""")
    setup = [f"cd /app/{root} && tar -czf /app/{name}.tar.gz * && rm -rf /app/{root}"]
    return TaskSpec("tar-extract", "file-manipulation", ins, files,
                    f"mkdir -p /app/{dst} && tar -xzf /app/{name}.tar.gz -C /app/{dst}", checks, setup)


# ----------------------------------------------------------------------------------------------- git

_GIT_ENV = 'export GIT_AUTHOR_DATE="2024-01-01T12:00:00Z" GIT_COMMITTER_DATE="2024-01-01T12:00:00Z"'


def _repo(d: _Draw) -> tuple[str, dict[str, str], list[str]]:
    repo = d.dirs[0]
    files = {f"{repo}/{d.stems[0]}.py": "VALUE = 1\n", f"{repo}/README.md": f"# {repo}\n"}
    setup = [f"cd /app/{repo} && git init -q -b main && git add -A && {_GIT_ENV} && git commit -qm 'Initial commit'"]
    return repo, files, setup


def _git_checks(lines: list[str]) -> str:
    return "\n".join(["import subprocess", "", "",
                      "def git(repo, *args):",
                      "    return subprocess.run(['git', '-C', repo, *args], capture_output=True, text=True,",
                      "                          timeout=10, check=False).stdout.strip()", "", ""] + lines)


def git_commit_file(d: _Draw) -> TaskSpec:
    repo, files, setup = _repo(d)
    name, word = d.file(1), d.rng.choice(WORDS)
    msg = d.rng.choice(("Add notes", f"Add {d.stems[1]}", "Add data file", f"Record {word}"))
    ins = d.pick(f"In the git repository `/app/{repo}`, create `{name}` containing the line `{word}` and commit it "
                 f"with the message `{msg}`.",
                 f"Add a file `{name}` (content: `{word}`) to the git repo at `/app/{repo}` and commit it; the "
                 f"commit message must be `{msg}`.")
    checks = _git_checks([
        "def test_committed():", f"    assert git({'/app/' + repo!r}, 'show', 'HEAD:{name}') == {word!r}", "", "",
        "def test_message():", f"    assert git({'/app/' + repo!r}, 'log', '-1', '--format=%s') == {msg!r}", ""])
    sol = f"cd /app/{repo}\necho '{word}' > {name}\ngit add {name} && git commit -qm '{msg}'"
    return TaskSpec("git-commit-file", "git", ins, files, sol, checks, setup, git=True)


def git_branch(d: _Draw) -> TaskSpec:
    repo, files, setup = _repo(d)
    branch = d.rng.choice(("develop", "staging", f"fix/{d.stems[2]}", f"feature/{d.rng.choice(WORDS)}"))
    ins = d.pick(f"Create a git branch `{branch}` at the current commit of `/app/{repo}` (stay on `main`).",
                 f"In `/app/{repo}`, add a new branch called `{branch}` pointing at `main`'s tip, without "
                 "switching to it.")
    checks = _git_checks([
        "def test_branch():",
        f"    assert git({'/app/' + repo!r}, 'rev-parse', {branch!r}) == git({'/app/' + repo!r}, 'rev-parse', 'main')",
        "", "", "def test_still_on_main():",
        f"    assert git({'/app/' + repo!r}, 'rev-parse', '--verify', '-q', {branch!r})",
        f"    assert git({'/app/' + repo!r}, 'branch', '--show-current') == 'main'", ""])
    return TaskSpec("git-branch", "git", ins, files, f"git -C /app/{repo} branch {branch}", checks, setup, git=True)


def git_move(d: _Draw) -> TaskSpec:
    repo, files, setup = _repo(d)
    old, new = f"{d.stems[0]}.py", f"{d.stems[3]}.py"
    msg = f"Rename {d.stems[0]} to {d.stems[3]}"
    ins = d.pick(f"In the git repository `/app/{repo}`, rename `{old}` to `{new}` and commit the change with the "
                 f"message `{msg}`.",
                 f"Use git to move `{old}` to `{new}` in `/app/{repo}`, then commit with message `{msg}`.")
    checks = _git_checks([
        "def test_renamed():", f"    files = git({'/app/' + repo!r}, 'ls-tree', '--name-only', 'HEAD').split()",
        f"    assert {new!r} in files and {old!r} not in files", "", "",
        "def test_message():", f"    assert git({'/app/' + repo!r}, 'log', '-1', '--format=%s') == {msg!r}", ""])
    sol = f"cd /app/{repo}\ngit mv {old} {new}\ngit commit -qm '{msg}'"
    return TaskSpec("git-move", "git", ins, files, sol, checks, setup, git=True)


def git_last_message(d: _Draw) -> TaskSpec:
    repo, files, setup = _repo(d)
    out = d.file(4)
    msg = f"Update {d.rng.choice(WORDS)} {d.rng.choice(WORDS)}"
    setup.append(f"cd /app/{repo} && echo 'VALUE = 2' > {d.stems[0]}.py && git commit -qam '{msg}'")
    ins = d.pick(f"Write the subject line of the latest commit in `/app/{repo}` to `/app/{out}`.",
                 f"What is the message of the most recent commit of the git repo `/app/{repo}`? Save it in "
                 f"`/app/{out}`.")
    checks = _git_checks(["def test_subject():", f"    got = open({'/app/' + out!r}).read().strip()",
                          f"    assert got and got == git({'/app/' + repo!r}, 'log', '-1', '--format=%s')", ""])
    return TaskSpec("git-last-message", "git", ins, files, f"git -C /app/{repo} log -1 --format=%s > /app/{out}",
                    checks, setup, git=True)


# -------------------------------------------------------------------------------------------- python


def python_script(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(2)
    script = f"{d.rng.choice(('total', 'summer', 'adder'))}_{d.stems[1]}.py"
    nums = [d.rng.randint(-20, 99) for _ in range(d.rng.randint(4, 9))]
    ins = d.pick(f"Write a Python script `/app/{script}` that reads the integers in `/app/{src}` (one per line) and "
                 f"writes their sum to `/app/{out}`. Run it.",
                 f"Create `/app/{script}`: it must add up the numbers listed in `/app/{src}` and write the total to "
                 f"`/app/{out}`. Then run the script.")
    sol = (f"cat > /app/{script} <<'EOF'\nnums = [int(x) for x in open(\"/app/{src}\").read().split()]\n"
           f"open(\"/app/{out}\", \"w\").write(f\"{{sum(nums)}}\\n\")\nEOF\npython3 /app/{script}")
    checks = _checks(f"""
def test_script_and_total():
    assert (APP / {script!r}).is_file(), "the script was not written"
    assert (APP / {out!r}).read_text().strip() == str(sum(int(x) for x in lines({src!r})))""")
    return TaskSpec("python-script", "python-scripts", ins, {src: _text([str(x) for x in nums])}, sol, checks)


def python_fix_constant(d: _Draw) -> TaskSpec:
    pkg, mod = d.dirs[0], d.stems[0]
    fn = d.rng.choice(("scale", "bonus", "shift", "boost"))
    good, bad = d.rng.sample(range(2, 12), 2)
    code = f'def {fn}(x):\n    """Return x plus {good}."""\n    return x + {bad}\n'
    ins = d.pick(f"`{fn}(x)` in `/app/{pkg}/{mod}.py` should return `x + {good}` but adds {bad}. Fix it.",
                 f"Fix the bug in `/app/{pkg}/{mod}.py`: `{fn}` must add {good} to its argument, not {bad}.")
    sol = f"sed -i 's/return x + {bad}/return x + {good}/' /app/{pkg}/{mod}.py"
    checks = "\n".join(["import sys", "", "sys.path.insert(0, '/app')", "", "",
                        "def test_fixed():", f"    from {pkg}.{mod} import {fn}",
                        f"    assert {fn}(0) == {good} and {fn}(10) == 10 + {good}", ""])
    return TaskSpec("python-fix-constant", "software-engineering", ins,
                    {f"{pkg}/__init__.py": "", f"{pkg}/{mod}.py": code}, sol, checks)


def python_fix_operator(d: _Draw) -> TaskSpec:
    pkg, mod = d.dirs[0], d.stems[0]
    fn, limit = d.rng.choice(("is_adult", "can_vote", "passes", "in_stock")), d.rng.randint(3, 60)
    code = f"def {fn}(n):\n    return n > {limit}\n"
    ins = d.pick(f"`{fn}(n)` in `/app/{pkg}/{mod}.py` must be true when `n` is {limit} or more, but it is false for "
                 f"exactly {limit}. Fix the comparison.",
                 f"In `/app/{pkg}/{mod}.py`, `{fn}({limit})` wrongly returns `False`; values of at least {limit} "
                 "must give `True`. Fix it.")
    sol = f"sed -i 's/n > {limit}/n >= {limit}/' /app/{pkg}/{mod}.py"
    checks = "\n".join(["import sys", "", "sys.path.insert(0, '/app')", "", "",
                        "def test_boundary():", f"    from {pkg}.{mod} import {fn}", f"    assert {fn}({limit})", "", "",
                        "def test_others():", f"    from {pkg}.{mod} import {fn}",
                        f"    assert {fn}({limit}) and {fn}({limit + 1}) and not {fn}({limit - 1})", ""])
    return TaskSpec("python-fix-operator", "software-engineering", ins,
                    {f"{pkg}/__init__.py": "", f"{pkg}/{mod}.py": code}, sol, checks)


# ------------------------------------------------------------------- common idioms, one command each
# The first example of each core command's tldr page (tail, nl/awk NR, sort | uniq -c, find -size, tar -czf,
# git tag -a, a group-by, a csv filter): a broad catalogue has them, and so do the skills some held-out tasks
# need. Instances never reuse a held-out task's wording, names, contents or constants (tested).


def tail_lines(d: _Draw) -> TaskSpec:
    src, out, n = d.file(0, d.rng.choice(("txt", "log", "md"))), d.file(1), d.rng.choice((2, 4, 5, 6, 7, 8))
    lines = d.lines(d.rng.randint(n + 3, n + 10))
    ins = d.pick(f"Save the final {n} lines of `/app/{src}` as `/app/{out}`.",
                 f"Copy the bottom {n} lines of `/app/{src}` into `/app/{out}`, in their original order.",
                 f"`/app/{out}` should contain only the last {n} lines of `/app/{src}`. Create it.",
                 f"Put the closing {n} lines of the file `/app/{src}` into a new file `/app/{out}`.",
                 f"Extract the {n} lines at the end of `/app/{src}` and store them in `/app/{out}` as they are.")
    return TaskSpec("tail-lines", "text-processing", ins, {src: _text(lines)},
                    f"tail -n {n} /app/{src} > /app/{out}", _checks_lines(out, f"lines({src!r})[-{n}:]", (src,)))


def number_lines(d: _Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    sep, name = d.rng.choice(((". ", "a period and a space"), (") ", "a closing parenthesis and a space"),
                              ("\t", "a tab"), (" - ", "a space, a dash and a space"), ("|", "a `|`")))
    lines = d.lines(d.rng.randint(4, 9))
    example = f"1{sep}{lines[0]}".replace("\t", "<TAB>")
    ins = d.pick(f"Create `/app/{out}` from `/app/{src}` by putting each line's number (counting from 1) and "
                 f"{name} in front of it, e.g. `{example}`.",
                 f"Number the lines of `/app/{src}`: write them to `/app/{out}`, each preceded by its line number "
                 f"and {name} (first line: `{example}`).",
                 f"Produce `/app/{out}`: the lines of `/app/{src}` in order, each starting with its 1-based line "
                 f"number followed by {name}, as in `{example}`.",
                 f"Add line numbers to `/app/{src}` and save the result as `/app/{out}`. Each output line is the "
                 f"number (from 1), then {name}, then the original line, e.g. `{example}`.")
    # nl, not awk '{print NR ". " $0}': inside a JSON tool call awk's double quotes must be escaped, which a
    # 135M policy gets wrong (a format error); nl's separator needs no escaping, and its default is the tab
    sol = f"nl -ba -w1 /app/{src} > /app/{out}" if sep == "\t" else f"nl -ba -w1 -s'{sep}' /app/{src} > /app/{out}"
    py_sep = sep.replace("\t", "\\t")
    return TaskSpec("number-lines", "text-processing", ins, {src: _text(lines)}, sol,
                    _checks_lines(out, f"[f'{{i}}{py_sep}{{x}}' for i, x in enumerate(lines({src!r}), 1)]", (src,)))


def top_values(d: _Draw) -> TaskSpec:
    src, out, k = d.file(0, "log"), d.file(1), d.rng.choice((1, 2, 4, 5))
    field, what = d.rng.choice(((1, "user name"), (2, "city"), (3, "word")))
    nth = ("first", "second", "third")[field - 1]
    pools = (NAMES, CITIES, WORDS)
    pool = d.rng.sample(pools[field - 1], 7)
    # some instances have equal counts, which the stated order (count down, then value up) settles
    weights = d.rng.sample(range(1, 12), 7) if d.rng.random() < 0.5 else [d.rng.randint(1, 6) for _ in range(7)]
    rows = [[d.rng.choice(NAMES), d.rng.choice(CITIES), d.rng.choice(WORDS)] for _ in range(sum(weights))]
    order = [v for v, w in zip(pool, weights) for _ in range(w)]
    d.rng.shuffle(order)
    for r, v in zip(rows, order):
        r[field - 1] = v
    data = _text([" ".join(r) for r in rows])
    plural = "s" if k > 1 else ""
    ins = d.pick(f"Each line of `/app/{src}` has three space-separated fields: user name, city, word. Write the "
                 f"{k} most common {what}{plural} (field {field}) to `/app/{out}`, one per line, most "
                 "frequent first (equal counts in alphabetical order).",
                 f"Which {k} value{plural} of field {field} ({what}) occur most often in `/app/{src}` "
                 f"(space-separated: user name, city, word)? List {'them' if k > 1 else 'it'} in `/app/{out}`, "
                 "most frequent first, one per line; on equal counts the alphabetically smaller value comes first.",
                 f"In `/app/{src}` every line is `user name, city, word` separated by single spaces. Count how often "
                 f"each {what} (the {nth} field) appears and save the top {k} to `/app/{out}`, highest count first "
                 "and alphabetically among equal counts, one per line.",
                 f"The {nth} field of each line of `/app/{src}` is a {what} (fields: user name, city, word, separated "
                 f"by spaces). Write the {k} {what}{plural} seen most often to `/app/{out}`, one per line, by count "
                 "descending, ties sorted alphabetically.")
    sol = (f"cut -d' ' -f{field} /app/{src} | sort | uniq -c | sort -k1,1nr -k2,2 | head -n {k} | awk '{{print $2}}' "
           f"> /app/{out}")
    expected = (f"[v for v, _ in sorted(__import__('collections').Counter(x.split()[{field - 1}] for x in "
                f"lines({src!r})).items(), key=lambda vc: (-vc[1], vc[0]))[:{k}]]")
    return TaskSpec("top-values", "log-analysis", ins, {src: data}, sol, _checks_lines(out, expected))


def find_size(d: _Draw) -> TaskSpec:
    root, out = d.dirs[0], d.file(5)
    limit = d.rng.choice((100, 200, 300, 500, 2000))
    bigger = d.rng.random() < 0.6
    files = {}
    for i in range(8):
        sub = f"{d.dirs[1]}/" if i % 3 == 1 else ""
        size = d.rng.choice((limit // 4, limit // 2, limit * 2, limit * 3)) + d.rng.randint(1, 9)
        files[f"{root}/{sub}{d.stems[i % 6]}_{i}.dat"] = "x" * (size - 1) + "\n"
    test = "p.stat().st_size > " + str(limit) if bigger else "p.stat().st_size < " + str(limit)
    rel = d.rng.random() < 0.5
    where = f"relative to `/app/{root}`" if rel else "as absolute paths"
    cmp = f"{'larger' if bigger else 'smaller'} than {limit} bytes"
    ins = d.pick(f"List the files under `/app/{root}` (subdirectories too) that are {cmp}, {where}, sorted, one per "
                 f"line, in `/app/{out}`.",
                 f"Write to `/app/{out}` the paths ({where}) of every file below `/app/{root}` whose size is {cmp}, "
                 "sorted alphabetically.",
                 f"Search `/app/{root}` recursively for files {cmp} and save their paths ({where}) to "
                 f"`/app/{out}`, one per line in sorted order.")
    size = f"-type f -size {'+' if bigger else '-'}{limit}c"  # c: bytes, no rounding up to blocks
    # `find *` in the directory prints paths relative to it: no `sed 's|^\./||'`, whose escapes a 135M policy
    # garbles into `sed 's/^/\./'`
    sol = (f"cd /app/{root} && find * {size} | sort > /app/{out}" if rel else
           f"find /app/{root} {size} | sort > /app/{out}")
    shown = f"str(p.relative_to(DATA / {root!r}))" if rel else "str(APP / p.relative_to(DATA))"
    expected = f"sorted({shown} for p in (DATA / {root!r}).rglob('*') if p.is_file() and {test})"
    return TaskSpec("find-size", "file-manipulation", ins, files, sol, _checks_lines(out, expected))


def tar_gz_files(d: _Draw) -> TaskSpec:
    root, name = d.dirs[0], d.stems[5] + d.rng.choice((".tgz", ".tar.gz"))
    ext = d.rng.choice(("txt", "csv", "cfg", "md"))
    files = _tree(d, root, (ext, "dat"), 6)
    files = {k: v for k, v in files.items() if k.count("/") == 1}  # top level only
    files[f"{root}/{d.stems[0]}_k.{ext}"] = "keep\n"
    ins = d.pick(f"Pack the `.{ext}` files of `/app/{root}` into the gzip-compressed tarball `/app/{name}`, with "
                 f"bare file names as member names (no `{root}/` prefix) and nothing else inside.",
                 f"Create `/app/{name}`, a tar.gz holding just the `*.{ext}` files from `/app/{root}`, each stored "
                 "under its bare file name.",
                 f"Archive every `.{ext}` file in `/app/{root}` into `/app/{name}` (tar with gzip compression). "
                 f"Members must be the plain file names, without any directory part; leave out all other files.")
    checks = _checks(f"""
def test_members():
    import tarfile

    with tarfile.open(APP / '{name}', 'r:gz') as t:
        names = sorted(m.name.removeprefix('./') for m in t.getmembers() if m.isfile())
    assert names == sorted(p.name for p in (DATA / {root!r}).glob('*.{ext}'))""")
    return TaskSpec("tar-gz-files", "file-manipulation", ins, files,
                    f"cd /app/{root} && tar -czf /app/{name} *.{ext}", checks)


def git_tag(d: _Draw) -> TaskSpec:
    repo, files, setup = _repo(d)
    tag = d.rng.choice(("v0.{}.0", "v2.{}", "release-{}", "v{}.1.0")).format(d.rng.randint(1, 9))
    annotated = d.rng.random() < 0.6
    msg = d.rng.choice(("First beta", f"Ship {tag}", "Stable build", f"Milestone {d.rng.randint(2, 20)}"))
    if annotated:
        ins = d.pick(f"Tag the current commit of the git repo `/app/{repo}` as `{tag}` with an annotated tag whose "
                     f"message is `{msg}`.",
                     f"In `/app/{repo}`, add the annotated git tag `{tag}` (message: `{msg}`) to `HEAD`.",
                     f"Mark the latest commit of the repository `/app/{repo}` with an annotated tag called `{tag}` "
                     f"and the tag message `{msg}`.")
        sol = f"git -C /app/{repo} tag -a {tag} -m '{msg}'"
    else:
        ins = d.pick(f"Add a lightweight git tag `{tag}` to the latest commit of `/app/{repo}`.",
                     f"Create the tag `{tag}` (a plain, lightweight tag) on `HEAD` in the git repository `/app/{repo}`.",
                     f"The git repository `/app/{repo}` needs a lightweight (not annotated) tag `{tag}` on its "
                     "current commit. Add it.")
        sol = f"git -C /app/{repo} tag {tag}"
    r = repr("/app/" + repo)
    # an annotated tag's ref names a tag object, a lightweight one's the commit itself
    same = "!=" if annotated else "=="
    lines = ["def test_tag():", f"    head = git({r}, 'rev-parse', 'HEAD')",
             f"    assert head and git({r}, 'rev-parse', '{tag}^{{commit}}') == head",
             f"    assert git({r}, 'rev-parse', {tag!r}) {same} head", ""]
    if annotated:
        lines[-1:] = [f"    assert git({r}, 'tag', '-l', '--format=%(contents:subject)', {tag!r}) == {msg!r}", ""]
    return TaskSpec("git-tag", "git", ins, files, sol, _git_checks(lines), setup, git=True)


def group_totals(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1, "csv")
    header, rows = _table(d, d.rng.randint(6, 11))
    agg = d.rng.choice(("sum", "count", "max"))
    key, key_col = d.rng.choice((("name", 0), ("city", 1)))
    what = {"sum": "total `qty`", "count": "number of rows", "max": "largest `price`"}[agg]
    ins = d.pick(f"`/app/{src}` has the columns `{','.join(header)}`. For each `{key}`, compute the {what}, and write "
                 f"`/app/{out}` with the header `{key},{agg}` and one `{key},value` line per {key}, sorted by {key}.",
                 f"Group the CSV `/app/{src}` (columns `{','.join(header)}`) by `{key}` and write the {what} of each "
                 f"group to `/app/{out}`: header `{key},{agg}`, then one line per {key} in alphabetical order.",
                 f"Using `/app/{src}` (header `{','.join(header)}`), write `/app/{out}` listing the {what} for each "
                 f"distinct `{key}`: first the line `{key},{agg}`, then `{key},value` rows ordered by {key}.")
    expr = {"sum": "int(r[2])", "count": "1", "max": "int(r[3])"}[agg]
    fold = "max" if agg == "max" else "sum"
    sol = (f"python3 - <<'EOF'\nimport csv\nrows = list(csv.DictReader(open(\"/app/{src}\")))\ngroups = {{}}\n"
           f"for r in rows:\n    groups.setdefault(r[\"{key}\"], []).append("
           + {"sum": "int(r[\"qty\"])", "count": "1", "max": "int(r[\"price\"])"}[agg] + ")\n"
           f"with open(\"/app/{out}\", \"w\") as f:\n    f.write(\"{key},{agg}\\n\")\n"
           f"    for k in sorted(groups):\n        f.write(f\"{{k}},{{{fold}(groups[k])}}\\n\")\nEOF")
    expected = (f"['{key},{agg}'] + [f'{{k}},{{v}}' for k, v in sorted({{k: {fold}({expr} for r in rows({src!r}) "
                f"if r[{key_col}] == k) for k in {{r[{key_col}] for r in rows({src!r})}}}}.items())]")
    return TaskSpec("group-totals", "csv-json", ins, {src: _csv(header, rows)}, sol, _checks_lines(out, expected))


def csv_compare_json(d: _Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1, "json")
    header = ["code", "title", "have", "need"]
    rows = [[f"{d.rng.choice('ABCDEFGH')}{d.rng.randint(100, 999)}", d.rng.choice(WORDS), str(d.rng.randint(0, 30)),
             str(d.rng.randint(0, 30))] for _ in range(d.rng.randint(6, 10))]
    rows[0][2], rows[0][3] = "3", "9"
    op, words = d.rng.choice(((">", "greater than"), ("<", "less than"), (">=", "at least")))
    key, order = d.rng.choice((("code", "sorted by `code`"), ("title", "in file order")))
    ins = d.pick(f"Read the CSV `/app/{src}` (columns `{','.join(header)}`) with Python and write `/app/{out}`: a JSON "
                 f"list of the `{key}` of each row whose `have` is {words} its `need`, {order}.",
                 f"Write to `/app/{out}` a JSON array holding the `{key}` values of the rows of `/app/{src}` (columns "
                 f"`{','.join(header)}`) where `have` is {words} `need`, {order}.",
                 f"`/app/{src}` is a CSV with the columns `{','.join(header)}`. Select the rows whose `have` is "
                 f"{words} their `need` and save the list of their `{key}` values as JSON in `/app/{out}`, {order}.")
    sort = key == "code"
    sol = (f"python3 - <<'EOF'\nimport csv, json\nrows = list(csv.DictReader(open(\"/app/{src}\")))\n"
           f"keep = [r[\"{key}\"] for r in rows if int(r[\"have\"]) {op} int(r[\"need\"])]\n"
           f"json.dump({'sorted(keep)' if sort else 'keep'}, open(\"/app/{out}\", \"w\"))\nEOF")
    col = header.index(key)
    pick = f"[r[{col}] for r in rows({src!r}) if int(r[2]) {op} int(r[3])]"
    checks = _checks(f"""
def test_json_list():
    assert json.loads((APP / {out!r}).read_text()) == {'sorted(' + pick + ')' if sort else pick}""")
    return TaskSpec("csv-compare-json", "csv-json", ins, {src: _csv(header, rows)}, sol, checks)


FAMILIES: tuple[Callable[[_Draw], TaskSpec], ...] = (
    head_lines, skip_header, grep_last, grep_first, grep_lines, grep_invert, grep_count, count_lines, count_words,
    sort_lines, sort_numbers, unique_lines, count_distinct, dedupe_in_order, change_case, replace_word,
    reverse_lines, line_range, drop_blank, prefix_lines, join_files, csv_column, csv_sum, csv_max,
    csv_filter_python, json_field, json_count, find_ext, count_files, copy_into, move_rename, delete_pattern,
    make_script, tar_directory, tar_extract, git_commit_file, git_branch, git_move, git_last_message,
    python_script, python_fix_constant, python_fix_operator, tail_lines, number_lines, top_values, find_size,
    tar_gz_files, git_tag, group_totals, csv_compare_json,
)


def family_name(family: Callable[[_Draw], TaskSpec]) -> str:
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
            spec = family(_Draw(random.Random(f"{seed}:{family.__name__}:{k}")))
            out.append((task_id(spec.family, k, seed), spec))
    return out


_TOML = """version = "1.0"

[metadata]
author_name = "FireFlash (generated)"
difficulty = "easy"
category = "{category}"
tags = ["{category}", "generated", "{family}"]
tier = 1

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 60.0
cpus = 1
memory_mb = 1024
storage_mb = 512
allow_internet = false
"""
_GIT_IDENTITY = ('ENV GIT_AUTHOR_NAME="FireFlash" GIT_AUTHOR_EMAIL="tasks@fireflash.invalid" '
                 'GIT_COMMITTER_NAME="FireFlash" GIT_COMMITTER_EMAIL="tasks@fireflash.invalid"')
# python:3.11-slim has no git; the host's userland skips an install of what it has (tasks/dockerfile.py)
_INSTALL_GIT = "RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*"
_TEST_SH = """#!/bin/bash
# The sandbox's python3 may lack pytest: FireFlash's stdlib runner (the verifier writes it) runs the checks.
cd /app || exit 1
python3 /tests/junit_runner.py --junitxml /logs/verifier/junit.xml /tests/test_outputs.py
"""


def write_task(task_id: str, spec: TaskSpec, out_dir: Path) -> Path:
    """Write ``spec`` as a Harbor task directory ``out_dir/task_id`` (replacing an older one); returns it."""
    root = out_dir / task_id
    tmp = out_dir / f".{task_id}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "environment" / "app").mkdir(parents=True)
    (tmp / "solution").mkdir()
    (tmp / "tests").mkdir(exist_ok=True)
    for rel, text in spec.files.items():  # the workspace, and the pristine copies the checks compute from
        for path in (tmp / "environment" / "app" / rel, tmp / "tests" / "data" / rel):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    docker = ["FROM python:3.11-slim-bookworm"] + ([_INSTALL_GIT, "WORKDIR /app", _GIT_IDENTITY] if spec.git
                                                    else ["WORKDIR /app"])
    docker += ["COPY app/ /app/"] + [f"RUN {line}" for line in spec.setup]
    (tmp / "environment" / "Dockerfile").write_text("\n".join(docker) + "\n")
    (tmp / "instruction.md").write_text(spec.instruction + "\n")
    (tmp / "task.toml").write_text(_TOML.format(category=spec.category, family=spec.family))
    (tmp / "solution" / "solve.sh").write_text("#!/bin/bash\n" + spec.solution + "\n")
    (tmp / "tests" / "test.sh").write_text(_TEST_SH)
    (tmp / "tests" / "test_outputs.py").write_text(spec.checks)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


MANIFEST = "generated.json"
LAYOUT = 3  # what write_task writes besides the specs (2: git in git tasks' images; 3: no runner copy); a change rewrites


def write_tasks(per_family: int, out_dir: Path, seed: int = 0, families: Sequence[str] = ()) -> list[Path]:
    """Generate and write the tasks once: reused while ``out_dir``'s manifest matches what would be written."""
    pairs = generate(per_family, seed, families)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = out_dir / MANIFEST
    digest = hashlib.sha256(json.dumps([(i, asdict(s)) for i, s in pairs], sort_keys=True).encode()).hexdigest()
    want = {"per_family": per_family, "seed": seed, "digest": digest, "layout": LAYOUT}
    if manifest.is_file() and json.loads(manifest.read_text()) == want:
        return [out_dir / task_id for task_id, _ in pairs]
    paths = [write_task(task_id, spec, out_dir) for task_id, spec in pairs]
    manifest.write_text(json.dumps(want))
    return paths
