from datetime import timedelta


def date_range(start, end):
    """All dates from start to end, both included."""
    days = []
    current = start
    while current < end:
        days.append(current)
        current += timedelta(days=1)
    return days
