"""Small helpers for the entry points: the default trainer preset and clean user-facing errors."""

from __future__ import annotations

import contextlib
import sys


def default_trainer_override(args: list[str]) -> list[str]:
    """`trainer=gpu` when a GPU is present and the command names no trainer preset (`cpu` otherwise)."""
    if any(a.startswith(("trainer=", "+trainer=")) for a in args) or any(a in ("-h", "--help", "--cfg", "-c") for a in args):
        return []
    import torch

    return ["trainer=gpu"] if torch.cuda.is_available() else []


@contextlib.contextmanager
def exit_on_user_error(*user_errors: type[BaseException]):
    """Errors of the given types (caused by the user's input: a model that cannot be loaded, bad data) end
    the run with their message alone, without a traceback; anything else propagates."""
    try:
        yield
    except user_errors as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
