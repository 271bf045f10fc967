"""Tool-call parsing: accepted forms, every malformed case as a FormatError, and a 10,000-case fuzz."""

import json
import random

import pytest

from fireflash.harness.parsing import ParsedCall, parse_tool_calls
from fireflash.harness.specs import FormatError, validate_arguments

pytestmark = pytest.mark.unit


def calls(text):
    return [c for c in parse_tool_calls(text) if isinstance(c, ParsedCall)]


def errors(text):
    return [str(c) for c in parse_tool_calls(text) if isinstance(c, FormatError)]


def test_hermes_single_call():
    out = parse_tool_calls('Let me look.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>')
    assert out == [ParsedCall("Bash", {"command": "ls"})]


def test_two_objects_in_one_block():
    text = '<tool_call>{"name":"Bash","arguments":{"command":"ls"}}{"name":"Read","arguments":{"file_path":"/a"}}</tool_call>'
    assert calls(text) == [ParsedCall("Bash", {"command": "ls"}), ParsedCall("Read", {"file_path": "/a"})]


def test_several_blocks_and_unterminated_last_block():
    text = (
        '<tool_call>{"name":"Bash","arguments":{"command":"a"}}</tool_call> then '
        '<tool_call>{"name":"Bash","arguments":{"command":"b"}}'
    )
    assert [c.arguments["command"] for c in calls(text)] == ["a", "b"]


def test_arguments_missing_final_brace_are_closed():
    text = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls -la"}\n</tool_call>'
    assert parse_tool_calls(text) == [ParsedCall("Bash", {"command": "ls -la"})]


def test_stray_closing_brace_after_a_complete_call_is_ignored():
    # seen from SmolLM2: {"name": "Bash", "arguments": {"command": "ls"}}}
    text = '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}}\n</tool_call>'
    assert parse_tool_calls(text) == [ParsedCall("Bash", {"command": "ls"})]
    assert isinstance(parse_tool_calls("<tool_call>}</tool_call>")[0], FormatError)


def test_braces_inside_argument_string():
    text = '<tool_call>{"name": "Bash", "arguments": {"command": "mkdir -p a/{b,c"}}</tool_call>'
    assert parse_tool_calls(text) == [ParsedCall("Bash", {"command": "mkdir -p a/{b,c"})]
    # and with the final brace missing too: string-aware closing must not count the brace in the string
    text = '<tool_call>{"name": "Bash", "arguments": {"command": "mkdir -p a/{b,c"}</tool_call>'
    assert parse_tool_calls(text) == [ParsedCall("Bash", {"command": "mkdir -p a/{b,c"})]


def test_plain_json_object_without_tags():
    text = 'I will run:\n```json\n{"name": "Read", "arguments": {"file_path": "/app/x.py", "offset": 3}}\n```'
    assert calls(text) == [ParsedCall("Read", {"file_path": "/app/x.py", "offset": 3})]


def test_json_without_name_is_not_a_call():
    assert parse_tool_calls('The config is {"a": 1, "b": [2, 3]} and that is all.') == []


def test_answer_without_call_is_empty():
    assert parse_tool_calls("All done: the tests pass.") == []


def test_qwen3_coder_xml_parameters_converted_by_schema():
    text = (
        "<tool_call>\n<function=Bash>\n<parameter=command>\nsleep 1 && echo {x}\n</parameter>\n"
        "<parameter=timeout>\n30\n</parameter>\n<parameter=run_in_background>\ntrue\n</parameter>\n</function>\n</tool_call>"
    )
    assert parse_tool_calls(text) == [
        ParsedCall("Bash", {"command": "sleep 1 && echo {x}", "timeout": 30, "run_in_background": True})
    ]


def test_xml_without_wrapper_and_multiline_value_kept_exactly():
    text = "<function=Write>\n<parameter=file_path>\n/a.py\n</parameter>\n<parameter=content>\n  x = 1\n\ny = 2\n</parameter>\n</function>"
    assert parse_tool_calls(text) == [ParsedCall("Write", {"file_path": "/a.py", "content": "  x = 1\n\ny = 2"})]


def test_unterminated_parameter_is_format_error():
    text = "<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</function>\n</tool_call>"
    [err] = parse_tool_calls(text)
    assert isinstance(err, FormatError) and "unterminated <parameter=command>" in str(err)


def test_malformed_json_is_format_error_with_position():
    [err] = parse_tool_calls('<tool_call>{"name": "Bash", "arguments": {"command": ls}}</tool_call>')
    assert isinstance(err, FormatError) and "malformed JSON" in str(err) and "column" in str(err)


def test_unknown_tool_and_wrong_types():
    assert "unknown tool 'Grep'" in errors('<tool_call>{"name": "Grep", "arguments": {"pattern": "x"}}</tool_call>')[0]
    assert "Bash.command must be a string" in errors('<tool_call>{"name": "Bash", "arguments": {"command": 5}}</tool_call>')[0]
    assert "Read.offset must be a integer" in errors(
        '<tool_call>{"name": "Read", "arguments": {"file_path": "/a", "offset": "x"}}</tool_call>'
    )[0]
    assert "missing required" in errors('<tool_call>{"name": "Edit", "arguments": {"file_path": "/a"}}</tool_call>')[0]
    assert "unknown argument" in errors('<tool_call>{"name": "Bash", "arguments": {"cmd": "ls"}}</tool_call>')[0]


def test_valid_and_invalid_calls_keep_their_order():
    text = (
        '<tool_call>{"name":"Bash","arguments":{"command":"a"}}</tool_call>'
        '<tool_call>{"name":"Nope","arguments":{}}</tool_call>'
        '<tool_call>{"name":"Bash","arguments":{"command":"c"}}</tool_call>'
    )
    out = parse_tool_calls(text)
    assert [type(x).__name__ for x in out] == ["ParsedCall", "FormatError", "ParsedCall"]


def test_tool_call_marker_but_nothing_parses():
    # the model "finished for a tool call" but wrote no parsable call: an error, never a claimed call
    for text in ("<tool_call>", "<tool_call>\n</tool_call>", "<tool_call>Bash ls</tool_call>", "</tool_call>"):
        out = parse_tool_calls(text)
        assert out and all(isinstance(x, FormatError) for x in out), text


def test_arguments_given_as_json_string_and_openai_shape():
    text = '<tool_call>{"type": "function", "function": {"name": "Bash", "arguments": "{\\"command\\": \\"pwd\\"}"}}</tool_call>'
    assert parse_tool_calls(text) == [ParsedCall("Bash", {"command": "pwd"})]


def test_validate_rejects_bool_for_integer():
    with pytest.raises(FormatError, match="Read.limit must be a integer"):
        validate_arguments("Read", {"file_path": "/a", "limit": True})


SEEDS = [
    '<tool_call>\n{"name": "Bash", "arguments": {"command": "ls -la /app && cat x | grep \\"{y}\\""}}\n</tool_call>',
    '<tool_call>{"name":"Edit","arguments":{"file_path":"/a","old_string":"a\\nb","new_string":"c","replace_all":true}}</tool_call>',
    "<tool_call>\n<function=Write>\n<parameter=file_path>\n/a\n</parameter>\n<parameter=content>\n{}\n</parameter>\n</function>\n</tool_call>",
    'Thinking... {"name": "Read", "arguments": {"file_path": "/x", "offset": 1, "limit": 5}} ok',
    '<tool_call>[{"name":"Bash","arguments":{"command":"a"}},{"name":"Bash","arguments":{"command":"b"}}]</tool_call>',
]
ALPHABET = list('{}[]",:\\<>/=\n tool_call function parameter name arguments Bash Read 0123456789') + ["<tool_call>", "</tool_call>", "<parameter=", "</parameter>", "<function=", '"name":', "\\u12"]


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        i = rng.randrange(len(text) + 1)
        if op == 0 and text:
            text = text[:i] + text[i + rng.randint(1, 8):]
        elif op == 1:
            text = text[:i] + rng.choice(ALPHABET) + text[i:]
        elif op == 2:
            text = text[:i]
        elif op == 3:
            j = rng.randrange(len(text) + 1)
            text = text[:i] + text[min(i, j):max(i, j)] + text[i:]
        else:
            text = text + rng.choice(SEEDS)
    return text


def test_fuzz_10000_mutated_outputs_never_crash():
    rng = random.Random(1234)
    n_calls = n_errors = 0
    for k in range(10_000):
        text = mutate(SEEDS[k % len(SEEDS)], rng)
        out = parse_tool_calls(text)  # must not raise
        for item in out:
            if isinstance(item, ParsedCall):
                n_calls += 1
                assert validate_arguments(item.name, item.arguments) == item.arguments
                json.dumps(item.arguments)
            else:
                assert isinstance(item, FormatError) and str(item)
                n_errors += 1
    # the mutations must exercise both outcomes, or the fuzz proves nothing
    assert n_calls > 1000 and n_errors > 1000


def test_deeply_nested_json_is_format_error():
    text = "<tool_call>" + "[" * 100_000 + "</tool_call>"
    out = parse_tool_calls(text)
    assert out and all(isinstance(x, FormatError) for x in out)


def test_closing_tag_inside_a_json_string_is_data():
    # the block used to end at the </tool_call> inside the content string: a malformed-JSON error
    content = "print('<tool_call>x</tool_call>')\n"
    call = {"name": "Write", "arguments": {"file_path": "/app/p.py", "content": content}}
    text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    assert parse_tool_calls(text) == [ParsedCall("Write", {"file_path": "/app/p.py", "content": content})]
    second = '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
    assert calls(text + " and " + second) == [ParsedCall("Write", call["arguments"]), ParsedCall("Bash", {"command": "ls"})]
    # cut short after the string: still one call, closed
    assert calls(f"<tool_call>{json.dumps(call)[:-2]}") == [ParsedCall("Write", call["arguments"])]


def test_function_tag_inside_a_json_string_does_not_switch_to_xml():
    # used to parse as XML: "unknown tool 'main'"
    call = {"name": "Write", "arguments": {"file_path": "/app/q.txt", "content": "see <function=main> here"}}
    for text in (f"<tool_call>{json.dumps(call)}</tool_call>", json.dumps(call), f"Writing:\n{json.dumps(call)}"):
        assert parse_tool_calls(text) == [ParsedCall("Write", call["arguments"])], text
    bare_tag = {"name": "Bash", "arguments": {"command": "echo '<tool_call>'"}}
    assert parse_tool_calls(json.dumps(bare_tag)) == [ParsedCall("Bash", bare_tag["arguments"])]


def test_malformed_json_block_does_not_swallow_the_next_block():
    text = (
        '<tool_call>{"name": "Bash", "arguments": {"command": "echo "hi"}}</tool_call> "then" '
        '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
    )
    out = parse_tool_calls(text)
    assert isinstance(out[0], FormatError) and "malformed JSON" in str(out[0])
    assert out[1:] == [ParsedCall("Bash", {"command": "ls"})]


def test_malformed_optional_parameter_is_format_error():
    # '<parameter=timeout' without its '>' was dropped and the command ran with the default timeout
    for bad in ("<parameter=timeout\n30\n</parameter>\n", "<parameter=timeout 30</parameter\n"):
        text = f"<tool_call>\n<function=Bash>\n<parameter=command>\nmake\n</parameter>\n{bad}</function>\n</tool_call>"
        [err] = parse_tool_calls(text)
        assert isinstance(err, FormatError) and "Bash: malformed parameter tag '<parameter=timeout" in str(err), bad
    # the text of a value is the value's own
    text = "<function=Write>\n<parameter=file_path>\n/a.md\n</parameter>\n<parameter=content>\nuse <parameter=NAME\n</parameter>\n</function>"
    assert parse_tool_calls(text) == [ParsedCall("Write", {"file_path": "/a.md", "content": "use <parameter=NAME"})]
