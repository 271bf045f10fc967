"""Prompt rendering and the tool-aware ChatML template (RECIPE.md §4: native tool calling, token-exact).

The first prompt of a segment is rendered once with the chat template (``tools=`` passed through). Every
later piece — tool results, notices, the compaction request, the next generation prompt — is rendered as a
*fragment* that is appended to the running token sequence; the conversation is never re-rendered and
re-tokenized (that silently changes ids the policy sampled).

A fragment is cut out of a tiny probe conversation ``[system, user, assistant(SENTINEL), *new]``: it is
the text after ``SENTINEL + eos``. This works for any template that renders earlier turns independently
of later ones (ChatML, Hermes, Qwen), without per-template code.

Templates that ignore ``tools=`` (SmolLM2's plain ChatML, measured in MEASURED.md) get
``TOOL_CHATML_TEMPLATE``: tool schemas in the system turn, Hermes ``<tool_call>`` JSON in assistant turns,
results in ``tool`` turns.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fireflash.harness.specs import TOOL_SPECS

TOOL_CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + message['content'] }}"
    "{%- if tools %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions. Their signatures are inside <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each call, write a JSON object with the function name and arguments inside "
    "<tool_call></tool_call> tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\\n</tool_call>' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call.get('function') else call %}"
    "{%- if not loop.first or message['content'] %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' + (fn['arguments'] | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Tool-aware ChatML (Hermes convention) for models whose own template drops ``tools=``."""

_SENTINEL = "\u2063FIREFLASH-FRAGMENT\u2063"


_SLOT = re.compile("\u2063FIREFLASH-SLOT-([0-9]+)\u2063")


def _slot(i: int) -> str:
    return f"\u2063FIREFLASH-SLOT-{i}\u2063"


class TemplateError(ValueError):
    """The tokenizer's chat template cannot be used for token-exact fragment rendering."""


def template_supports_tools(tokenizer: Any) -> bool:
    """True if the tokenizer's own chat template renders ``tools=`` (probed with a marker schema)."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    probe = [{"type": "function", "function": {"name": "fireflash_probe_tool", "description": "", "parameters": {}}}]
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], tools=probe, tokenize=False,
            add_generation_prompt=True,
        )
    except Exception:  # noqa: BLE001 — a template that raises on tools= does not support them
        return False
    return "fireflash_probe_tool" in text


def to_template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A harness message dict ({role, content, tool_calls=[{name, arguments}]}) in the OpenAI shape templates read."""
    out = {"role": message["role"], "content": message.get("content", "")}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in message["tool_calls"]
        ]
    return out


class ChatRenderer:
    """Renders prompts and fragments to token ids for one tokenizer.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template and an ``eos_token`` that ends assistant turns.
        tools: tool specs in the OpenAI format (default: the four harness tools).

    Raises:
        TemplateError: no eos token, or the template does not render turns independently (see module doc).
    """

    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]] | None = None) -> None:
        self.tokenizer = tokenizer
        self.tools = tools if tools is not None else TOOL_SPECS
        if tokenizer.eos_token is None or tokenizer.eos_token_id is None:
            raise TemplateError("tokenizer has no eos_token; cannot tell where an assistant turn ends")
        self.native_tools = template_supports_tools(tokenizer)
        self.template = None if self.native_tools else TOOL_CHATML_TEMPLATE
        self.eos_text: str = tokenizer.eos_token
        self.eos_id: int = tokenizer.eos_token_id
        self._specials = sorted({t for t in tokenizer.all_special_tokens if len(t) > 1}, key=len, reverse=True)
        # the Rust tokenizer directly: same ids as tokenizer.encode, ~10x less Python overhead per call
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self._shapes: dict[tuple[str, ...], str] | None = {}
        self.fragment_text([])  # fail at construction, not mid-attempt, on an unusable template
        if not self._verbatim_contents():
            self._shapes = None

    def render_text(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        """The chat template applied to ``messages`` (harness dicts) with the tool specs."""
        return self.tokenizer.apply_chat_template(
            [to_template_message(m) for m in messages],
            tools=self.tools,
            chat_template=self.template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with special-token strings recognised, no BOS/EOS added."""
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` exactly as sampled (special tokens kept, no clean-up of spaces)."""
        if self._backend is not None:
            return self._backend.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def neutralize(self, text: str) -> str:
        """Break special-token strings inside tool output or task text so they tokenize as plain text.

        Without this a file containing ``<|im_end|>`` would end the tool turn early for the model.
        """
        for special in self._specials:
            if special in text:
                text = text.replace(special, special[0] + "\u200b" + special[1:])
        return text

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of the opening prompt of a segment, ending with the generation prompt; contents neutralized."""
        clean = [{**m, "content": self.neutralize(m.get("content", ""))} for m in messages]
        return self.encode(self.render_text(clean, add_generation_prompt=True))

    def fragment_text(self, messages: list[dict[str, Any]]) -> str:
        """Text that follows a finished assistant turn (after its eos): ``messages`` + the generation prompt.

        Plain messages (no tool calls) reuse a cached render of the same role sequence with placeholder
        contents (Jinja costs ~0.3 ms per render); ``_verbatim_contents`` proved this exact for the template.
        """
        if self._shapes is None or any(m.get("tool_calls") for m in messages):
            return self._render_fragment(messages)
        key = tuple(m["role"] for m in messages)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._render_fragment(
                [{"role": m["role"], "content": _slot(i)} for i, m in enumerate(messages)]
            )
        # one pass: a content that happens to contain a slot marker is never re-substituted
        return _SLOT.sub(lambda match: messages[int(match.group(1))].get("content", ""), shape)

    def _verbatim_contents(self) -> bool:
        """True if the template pastes message contents unchanged (no strip/escape), so slots can be filled."""
        odd = [{"role": r, "content": f" \n {r} <x> & {{}} \t\n"} for r in ("tool", "user", "tool")]
        slots = self._render_fragment([{"role": m["role"], "content": _slot(i)} for i, m in enumerate(odd)])
        return _SLOT.sub(lambda match: odd[int(match.group(1))]["content"], slots) == self._render_fragment(odd)

    def _render_fragment(self, messages: list[dict[str, Any]]) -> str:
        probe = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _SENTINEL},
        ]
        text = self.render_text(probe + messages, add_generation_prompt=True)
        at = text.find(_SENTINEL)
        after = at + len(_SENTINEL)
        if at < 0 or not text.startswith(self.eos_text, after):
            raise TemplateError(
                "chat template does not end an assistant turn with its eos token right after the content; "
                "set harness.system_prompt_path and use a ChatML-style model, or report the template"
            )
        return text[after + len(self.eos_text) :]

    def assistant_text(self, content: str, tool_calls: list[dict[str, Any]]) -> str:
        """What the policy writes for an assistant turn, as the template renders it, without the eos.

        ``tool_calls`` are ``{"name", "arguments"}`` dicts. Used to write demonstrations (``fireflash.sft``)
        in exactly the convention the template shows the model for its own earlier turns.

        Raises:
            TemplateError: the template does not end the assistant turn with its eos token.
        """
        head = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        before = self.render_text(head, add_generation_prompt=True)
        text = self.render_text(head + [{"role": "assistant", "content": content, "tool_calls": tool_calls}],
                                add_generation_prompt=False)
        end = text.rfind(self.eos_text)
        if not text.startswith(before) or end < len(before):
            raise TemplateError("chat template does not render an assistant turn as generation prompt + text + eos")
        return text[len(before):end]

    def fragment_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of ``fragment_text(messages)``; contents are neutralized first."""
        clean = [{**m, "content": self.neutralize(m.get("content", ""))} for m in messages]
        return self.encode(self.fragment_text(clean))

    def tool_specs_json(self) -> str:
        """The tool specs exactly as serialised for the prompt (for identity checks across uses)."""
        return json.dumps(self.tools, sort_keys=True)
