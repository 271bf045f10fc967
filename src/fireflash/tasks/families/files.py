"""File families: find by extension or size, count, copy, move, delete, make a script executable, tar and untar."""

from __future__ import annotations

from fireflash.tasks.families.checks import check_lines, check_value, checks_of
from fireflash.tasks.families.draw import WORDS, Draw, TaskSpec, as_text


def _tree(d: Draw, root: str, exts: tuple[str, ...], n: int) -> dict[str, str]:
    files = {}
    for i in range(n):
        sub = f"{d.dirs[1]}/" if i % 3 == 2 else ""
        files[f"{root}/{sub}{d.stems[i % 6]}_{i}.{d.rng.choice(exts)}"] = " ".join(d.words(3)) + "\n"
    return files


def find_ext(d: Draw) -> TaskSpec:
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
                    check_lines(out, f"sorted(str(APP / p.relative_to(DATA)) for p in (DATA / {root!r}).rglob('*.{ext}'))"))


def count_files(d: Draw) -> TaskSpec:
    root, out = d.dirs[0], d.file(5)
    ext = d.rng.choice(("log", "txt", "json"))
    files = {f"{root}/{d.stems[i % 6]}{i}.{ext if i % 2 else 'dat'}": "x\n" for i in range(d.rng.randint(4, 11))}
    ins = d.pick(f"How many `.{ext}` files are in `/app/{root}`? Write the number to `/app/{out}`.",
                 f"Count the files directly in `/app/{root}` whose names end in `.{ext}`; save the count in "
                 f"`/app/{out}`.")
    return TaskSpec("count-files", "file-manipulation", ins, files,
                    f"ls /app/{root}/*.{ext} | wc -l > /app/{out}",
                    check_value(out, f"len(list((DATA / {root!r}).glob('*.{ext}')))"))


def copy_into(d: Draw) -> TaskSpec:
    src, dst = d.file(0), d.dirs[0]
    text = as_text(d.lines(3))
    ins = d.pick(f"Copy `/app/{src}` into a new directory `/app/{dst}` (keep the original and the file name).",
                 f"Create the directory `/app/{dst}` and put a copy of `/app/{src}` in it.")
    checks = checks_of(f"""
def test_copied():
    assert (APP / {dst!r} / {src!r}).read_text() == text({src!r})
    unchanged({src!r})""")
    return TaskSpec("copy-into", "file-manipulation", ins, {src: text},
                    f"mkdir -p /app/{dst} && cp /app/{src} /app/{dst}/", checks)


def move_rename(d: Draw) -> TaskSpec:
    src, new = d.file(0), d.file(1, d.rng.choice(("txt", "bak", "old")))
    text = as_text(d.lines(2))
    ins = d.pick(f"Rename `/app/{src}` to `/app/{new}`.", f"Move `/app/{src}` to `/app/{new}`; the old name must "
                 "no longer exist.")
    checks = checks_of(f"""
def test_moved():
    assert (APP / {new!r}).read_text() == text({src!r})


def test_old_gone():
    assert (APP / {new!r}).is_file() and not (APP / {src!r}).exists()""")
    return TaskSpec("move-rename", "file-manipulation", ins, {src: text}, f"mv /app/{src} /app/{new}", checks)


def delete_pattern(d: Draw) -> TaskSpec:
    root, ext = d.dirs[0], d.rng.choice(("tmp", "bak", "swp"))
    files = {f"{root}/{d.stems[i % 6]}{i}.{ext if i % 2 else 'txt'}": "x\n" for i in range(8)}
    ins = d.pick(f"Delete every `.{ext}` file in `/app/{root}`; leave the other files alone.",
                 f"Remove the `*.{ext}` files from `/app/{root}` and nothing else.")
    checks = checks_of(f"""
def test_deleted():
    gone = [p.relative_to(DATA) for p in (DATA / {root!r}).glob('*.{ext}')]
    assert gone and not any((APP / p).exists() for p in gone)


def test_others_kept():
    test_deleted()
    kept = [p.relative_to(DATA) for p in (DATA / {root!r}).iterdir() if p.suffix != '.{ext}']
    assert all((APP / p).is_file() for p in kept)""")
    return TaskSpec("delete-pattern", "file-manipulation", ins, files, f"rm /app/{root}/*.{ext}", checks)


def make_script(d: Draw) -> TaskSpec:
    name, word = d.file(0, "sh"), d.rng.choice(WORDS)
    ins = d.pick(f"Write an executable bash script `/app/{name}` that prints `{word}`.",
                 f"Create `/app/{name}`, a bash script that outputs the line `{word}`, and make it executable.")
    checks = "\n".join(["import os", "import subprocess", "", "", "def test_executable():",
                        f"    assert os.access('/app/{name}', os.X_OK)", "", "", "def test_output():",
                        f"    out = subprocess.run(['/app/{name}'], capture_output=True, text=True, timeout=10).stdout",
                        f"    assert out.strip() == {word!r}", ""])
    sol = f"printf '#!/bin/bash\\necho {word}\\n' > /app/{name}\nchmod +x /app/{name}"
    return TaskSpec("make-script", "shell-scripting", ins, {}, sol, checks)


def tar_directory(d: Draw) -> TaskSpec:
    root, name = d.dirs[0], d.stems[5]
    files = _tree(d, root, ("txt", "cfg"), 4)
    ins = d.pick(f"Create a tar archive `/app/{name}.tar` (not compressed) of the directory `/app/{root}`, so that "
                 f"its entries start with `{root}/`.",
                 f"Pack the folder `/app/{root}` into the uncompressed tarball `/app/{name}.tar`, with paths "
                 f"relative to `/app` (like `{root}/...`).")
    checks = checks_of(f"""
def test_members():
    import tarfile

    with tarfile.open(APP / '{name}.tar') as t:
        names = sorted(m.name.removeprefix('./') for m in t.getmembers() if m.isfile())
    assert names == sorted(str(p.relative_to(DATA)) for p in (DATA / {root!r}).rglob('*') if p.is_file())""")
    return TaskSpec("tar-directory", "file-manipulation", ins, files, f"tar -cf /app/{name}.tar -C /app {root}", checks)


def tar_extract(d: Draw) -> TaskSpec:
    root, dst, name = d.dirs[0], d.dirs[2], d.stems[5]
    files = _tree(d, root, ("txt", "cfg"), 4)
    ins = d.pick(f"Unpack the gzip-compressed tarball `/app/{name}.tar.gz` into the directory `/app/{dst}` "
                 "(create it).",
                 f"Extract `/app/{name}.tar.gz` so that its files end up under `/app/{dst}`.")
    checks = checks_of(f"""
def test_extracted():
    inner = [p.relative_to(DATA / {root!r}) for p in (DATA / {root!r}).rglob('*') if p.is_file()]
    assert inner and all((APP / {dst!r} / p).read_text() == text(f"{root}/{{p}}") for p in inner)""")
    setup = [f"cd /app/{root} && tar -czf /app/{name}.tar.gz * && rm -rf /app/{root}"]
    return TaskSpec("tar-extract", "file-manipulation", ins, files,
                    f"mkdir -p /app/{dst} && tar -xzf /app/{name}.tar.gz -C /app/{dst}", checks, setup)


def find_size(d: Draw) -> TaskSpec:
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
    return TaskSpec("find-size", "file-manipulation", ins, files, sol, check_lines(out, expected))


def tar_gz_files(d: Draw) -> TaskSpec:
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
    checks = checks_of(f"""
def test_members():
    import tarfile

    with tarfile.open(APP / '{name}', 'r:gz') as t:
        names = sorted(m.name.removeprefix('./') for m in t.getmembers() if m.isfile())
    assert names == sorted(p.name for p in (DATA / {root!r}).glob('*.{ext}'))""")
    return TaskSpec("tar-gz-files", "file-manipulation", ins, files,
                    f"cd /app/{root} && tar -czf /app/{name} *.{ext}", checks)
