"""`DataError`: malformed input data (training records, datasets); the message names the file, the record and the fix."""


class DataError(ValueError):
    """Malformed training data; the message names the file, the record and the fix."""
