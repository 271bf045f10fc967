"""Read / Write / Edit through a real sandbox: Claude-Code semantics and every error as a result string."""

import pytest

from fireflash.harness.config import HarnessConfig
from fireflash.harness.files import FileTools

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]


def tools(sb, **cfg):
    c = HarnessConfig(**cfg)
    return FileTools(sb, "/app", c.read_default_lines, c.read_max_line_chars, c.read_max_chars)


def test_read_numbers_lines_and_pages(in_sandbox):
    async def scenario(sb):
        await sb.write_file("/app/a.txt", "".join(f"line {i}\n" for i in range(1, 11)).encode())
        t = tools(sb, read_default_lines=4)
        return await t.read("a.txt"), await t.read("/app/a.txt", offset=9, limit=5), await t.read("a.txt", offset=50)

    first, last, past = in_sandbox(scenario)
    assert first.splitlines()[:4] == ["     1\tline 1", "     2\tline 2", "     3\tline 3", "     4\tline 4"]
    assert "continue with offset=5" in first
    assert last == "     9\tline 9\n    10\tline 10"
    assert past == "Error: /app/a.txt has 10 lines; offset 50 is past the end"


def test_read_error_cases(in_sandbox):
    async def scenario(sb):
        await sb.write_file("/app/empty", b"")
        await sb.write_file("/app/bin", b"\x7fELF\x00\x01\x02")
        await sb.write_file("/app/long", b"x" * 5000 + b"\n")
        await sb.write_file("/app/big", b"y" * 100 + b"\n" * 3000)
        t = tools(sb, read_max_line_chars=100, read_max_chars=5000)
        return [await t.read(p) for p in ("/app/nope.txt", "/app/empty", "/app/bin", "/app/long", "/app/big", "/app")]

    missing, empty, binary, long, big, directory = in_sandbox(scenario)
    assert missing == "Error: file does not exist: /app/nope.txt"
    assert empty == "(file /app/empty exists but is empty)"
    assert binary.startswith("Error: /app/bin is a binary file (7 bytes)")
    assert long == "     1\t" + "x" * 100 + "… [line cut: 5,000 characters]"
    assert "over the Read budget of 5,000" in big and "limit=" in big
    assert directory.startswith("Error: /app is a directory")


def test_write_creates_parents_and_overwrite_needs_read(in_sandbox):
    async def scenario(sb):
        await sb.write_file("/app/existing.py", b"old\n")
        t = tools(sb)
        created = await t.write("/app/deep/er/new.py", "print(1)\n")
        refused = await t.write("existing.py", "new\n")
        await t.read("existing.py")
        allowed = await t.write("existing.py", "new\n")
        return created, refused, allowed, await sb.read_file("/app/deep/er/new.py"), await sb.read_file("/app/existing.py")

    created, refused, allowed, new, existing = in_sandbox(scenario)
    assert created == "Created /app/deep/er/new.py (9 bytes, 1 lines)."
    assert refused.startswith("Error: /app/existing.py already exists; Read it before overwriting")
    assert allowed.startswith("Overwrote /app/existing.py") and existing == b"new\n" and new == b"print(1)\n"


def test_edit_rejects_non_unique_multiline_with_count_and_lines(in_sandbox):
    block = "if x:\n    y()\n"
    async def scenario(sb):
        await sb.write_file("/app/m.py", (block + "z = 1\n" + block + "w = 2\n" + block).encode())
        t = tools(sb)
        refused = await t.edit("m.py", block, "pass\n")
        everywhere = await t.edit("m.py", block, "pass\n", replace_all=True)
        return refused, everywhere, await sb.read_file("/app/m.py")

    refused, everywhere, data = in_sandbox(scenario)
    assert refused == (
        "Error: old_string matches 3 times in /app/m.py (lines 1, 4, 7); add surrounding lines to make it unique, "
        "or set replace_all to true"
    )
    assert everywhere == "Edited /app/m.py: replaced 3 occurrences (lines 1, 4, 7)."
    assert data == b"pass\nz = 1\npass\nw = 2\npass\n"


def test_edit_crlf_file_with_lf_strings_keeps_crlf_and_exact_whitespace(in_sandbox):
    async def scenario(sb):
        await sb.write_file("/app/w.txt", b"alpha\r\nbeta\r\ngamma\r\n")
        t = tools(sb)
        result = await t.edit("/app/w.txt", "alpha\nbeta", "alpha\n\t  beta  \n\n  delta\t")
        return result, await sb.read_file("/app/w.txt")

    result, data = in_sandbox(scenario)
    assert result == "Edited /app/w.txt: replaced 1 occurrence (line 1)."
    assert data == b"alpha\r\n\t  beta  \r\n\r\n  delta\t\r\ngamma\r\n"


def test_edit_error_messages(in_sandbox):
    async def scenario(sb):
        await sb.write_file("/app/e.txt", b"a b c\n")
        t = tools(sb)
        return [await t.edit("e.txt", "zzz", "y"), await t.edit("e.txt", "a", "a"), await t.edit("e.txt", "", "y"),
                await t.edit("/app/none.txt", "a", "b")]

    not_found, same, empty, missing = in_sandbox(scenario)
    assert not_found.startswith("Error: old_string not found in /app/e.txt")
    assert same.startswith("Error: old_string and new_string are identical")
    assert empty.startswith("Error: old_string is empty")
    assert missing == "Error: file does not exist: /app/none.txt"


def test_model_input_the_sandbox_refuses_is_a_tool_error(in_sandbox):
    from fireflash.harness.parsing import ParsedCall
    from fireflash.harness.tools import ToolBox

    async def scenario(sb):
        box = ToolBox(sb, "/app", HarnessConfig())
        await sb.write_file("/app/f.txt", b"x")
        return [await box.call(ParsedCall("Read", {"file_path": "/app/a\x00b"})),
                await box.call(ParsedCall("Write", {"file_path": "/app", "content": "x"})),
                await box.call(ParsedCall("Write", {"file_path": "/app/f.txt/child", "content": "x"}))]

    nul, directory, under_file = in_sandbox(scenario)
    assert nul.startswith("Error: ") and "NUL" in nul
    assert directory.startswith("Error: /app is a directory") and under_file.startswith("Error: cannot write")


def test_edit_counts_overlapping_matches(in_sandbox):
    # "}\n}\n" matches at lines 1 and 2 of "}\n}\n}\n": str.count saw one match and edited line 1 silently
    async def scenario(sb):
        await sb.write_file("/app/b.js", b"}\n}\n}\n")
        await sb.write_file("/app/aa.txt", b"xaaay\n")
        t = tools(sb)
        await t.read("b.js")
        await t.read("aa.txt")
        once = await t.edit("b.js", "}\n}\n", "}\n")
        every = await t.edit("b.js", "}\n}\n", "}\n", replace_all=True)
        apart = await t.edit("aa.txt", "aa", "b", replace_all=True)
        return once, every, apart, await sb.read_file("/app/b.js"), await sb.read_file("/app/aa.txt")

    once, every, apart, b_js, aa = in_sandbox(scenario)
    assert once == (
        "Error: old_string matches 2 times in /app/b.js (lines 1, 2); add surrounding lines to make it unique, "
        "or set replace_all to true"
    )
    assert every.startswith("Error: old_string matches 2 times in /app/b.js (lines 1, 2) and the matches overlap")
    assert apart.startswith("Error: old_string matches 2 times in /app/aa.txt (lines 1, 1) and the matches overlap")
    assert (b_js, aa) == (b"}\n}\n}\n", b"xaaay\n")  # nothing was written
