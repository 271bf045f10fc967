"""Python families: write a small script, fix a wrong constant, fix a wrong operator."""

from __future__ import annotations

from fireflash.tasks.families.checks import checks_of
from fireflash.tasks.families.draw import Draw, TaskSpec, as_text


def python_script(d: Draw) -> TaskSpec:
    src, out = d.file(0), d.file(2)
    script = f"{d.rng.choice(('total', 'summer', 'adder'))}_{d.stems[1]}.py"
    nums = [d.rng.randint(-20, 99) for _ in range(d.rng.randint(4, 9))]
    ins = d.pick(f"Write a Python script `/app/{script}` that reads the integers in `/app/{src}` (one per line) and "
                 f"writes their sum to `/app/{out}`. Run it.",
                 f"Create `/app/{script}`: it must add up the numbers listed in `/app/{src}` and write the total to "
                 f"`/app/{out}`. Then run the script.")
    sol = (f"cat > /app/{script} <<'EOF'\nnums = [int(x) for x in open(\"/app/{src}\").read().split()]\n"
           f"open(\"/app/{out}\", \"w\").write(f\"{{sum(nums)}}\\n\")\nEOF\npython3 /app/{script}")
    checks = checks_of(f"""
def test_script_and_total():
    assert (APP / {script!r}).is_file(), "the script was not written"
    assert (APP / {out!r}).read_text().strip() == str(sum(int(x) for x in lines({src!r})))""")
    return TaskSpec("python-script", "python-scripts", ins, {src: as_text([str(x) for x in nums])}, sol, checks)


def python_fix_constant(d: Draw) -> TaskSpec:
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


def python_fix_operator(d: Draw) -> TaskSpec:
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
