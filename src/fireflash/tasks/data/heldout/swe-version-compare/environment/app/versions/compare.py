def compare(a, b):
    """-1, 0 or 1 as version string a is lower than, equal to or higher than b."""
    pa, pb = a.split("."), b.split(".")
    return (pa > pb) - (pa < pb)
