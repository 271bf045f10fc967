"""CSV and JSON families: a column, a sum, a maximum, a filter in Python, a JSON field or count, a group-by and a
CSV filter written as JSON."""

from __future__ import annotations

import json

from fireflash.tasks.families.checks import check_lines, check_value, checks_of
from fireflash.tasks.families.draw import CITIES, NAMES, WORDS, Draw, TaskSpec, as_text


def _table(d: Draw, n: int) -> tuple[list[str], list[list[str]]]:
    header = ["name", "city", "qty", "price"]
    rows = [[d.rng.choice(NAMES), d.rng.choice(CITIES), str(d.rng.randint(1, 40)), str(d.rng.randint(2, 90))]
            for _ in range(n)]
    return header, rows


def _csv(header: list[str], rows: list[list[str]]) -> str:
    return as_text([",".join(header)] + [",".join(r) for r in rows])


def csv_column(d: Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1)
    header, rows = _table(d, d.rng.randint(4, 8))
    col = d.rng.randrange(4)
    ins = d.pick(f"`/app/{src}` is a CSV file with the header `{','.join(header)}`. Write the values of the "
                 f"`{header[col]}` column (without the header) to `/app/{out}`, one per line.",
                 f"Extract the `{header[col]}` column of `/app/{src}` (comma-separated, one header line) into "
                 f"`/app/{out}`, skipping the header.")
    return TaskSpec("csv-column", "csv-json", ins, {src: _csv(header, rows)},
                    f"tail -n +2 /app/{src} | cut -d, -f{col + 1} > /app/{out}",
                    check_lines(out, f"[r[{col}] for r in rows({src!r})]"))


def csv_sum(d: Draw) -> TaskSpec:
    src, out = d.file(0, "csv"), d.file(1)
    header, rows = _table(d, d.rng.randint(4, 9))
    col = d.rng.choice((2, 3))
    ins = d.pick(f"`/app/{src}` has the columns `{','.join(header)}`. Write the sum of the `{header[col]}` column "
                 f"to `/app/{out}`.",
                 f"Add up the `{header[col]}` values in the CSV `/app/{src}` (it has a header line) and write the "
                 f"total to `/app/{out}`.")
    return TaskSpec("csv-sum", "csv-json", ins, {src: _csv(header, rows)},
                    f"awk -F, 'NR > 1 {{s += ${col + 1}}} END {{print s}}' /app/{src} > /app/{out}",
                    check_value(out, f"sum(int(r[{col}]) for r in rows({src!r}))"))


def csv_max(d: Draw) -> TaskSpec:
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
                    check_value(out, f"max(rows({src!r}), key=lambda r: int(r[3]))[0]"))


def csv_filter_python(d: Draw) -> TaskSpec:
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
    checks = checks_of(f"""
def test_json_list():
    assert json.loads((APP / {out!r}).read_text()) == [r[0] for r in rows({src!r}) if r[1] == {city!r}]""")
    return TaskSpec("csv-filter-python", "csv-json", ins, {src: _csv(header, rows)}, sol, checks)


def json_field(d: Draw) -> TaskSpec:
    src, out = d.file(0, "json"), d.file(1)
    key = d.rng.choice(("owner", "region", "tier", "status"))
    data = {"id": d.rng.randint(100, 999), key: d.rng.choice(WORDS), "tags": d.words(2)}
    ins = d.pick(f"Write the value of the `{key}` field of the JSON object in `/app/{src}` to `/app/{out}`.",
                 f"`/app/{src}` holds a JSON object. Save its `{key}` value (plain text, no quotes) in `/app/{out}`.")
    sol = f"python3 -c \"import json; print(json.load(open('/app/{src}'))['{key}'])\" > /app/{out}"
    return TaskSpec("json-field", "csv-json", ins, {src: json.dumps(data, indent=2) + "\n"}, sol,
                    check_value(out, f"json.loads(text({src!r}))[{key!r}]"))


def json_count(d: Draw) -> TaskSpec:
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
                    check_value(out, f"sum(1 for x in json.loads(text({src!r})) if x['active'])"))


def group_totals(d: Draw) -> TaskSpec:
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
    return TaskSpec("group-totals", "csv-json", ins, {src: _csv(header, rows)}, sol, check_lines(out, expected))


def csv_compare_json(d: Draw) -> TaskSpec:
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
    checks = checks_of(f"""
def test_json_list():
    assert json.loads((APP / {out!r}).read_text()) == {'sorted(' + pick + ')' if sort else pick}""")
    return TaskSpec("csv-compare-json", "csv-json", ins, {src: _csv(header, rows)}, sol, checks)
