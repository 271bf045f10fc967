"""Text families: head/tail, grep, wc, sort, uniq, sed/tr, line ranges, numbering and joining lines, top-k counts."""

from __future__ import annotations

from fireflash.tasks.families.checks import check_lines, check_value
from fireflash.tasks.families.draw import CITIES, LEVELS, NAMES, WORDS, Draw, TaskSpec, as_text


def head_lines(d: Draw) -> TaskSpec:
    src, out, n = d.file(0), d.file(1), d.rng.randint(2, 7)
    lines = d.lines(d.rng.randint(n + 3, n + 9))
    ins = d.pick(f"Write the first {n} lines of `/app/{src}` to `/app/{out}`.",
                 f"Save the top {n} lines of `/app/{src}` as `/app/{out}`, unchanged.",
                 f"Copy only the first {n} lines of `/app/{src}` into a new file `/app/{out}`.")
    return TaskSpec("head-lines", "text-processing", ins, {src: as_text(lines)},
                    f"head -n {n} /app/{src} > /app/{out}", check_lines(out, f"lines({src!r})[:{n}]", (src,)))


def skip_header(d: Draw) -> TaskSpec:
    src, out, k = d.file(0, "csv"), d.file(1, "csv"), d.rng.randint(1, 3)
    lines = [",".join(d.words(3)) for _ in range(d.rng.randint(5, 9))]
    what = "header line" if k == 1 else f"{k} header lines"
    ins = d.pick(f"`/app/{src}` starts with {'a ' if k == 1 else ''}{what}. Write every line after "
                 f"{'it' if k == 1 else 'them'} to `/app/{out}`.",
                 f"Write `/app/{src}` without its first {k} line{'s' if k > 1 else ''} to `/app/{out}`.")
    return TaskSpec("skip-header", "text-processing", ins, {src: as_text(lines)},
                    f"tail -n +{k + 1} /app/{src} > /app/{out}", check_lines(out, f"lines({src!r})[{k}:]", (src,)))


def _log_lines(d: Draw, n: int) -> list[str]:
    return [f"2024-05-{d.rng.randint(1, 28):02d} {d.rng.choice(LEVELS)} {' '.join(d.words(3))}" for _ in range(n)]


def grep_last(d: Draw) -> TaskSpec:
    src, out = d.file(0, "log"), d.file(1)
    level, n = d.rng.choice(("ERROR", "WARN")), d.rng.randint(2, 4)
    lines = _log_lines(d, 14)
    lines[d.rng.randrange(14)] = f"2024-05-01 {level} {' '.join(d.words(3))}"
    lines[d.rng.randrange(14)] = f"2024-05-02 {level} {' '.join(d.words(3))}"
    ins = d.pick(f"Write the last {n} lines of `/app/{src}` that contain `{level}` to `/app/{out}`, oldest first.",
                 f"From `/app/{src}`, keep only the lines with `{level}` and save the final {n} of them in "
                 f"`/app/{out}`.")
    return TaskSpec("grep-last", "log-analysis", ins, {src: as_text(lines)},
                    f"grep '{level}' /app/{src} | tail -n {n} > /app/{out}",
                    check_lines(out, f"[x for x in lines({src!r}) if {level!r} in x][-{n}:]"))


def grep_first(d: Draw) -> TaskSpec:
    src, out, word, n = d.file(0), d.file(1), d.rng.choice(WORDS[:20]), d.rng.randint(1, 3)
    lines = d.lines(12)
    for i in d.rng.sample(range(12), 4):
        lines[i] = f"{lines[i]} {word}"
    ins = d.pick(f"Write the first {n} lines of `/app/{src}` that contain the word `{word}` to `/app/{out}`.",
                 f"Find the lines of `/app/{src}` mentioning `{word}` and save the first {n} of them to `/app/{out}`.")
    return TaskSpec("grep-first", "text-processing", ins, {src: as_text(lines)},
                    f"grep '{word}' /app/{src} | head -n {n} > /app/{out}",
                    check_lines(out, f"[x for x in lines({src!r}) if {word!r} in x][:{n}]"))


def grep_lines(d: Draw) -> TaskSpec:
    src, out = d.file(0, "log"), d.file(1)
    level = d.rng.choice(LEVELS)
    lines = _log_lines(d, 12)
    lines[3] = f"2024-05-03 {level} {' '.join(d.words(3))}"
    ins = d.pick(f"Copy every line of `/app/{src}` whose level is `{level}` to `/app/{out}`, in order.",
                 f"Extract the `{level}` lines of `/app/{src}` into `/app/{out}`.")
    return TaskSpec("grep-lines", "log-analysis", ins, {src: as_text(lines)},
                    f"grep ' {level} ' /app/{src} > /app/{out}",
                    check_lines(out, f"[x for x in lines({src!r}) if x.split()[1] == {level!r}]", (src,)))


def grep_invert(d: Draw) -> TaskSpec:
    src, out, word = d.file(0), d.file(1), d.rng.choice(("TODO", "DRAFT", "SKIP", "OLD"))
    lines = d.lines(10)
    for i in d.rng.sample(range(10), 3):
        lines[i] = f"{word} {lines[i]}"
    ins = d.pick(f"Write `/app/{src}` to `/app/{out}` without the lines that contain `{word}`.",
                 f"Remove every line containing `{word}` from a copy of `/app/{src}` saved as `/app/{out}`; "
                 "keep the original.")
    return TaskSpec("grep-invert", "text-processing", ins, {src: as_text(lines)},
                    f"grep -v '{word}' /app/{src} > /app/{out}",
                    check_lines(out, f"[x for x in lines({src!r}) if {word!r} not in x]", (src,)))


def grep_count(d: Draw) -> TaskSpec:
    src, out = d.file(0, "log"), d.file(1)
    level = d.rng.choice(LEVELS)
    lines = _log_lines(d, d.rng.randint(8, 20))
    lines[0] = f"2024-05-01 {level} {' '.join(d.words(3))}"
    ins = d.pick(f"How many lines of `/app/{src}` have the level `{level}`? Write just the number to `/app/{out}`.",
                 f"Count the `{level}` lines in `/app/{src}` and write the count to `/app/{out}`.")
    return TaskSpec("grep-count", "log-analysis", ins, {src: as_text(lines)},
                    f"grep -c ' {level} ' /app/{src} > /app/{out}",
                    check_value(out, f"sum(x.split()[1] == {level!r} for x in lines({src!r}))"))


def count_lines(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(d.rng.randint(3, 25))
    ins = d.pick(f"Write the number of lines in `/app/{src}` to `/app/{out}` (just the number).",
                 f"Count the lines of `/app/{src}`; save the count in `/app/{out}`.")
    return TaskSpec("count-lines", "text-processing", ins, {src: as_text(lines)},
                    f"wc -l < /app/{src} > /app/{out}", check_value(out, f"len(lines({src!r}))"))


def count_words(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(d.rng.randint(3, 9))
    ins = d.pick(f"Write the number of words in `/app/{src}` to `/app/{out}`.",
                 f"Count all whitespace-separated words in `/app/{src}` and write the number to `/app/{out}`.")
    return TaskSpec("count-words", "text-processing", ins, {src: as_text(lines)},
                    f"wc -w < /app/{src} > /app/{out}", check_value(out, f"len(text({src!r}).split())"))


def sort_lines(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    items = d.rng.sample(WORDS, d.rng.randint(5, 10))
    desc = d.rng.random() < 0.4
    order = "reverse alphabetical" if desc else "alphabetical"
    ins = d.pick(f"Sort the lines of `/app/{src}` in {order} order and write them to `/app/{out}`.",
                 f"Write the lines of `/app/{src}` to `/app/{out}`, sorted in {order} order.")
    return TaskSpec("sort-lines", "text-processing", ins, {src: as_text(items)},
                    f"sort {'-r ' if desc else ''}/app/{src} > /app/{out}",
                    check_lines(out, f"sorted(lines({src!r}), reverse={desc})", (src,)))


def sort_numbers(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    nums = [str(x) for x in d.rng.sample(range(1, 999), d.rng.randint(5, 10))]
    desc = d.rng.random() < 0.5
    ins = d.pick(f"`/app/{src}` holds one integer per line. Write them to `/app/{out}` sorted numerically, "
                 f"{'largest' if desc else 'smallest'} first.",
                 f"Sort the numbers in `/app/{src}` {'in descending' if desc else 'in ascending'} numeric order "
                 f"into `/app/{out}`.")
    return TaskSpec("sort-numbers", "text-processing", ins, {src: as_text(nums)},
                    f"sort -n{'r' if desc else ''} /app/{src} > /app/{out}",
                    check_lines(out, f"[str(v) for v in sorted(map(int, lines({src!r})), reverse={desc})]"))


def unique_lines(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    pool = d.rng.sample(WORDS, 5)
    items = [d.rng.choice(pool) for _ in range(12)]
    ins = d.pick(f"Write the distinct lines of `/app/{src}` to `/app/{out}`, sorted, each once.",
                 f"`/app/{src}` has repeated lines. Save each different line once, in sorted order, to `/app/{out}`.")
    return TaskSpec("unique-lines", "text-processing", ins, {src: as_text(items)},
                    f"sort -u /app/{src} > /app/{out}", check_lines(out, f"sorted(set(lines({src!r})))"))


def count_distinct(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    pool = d.rng.sample(WORDS, d.rng.randint(3, 7))
    items = pool + [d.rng.choice(pool) for _ in range(8)]
    d.rng.shuffle(items)
    ins = d.pick(f"How many different lines does `/app/{src}` contain? Write the number to `/app/{out}`.",
                 f"Count the distinct values (one per line) in `/app/{src}` and save the count in `/app/{out}`.")
    return TaskSpec("count-distinct", "text-processing", ins, {src: as_text(items)},
                    f"sort -u /app/{src} | wc -l > /app/{out}", check_value(out, f"len(set(lines({src!r})))"))


def dedupe_in_order(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    pool = d.rng.sample(WORDS, 6)
    items = [d.rng.choice(pool) for _ in range(12)]
    ins = d.pick(f"Copy `/app/{src}` to `/app/{out}` keeping only the first occurrence of each line, in the "
                 "original order.",
                 f"Remove duplicate lines from `/app/{src}` (keep first occurrences, do not sort); write the "
                 f"result to `/app/{out}`.")
    return TaskSpec("dedupe-in-order", "text-processing", ins, {src: as_text(items)},
                    f"awk '!seen[$0]++' /app/{src} > /app/{out}", check_lines(out, f"list(dict.fromkeys(lines({src!r})))"))


def change_case(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(5)
    upper = d.rng.random() < 0.5
    if not upper:
        lines = [x.title() for x in lines]
    case = "upper case" if upper else "lower case"
    ins = d.pick(f"Write `/app/{src}` converted to {case} to `/app/{out}`.",
                 f"Create `/app/{out}`: the text of `/app/{src}` with every letter in {case}.")
    tr = "a-z A-Z" if upper else "A-Z a-z"
    return TaskSpec("change-case", "text-processing", ins, {src: as_text(lines)},
                    f"tr {tr} < /app/{src} > /app/{out}",
                    check_lines(out, f"[x.{'upper' if upper else 'lower'}() for x in lines({src!r})]", (src,)))


def replace_word(d: Draw) -> TaskSpec:
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
    return TaskSpec("replace-word", "text-processing", ins, {src: as_text(lines)}, sol, check_lines(out, want))


def reverse_lines(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(d.rng.randint(4, 9))
    ins = d.pick(f"Write the lines of `/app/{src}` in reverse order (last line first) to `/app/{out}`.",
                 f"Create `/app/{out}` holding the lines of `/app/{src}` from the bottom up.")
    return TaskSpec("reverse-lines", "text-processing", ins, {src: as_text(lines)},
                    f"tac /app/{src} > /app/{out}", check_lines(out, f"lines({src!r})[::-1]"))


def line_range(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(14)
    a = d.rng.randint(2, 6)
    b = a + d.rng.randint(1, 5)
    ins = d.pick(f"Write lines {a} to {b} (inclusive, counting from 1) of `/app/{src}` to `/app/{out}`.",
                 f"Extract lines {a} through {b} of `/app/{src}` into `/app/{out}`.")
    return TaskSpec("line-range", "text-processing", ins, {src: as_text(lines)},
                    f"sed -n '{a},{b}p' /app/{src} > /app/{out}", check_lines(out, f"lines({src!r})[{a - 1}:{b}]"))


def drop_blank(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(1)
    lines = d.lines(8)
    for i in sorted(d.rng.sample(range(9), 3), reverse=True):
        lines.insert(i, "")
    ins = d.pick(f"Write `/app/{src}` to `/app/{out}` without its empty lines.",
                 f"Remove the blank lines of `/app/{src}`; save the rest, in order, as `/app/{out}`.")
    return TaskSpec("drop-blank", "text-processing", ins, {src: as_text(lines)},
                    f"grep -v '^$' /app/{src} > /app/{out}", check_lines(out, f"[x for x in lines({src!r}) if x]"))


def prefix_lines(d: Draw) -> TaskSpec:
    src, out, mark = d.file(0), d.file(1), d.rng.choice(("> ", "- ", "# ", "* "))
    lines = d.lines(6)
    ins = d.pick(f"Write `/app/{src}` to `/app/{out}` with `{mark}` (including the space) added at the start of "
                 "every line.",
                 f"Prefix each line of `/app/{src}` with `{mark.strip()}` and a space; save it as `/app/{out}`.")
    sed_mark = mark.replace("*", "\\*")
    return TaskSpec("prefix-lines", "text-processing", ins, {src: as_text(lines)},
                    f"sed 's/^/{sed_mark}/' /app/{src} > /app/{out}",
                    check_lines(out, f"[{mark!r} + x for x in lines({src!r})]"))


def join_files(d: Draw) -> TaskSpec:
    a, b, out = d.file(0), d.file(1), d.file(2)
    la, lb = d.lines(3), d.lines(4)
    ins = d.pick(f"Concatenate `/app/{a}` and then `/app/{b}` into `/app/{out}`.",
                 f"Create `/app/{out}` with the contents of `/app/{a}` followed by those of `/app/{b}`.")
    return TaskSpec("join-files", "file-manipulation", ins, {a: as_text(la), b: as_text(lb)},
                    f"cat /app/{a} /app/{b} > /app/{out}", check_lines(out, f"lines({a!r}) + lines({b!r})"))


def tail_lines(d: Draw) -> TaskSpec:
    src, out, n = d.file(0, d.rng.choice(("txt", "log", "md"))), d.file(1), d.rng.choice((2, 4, 5, 6, 7, 8))
    lines = d.lines(d.rng.randint(n + 3, n + 10))
    ins = d.pick(f"Save the final {n} lines of `/app/{src}` as `/app/{out}`.",
                 f"Copy the bottom {n} lines of `/app/{src}` into `/app/{out}`, in their original order.",
                 f"`/app/{out}` should contain only the last {n} lines of `/app/{src}`. Create it.",
                 f"Put the closing {n} lines of the file `/app/{src}` into a new file `/app/{out}`.",
                 f"Extract the {n} lines at the end of `/app/{src}` and store them in `/app/{out}` as they are.")
    return TaskSpec("tail-lines", "text-processing", ins, {src: as_text(lines)},
                    f"tail -n {n} /app/{src} > /app/{out}", check_lines(out, f"lines({src!r})[-{n}:]", (src,)))


def number_lines(d: Draw) -> TaskSpec:
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
    return TaskSpec("number-lines", "text-processing", ins, {src: as_text(lines)}, sol,
                    check_lines(out, f"[f'{{i}}{py_sep}{{x}}' for i, x in enumerate(lines({src!r}), 1)]", (src,)))


def top_values(d: Draw) -> TaskSpec:
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
    data = as_text([" ".join(r) for r in rows])
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
    return TaskSpec("top-values", "log-analysis", ins, {src: data}, sol, check_lines(out, expected))
