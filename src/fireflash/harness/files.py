"""The Read, Write and Edit tools over a sandbox's files (Claude-Code semantics, RECIPE.md §4).

Every problem (missing, empty, binary or oversized file, unread overwrite, ambiguous edit) comes back as
an ``Error: ...`` result string for the model; only sandbox infrastructure failures raise.
"""

from __future__ import annotations

import itertools
import posixpath
import shlex

from fireflash.protocols import Sandbox


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:8192]


def _whole_lines(value: float | None, default: int, most: int) -> int:
    """The model's line number or count as an int in [1, ``most``]; None, NaN and values < 1 give ``default``.

    Compared before converting, so inf or a 400-digit integer cannot overflow; a fraction is rounded down.
    """
    if value is None or not value >= 1:  # `not >=` also catches NaN
        return default
    return most if value >= most else int(value)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _match_starts(text: str, needle: str) -> list[int]:
    """Every index where ``needle`` starts in ``text``, overlapping matches included.

    ``str.count`` counts non-overlapping matches: ``"}\n}\n"`` in ``"}\n}\n}\n"`` would count once and
    an edit meant for line 2 would silently land on line 1.
    """
    found, at = [], text.find(needle)
    while at >= 0:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


class FileTools:
    """Read / Write / Edit in one sandbox, remembering which files the model has read.

    Args:
        sandbox: the attempt's sandbox.
        workdir: where relative paths start (the task's working directory).
        default_lines: Read's default ``limit``, lines.
        max_line_chars: longer lines are cut in Read output, characters.
        max_chars: a Read producing more than this many characters is refused with a hint.
    """

    def __init__(self, sandbox: Sandbox, workdir: str, default_lines: int, max_line_chars: int, max_chars: int) -> None:
        self.sandbox = sandbox
        self.workdir = workdir
        self.default_lines = default_lines
        self.max_line_chars = max_line_chars
        self.max_chars = max_chars
        self.seen: set[str] = set()  # paths read or written in this attempt: they may be overwritten

    def resolve(self, file_path: str) -> str:
        return posixpath.normpath(posixpath.join(self.workdir, file_path))

    async def _load(self, path: str) -> bytes | str:
        """File bytes, or an error string for the model."""
        try:
            return await self.sandbox.read_file(path)
        except FileNotFoundError:
            return f"Error: file does not exist: {path}"
        except IsADirectoryError:
            return f"Error: {path} is a directory; list it with Bash (ls {shlex.quote(path)})"
        except OSError as e:  # permission, name too long, loops, ...: the model's to fix
            return f"Error: cannot read {path}: {e.strerror or e}"

    async def read(self, file_path: str, offset: int | None = None, limit: int | None = None) -> str:
        """Lines ``offset``..``offset+limit-1`` (1-based) as ``cat -n`` output: 6-wide number, tab, line."""
        path = self.resolve(file_path)
        data = await self._load(path)
        if isinstance(data, str):
            return data
        self.seen.add(path)
        if not data:
            return f"(file {path} exists but is empty)"
        if _is_binary(data):
            return f"Error: {path} is a binary file ({len(data):,} bytes); inspect it with Bash, e.g. xxd {shlex.quote(path)} | head"
        lines = data.decode("utf-8", errors="replace").splitlines()
        if offset is not None and offset > len(lines):
            return f"Error: {path} has {len(lines)} lines; offset {offset} is past the end"
        start = _whole_lines(offset, 1, len(lines))
        count = _whole_lines(limit, self.default_lines, len(lines))
        out = []
        for number in range(start, min(len(lines), start + count - 1) + 1):
            line = lines[number - 1]
            if len(line) > self.max_line_chars:
                line = line[: self.max_line_chars] + f"… [line cut: {len(line):,} characters]"
            out.append(f"{number:>6}\t{line}")
        text = "\n".join(out)
        if len(text) > self.max_chars:
            per_line = max(1, len(text) // max(1, len(out)))
            return (
                f"Error: reading {len(out):,} lines of {path} gives {len(text):,} characters, over the Read budget "
                f"of {self.max_chars:,}; read fewer lines, e.g. offset={start} limit={max(1, self.max_chars // per_line)}"
            )
        shown_end = start + len(out) - 1
        if shown_end < len(lines):
            text += f"\n(lines {start}-{shown_end} of {len(lines)}; continue with offset={shown_end + 1})"
        return text

    async def _store(self, path: str, data: bytes) -> None:
        try:
            await self.sandbox.write_file(path, data)
        except FileNotFoundError:
            await self.sandbox.exec(f"mkdir -p -- {shlex.quote(posixpath.dirname(path))}", timeout_sec=30)
            await self.sandbox.write_file(path, data)

    async def write(self, file_path: str, content: str) -> str:
        """Write ``content`` (UTF-8) as the whole file; parents are created; overwrites need an earlier Read."""
        path = self.resolve(file_path)
        existing = await self._load(path)
        exists = isinstance(existing, bytes)
        if not exists and " is a directory" in existing:
            return existing
        if exists and path not in self.seen:
            return f"Error: {path} already exists; Read it before overwriting it (or change it with Edit)"
        try:
            await self._store(path, content.encode("utf-8"))
        except OSError as e:
            return f"Error: cannot write {path}: {e.strerror or e}"
        self.seen.add(path)
        n_lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        return f"{'Overwrote' if exists else 'Created'} {path} ({len(content.encode()):,} bytes, {n_lines} lines)."

    async def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
        """Replace ``old_string`` by ``new_string``; it must match exactly once unless ``replace_all``.

        Matches are counted overlapping ones included (``"}\n}\n"`` matches twice in ``"}\n}\n}\n"``), so an
        ambiguous edit is refused rather than applied to the first match. ``replace_all`` replaces every match
        when no two overlap; when matches overlap it is refused too (an error result), since replacing left to
        right would leave some of them unreplaced.

        Files whose line endings are all CRLF are matched with LF strings and keep CRLF (``\\n`` in either
        string stands for the file's line ending); a file with mixed endings is matched exactly, and every byte
        outside the replaced text stays as it was. ``new_string`` is otherwise inserted verbatim.
        """
        path = self.resolve(file_path)
        if old_string == "":
            return "Error: old_string is empty; give the exact text to replace (use Write to create a file)"
        if old_string == new_string:
            return "Error: old_string and new_string are identical; nothing to change"
        data = await self._load(path)
        if isinstance(data, str):
            return data
        if _is_binary(data):
            return f"Error: {path} is a binary file; Edit works on text files"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"Error: {path} is not valid UTF-8 (byte {e.start}); edit it with Bash instead"
        # only an all-CRLF file is matched with LF strings; a mixed file is matched exactly and left as it is
        crlf = "\r\n" in text and text.count("\n") == text.count("\r\n")
        if crlf:
            text, old_string, new_string = (s.replace("\r\n", "\n") for s in (text, old_string, new_string))
        at = _match_starts(text, old_string)
        count = len(at)
        if count == 0:
            mixed = "; the file mixes CRLF and LF line endings: match them too" if "\r\n" in text and not crlf else ""
            return (f"Error: old_string not found in {path}; it must match exactly, including whitespace and "
                    f"indentation{mixed}")
        starts = [_line_of(text, i) for i in at]
        if count > 1 and not replace_all:
            return (
                f"Error: old_string matches {count} times in {path} (lines {', '.join(map(str, starts))}); add "
                f"surrounding lines to make it unique, or set replace_all to true"
            )
        overlapping = any(b < a + len(old_string) for a, b in itertools.pairwise(at))
        if overlapping:
            # replacing left to right would rewrite only some of the matches, and which ones depends on
            # the order: refuse rather than guess (the model can give a longer, unique old_string)
            return (
                f"Error: old_string matches {count} times in {path} (lines {', '.join(map(str, starts))}) and the "
                f"matches overlap, so replace_all cannot replace each of them; give a longer old_string that "
                f"matches once, or edit the places one at a time"
            )
        text = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
        if crlf:
            text = text.replace("\n", "\r\n")
        try:
            await self._store(path, text.encode("utf-8"))
        except OSError as e:
            return f"Error: cannot write {path}: {e.strerror or e}"
        self.seen.add(path)
        where = f"line {starts[0]}" if count == 1 else f"lines {', '.join(map(str, starts))}"
        return f"Edited {path}: replaced {count} occurrence{'s' if count > 1 else ''} ({where})."
