"""grading stage of the FireFlash pipeline (see README.md in this folder).

score = await make_grader(task.grader).grade(task, attempt_sandbox)
"""

from fireflash.grading.graders import GRADERS, SweGrader, TestsGrader, make_grader, score_swe, score_tests
from fireflash.grading.verifier import run_verifier

__all__ = ["GRADERS", "SweGrader", "TestsGrader", "make_grader", "run_verifier", "score_swe", "score_tests"]
