"""Edit and line endings: only an all-CRLF file is matched with LF strings; a mixed file is edited byte-exactly."""

import pytest

from fireflash.harness.config import HarnessConfig
from fireflash.harness.files import FileTools

pytestmark = [pytest.mark.sandbox, pytest.mark.integration]

MIXED = b"one\r\ntwo\nthree\r\nfour\n"


def tools(sb):
    c = HarnessConfig()
    return FileTools(sb, "/app", c.read_default_lines, c.read_max_line_chars, c.read_max_chars)


def edit_mixed(in_sandbox, *edit_args):
    async def scenario(sb):
        await sb.write_file("/app/m.txt", MIXED)
        result = await tools(sb).edit("/app/m.txt", *edit_args)
        return result, await sb.read_file("/app/m.txt")

    return in_sandbox(scenario)


def test_mixed_file_keeps_every_byte_outside_the_replaced_text(in_sandbox):
    result, data = edit_mixed(in_sandbox, "two", "2\n2b")
    assert result == "Edited /app/m.txt: replaced 1 occurrence (line 2)."
    assert data == b"one\r\n2\n2b\nthree\r\nfour\n"


def test_mixed_file_is_matched_exactly_across_line_endings(in_sandbox):
    result, data = edit_mixed(in_sandbox, "one\r\ntwo\nthree", "1\r\n2\n3")
    assert result == "Edited /app/m.txt: replaced 1 occurrence (line 1)."
    assert data == b"1\r\n2\n3\r\nfour\n"


def test_mixed_file_refuses_an_lf_string_where_the_file_has_crlf(in_sandbox):
    result, data = edit_mixed(in_sandbox, "one\ntwo", "x")
    assert result.startswith("Error: old_string not found in /app/m.txt") and "mixes CRLF and LF" in result
    assert data == MIXED
