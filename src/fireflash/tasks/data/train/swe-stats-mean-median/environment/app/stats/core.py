def mean(values):
    total = 0.0
    for v in values:
        total += v
    return total / len(values)


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
