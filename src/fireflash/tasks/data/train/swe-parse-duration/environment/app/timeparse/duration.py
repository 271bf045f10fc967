import re

UNITS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    """'1h30m' -> seconds."""
    for number, unit in re.findall(r"(\d+)([hms])", text):
        return int(number) * UNITS[unit]
    raise ValueError(f"not a duration: {text!r}")
