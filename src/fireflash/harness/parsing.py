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
    out: list[ParsedCall | FormatError] = []
    pos, n = 0, len(block)
    while pos < n:
        while pos < n and (block[pos].isspace() or block[pos] == "," or (out and block[pos] in "}]")):
            pos += 1  # stray closers after a complete object are a common slip with an unambiguous intent
        if pos >= n:
            break
        if block[pos] not in "{[":
            out.append(FormatError(f"expected a JSON object inside <tool_call>, found {block[pos:pos + 30]!r}"))
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
    return out


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
        for p in _PARAMETER.finditer(body):
            close = body.find("</parameter>", p.end())
            nxt = _PARAMETER.search(body, p.end())
            if close < 0 or (nxt is not None and nxt.start() < close):
                error = FormatError(f"{name}: unterminated <parameter={p.group(1)}>; close it with </parameter>")
                break
            value = body[p.end() : close]
            value = value.removeprefix("\n")
            args[p.group(1).strip()] = value.removesuffix("\n")
        if error is None:
            try:
                out.append(ParsedCall(name, validate_arguments(name, args, from_text=True)))
                continue
            except FormatError as err:
                error = err
        out.append(error)
    return out


def _bare_json_calls(text: str) -> list[ParsedCall | FormatError]:
    """JSON objects written without tags; only objects with a name and arguments count as calls."""
    out: list[ParsedCall | FormatError] = []
    pos = text.find("{")
    while pos >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            try:
                out.append(_call_from_object(obj))
            except FormatError as err:
                out.append(err)
        pos = text.find("{", end)
    return out


def parse_tool_calls(text: str) -> list[ParsedCall | FormatError]:
    """All tool calls in one assistant message, in order; invalid ones as ``FormatError`` entries.

    Args:
        text: the decoded assistant message (assistant prefix included, stop token excluded).

    Returns:
        An empty list when the message holds no call and no call marker (the model answered).
    """
    try:
        if _OPEN in text:
            out: list[ParsedCall | FormatError] = []
            chunks = text.split(_OPEN)[1:]
            for chunk in chunks:
                block = chunk.split(_CLOSE, 1)[0]
                out.extend(_parse_xml_functions(block) if _FUNCTION.search(block) else _parse_json_block(block))
            return out
        if _FUNCTION.search(text):
            return _parse_xml_functions(text)
        calls = _bare_json_calls(text)
        if not calls and any(marker in text for marker in _MARKERS):
            calls.append(FormatError("found a tool-call marker but no complete call; write <tool_call>{json}</tool_call>"))
        return calls
    except RecursionError:
        return [FormatError("tool call JSON is nested too deeply")]
