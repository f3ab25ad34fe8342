"""Loading components by hub id or local path, failing fast and clearly without a network.

`resolve_tiny(model_id, config_key)` turns a config's `tiny:NAME` into the
folder of that tiny checkpoint (vlm/tiny/, written on first load); every other
id passes through, so a tiny flavour loads through the same code as a hub model.
`offline_unless_reachable(model_id)` switches huggingface_hub to offline mode
when the id is not a local path and the hub cannot be reached within a few
seconds, so a cached model still loads and a missing one fails at once instead
of retrying for a minute. `ComponentLoadError` carries the one message the
entry points print: which model id failed and how to point the config at a
local copy.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import huggingface_hub.constants as hf_constants


TINY_PREFIX = "tiny:"


class ComponentLoadError(RuntimeError):
    """A model component could not be loaded; the message says which and how to fix it."""


def resolve_tiny(model_id: str, config_key: str, folder_scheme: str = "") -> str:
    """`tiny:NAME` → `folder_scheme` + the local folder of tiny checkpoint NAME (written on first call; timm and
    open_clip name a folder `local-dir:PATH`, transformers a plain path); any other id unchanged."""
    if not model_id.startswith(TINY_PREFIX):
        return model_id
    from vlm.tiny import ensure_tiny, flavours  # imported on use: the writers import every model library

    name = model_id.removeprefix(TINY_PREFIX)
    if name not in flavours():
        raise ComponentLoadError(f"unknown tiny flavour {name!r} in {config_key}={model_id}\n"
                                 f"  fix: choose one of {', '.join(f'{TINY_PREFIX}{n}' for n in flavours())}")
    return f"{folder_scheme}{ensure_tiny(name)}"


def is_local(model_id: str) -> bool:
    return model_id.startswith("local-dir:") or Path(model_id).expanduser().exists()


def hub_reachable(timeout: float = 3.0) -> bool:
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def offline_unless_reachable(model_id: str) -> None:
    if not is_local(model_id) and not hf_constants.HF_HUB_OFFLINE and not hub_reachable():
        hf_constants.HF_HUB_OFFLINE = True


def load_error(kind: str, model_id: str, config_key: str, err: Exception) -> ComponentLoadError:
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if is_local(model_id):
        hint = f"check that {model_id} holds a complete checkpoint"
    else:
        repo = model_id.removeprefix("hf-hub:")
        local = "local-dir:DIR" if model_id.startswith("hf-hub:") else "DIR"
        hint = (
            f"the hub is unreachable or the model is gated/missing. Download it where you have access "
            f"(`hf download {repo} --local-dir DIR`), then run with {config_key}={local}"
        )
    return ComponentLoadError(f"could not load {kind} '{model_id}': {reason}\n  fix: {hint}")
