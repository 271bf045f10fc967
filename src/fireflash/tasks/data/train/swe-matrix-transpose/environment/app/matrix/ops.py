def transpose(m):
    """Rows become columns."""
    return [[m[r][c] for r in range(len(m))] for c in range(len(m))]


def identity(n):
    return [[1 if r == c else 0 for c in range(n)] for r in range(n)]
