"""Every module of the project imports, and every third-party package it imports is declared in pyproject.toml.

- each module of core, vlm, behavior, data, eval, train.py, evaluate.py and scripts/*.py is imported (scripts
  are loaded as modules: their work sits behind `if __name__ == "__main__"`), so a missing dependency of a
  module-level import fails here;
- imports inside functions (optional or heavy packages, loaded on use) are found statically (ast) in the same
  files: each top-level name that is neither the standard library nor the project must belong to a distribution
  named in `[project] dependencies` or an optional extra;
- each declared dependency is imported somewhere, or is listed in USED_INDIRECTLY with the reason.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import importlib.util
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "vlm", "behavior", "data", "eval", "vla")
FILES = sorted([p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")] + [ROOT / "train.py", ROOT / "evaluate.py"]
               + list((ROOT / "scripts").glob("*.py")))
# declared, never imported by name in the project: the reason
USED_INDIRECTLY = {
    "mlflow": "Lightning's MLFlowLogger (logger=mlflow, the default tracker)",
    "wandb": "Lightning's WandbLogger (logger=wandb)",
    "tensorboardx": "Lightning's TensorBoardLogger backend (logger=tensorboard)",
    "hydra-submitit-launcher": "hydra/launcher=submitit_slurm (a Hydra plugin, found by Hydra)",
    "pytest-xdist": "make test (pytest -n auto)",
    "pytest-cov": "coverage reports (pytest --cov)",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"]) + [s for group in project.get("optional-dependencies", {}).values() for s in group]
    return {_normal(re.match(r"[A-Za-z0-9_.-]+", s).group(0)) for s in specs}


def _imported_top_names() -> dict[str, set[str]]:
    """Top-level module names imported anywhere in the project files (module level or inside functions)."""
    found: dict[str, set[str]] = {}
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                found.setdefault(n.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("path", [p for p in FILES if p.parent.name != "scripts"], ids=_module_name)
def test_module_imports(path):
    importlib.import_module(_module_name(path))


@pytest.mark.parametrize("path", [p for p in FILES if p.parent.name == "scripts"], ids=lambda p: p.name)
def test_script_imports_without_running(path):
    assert '__name__ == "__main__"' in path.read_text(), f"{path.name}: put the script's work behind a __main__ guard"
    spec = importlib.util.spec_from_file_location(f"_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]


def test_every_imported_package_is_declared_and_every_declared_one_used():
    local = set(PACKAGES) | {"tests", "scripts", "train", "evaluate"} | {p.stem for p in (ROOT / "scripts").glob("*.py")}
    dists = md.packages_distributions()
    declared = _declared()
    used: set[str] = set()
    missing = []
    for name, where in sorted(_imported_top_names().items()):
        if name in sys.stdlib_module_names or name in local:
            continue
        # an optional package that is not installed here (torchao, wandb, ...): its distribution is its name
        owners = {_normal(d) for d in dists.get(name, [name])}
        used |= owners
        if not owners & declared:
            missing.append(f"{name} (imported by {', '.join(sorted(where))}; distribution {sorted(owners)})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)
    unused = declared - used - {_normal(n) for n in USED_INDIRECTLY} - {"pytest"}
    assert not unused, f"declared in pyproject.toml but imported nowhere: {sorted(unused)} (remove, or say why in USED_INDIRECTLY)"


def test_vla_joins_vlm_and_behavior_which_import_neither_it_nor_each_other():
    """vla/ builds on vlm/ and behavior/; the siblings stay independent (issue: VLA "in a package of its own")."""
    pattern = re.compile(r"^\s*(?:from|import)\s+(vla|vlm|behavior)\b", re.M)
    for pkg, banned in (("vlm", {"vla", "behavior"}), ("behavior", {"vla"}), ("core", {"vla", "vlm", "behavior"})):
        for path in (ROOT / pkg).rglob("*.py"):
            found = set(pattern.findall(path.read_text())) & banned
            assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"
    vla_imports = {m for p in (ROOT / "vla").rglob("*.py") for m in pattern.findall(p.read_text())}
    assert {"vlm", "behavior"} <= vla_imports
