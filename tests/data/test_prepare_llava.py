"""scripts/prepare_llava.py on a synthetic LLaVA-1.5 layout: laid out from a --source folder (archives of every
shape LLaVA's sources ship, an already-extracted folder, gif/png OCR-VQA files), then `--check` counts absent images
per source and text-only records; data.sources.require_files names the first missing file and the prepare command."""

import json
import time
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from data.errors import DataError
from data.sources import require_files, resolve
from scripts import prepare_llava as prep
from tests.conftest import compose_cfg

Q = [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A thing."}]
CAPTION = [{"from": "human", "value": "Give a short caption.\n<image>"}, {"from": "gpt", "value": "a red square"}]
TEXT = [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "hi"}]
INSTRUCT_IMAGES = ["coco/train2017/c1.jpg", "coco/train2017/c2.jpg", "gqa/images/g1.jpg", "ocr_vqa/images/o1.jpg",
                   "textvqa/train_images/t1.jpg", "vg/VG_100K/v1.jpg", "vg/VG_100K_2/v2.jpg"]


def png(path: Path, color=(200, 30, 30), fmt=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), color).save(path, format=fmt)


def zip_of(path: Path, members: dict[str, str]):
    """A zip whose members (archive name → image format) are tiny images."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, fmt in members.items():
            tmp = path.parent / "_member"
            png(tmp, fmt=fmt)
            zf.write(tmp, name)
            tmp.unlink()


@pytest.fixture
def source(tmp_path):
    """What a user downloaded: annotation files, archives under their local names, one folder already extracted."""
    src = tmp_path / "src"
    lcs = [{"id": f"l{i}", "image": f"0000{i}/{i}.jpg", "conversations": CAPTION} for i in range(3)]
    (src / "LLaVA-Pretrain").mkdir(parents=True)
    (src / "LLaVA-Pretrain/blip_laion_cc_sbu_558k.json").write_text(json.dumps(lcs))
    instruct = [{"id": f"i{k}", "image": rel, "conversations": Q} for k, rel in enumerate(INSTRUCT_IMAGES)]
    instruct += [{"id": "text1", "conversations": TEXT}, {"id": "text2", "conversations": TEXT + TEXT}]
    (src / "llava_v1_5_mix665k.json").write_text(json.dumps(instruct))
    zip_of(src / "llava_pretrain_images.zip", {f"0000{i}/{i}.jpg": "JPEG" for i in range(3)})  # many top folders
    zip_of(src / "train2017.zip", {"train2017/c1.jpg": "JPEG", "train2017/c2.jpg": "JPEG"})  # one top folder
    png(src / "gqa/images/g1.jpg", fmt="JPEG")  # already extracted: linked
    zip_of(src / "ocr_vqa.zip", {"images/o1.gif": "GIF"})  # gif → jpg, as LLaVA's records expect
    zip_of(src / "train_val_images.zip", {"train_images/t1.jpg": "JPEG"})
    zip_of(src / "vg_images.zip", {"VG_100K/v1.jpg": "JPEG"})
    zip_of(src / "vg_images2.zip", {"VG_100K_2/v2.jpg": "JPEG", "__MACOSX/._v2.jpg": "JPEG"})
    return src


def run(capsys, *argv):
    code = prep.main([str(a) for a in argv])
    return code, capsys.readouterr()


def test_layout_from_a_source_folder_then_check_counts_what_is_missing(tmp_path, source, capsys):
    out = tmp_path / "root"
    code, io = run(capsys, "--out", out, "--source", source)
    assert code == 0, io.out + io.err
    for rel in INSTRUCT_IMAGES:
        assert (out / rel).is_file(), rel
    assert (out / "LLaVA-Pretrain/images/00001/1.jpg").is_file() and (out / "gqa/images").is_symlink()
    assert "llava_v1_5_mix665k.json: 9 records, 2 text-only" in io.out and "coco: 2 images, 0 missing" in io.out
    assert "LCS images: 3 images, 0 missing" in io.out
    # a second run finds everything in place and changes nothing
    assert run(capsys, "--out", out, "--source", source)[0] == 0

    (out / "coco/train2017/c2.jpg").unlink()
    (out / "LLaVA-Pretrain/images/00000/0.jpg").unlink()
    code, io = run(capsys, "--out", out, "--check")
    assert code == 1 and "coco: 2 images, 1 missing" in io.out and "gqa: 1 images, 0 missing" in io.out
    assert "LCS images: 3 images, 1 missing" in io.out and "prepare_llava.py --out" in io.err
    assert "+data.allow_images_outside_root=true" in io.out  # gqa/images is a symlink into --source


def test_a_folder_symlinked_from_source_is_outside_the_root_unless_allowed(tmp_path, source, capsys):
    from data.image_decode import ImagePolicy
    from data.llava import load_llava

    out = tmp_path / "root"
    assert run(capsys, "--out", out, "--source", source)[0] == 0
    instruct = out / "llava_v1_5_mix665k.json"
    records, skipped = load_llava(instruct, out, skip_bad=True)
    assert dict(skipped) == {"image outside the image root": sum(rel.startswith("gqa/") for rel in INSTRUCT_IMAGES)}
    records, skipped = load_llava(instruct, out, images=ImagePolicy(allow_outside_root=True))
    assert len(records) == 9 and not skipped
    report = prep.check(out, set())
    assert report["llava_v1_5_mix665k.json"]["text_only"] == 2
    assert report["llava_v1_5_mix665k.json"]["sources"]["vg"] == {"images": 2, "missing": 0}


def test_check_without_data_reports_missing_files_and_downloads_nothing(tmp_path, capsys):
    code, io = run(capsys, "--out", tmp_path / "empty", "--check", "--extras", "lvis4v", "lrv")
    assert code == 1 and "llava_v1_5_mix665k.json: MISSING" in io.out and "lrv/lrv_instruct_343k.json: MISSING" in io.out
    assert not (tmp_path / "empty").exists()


def test_lrv_records_become_llava_records():
    vg = [{"image_id": "2345", "question": " Is there a cat? ", "answer": "No. "}]
    chart = [{"image_id": "c/17.png", "question": "Max?", "answer": "9"}]
    got = prep.lrv_records(vg, chart)
    assert got[0] == {"id": "2345", "image": "lrv/lrv-vg/2345.jpg", "conversations": [
        {"from": "human", "value": "<image>\nIs there a cat?"}, {"from": "gpt", "value": "No."}]}
    assert got[1]["id"] == "17" and got[1]["image"] == "lrv/lrv-chart/c/17.png"


def test_require_files_names_the_first_missing_file_and_the_prepare_command(tmp_path, source, capsys):
    out = tmp_path / "root"
    cfg = compose_cfg("data=llava_v15", f"data.root={out}").data
    with pytest.raises(DataError) as err:
        require_files(cfg, {"align": 1})
    msg = str(err.value)
    assert f"{out}/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json does not exist" in msg
    assert f"python scripts/prepare_llava.py --out {out}" in msg and "'align'" in msg
    with pytest.raises(DataError, match="'lvis'.*not in data.splits"):
        require_files(cfg, ["instruct", "lvis"])
    assert run(capsys, "--out", out, "--source", source)[0] == 0
    start = time.perf_counter()
    require_files(cfg, ["align", "instruct"])
    assert time.perf_counter() - start < 0.5
    sources = resolve(cfg).splits
    assert sources["align"][0].image_root == out / "LLaVA-Pretrain/images" and sources["instruct"][0].image_root == out
    lvis = compose_cfg("data=llava_lvis4v_lrv", f"data.root={out}").data
    with pytest.raises(DataError, match="lvis_instruct4v_220k.json does not exist.*--extras lvis4v lrv"):
        require_files(lvis, {"instruct": 1})
    assert [s.json.name for s in resolve(lvis).splits["instruct"]] == [
        "llava_v1_5_mix665k.json", "lvis_instruct4v_220k.json", "lrv_instruct_343k.json"]


def test_require_files_skips_generated_data():
    require_files(compose_cfg().data, {"align": 1, "instruct": 1})  # sort_of_clevr: generated on first use
