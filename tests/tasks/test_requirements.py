"""Gate 2: every path, literal and command the tests check must be stated in the instruction."""

import pytest

from fireflash.tasks.loader import bundled_tasks
from fireflash.curation.references import referenced_requirements
from fireflash.curation.requirements import check_stated, unstated_requirements

pytestmark = pytest.mark.unit

TESTS = '''
"""Docstring mentioning /secret/path.txt is not a requirement."""
import subprocess
from pathlib import Path


def test_output():
    assert Path("/app/out/result.txt").read_text() == "DONE"
    assert Path("/tests/data/in.txt").exists()


def test_count():
    assert len(Path("/app/out/result.txt").read_text()) == 4217
    assert subprocess.run(["mytool", "--check"]).returncode == 0
    assert subprocess.run(["python3", "-V"]).returncode == 0
    assert "x" in "xyz"
'''


def write(tmp_path, body, name="test_outputs.py"):
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / name).write_text(body)
    return tests


def test_extracts_paths_literals_and_commands(tmp_path):
    found = {(r.kind, r.value) for r in referenced_requirements(write(tmp_path, TESTS))}
    assert found == {
        ("path", "/app/out/result.txt"),
        ("literal", "DONE"),
        ("literal", "4217"),
        ("command", "mytool"),
        ("literal", "xyz"),
    }


def test_unstated_requirements_are_listed_with_location(tmp_path):
    tests = write(tmp_path, TESTS)
    instruction = "Run `mytool`, then write DONE to out/result.txt. The answer has 4217 bytes; xyz."
    assert unstated_requirements(tests, instruction, "/app") == []
    stated = check_stated(tests, "Write DONE to a file.", "/app")
    assert {(r.kind, r.value) for r in stated.missing} == {
        ("path", "/app/out/result.txt"),
        ("command", "mytool"),
        ("literal", "xyz"),
    }
    assert all(r.where.startswith("tests/test_outputs.py:") for r in stated.missing)
    # a number the tests expect is computed from the instruction's rules: a note, not a requirement
    assert [(r.value, why) for r, why in stated.notes] == [
        ("4217", "an expected value computed from the instruction's rules (a number)")
    ]


def test_numbers_match_whole_numbers_only(tmp_path):
    tests = write(tmp_path, "def test_n():\n    assert compute() == 42\n")
    assert check_stated(tests, "It is 42.", "/app").notes == []
    assert len(check_stated(tests, "It is 142 or 4.2 or 42.5.", "/app").notes) == 1


def test_shell_tests_paths(tmp_path):
    tests = write(
        tmp_path, "#!/bin/bash\ngrep -q ok /app/report.md && echo 1 > /logs/verifier/reward.txt\n", "test.sh"
    )
    assert [(r.kind, r.value) for r in unstated_requirements(tests, "Write a report.", "/app")] == [
        ("path", "/app/report.md")
    ]


def test_every_bundled_task_states_what_it_checks():
    for split in ("train", "heldout"):
        for task in bundled_tasks(split):
            assert (
                unstated_requirements(
                    task.grader.tests_dir, task.instruction, task.environment.workdir, [task.path / "environment"]
                )
                == []
            ), task.id


SWE_TESTS = '''\
import pytest
from inflection import singularize, pluralize


@pytest.mark.parametrize("word,expected", [("sponsors", "sponsor")])
def test_singular(word, expected):
    assert singularize(word) == expected


class TestPlural:
    def test_plural(self):
        assert pluralize("octopus") == "octopi"


def test_untouched():
    assert pluralize("person") == "people"
'''


def test_swe_tasks_owe_only_what_their_fail_to_pass_tests_check(tmp_path):
    # issue 30: a generated SWE task ships a package's test file; its PASS_TO_PASS tests already pass on the code
    # the agent is given, and their literals ('people') failed gate 2 for most generated tasks
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_inflection.py").write_text(SWE_TESTS)
    instruction = "singularize('sponsors') returns 'sponsors' instead of 'sponsor'; fix it in inflection."
    everything = {r.value for r in check_stated(tmp_path / "tests", instruction, "/app").missing}
    assert {"people", "octopi"} <= everything
    f2p = ["tests/test_inflection.py::test_singular[sponsors-sponsor]"]
    assert check_stated(tmp_path / "tests", instruction, "/app", only_tests=f2p).missing == []
    # a method of a class, named by its class; its decorators' and body's literals count, nothing else does
    f2p = ["test_inflection.py::TestPlural::test_plural"]
    missing = {r.value for r in check_stated(tmp_path / "tests", instruction, "/app", only_tests=f2p).missing}
    assert missing == {"octopi"}
