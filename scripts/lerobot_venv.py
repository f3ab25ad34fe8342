"""A cached virtual environment holding the `lerobot` package itself (0.4.4), apart from the project's.

    python scripts/lerobot_venv.py            # creates it if missing, prints its python
    python scripts/lerobot_venv.py --rebuild  # throws the cached one away first

lerobot 0.4.4 (the newest release for Python 3.11) pins torch<2.11 and huggingface-hub<0.36, which the
project's environment cannot meet, so LeRobot's side of the interop check (scripts/lerobot_side/,
tests/data/test_lerobot_interop.py) runs in an environment of its own:

- where: `$REFRACT_LEROBOT_VENV`, else `<cache root>/lerobot-0.4.4-venv` (`data.cache.cache_root()`:
  `$REFRACT_CACHE`, else ~/.cache/refract);
- torch 2.10.0 + torchvision 0.25.0: the CPU wheels of https://download.pytorch.org/whl/cpu when that index
  answers (`$REFRACT_LEROBOT_TORCH_INDEX` names another), else PyPI's default build of the same versions
  (with CUDA libraries: larger, and it runs on CPU all the same);
- then `lerobot==0.4.4` with its own pins; its video encoding and the "pyav" decoder use PyAV (a base
  dependency, its wheel carries FFmpeg); its default decoder, torchcodec, also installs but needs the
  system's FFmpeg libraries, so scripts/lerobot_side/read.py falls back to "pyav" where torchcodec fails.

Ready means a marker file `.refract-ready` (written last, atomically) whose recorded spec equals SPEC; a
folder without it (a crash mid-build) or with another spec is removed and built anew. A `filelock.FileLock`
beside the folder serialises concurrent callers: the second waits, then finds it ready. The marker records
the creation's wall time and the folder's size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from data.cache import cache_root  # noqa: E402

LEROBOT_VERSION = "0.4.4"
TORCH_VERSION = "2.10.0"  # lerobot 0.4.4: torch>=2.2.1,<2.11; torchcodec<0.11 (0.10 is built against torch 2.10)
TORCHVISION_VERSION = "0.25.0"  # the torchvision release paired with torch 2.10 (lerobot: <0.26)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SPEC = {"lerobot": LEROBOT_VERSION, "torch": TORCH_VERSION, "torchvision": TORCHVISION_VERSION,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}"}
MARKER = ".refract-ready"
LOCK_TIMEOUT_S = 3600  # another caller's build: minutes, never an hour


class LeRobotVenvError(RuntimeError):
    """The venv could not be built; the message names the step and the tail of its output."""


def default_venv_dir() -> Path:
    env = os.environ.get("REFRACT_LEROBOT_VENV")
    return Path(env).expanduser() if env else cache_root() / f"lerobot-{LEROBOT_VERSION}-venv"


def venv_python(venv: Path) -> Path:
    return Path(venv) / "bin" / "python"


def read_marker(venv: Path) -> dict | None:
    try:
        marker = json.loads((Path(venv) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker if marker.get("spec") == SPEC else None


def folder_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in Path(path).rglob("*") if not p.is_symlink() and p.is_file())


def index_answers(url: str, timeout_s: float = 10.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/torch/", timeout=timeout_s) as r:
            return r.status == 200
    except OSError:
        return False


def run_step(name: str, cmd: list[str], log) -> None:
    log(f"[lerobot-venv] {name}: {' '.join(cmd)}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise LeRobotVenvError(f"building the lerobot {LEROBOT_VERSION} venv failed at '{name}' "
                               f"(exit {proc.returncode}):\n{tail}")
    log(f"[lerobot-venv] {name}: done in {time.monotonic() - t0:.0f} s")


def build(venv: Path, log) -> dict:
    """Build the venv in place (the caller holds the lock and has removed any unfinished folder)."""
    t0 = time.monotonic()
    run_step("create venv", [sys.executable, "-m", "venv", str(venv)], log)
    py = str(venv_python(venv))
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
    torch_pins = [f"torch=={TORCH_VERSION}", f"torchvision=={TORCHVISION_VERSION}"]
    index = os.environ.get("REFRACT_LEROBOT_TORCH_INDEX", CPU_INDEX)
    if index_answers(index):
        torch_source = index
        run_step("torch (CPU wheels)", [*pip, "--index-url", index,
                                        f"torch=={TORCH_VERSION}+cpu", f"torchvision=={TORCHVISION_VERSION}+cpu"], log)
    else:
        torch_source = "pypi"
        log(f"[lerobot-venv] {index} does not answer: PyPI's torch {TORCH_VERSION} (with CUDA libraries) instead")
        run_step("torch (PyPI)", [*pip, *torch_pins], log)
    # The pins again, so the resolver keeps the torch pair just installed (a +cpu build satisfies ==2.10.0).
    run_step(f"lerobot {LEROBOT_VERSION}", [*pip, f"lerobot=={LEROBOT_VERSION}", *torch_pins], log)
    run_step("import check", [py, "-c", "import lerobot, torch, av; "
                              "from lerobot.datasets.lerobot_dataset import LeRobotDataset; "
                              "print('lerobot', lerobot.__version__, 'torch', torch.__version__, 'av', av.__version__)"],
             log)
    seconds = time.monotonic() - t0
    marker = {"spec": SPEC, "torch_source": torch_source, "created_s": round(seconds, 1),
              "size_bytes": folder_size(venv), "created_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tmp = venv / f"{MARKER}.tmp"
    tmp.write_text(json.dumps(marker, indent=1))
    os.replace(tmp, venv / MARKER)
    log(f"[lerobot-venv] ready in {seconds:.0f} s, {marker['size_bytes'] / 2**30:.2f} GiB: {venv}")
    return marker


def ensure_lerobot_venv(venv: Path | None = None, rebuild: bool = False, log=print) -> Path:
    """The python of a ready lerobot venv at `venv` (default_venv_dir()), built first if missing."""
    venv = Path(venv) if venv is not None else default_venv_dir()
    if not rebuild and read_marker(venv):
        return venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(venv) + ".lock", timeout=LOCK_TIMEOUT_S):
        if rebuild or not read_marker(venv):  # another caller may have finished it while this one waited
            if venv.exists():
                log(f"[lerobot-venv] removing an unfinished or outdated venv: {venv}")
                shutil.rmtree(venv)
            log(f"[lerobot-venv] building lerobot {LEROBOT_VERSION} venv at {venv} (minutes, once)")
            build(venv, log)
    return venv_python(venv)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=None, help="default: $REFRACT_LEROBOT_VENV or the cache root")
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()
    py = ensure_lerobot_venv(args.venv, rebuild=args.rebuild)
    print(json.dumps({"python": str(py), **read_marker(py.parent.parent)}, indent=1))


if __name__ == "__main__":
    main()
