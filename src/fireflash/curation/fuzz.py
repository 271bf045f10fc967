"""Malformed final workspaces for gate 8 and the grader fuzz (RECIPE.md §3: "malformed real agent
outputs are scored without crashing").

Each mutation rewrites the files a solution is expected to produce into something a real agent might
leave behind: binary junk, a huge file, nothing, a directory, the wrong encoding, no permissions, a
symlink loop, a truncated file. Mutations are deterministic functions of (name, seed), so the same
workspace can be rebuilt and re-scored (gate 9).
"""

from __future__ import annotations

import random
import shlex

from fireflash.protocols import Sandbox

HUGE_FILE_BYTES = 8 * 1024 * 1024
MUTATIONS = (
    "binary_junk",
    "huge",
    "missing",
    "directory",
    "wrong_encoding",
    "no_permissions",
    "symlink_loop",
    "truncated",
    "empty",
    "crlf",
    "dangling_symlink",
    "latin1",
)


def junk_bytes(seed: int, n: int = 4096) -> bytes:
    """``n`` deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(n)


async def apply_mutation(sandbox: Sandbox, name: str, paths: list[str], seed: int = 0) -> None:
    """Rewrite every path in ``paths`` inside ``sandbox`` according to mutation ``name``.

    Raises:
        ValueError: unknown mutation name (see ``MUTATIONS``).
    """
    if name not in MUTATIONS:
        raise ValueError(f"unknown mutation {name!r}; known: {', '.join(MUTATIONS)}")
    for i, path in enumerate(paths):
        q = shlex.quote(path)
        prep = f"mkdir -p $(dirname {q}) && rm -rf {q}"
        if name == "binary_junk":
            await sandbox.exec(prep, timeout_sec=30)
            await sandbox.write_file(path, junk_bytes(seed * 1000 + i))
        elif name == "wrong_encoding":
            await sandbox.exec(prep, timeout_sec=30)
            await sandbox.write_file(path, "résumé, naïve café: 42\n".encode("utf-16"))
        elif name == "latin1":
            await sandbox.exec(prep, timeout_sec=30)
            await sandbox.write_file(path, "données: é, ü, ß\n".encode("latin-1"))
        else:
            script = {
                "huge": f"{prep} && yes 'junk line of a runaway output' | head -c {HUGE_FILE_BYTES} > {q}",
                "missing": f"rm -rf {q}",
                "directory": f"{prep} && mkdir -p {q}/nested",
                "no_permissions": f"[ -e {q} ] || {{ mkdir -p $(dirname {q}) && echo junk > {q}; }}; chmod 000 {q}",
                "symlink_loop": f"{prep} && ln -s {q} {q}",
                "truncated": f"[ -f {q} ] && head -c $(( $(stat -c %s {q}) / 2 )) {q} > {q}.ff && printf '\\0' >> {q}.ff"
                f" && mv -f {q}.ff {q} || {{ {prep}; printf 'par\\0' > {q}; }}",
                "empty": f"{prep} && : > {q}",
                "crlf": f"[ -f {q} ] && sed -i 's/$/\\r/' {q} || {{ {prep}; printf 'a\\r\\nb\\r\\n' > {q}; }}",
                "dangling_symlink": f"{prep} && ln -s /nonexistent/fireflash-fuzz {q}",
            }[name]
            await sandbox.exec(script, timeout_sec=60)
