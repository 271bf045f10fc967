"""Git families: commit a file, branch, ``git mv``, the last message, an annotated tag; each instance starts from a
one-commit repository with fixed dates."""

from __future__ import annotations

from fireflash.tasks.families.draw import WORDS, Draw, TaskSpec

_GIT_ENV = 'export GIT_AUTHOR_DATE="2024-01-01T12:00:00Z" GIT_COMMITTER_DATE="2024-01-01T12:00:00Z"'


def _repo(d: Draw) -> tuple[str, dict[str, str], list[str]]:
    repo = d.dirs[0]
    files = {f"{repo}/{d.stems[0]}.py": "VALUE = 1\n", f"{repo}/README.md": f"# {repo}\n"}
    setup = [f"cd /app/{repo} && git init -q -b main && git add -A && {_GIT_ENV} && git commit -qm 'Initial commit'"]
    return repo, files, setup


def _git_checks(lines: list[str]) -> str:
    return "\n".join(["import subprocess", "", "",
                      "def git(repo, *args):",
                      "    return subprocess.run(['git', '-C', repo, *args], capture_output=True, text=True,",
                      "                          timeout=10, check=False).stdout.strip()", "", ""] + lines)


def git_commit_file(d: Draw) -> TaskSpec:
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


def git_branch(d: Draw) -> TaskSpec:
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


def git_move(d: Draw) -> TaskSpec:
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


def git_last_message(d: Draw) -> TaskSpec:
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


def git_tag(d: Draw) -> TaskSpec:
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
