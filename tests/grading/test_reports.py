"""Verifier report parsing: reward.txt / reward.json / JUnit XML, and test-id matching."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fireflash.grading.reports import (
    CheckResult,
    ReportError,
    junit_key,
    match_checks,
    parse_junit,
    parse_reward_json,
    parse_reward_txt,
)

pytestmark = pytest.mark.unit

PYTEST_JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="tests.test_calc" name="test_add" time="0.001"/>
<testcase classname="tests.test_calc" name="test_sub" time="0.001"><failure message="assert 1 == 2">x</failure></testcase>
<testcase classname="tests.test_calc.TestDiv" name="test_zero" time="0.001"><error message="boom"/></testcase>
<testcase classname="tests.test_calc" name="test_later" time="0"><skipped message="todo"/></testcase>
<testcase classname="tests.test_calc" name="test_param[1-2]" time="0.001"/>
</testsuite></testsuites>"""


def test_reward_txt_parses_number():
    assert parse_reward_txt(b" 0.75\n") == 0.75


@pytest.mark.parametrize("data", [b"", b"yes", b"1.5", b"-0.1", b"nan", b"inf"])
def test_reward_txt_rejects_non_rewards(data):
    with pytest.raises(ReportError, match="reward.txt"):
        parse_reward_txt(data)


def test_reward_json_reward_key_and_single_value():
    assert parse_reward_json(b'{"reward": 1, "note": "ok"}') == 1.0
    assert parse_reward_json(b'{"accuracy": 0.5}') == 0.5


@pytest.mark.parametrize(
    "data", [b"[1]", b'{"reward": "1"}', b'{"a": 0.1, "b": 0.2}', b"\xff", b'{"reward": true}']
)
def test_reward_json_rejects_malformed(data):
    with pytest.raises(ReportError, match="reward.json"):
        parse_reward_json(data)


def test_junit_outcomes_failure_error_skipped_count_as_failed():
    results = {r.id: r.passed for r in parse_junit(PYTEST_JUNIT)}
    assert results == {
        "tests.test_calc.test_add": True,
        "tests.test_calc.test_sub": False,
        "tests.test_calc.TestDiv.test_zero": False,
        "tests.test_calc.test_later": False,
        "tests.test_calc.test_param[1-2]": True,
    }


def test_junit_rerun_passes_only_if_every_report_passes():
    xml = b'<testsuite><testcase classname="m" name="t"/><testcase classname="m" name="t"><failure/></testcase></testsuite>'
    assert parse_junit(xml) == [CheckResult("m.t", False, "failure: ")]


def test_junit_rejects_non_junit():
    with pytest.raises(ReportError, match="junit.xml"):
        parse_junit(b"<html></html>")
    with pytest.raises(ReportError, match="not valid XML"):
        parse_junit(b"<testsuite><testcase")


def test_junit_key_and_matching():
    assert junit_key("tests/test_calc.py::TestDiv::test_zero") == "tests.test_calc.TestDiv.test_zero"
    results = parse_junit(PYTEST_JUNIT)
    got = match_checks(
        ["test_calc.py::test_add", "tests/test_calc.py::test_sub", "test_calc.py::test_missing"], results
    )
    assert got == {
        "test_calc.py::test_add": True,
        "tests/test_calc.py::test_sub": False,
        "test_calc.py::test_missing": False,
    }


def test_parametrised_ids_with_colons_and_dots_match_their_cases():
    # boltons' test_urlutils ids (issue 30): "::" and "." inside the parameters split the id before, so every
    # such case counted as failed and a correct reference scored 0 for a broken PASS_TO_PASS
    ids = ["tests/test_urlutils.py::test_roundtrip[https://[::101.45.75.219]:80/?hi=bye]",
           "tests/test_urlutils.py::test_roundtrip[ldap://[::192.9.5.5]/dc=example,dc=com??sub?(sn=Jensen)]",
           "tests/test_urlutils.py::TestX::test_y[1.5-a::b]"]
    results = [CheckResult("tests.test_urlutils.test_roundtrip[https://[::101.45.75.219]:80/?hi=bye]", True),
               CheckResult("tests.test_urlutils.test_roundtrip[ldap://[::192.9.5.5]/dc=example,dc=com??sub?(sn=Jensen)]",
                           False),
               CheckResult("test_urlutils.TestX.test_y[1.5-a::b]", True)]
    assert junit_key(ids[0]) == "tests.test_urlutils.test_roundtrip[https://[::101.45.75.219]:80/?hi=bye]"
    assert match_checks(ids, results) == {ids[0]: True, ids[1]: False, ids[2]: True}


def test_ambiguous_match_counts_as_failed():
    results = [CheckResult("a.test_x", True), CheckResult("b.test_x", True)]
    assert match_checks(["test_x"], results) == {"test_x": False}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_parsers_never_raise_anything_but_report_error(data):
    for parse in (parse_reward_txt, parse_reward_json, parse_junit):
        try:
            parse(data)
        except ReportError:
            pass


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=40), st.text(max_size=40), st.sampled_from(["", "<failure/>", "<error/>", "<skipped/>"])
)
def test_junit_with_arbitrary_names_round_trips(classname, name, child):
    from xml.sax.saxutils import quoteattr

    xml = f"<testsuite><testcase classname={quoteattr(classname)} name={quoteattr(name)}>{child}</testcase></testsuite>"
    try:
        results = parse_junit(xml.encode("utf-8", errors="surrogatepass"))
    except ReportError:
        return  # characters XML cannot carry
    assert len(results) == 1 and results[0].passed == (child == "")
