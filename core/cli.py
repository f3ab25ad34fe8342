"""Helpers for the entry points (train.py, evaluate.py): user errors end the run with a clean message."""

from __future__ import annotations

import contextlib
import sys


@contextlib.contextmanager
def exit_on_user_error(*user_errors: type[BaseException]):
    """Errors of the given types (caused by the user's input: a model that cannot be loaded, bad data) end
    the run with their message alone, without a traceback; anything else propagates."""
    try:
        yield
    except user_errors as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
