"""Tool-call parsing: from the model's raw text to validated calls or ``FormatError`` messages (RECIPE.md §4).

Accepted forms, in the order found in the text:

* Hermes: ``<tool_call>{"name": "Bash", "arguments": {...}}</tool_call>``, several objects in one block,
  several blocks in one message, an unterminated last block;
* plain JSON objects with ``name`` and ``arguments`` (or ``parameters``) anywhere in the text;
* Qwen3-Coder XML: ``<function=Bash><parameter=command>ls</parameter></function>`` (values converted by
  the schema type).

A JSON object cut short only by missing closing braces/brackets at the end of its block is closed, and
stray closers after a complete object are skipped (the intent is unambiguous either way). Everything else that looks like a call but does not parse becomes a ``FormatError``
entry, so the message never claims a call that was not parsed. The parser never raises.

Text inside a JSON string is data, never markup: a JSON block ends at the first ``</tool_call>`` *outside*
its strings (a Write of a file containing ``</tool_call>`` is one call), and a ``<function=`` or
``<tool_call>`` inside a JSON call's string does not switch the format. The format of a ``<tool_call>``
block is decided by its first construct: ``{`` or ``[`` is JSON, otherwise a ``<function=`` makes it XML.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from fireflash.harness.specs import FormatError, validate_arguments

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"<function=([^>\n]*)>")
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>")
_MARKERS = ("<tool_call", "</tool_call", "<function=", "<parameter=")
_PARAMETER_START = "<parameter="
# a JSON string (escapes included) or a tool-call tag: scanning with it skips tags inside strings; an
# unterminated string does not match, so its text is scanned as markup (the naive boundary)
_JSON_SCAN = re.compile(r'"(?:[^"\\]|\\.)*"|</?tool_call>', re.DOTALL)
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedCall:
    """One valid call: a known tool and schema-checked arguments."""

    name: str
    arguments: dict[str, Any]


def _close_json(text: str) -> str | None:
    """``text`` plus the closers it lacks, when the only defect is missing closing braces/brackets at the end."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None
    if in_string or not stack:
        return None
    return text.rstrip() + "".join(reversed(stack))


def _call_from_object(obj: Any) -> ParsedCall:
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI style {"type": "function", "function": {...}}
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise FormatError('a tool call must be a JSON object {"name": TOOL, "arguments": {...}}')
    if "arguments" in obj and "parameters" in obj:
        raise FormatError(f"{obj['name']}: give either 'arguments' or 'parameters', not both")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            raise FormatError(f"{obj['name']}: 'arguments' is a string that is not valid JSON ({e.msg})") from None
    return ParsedCall(obj["name"], validate_arguments(obj["name"], args))


def _parse_json_block(block: str) -> list[ParsedCall | FormatError]:
    """One or more JSON objects (or a JSON list of them) separated by whitespace or commas."""
    return _parse_json_block_checked(block)[0]


def _parse_json_block_checked(block: str) -> tuple[list[ParsedCall | FormatError], bool]:
    """``_parse_json_block`` plus whether every object decoded (False: malformed JSON or a non-JSON start)."""
    decoded = True
    out: list[ParsedCall | FormatError] = []
    pos, n = 0, len(block)
    while pos < n:
        while pos < n and (block[pos].isspace() or block[pos] == "," or (out and block[pos] in "}]")):
            pos += 1  # stray closers after a complete object are a common slip with an unambiguous intent
        if pos >= n:
            break
        if block[pos] not in "{[":
            out.append(FormatError(f"expected a JSON object inside <tool_call>, found {block[pos:pos + 30]!r}"))
            decoded = False
            break
        try:
            obj, end = _DECODER.raw_decode(block, pos)
        except json.JSONDecodeError as e:
            closed = _close_json(block[pos:])
            try:
                obj, _ = _DECODER.raw_decode(closed) if closed else (None, 0)
            except json.JSONDecodeError:
                closed = None
            if closed is None:
                out.append(FormatError(f"malformed JSON in tool call: {e.msg} at line {e.lineno} column {e.colno}"))
                decoded = False
                break
            end = n
        for item in obj if isinstance(obj, list) else [obj]:
            try:
                out.append(_call_from_object(item))
            except FormatError as err:
                out.append(err)
        pos = end
    if not out:
        out.append(FormatError("empty <tool_call> block"))
    return out, decoded


def _parse_xml_functions(text: str) -> list[ParsedCall | FormatError]:
    """Qwen3-Coder style ``<function=NAME><parameter=KEY>value</parameter>...</function>`` blocks."""
    out: list[ParsedCall | FormatError] = []
    starts = list(_FUNCTION.finditer(text))
    for i, m in enumerate(starts):
        stop = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        body = text[m.end() : stop]
        body = body.split("</function>", 1)[0]
        name = m.group(1).strip()
        args: dict[str, str] = {}
        error: FormatError | None = None
        tags: set[int] = set()  # where well-formed <parameter=NAME> tags start
        values: list[tuple[int, int]] = []  # (start, end) of each parameter's value
        for p in _PARAMETER.finditer(body):
            close = body.find("</parameter>", p.end())
            nxt = _PARAMETER.search(body, p.end())
            if close < 0 or (nxt is not None and nxt.start() < close):
                error = FormatError(f"{name}: unterminated <parameter={p.group(1)}>; close it with </parameter>")
                break
            value = body[p.end() : close]
            tags.add(p.start())
            values.append((p.end(), close))
            value = value.removeprefix("\n")
            args[p.group(1).strip()] = value.removesuffix("\n")
        if error is None:
            error = _malformed_parameter(name, body, tags, values)
        if error is None:
            try:
                out.append(ParsedCall(name, validate_arguments(name, args, from_text=True)))
                continue
            except FormatError as err:
                error = err
        out.append(error)
    return out


def _malformed_parameter(name: str, body: str, tags: set[int], values: list[tuple[int, int]]) -> FormatError | None:
    """An error for a ``<parameter=`` outside every value that is not a well-formed tag (e.g. no ``>``).

    Without this check such a parameter (``<parameter=timeout`` then a newline) was silently dropped and the
    call ran with its default. Text inside a value is the value's own (a file may mention ``<parameter=``).
    """
    at = body.find(_PARAMETER_START)
    while at >= 0:
        if at not in tags and not any(start <= at < end for start, end in values):
            return FormatError(
                f"{name}: malformed parameter tag {body[at:at + 40]!r}; write <parameter=NAME> (closed by '>' on "
                f"the same line), then the value, then </parameter>"
            )
        at = body.find(_PARAMETER_START, at + 1)
    return None


def _bare_json_calls(text: str) -> list[ParsedCall | FormatError]:
    """JSON objects written without tags; only objects with a name and arguments count as calls."""
    return _bare_json_call_spans(text)[0]


def _bare_json_call_spans(text: str) -> tuple[list[ParsedCall | FormatError], list[tuple[int, int]]]:
    """``_bare_json_calls`` plus the (start, end) of each call object in ``text``."""
    out: list[ParsedCall | FormatError] = []
    spans: list[tuple[int, int]] = []
    pos = text.find("{")
    while pos >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            spans.append((pos, end))
            try:
                out.append(_call_from_object(obj))
            except FormatError as err:
                out.append(err)
        pos = text.find("{", end)
    return out, spans


def _first_tag(text: str, start: int) -> int:
    """Index of the first ``<tool_call>`` or ``</tool_call>`` at or after ``start``; ``len(text)`` if none."""
    found = [i for i in (text.find(_OPEN, start), text.find(_CLOSE, start)) if i >= 0]
    return min(found, default=len(text))


def _json_block_end(text: str, start: int) -> int:
    """Where a JSON ``<tool_call>`` body starting at ``start`` ends: the first tool-call tag outside its strings."""
    for m in _JSON_SCAN.finditer(text, start):
        if m.group().startswith("<"):
            return m.start()
    return len(text)


def _tool_call_blocks(text: str, pos: int) -> list[ParsedCall | FormatError]:
    """Every ``<tool_call>`` block from the one at ``pos`` on, each parsed by its first construct."""
    out: list[ParsedCall | FormatError] = []
    while pos >= 0:
        body = pos + len(_OPEN)
        first = _SPACE.match(text, body).end()  # type: ignore[union-attr]  # \s* always matches
        naive = _first_tag(text, body)
        if text.startswith(("{", "["), first):
            end = _json_block_end(text, first)
            parsed, decoded = _parse_json_block_checked(text[body:end])
            if not decoded and naive < end:
                # malformed JSON (an unbalanced quote) makes the string-aware end unreliable: fall back
                # to the first tag, so the next block is still parsed on its own
                end, parsed = naive, _parse_json_block(text[body:naive])
            out.extend(parsed)
        else:
            end = naive
            block = text[body:end]
            out.extend(_parse_xml_functions(block) if _FUNCTION.search(block) else _parse_json_block(block))
        pos = text.find(_OPEN, end)
    return out


def parse_tool_calls(text: str) -> list[ParsedCall | FormatError]:
    """All tool calls in one assistant message, in order; invalid ones as ``FormatError`` entries.

    Args:
        text: the decoded assistant message (assistant prefix included, stop token excluded).

    Returns:
        An empty list when the message holds no call and no call marker (the model answered).
    """
    try:
        bare, spans = _bare_json_call_spans(text)

        def outside_calls(m: re.Match[str]) -> bool:  # a tag inside a bare JSON call's string is data
            return not any(start <= m.start() < end for start, end in spans)

        opening = next((m for m in re.finditer(re.escape(_OPEN), text) if outside_calls(m)), None)
        if opening is not None:
            return _tool_call_blocks(text, opening.start())
        function = next((m for m in _FUNCTION.finditer(text) if outside_calls(m)), None)
        if function is not None:
            return _parse_xml_functions(text[function.start():])
        if not bare and any(marker in text for marker in _MARKERS):
            bare.append(FormatError("found a tool-call marker but no complete call; write <tool_call>{json}</tool_call>"))
        return bare
    except RecursionError:
        return [FormatError("tool call JSON is nested too deeply")]
