"""What every family draws from: ``TaskSpec`` (one generated task), ``Draw`` (one instance's random names and
words) and the word pools; ``as_text`` joins lines as a file's contents."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from fireflash.tasks.words import DIR_WORDS, FILE_STEMS

WORDS = (
    "alpha", "amber", "anchor", "apple", "arrow", "basil", "beacon", "birch", "bridge", "cable", "canyon",
    "cedar", "cloud", "comet", "copper", "coral", "delta", "ember", "falcon", "fern", "forest", "garnet",
    "glacier", "harbor", "hazel", "indigo", "island", "jasper", "lantern", "lemon", "maple", "meadow",
    "nickel", "ocean", "olive", "orbit", "pepper", "pine", "prairie", "quartz", "raven", "river", "saffron",
    "silver", "summit", "thunder", "timber", "tulip", "valley", "violet", "willow", "winter", "zephyr",
)
LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
NAMES = ("ana", "ben", "carla", "dev", "eli", "fay", "gus", "hana", "ivan", "jo", "kim", "leo", "mia", "noor")
CITIES = ("oslo", "lima", "rome", "kyiv", "doha", "quito", "perth", "cairo", "dakar", "hanoi")


@dataclass
class TaskSpec:
    """One generated task: what the agent is told, the files it starts with, the answer, the checks.

    ``files`` maps paths relative to ``/app`` to their contents; ``setup`` are Dockerfile ``RUN`` lines
    after the copy (e.g. ``git init``); ``checks`` is the body of ``tests/test_outputs.py``.
    """

    family: str
    category: str
    instruction: str
    files: dict[str, str]
    solution: str
    checks: str
    setup: list[str] = field(default_factory=list)
    git: bool = False


class Draw:
    """Random names for one instance: distinct file stems and directory words."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.stems = rng.sample(FILE_STEMS, 6)
        self.dirs = rng.sample(DIR_WORDS, 3)

    def file(self, i: int, ext: str = "txt") -> str:
        return f"{self.stems[i]}.{ext}"

    def words(self, n: int) -> list[str]:
        return [self.rng.choice(WORDS) for _ in range(n)]

    def lines(self, n: int, lo: int = 2, hi: int = 6) -> list[str]:
        return [" ".join(self.words(self.rng.randint(lo, hi))) for _ in range(n)]

    def pick(self, *phrasings: str) -> str:
        return self.rng.choice(phrasings)


def as_text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)
