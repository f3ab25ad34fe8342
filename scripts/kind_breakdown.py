"""Where a mini-world benchmark's score comes from: each study cell's accuracy per kind of question.

A family's single number hides which questions a cell answers from the image. This splits the per-item scores
that a study's cells already hold (`cells/<cell>-seed<S>.json`, scripts/reproduce.py) by the kind of question,
read from the world's own benchmark files, and gives each cell's mean over seeds with the study's two-level
bootstrap 95% interval (eval/intervals.py) per kind:

- VQAv2 and GQA by the question's form (`data.mini_world_questions.question_kind`: colour, shape, size, count,
  exists, relation = "left or right" / "above or below" choices, ...), GQA's relational questions ("the square
  to the left of the red circle") marked `+rel`;
- VSR by axis (left/right, above/below) and truth: a cell that calls every statement true scores 100 on the
  true ones and 0 on the false ones, which the family's accuracy (50) does not show.

    python scripts/kind_breakdown.py --study reproduction/prismatic_mini \\
        --world ~/.cache/refract/datasets/mini_world-8f4a94a0dc5f [--out FILE.md]

The world folder is the one the cells were evaluated on (`python -c "from data.mini_world import ensure; ..."` or
any cell run writes it); a study whose items are not in that world's files is refused, naming the cell, the
benchmark and the fix.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from data.atomic import atomic_file, read_json
from data.mini_world_questions import question_kind
from eval.intervals import bootstrap_interval

FAMILIES = ("mini_vqav2", "mini_gqa", "mini_vsr")


def item_kinds(world: Path) -> dict[str, dict[str, str]]:
    """{benchmark: {item id as the study's cells key it: kind}} for VQAv2, GQA and VSR of a mini world."""
    vqa = read_json(world / "vqav2/v2_OpenEnded_mscoco_val2014_questions.json")["questions"]
    gqa = read_json(world / "gqa/testdev_balanced_questions.json")
    with open(world / "vsr/random/test.jsonl") as f:
        vsr = [json.loads(line) for line in f if line.strip()]
    return {
        "mini_vqav2": {str(q["question_id"]): question_kind(q["question"]) for q in vqa},
        "mini_gqa": {k: question_kind(q["question"]) + ("+rel" if q["types"]["semantic"] == "rel" else "")
                     for k, q in gqa.items()},
        "mini_vsr": {str(i): ("left/right" if r["relation"] in ("left of", "right of") else "above/below")
                     + (" true" if r["label"] == 1 else " false") for i, r in enumerate(vsr)},
    }


def breakdown(cells: list[dict], kinds: dict[str, dict[str, str]], replicates: int = 2000) -> list[dict]:
    """One row per benchmark x kind x cell: benchmark, kind, cell, items, mean, low, high (percent)."""
    by_cell: dict[str, list[dict]] = defaultdict(list)
    for c in sorted(cells, key=lambda c: (c["cell"], c["seed"])):
        by_cell[c["cell"]].append(c)
    rows = []
    for bench in FAMILIES:
        for cell, runs in by_cell.items():
            scores = [run["items"][bench] for run in runs]
            unknown = sorted(set(scores[0]) - set(kinds[bench]))
            if unknown:
                raise SystemExit(f"error: {cell}'s {bench} items {unknown[:3]} are not in the world's {bench} file; "
                                 "fix: give --world the world folder these cells were evaluated on")
            for kind in sorted(set(kinds[bench].values())):
                ids = [i for i in scores[0] if kinds[bench][i] == kind]
                if not ids:
                    continue
                mean, low, high = bootstrap_interval([{i: s[i] for i in ids} for s in scores], "accuracy", replicates)
                rows.append({"benchmark": bench, "kind": kind, "cell": cell, "items": len(ids), "mean": mean,
                             "low": low, "high": high})
    return rows


def markdown(rows: list[dict]) -> str:
    """A table per benchmark: kinds down, cells across, 'mean [low, high]'."""
    out = []
    for bench in FAMILIES:
        sel = [r for r in rows if r["benchmark"] == bench]
        cells = sorted({r["cell"] for r in sel})
        out += [f"### {bench}", "", "| kind | items | " + " | ".join(f"`{c}`" for c in cells) + " |",
                "|---|---:|" + "---|" * len(cells)]
        for kind in sorted({r["kind"] for r in sel}):
            got = {r["cell"]: r for r in sel if r["kind"] == kind}
            n = next(iter(got.values()))["items"]
            out.append(f"| {kind} | {n} | " + " | ".join(
                f"{got[c]['mean']:.1f} [{got[c]['low']:.1f}, {got[c]['high']:.1f}]" if c in got else "" for c in cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", type=Path, required=True, help="a study's results folder (cells/*.json)")
    p.add_argument("--world", type=Path, required=True, help="the mini world folder its cells were evaluated on")
    p.add_argument("--cells", nargs="*", help="only these cells (default: every cell in the folder)")
    p.add_argument("--replicates", type=int, default=2000)
    p.add_argument("--out", type=Path, help="also write the tables here")
    args = p.parse_args(argv)
    paths = sorted((args.study / "cells").glob("*.json"))
    if not paths:
        raise SystemExit(f"error: no cells/*.json under {args.study}; fix: point --study at a study's results folder")
    cells = [c for c in map(read_json, paths) if not args.cells or c["cell"] in args.cells]
    text = markdown(breakdown(cells, item_kinds(args.world.expanduser()), args.replicates))
    if args.out:
        with atomic_file(args.out) as tmp:
            tmp.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
