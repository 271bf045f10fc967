"""The four tools' JSON-schema specs (Claude-Code conventions, RECIPE.md §4) and argument validation.

Specs use the OpenAI function format that chat templates accept as ``tools=``. ``validate_arguments``
turns a parsed call into clean keyword arguments or raises ``FormatError`` naming the fix, so a wrong
call becomes a tool result the model can react to.
"""

from __future__ import annotations

from typing import Any

TOOL_NAMES = ("Bash", "Read", "Write", "Edit")
KILL_JOB_COMMAND = "kill_job"
SUBMIT_COMMAND = "submit"


class FormatError(ValueError):
    """The model's message could not be turned into a valid tool call; the text says what to change."""


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOL_SPECS: list[dict[str, Any]] = [
    _fn(
        "Bash",
        "Run a shell command in a persistent bash session (the working directory and exports persist). Output "
        "goes to a log file; you see a head+tail preview, its size and the file path. A command still running "
        "at its timeout moves to the background (not killed) and its job id is reported. "
        f"Stop a background job with the command `{KILL_JOB_COMMAND} JOB_ID`. When the task is done, run the command "
        f"`{SUBMIT_COMMAND}` (or reply without a tool call) to end.",
        {
            "command": {"type": "string", "description": "The command to run."},
            "timeout": {"type": "integer", "description": "Seconds before the command moves to the background."},
            "run_in_background": {"type": "boolean", "description": "Start as a background job and return at once."},
        },
        ["command"],
    ),
    _fn(
        "Read",
        "Read a text file with line numbers (cat -n style). Reads up to 2000 lines from `offset` (1-based line).",
        {
            "file_path": {"type": "string", "description": "Absolute path (relative paths start at the task workdir)."},
            "offset": {"type": "integer", "description": "First line to read, 1-based."},
            "limit": {"type": "integer", "description": "Number of lines to read."},
        },
        ["file_path"],
    ),
    _fn(
        "Write",
        "Write a whole file, creating parent directories. Overwriting an existing file needs an earlier Read.",
        {
            "file_path": {"type": "string", "description": "Absolute path (relative paths start at the task workdir)."},
            "content": {"type": "string", "description": "The complete file content."},
        },
        ["file_path", "content"],
    ),
    _fn(
        "Edit",
        "Replace `old_string` with `new_string` in a file. `old_string` must match exactly once (whitespace "
        "included) unless `replace_all` is true.",
        {
            "file_path": {"type": "string", "description": "Absolute path (relative paths start at the task workdir)."},
            "old_string": {"type": "string", "description": "Exact text to replace."},
            "new_string": {"type": "string", "description": "Replacement text, inserted verbatim."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence."},
        },
        ["file_path", "old_string", "new_string"],
    ),
]

_SCHEMAS = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SPECS}
_PY_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "boolean": (bool,), "number": (int, float)}


def _coerce_text(value: str, kind: str, where: str) -> Any:
    """XML-style parameters arrive as text; convert them by the schema type (Qwen3-Coder convention)."""
    text = value.strip()
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise FormatError(f"{where} must be an integer, got {value!r}") from None
    if kind == "number":
        try:
            return float(text)
        except ValueError:
            raise FormatError(f"{where} must be a number, got {value!r}") from None
    if kind == "boolean":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise FormatError(f"{where} must be true or false, got {value!r}")
    return value


def validate_arguments(name: str, arguments: Any, from_text: bool = False) -> dict[str, Any]:
    """Check a call against its tool's schema and return clean arguments.

    Args:
        name: the tool name the model wrote.
        arguments: the decoded arguments (a dict; anything else is an error).
        from_text: values came from XML parameters as strings; convert them by schema type.

    Raises:
        FormatError: unknown tool, non-object arguments, a missing required or unknown argument, or a wrong type.
    """
    if name not in _SCHEMAS:
        raise FormatError(f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}")
    if not isinstance(arguments, dict):
        raise FormatError(f"{name}: arguments must be a JSON object, got {type(arguments).__name__}")
    schema = _SCHEMAS[name]
    props = schema["properties"]
    unknown = [k for k in arguments if k not in props]
    if unknown:
        raise FormatError(f"{name}: unknown argument(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(props)}")
    missing = [k for k in schema["required"] if k not in arguments]
    if missing:
        raise FormatError(f"{name}: missing required argument(s) {', '.join(map(repr, missing))}")
    clean: dict[str, Any] = {}
    for key, value in arguments.items():
        kind = props[key]["type"]
        where = f"{name}.{key}"
        if from_text and isinstance(value, str):
            value = _coerce_text(value, kind, where)
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, _PY_TYPES[kind]) and not (kind in ("integer", "number") and isinstance(value, bool))
        if not ok:
            raise FormatError(f"{where} must be a {kind}, got {type(value).__name__} {value!r:.60}")
        clean[key] = value
    return clean
