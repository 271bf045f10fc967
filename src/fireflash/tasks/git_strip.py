"""Strip answer leaks out of every git repository of a task environment, as SWE-bench does (issue 27).

A task's environment often holds git repositories whose history goes further than the task's start: a
branch or pull-request ref with the fix, a tag, a filter-branch backup (``refs/original``), a stash, a
reflog entry of a commit reset away, a blob written with ``git hash-object -w``. ``git log --all``,
``git reflog`` or ``git fsck --lost-found`` hand the agent the answer. So the loader appends
``STRIP_GIT`` as the last setup command of every task (it runs once in the parent, after the task's own
setup), and gate 5 runs ``CHECK_GIT`` on the prepared environment and names what is left.

What the strip keeps, in every repository found at any depth (a ``.git`` directory, a bare repository,
a submodule's ``.git/modules/<name>``):
    - HEAD, the branch it is on (``HEAD``'s symbolic ref) and every commit reachable from it;
    - the index and the working tree exactly as the task set them up (staged blobs stay);
    - an operation in progress (``MERGE_HEAD``, ``CHERRY_PICK_HEAD``, ``REVERT_HEAD``, ``REBASE_HEAD``,
      ``rebase-*/orig-head``): its commits stay, since a task may be "resolve this merge".
What it removes: every other ref (branches, tags, ``refs/remotes``, ``refs/pull``, ``refs/original``,
``refs/notes``, ``refs/stash``, ``refs/replace``; loose and packed), remotes, reflogs, ``ORIG_HEAD``,
``FETCH_HEAD``, ``COMMIT_EDITMSG``, ``rr-cache`` (recorded conflict resolutions), ``lost-found``,
commit-graph files, ``.keep`` marks, alternates (their reachable objects are copied in first), and then
every object no longer reachable (``repack -a -d`` + ``prune --expire=now``).

A task whose point is the git state itself (recover a dangling commit, merge a branch, push to a local
remote) sets ``keep_git_history = true`` in task.toml's ``[environment]`` (``keep_git_history: true`` in a
Terminal-Bench task.yaml): nothing is stripped. Kept history is then judged by what it holds (issue 26):
gate 5 looks for the reference solution's output (the lines the solution writes that the environment did
not have) in every object beyond HEAD (``ANSWER_IN_GIT``), and names how the object is reached: ``refs``
(a branch, tag, stash... other than HEAD's), ``reflogs`` or ``unreachable``. The state the task is built on
is declared with ``git_premise`` (``git_premise = ["reflogs", "unreachable"]`` for "recover the commit that
was reset away"): answer objects reached only that way are the premise, a note; answer objects reached any
other way (a ``future`` branch holding the fix) are a leak, and gate 5 fails. History that holds no answer
is a note. Not guaranteed: repositories in read-only host binds (``/usr``, ``/etc``, ``sandbox.ro_binds``)
are not searched, and without ``git`` in the environment nothing is stripped (gate 5 then says so).

The scripts address the sandbox's own ``/``; under the ``unsafe-local`` backend they address its box
(``$FIREFLASH_SANDBOX_ROOT``), never the host's files.
"""

from __future__ import annotations

KEEP_FIELD = "keep_git_history"
PREMISE_FIELD = "git_premise"
PREMISE_KINDS = ("refs", "reflogs", "unreachable")  # how an object beyond HEAD is reached (ANSWER_IN_GIT)

# Every git directory under the sandbox's writable filesystems (-xdev keeps out the host's read-only
# binds; /tmp is its own tmpfs): a directory holding a HEAD file, objects/ and refs/.
_FIND_GIT_DIRS = r"""
_ff_root="${FIREFLASH_SANDBOX_ROOT:-}"
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_COMMON_DIR GIT_NAMESPACE GIT_CEILING_DIRECTORIES
_ff_git_dirs() {
  find "$_ff_root/" "$_ff_root/tmp" -xdev -name HEAD \( -type f -o -type l \) 2>/dev/null | sort -u | while IFS= read -r h; do
    d=${h%/HEAD}; [ -d "$d/objects" ] && [ -d "$d/refs" ] && printf '%s\n' "$d"
  done
}
g() { git -c safe.directory='*' -c core.hooksPath=/dev/null -c gc.auto=0 --git-dir="$d" "$@"; }
"""

STRIP_GIT = (
    "( # fireflash: strip git history beyond HEAD (fireflash.tasks.git_strip; opt out: keep_git_history)\n"
    + _FIND_GIT_DIRS
    + r"""
command -v git >/dev/null 2>&1 || exit 0
_ff_git_dirs | while IFS= read -r d; do
  [ -d "$d" ] || continue
  cur=$(g symbolic-ref -q HEAD)
  for x in $(g remote 2>/dev/null); do g remote remove "$x" >/dev/null 2>&1; done
  g for-each-ref --format='%(refname)' 2>/dev/null | while IFS= read -r r; do
    [ "$r" = "$cur" ] || printf 'delete %s\n' "$r"
  done | g update-ref --no-deref --stdin 2>/dev/null
  rm -rf "$d/logs" "$d/ORIG_HEAD" "$d/FETCH_HEAD" "$d/COMMIT_EDITMSG" "$d/rr-cache" "$d/lost-found" \
    "$d/objects/info/commit-graph" "$d/objects/info/commit-graphs" "$d/objects/pack/multi-pack-index" \
    "$d"/objects/pack/*.keep
  i=0
  for p in MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD REBASE_HEAD rebase-merge/orig-head rebase-apply/orig-head; do
    for sha in $(cat "$d/$p" 2>/dev/null); do
      i=$((i + 1)); g update-ref "refs/fireflash-keep/$i" "$sha" 2>/dev/null
    done
  done
  g repack -a -d -q 2>/dev/null && rm -f "$d/objects/info/alternates"
  g prune --expire=now 2>/dev/null
  g for-each-ref --format='delete %(refname)' refs/fireflash-keep/ 2>/dev/null | g update-ref --stdin 2>/dev/null
done
); true"""
)
"""The setup command that strips every repository of the environment (see the module docstring)."""

CHECK_GIT = (
    "("
    + _FIND_GIT_DIRS
    + r"""
_ff_found=$(_ff_git_dirs)
if [ -n "$_ff_found" ] && ! command -v git >/dev/null 2>&1; then
  printf '%s\n' "$_ff_found" | while IFS= read -r d; do
    printf '%s\tgit is not installed in the environment, so its history could be neither stripped nor checked\n' "$d"
  done
  exit 0
fi
printf '%s\n' "$_ff_found" | while IFS= read -r d; do
  [ -n "$d" ] || continue
  cur=$(g symbolic-ref -q HEAD)
  roots=""
  for p in MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD REBASE_HEAD rebase-merge/orig-head rebase-apply/orig-head; do
    roots="$roots $(cat "$d/$p" 2>/dev/null)"
  done
  g for-each-ref --format='%(refname) %(objectname)' | while read -r r sha; do
    [ "$r" = "$cur" ] && continue
    n=$(g rev-list --count "$sha" --not HEAD -- 2>/dev/null || echo '?')
    printf '%s\tref %s (%s commit(s) not in HEAD'"'"'s history)\n' "$d" "$r" "$n"
  done
  for x in $(g remote); do printf '%s\tremote %s (%s)\n' "$d" "$x" "$(g remote get-url "$x" 2>/dev/null)"; done
  [ -d "$d/logs" ] && find "$d/logs" -type f -size +0 | while IFS= read -r f; do
    printf '%s\treflog %s (%s entries)\n' "$d" "${f#"$d"/}" "$(wc -l < "$f")"
  done
  for f in ORIG_HEAD FETCH_HEAD rr-cache lost-found objects/info/alternates; do
    [ -e "$d/$f" ] && printf '%s\t%s is present\n' "$d" "$f"
  done
  t=$(mktemp -d)
  g rev-list --objects --all --indexed-objects $roots 2>/dev/null | cut -d' ' -f1 | LC_ALL=C sort -u > "$t/reachable"
  g cat-file --batch-all-objects --batch-check='%(objectname) %(objecttype)' 2>/dev/null | LC_ALL=C sort > "$t/all"
  LC_ALL=C join -v1 "$t/all" "$t/reachable" > "$t/unreachable"
  n=$(wc -l < "$t/unreachable")
  if [ "$n" -gt 0 ]; then
    printf '%s\t%s unreachable object(s): %s\n' "$d" "$n" \
      "$(head -n 4 "$t/unreachable" | while read -r sha kind; do printf '%s %s ' "$kind" "${sha:0:10}"; done)"
  fi
  rm -rf "$t"
done | head -n 80
); true"""
)
"""Gate 5's check: one ``<git dir>\\t<finding>`` line per leak left in the environment's repositories."""


def git_findings(output: str) -> list[tuple[str, str]]:
    """``CHECK_GIT``'s output → (repository, finding) pairs; a ``.git`` directory is named by its work tree."""
    found = []
    for line in output.splitlines():
        repo, sep, finding = line.partition("\t")
        if sep:
            found.append((repo.removesuffix("/.git"), finding.strip()))
    return found


def answer_in_git(patterns: list[str]) -> str:
    """Gate 5's check of kept history: one ``<git dir>\t<kind>\t<blob>`` line per object beyond HEAD (not
    reachable from HEAD or the index) that holds one of ``patterns`` (lines of the reference solution's
    output), ``kind`` being how it is reached: ``refs`` (refs other than HEAD's branch, an operation in
    progress), else ``reflogs``, else ``unreachable``."""
    end = "FF_ANSWER_PATTERNS_EOF"
    body = "\n".join(p for p in patterns if p.strip() and end not in p)  # an empty line would match everything
    return (
        "("
        + _FIND_GIT_DIRS
        + f"""
command -v git >/dev/null 2>&1 || exit 0
pat=$(mktemp)
cat > "$pat" <<'{end}'
{body}
{end}
"""
        + r"""
_ff_git_dirs | while IFS= read -r d; do
  [ -n "$d" ] || continue
  cur=$(g symbolic-ref -q HEAD)
  t=$(mktemp -d)
  roots=""
  for p in MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD REBASE_HEAD rebase-merge/orig-head rebase-apply/orig-head; do
    roots="$roots $(cat "$d/$p" 2>/dev/null)"
  done
  g rev-list --objects HEAD --indexed-objects 2>/dev/null | cut -d' ' -f1 | LC_ALL=C sort -u > "$t/head"
  others=$(g for-each-ref --format='%(refname)' | grep -vxF "${cur:-HEAD}")
  g rev-list --objects $others $roots --not HEAD -- 2>/dev/null | cut -d' ' -f1 | LC_ALL=C sort -u > "$t/refs"
  g rev-list --objects --reflog --not HEAD -- 2>/dev/null | cut -d' ' -f1 | LC_ALL=C sort -u > "$t/reflogs"
  g cat-file --batch-all-objects --batch-check='%(objectname) %(objecttype)' 2>/dev/null     | awk '$2 == "blob" { print $1 }' | LC_ALL=C sort > "$t/blobs"
  LC_ALL=C comm -23 "$t/blobs" "$t/head" | head -n 5000 | while read -r sha; do
    g cat-file blob "$sha" 2>/dev/null | grep -qFf "$pat" || continue
    kind=unreachable
    grep -qxF "$sha" "$t/reflogs" && kind=reflogs
    grep -qxF "$sha" "$t/refs" && kind=refs
    printf '%s	%s	%s
' "$d" "$kind" "$sha"
  done
  rm -rf "$t"
done | head -n 40
rm -f "$pat"
); true"""
    )
