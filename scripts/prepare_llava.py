"""Lay out LLaVA-1.5's training data (and Prismatic's LVIS-Instruct-4V / LRV extras) under one root, or check it.

    python scripts/prepare_llava.py --out ROOT                    # download what is missing, then check
    python scripts/prepare_llava.py --out ROOT --source DIR       # take files from DIR first (no download for those)
    python scripts/prepare_llava.py --out ROOT --extras lvis4v lrv   # + Prismatic's llava-lvis4v-lrv extras
    python scripts/prepare_llava.py --out ROOT --check            # report what is missing; never downloads

The layout is LLaVA's `playground/data` (haotian-liu/LLaVA README, "Visual Instruction Tuning"), which
conf/data/llava_v15.yaml and llava_lvis4v_lrv.yaml read (`data.root=ROOT`):

    ROOT/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json, LLaVA-Pretrain/images/     (LCS-558K, stage 1)
    ROOT/llava_v1_5_mix665k.json, coco/train2017, gqa/images, ocr_vqa/images,
         textvqa/train_images, vg/VG_100K, vg/VG_100K_2                         (mix665k, stage 2)
    --extras lvis4v: ROOT/lvis_instruct4v_220k.json, coco/val2017
    --extras lrv:    ROOT/lrv/lrv_instruct_343k.json (converted from LRV's three files), lrv/lrv-vg, lrv/lrv-chart

Downloads: the annotation files with `huggingface_hub.snapshot_download` (liuhaotian/LLaVA-Pretrain,
liuhaotian/LLaVA-Instruct-150K, X2FD/LVIS-Instruct4V), the image archives over HTTP (URLs from LLaVA's README and
Prismatic's prismatic/preprocessing/download.py), LRV's files from Google Drive with `gdown`. Everything is
resumable: an archive downloads to ROOT/downloads/NAME.part and continues with an HTTP range request; a folder is
extracted next to its place and moved in only when complete; what is in place is skipped. `--source DIR` takes a
file or folder from DIR when it is there: an extracted folder at its layout path (DIR/coco/train2017, e.g. an
existing playground/data) is symlinked, an archive under its local name (DIR/train2017.zip, see ARCHIVES) is
extracted, an annotation file (DIR/llava_v1_5_mix665k.json or at its layout path) is symlinked.

`--check` reads each annotation file, lists each image folder once (os.scandir into sets, not a stat per record)
and prints, per file and per image source (coco, gqa, ocr_vqa, textvqa, vg, LCS images, ...), the records whose
image file is absent and the text-only records; it exits 1 when a file or an image is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from core.progress import track
from data.atomic import write_json
from data.llava import record_images


@dataclass(frozen=True)
class Annotation:
    path: str  # layout path under ROOT
    image_root: str  # where its records' image paths start, under ROOT
    hub: tuple[str, str] | None = None  # (dataset repo, file name) for snapshot_download
    extra: str | None = None  # the --extras name that needs it (None: always)


@dataclass(frozen=True)
class Archive:
    target: str  # layout folder under ROOT
    name: str  # local archive name (ROOT/downloads/NAME, or DIR/NAME with --source)
    url: str
    extra: str | None = None


LCS = "LLaVA-Pretrain/images"
ANNOTATIONS = [
    Annotation("LLaVA-Pretrain/blip_laion_cc_sbu_558k.json", LCS, ("liuhaotian/LLaVA-Pretrain", "blip_laion_cc_sbu_558k.json")),
    Annotation("llava_v1_5_mix665k.json", ".", ("liuhaotian/LLaVA-Instruct-150K", "llava_v1_5_mix665k.json")),
    Annotation("lvis_instruct4v_220k.json", ".", ("X2FD/LVIS-Instruct4V", "lvis_instruct4v_220k.json"), extra="lvis4v"),
    Annotation("lrv/lrv_instruct_343k.json", ".", None, extra="lrv"),  # converted from LRV_FILES
]
ARCHIVES = [
    Archive(LCS, "llava_pretrain_images.zip", "https://huggingface.co/datasets/liuhaotian/LLaVA-Pretrain/resolve/main/images.zip"),
    Archive("coco/train2017", "train2017.zip", "http://images.cocodataset.org/zips/train2017.zip"),
    Archive("gqa/images", "gqa_images.zip", "https://downloads.cs.stanford.edu/nlp/data/gqa/images.zip"),
    Archive("ocr_vqa/images", "ocr_vqa.zip", "https://huggingface.co/datasets/qnguyen3/ocr_vqa/resolve/main/ocr_vqa.zip"),
    Archive("textvqa/train_images", "train_val_images.zip", "https://dl.fbaipublicfiles.com/textvqa/images/train_val_images.zip"),
    Archive("vg/VG_100K", "vg_images.zip", "https://cs.stanford.edu/people/rak248/VG_100K_2/images.zip"),
    Archive("vg/VG_100K_2", "vg_images2.zip", "https://cs.stanford.edu/people/rak248/VG_100K_2/images2.zip"),
    Archive("coco/val2017", "val2017.zip", "http://images.cocodataset.org/zips/val2017.zip", extra="lvis4v"),
]
# LRV-Instruct (Google Drive ids from Prismatic's scripts/additional-datasets/lrv_instruct.py): raw files under ROOT/lrv
LRV_FILES = {"filter_cap1.json": "1pWkxE2kqpys1VdwBi99ZXN6-XY5SqhwU", "filter_cap_more1.json": "1NTxkuRPlvDn7aWaJpK_yb0p5r0cxPLNZ",
             "chart_release_update.json": "13j2U-ectsYGR92r6J5hPdhT8T5ezItHF"}
LRV_IMAGES = {"lrv/lrv-vg": ("lrv_vg_images.tar.gz", "1k9MNV-ImEV9BYEOeLEIb4uGEUZjd3QbM"),
              "lrv/lrv-chart": ("lrv_chart_images.zip", "1Dey-undzW2Nl21CYLFSkP_Y4RrfRJkYd")}


def wanted(items, extras: set[str]):
    return [i for i in items if i.extra is None or i.extra in extras]


# --- laying out -------------------------------------------------------------------------------------------


def download(url: str, dest: Path, chunk: int = 1 << 20) -> Path:
    """`url` to `dest`, resuming a partial `dest.part` with an HTTP range request."""
    import requests

    if dest.exists():
        return dest
    part = dest.with_name(dest.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    done = part.stat().st_size if part.exists() else 0
    with requests.get(url, stream=True, timeout=60, headers={"Range": f"bytes={done}-"} if done else {}) as r:
        if r.status_code == 416:  # the part is already complete
            part.rename(dest)
            return dest
        r.raise_for_status()
        if done and r.status_code != 206:  # the server ignored the range: start over
            done = 0
        total = int(r.headers.get("content-length", 0)) + done
        with open(part, "ab" if done else "wb") as f:
            f.writelines(track(r.iter_content(chunk), f"downloading {dest.name}", total=total // chunk + 1 if total else None))
    part.rename(dest)
    return dest


def extract(archive: Path, target: Path) -> None:
    """Extract `archive` (zip or tar) next to `target`, then move it in: its single top-level folder, or everything."""
    tmp = target.parent / f".{target.name}.extracting"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for member in track(zf.infolist(), f"extracting {archive.name}"):
                zf.extract(member, tmp)
    else:
        shutil.unpack_archive(str(archive), str(tmp))
    entries = [e for e in tmp.iterdir() if e.name != "__MACOSX"]
    inner = entries[0] if len(entries) == 1 and entries[0].is_dir() else tmp
    os.replace(inner, target)
    shutil.rmtree(tmp, ignore_errors=True)


def convert_to_jpg(folder: Path) -> int:
    """OCR-VQA ships gif/png files that LLaVA's records name `.jpg` (LLaVA: "we save all files as .jpg"): write a
    jpg beside each (first frame of a gif), as Prismatic's convert_to_jpg does. Returns the files written."""
    from data.image_decode import decode_image

    written = 0
    for entry in track(list(os.scandir(folder)), f"converting {folder.name} to jpg"):
        path = Path(entry.path)
        jpg = path.with_suffix(".jpg")
        if path.suffix.lower() in (".jpg", ".jpeg") or jpg.exists():
            continue
        decode_image(path, max_pixels=None).save(jpg)  # the first frame, as training decodes it
        written += 1
    return written


def link(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(src.resolve(), dest, target_is_directory=src.is_dir())


def place_annotation(ann: Annotation, root: Path, source: Path | None) -> None:
    dest = root / ann.path
    if dest.exists():
        return
    name = Path(ann.path).name
    for candidate in ([source / ann.path, source / name] if source else []):
        if candidate.is_file():
            return link(candidate, dest)
    if ann.extra == "lrv":
        return convert_lrv(root, source)
    from huggingface_hub import snapshot_download

    repo, filename = ann.hub
    snapshot_download(repo, repo_type="dataset", allow_patterns=[filename], local_dir=str(dest.parent))
    if not dest.exists():
        os.replace(dest.parent / filename, dest)


def place_archive(arc: Archive, root: Path, source: Path | None) -> None:
    """One image folder in place: from DIR (a folder, or the archive), else downloaded and extracted."""
    target = root / arc.target
    if target.exists():
        return
    if source and (source / arc.target).is_dir():
        return link(source / arc.target, target)
    archive = source / arc.name if source and (source / arc.name).is_file() else download(arc.url, root / "downloads" / arc.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    extract(archive, target)
    if arc.target == "ocr_vqa/images":
        convert_to_jpg(target)


def gdrive(file_id: str, dest: Path) -> Path:
    if dest.exists():
        return dest
    try:
        import gdown
    except ImportError as err:
        raise SystemExit(f"LRV-Instruct is on Google Drive: `pip install gdown` (or put {dest.name} into --source DIR)") from err
    dest.parent.mkdir(parents=True, exist_ok=True)
    gdown.download(id=file_id, output=str(dest), resume=True)
    return dest


def lrv_records(vg: list[dict], chart: list[dict]) -> list[dict]:
    """LRV's question/answer records in LLaVA's format, image paths under ROOT (Prismatic's lrv_instruct.py)."""
    def record(rid, image, q, a):
        return {"id": str(rid), "image": image, "conversations": [{"from": "human", "value": f"<image>\n{q.strip()}"},
                                                                  {"from": "gpt", "value": a.strip()}]}
    return ([record(x["image_id"], f"lrv/lrv-vg/{x['image_id']}.jpg", x["question"], x["answer"]) for x in vg]
            + [record(Path(x["image_id"]).stem, f"lrv/lrv-chart/{x['image_id']}", x["question"], x["answer"]) for x in chart])


def convert_lrv(root: Path, source: Path | None) -> None:
    raw = {}
    for name, file_id in LRV_FILES.items():
        given = source / "lrv" / name if source else None
        raw[name] = json.loads((given if given and given.is_file() else gdrive(file_id, root / "lrv" / name)).read_text())
    records = lrv_records(raw["filter_cap1.json"] + raw["filter_cap_more1.json"], raw["chart_release_update.json"])
    write_json(root / "lrv/lrv_instruct_343k.json", records, indent=None)


def place_lrv_images(root: Path, source: Path | None) -> None:
    for target, (name, file_id) in LRV_IMAGES.items():
        if (root / target).exists():
            continue
        if source and (source / target).is_dir():
            link(source / target, root / target)
            continue
        archive = source / name if source and (source / name).is_file() else gdrive(file_id, root / "downloads" / name)
        extract(archive, root / target)


def prepare(root: Path, source: Path | None, extras: set[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for ann in wanted(ANNOTATIONS, extras):
        place_annotation(ann, root, source)
    for arc in wanted(ARCHIVES, extras):
        place_archive(arc, root, source)
    if "lrv" in extras:
        place_lrv_images(root, source)


# --- checking -----------------------------------------------------------------------------------------------


def image_source(ann: Annotation, rel: str) -> str:
    """The source an image belongs to: LCS images, or the first folder of its path (coco, gqa, vg, lrv, ...)."""
    return "LCS images" if ann.image_root == LCS else rel.split("/", 1)[0]


class FolderIndex:
    """Which files exist, one os.scandir per folder (cached): fast at 665k records (string keys, no Path per record)."""

    def __init__(self):
        self.names: dict[str, set[str]] = {}

    def exists(self, base: str, rel: str) -> bool:
        folder, _, name = f"{base}/{rel}".rpartition("/")
        names = self.names.get(folder)
        if names is None:
            try:
                names = {e.name for e in os.scandir(folder)}
            except (FileNotFoundError, NotADirectoryError):
                names = set()
            self.names[folder] = names
        return name in names


def check(root: Path, extras: set[str]) -> dict:
    """{annotation path: {"records", "text_only", "missing_file", "sources": {source: {"images", "missing"}}}}."""
    index, report = FolderIndex(), {}
    for ann in wanted(ANNOTATIONS, extras):
        path = root / ann.path
        if not path.is_file():
            report[ann.path] = {"missing_file": True}
            continue
        records = json.loads(path.read_text())
        base = str(root / ann.image_root)
        images, missing = Counter(), Counter()
        text_only = 0
        for record in track(records, f"checking {ann.path}"):
            paths = record_images(record)
            text_only += not paths
            for rel in paths:
                src = image_source(ann, rel)
                images[src] += 1
                missing[src] += not index.exists(base, rel)
        report[ann.path] = {"missing_file": False, "records": len(records), "text_only": text_only,
                            "sources": {k: {"images": images[k], "missing": missing[k]} for k in sorted(images)}}
    return report


def format_report(report: dict) -> tuple[str, bool]:
    """(the report as text, whether anything is missing)."""
    lines, missing = [], False
    for name, r in report.items():
        if r["missing_file"]:
            lines.append(f"{name}: MISSING")
            missing = True
            continue
        lines.append(f"{name}: {r['records']} records, {r['text_only']} text-only")
        for src, c in r["sources"].items():
            lines.append(f"  {src}: {c['images']} images, {c['missing']} missing")
            missing |= c["missing"] > 0
    return "\n".join(lines), missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="the data root (data.root)")
    parser.add_argument("--source", type=Path, help="a folder holding files already downloaded (archives or a layout)")
    parser.add_argument("--extras", nargs="*", default=[], choices=["lvis4v", "lrv"], help="Prismatic's extra datasets")
    parser.add_argument("--check", action="store_true", help="report what is missing; download nothing")
    args = parser.parse_args(argv)
    extras = set(args.extras)
    if not args.check:
        prepare(args.out, args.source, extras)
    text, missing = format_report(check(args.out, extras))
    print(text)
    folders = [a.target for a in wanted(ARCHIVES, extras)] + (list(LRV_IMAGES) if "lrv" in extras else [])
    if any((args.out / folder).is_symlink() for folder in folders):
        print("note: image folders are symlinked from --source, outside the data root: train with "
              "+data.allow_images_outside_root=true (data/image_decode.py refuses image paths that leave the root)")
    if missing:
        print(f"incomplete: run `python scripts/prepare_llava.py --out {args.out}"
              + (f" --extras {' '.join(sorted(extras))}" if extras else "") + "` (or train with data.skip_bad=true to skip "
              "records whose image is absent)", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
