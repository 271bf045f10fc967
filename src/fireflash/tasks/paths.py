"""Where things live in a task directory, for the two formats FireFlash reads unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TaskPaths:
    """The files of one Harbor-format task (STYLE.md 9)::

        <task-id>/
        ├── instruction.md      what the agent is asked to do (everything the tests check is stated here)
        ├── task.toml           [agent] [verifier] [environment] [solution] [metadata]
        ├── environment/        the Docker build context
        │   └── Dockerfile      FROM/WORKDIR/COPY/ENV/RUN subset, materialised without a container engine
        ├── tests/              copied to /tests only at grading time
        │   └── test.sh         writes /logs/verifier/reward.txt, reward.json or junit.xml
        └── solution/           never visible to the agent
            ├── solve.sh        reference solution (gate 1)
            └── alt_*.sh        other correct solutions (gate 7)

    A Terminal-Bench-1 task instead holds ``task.yaml``, ``Dockerfile``, ``solution.sh``,
    ``run-tests.sh`` and ``tests/`` at its top level (see ``tb1`` below).
    """

    root: Path

    @property
    def instruction(self) -> Path:
        return self.root / "instruction.md"

    @property
    def config(self) -> Path:
        return self.root / "task.toml"

    @property
    def environment_dir(self) -> Path:
        return self.root / "environment"

    @property
    def dockerfile(self) -> Path:
        return self.environment_dir / "Dockerfile"

    @property
    def tests_dir(self) -> Path:
        return self.root / "tests"

    @property
    def test_script(self) -> Path:
        return self.tests_dir / "test.sh"

    @property
    def solution_dir(self) -> Path:
        return self.root / "solution"

    @property
    def solve_script(self) -> Path:
        return self.solution_dir / "solve.sh"

    def alt_solutions(self) -> list[Path]:
        """``solution/alt_*.sh``, sorted."""
        return sorted(self.solution_dir.glob("alt_*.sh"))

    # Terminal-Bench 1 layout
    @property
    def tb1_config(self) -> Path:
        return self.root / "task.yaml"

    @property
    def tb1_dockerfile(self) -> Path:
        return self.root / "Dockerfile"

    @property
    def tb1_solution(self) -> Path:
        return self.root / "solution.sh"

    @property
    def tb1_run_tests(self) -> Path:
        return self.root / "run-tests.sh"
