"""data/json_split.py: one text per element of a JSON list, without parsing (hand-built cases, a randomized round
trip against json.loads, malformed text), and data/prepare.py on it: the shards, manifests and errors the parse +
re-serialisation it replaces (`read_llava_json` + `json.dumps`) gave, byte for byte."""

import importlib
import json
import random
from collections import Counter, namedtuple
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import data.prepare as prep
from data.errors import DataError
from data.json_split import JSONSplitError, element_bounds, read_records, split_records
from data.llava import read_llava_json, record_images
from data.sources import Source


def split(text: str | bytes) -> list[str]:
    return split_records(bytearray(text.encode() if isinstance(text, str) else text)).to_pylist()


def loads_list(text: str) -> list | None:
    """json.loads of `text` if it is a JSON list, else None."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, list) else None


def same_as_json(text: str | bytes) -> bool:
    """Whether the split of `text` parses to what json.loads of the whole text gives (both must succeed)."""
    texts = split(text)
    return [json.loads(t) for t in texts] == json.loads(text)


@pytest.mark.parametrize("text, n", [
    ("[]", 0), (" \n\t[ \r\n ]\n", 0), ("[1]", 1), ('["a"]', 1), ("[[]]", 1), ("[{}]", 1), ("[null, true, false]", 3),
    ('[{"a": 1}, {"b": [1, 2, {"c": "]"}]}]', 2),
    ('["a,b", "[{", "}]", ","]', 4),  # brackets and commas inside strings
    (r'["a\"b", "c\\", "d\\\"e", "\\\\", "x\\\\\"y"]', 5),  # escaped quotes, backslash runs of every parity
    (r'[{"k\"]": "v\\"}, {"k": "\\\"],[{"}]', 2),
    ('["\\u00e9\\ud83d\\ude00", "é中😀", "\\n\\t\\/"]', 3),  # escapes and raw UTF-8
    ("[\n  {\n    \"a\": [\n      1,\n      2\n    ]\n  },\n  {\n    \"b\": {}\n  }\n]\n", 2),  # pretty-printed
    ("[-1.5e+3,0,1E2,\"\"]", 4), ("[[[[[[]]]]],[[]]]", 2), ("[7, \"s\", [1], {\"id\": 1}]", 4),  # not only objects
])
def test_hand_built_lists_split_into_their_elements(text, n):
    texts = split(text)
    assert len(texts) == n and same_as_json(text)


def test_each_text_is_its_element_with_whitespace_around_it():
    text = '[ {"a": 1} ,\n  2,"x" ]'
    assert split(text) == ['  {"a": 1} ', ' \n  2', ' "x" ']  # the delimiter before an element: a space
    assert [t.strip() for t in split(text)] == ['{"a": 1}', "2", '"x"']


@pytest.mark.parametrize("text, says", [
    ("", "does not start with '['"), ("   ", "does not start with '['"), ('{"a": [1]}', "does not start with '['"),
    ('"[1]"', "does not start with '['"), ("1", "does not start with '['"), ("x [1]", "does not start with '['"),
    ("\ufeff[1]", "does not start with '['"),  # a byte order mark: json.loads refuses it too
    ("[1, 2", "not closed"), ('[{"a": [1, 2]}', "not closed"), ("[", "not closed"),
    ('[{"a": "b', "string is not closed"), ('["a\\"]', "string is not closed"),
    ("[1] 2", "extra data"), ("[1]]", "extra data"), ("[1] [2]", "extra data"), ('[1] "', "string is not closed"),
    ("[1}", "closed by '}'"),
])
def test_a_text_that_is_not_a_json_list_raises_with_the_byte(text, says):
    with pytest.raises(JSONSplitError, match=says.replace("[", r"\[")):
        split(text)
    assert loads_list(text) is None


@pytest.mark.parametrize("text", ["[1,]", "[,]", "[1 2]", "[tru]", '[{"a" 1}]', "[[}]", '[{"a": 1}, x]',
                                  "[\u00a01]", '["a\tb"]', "[1, {} {}]"])
def test_a_malformed_element_inside_the_frame_is_left_to_its_parse(text):
    assert loads_list(text) is None
    texts = split(text)
    bad = 0
    for t in texts:
        try:
            json.loads(t)
        except ValueError:
            bad += 1
    assert bad >= 1


def test_bytes_that_are_not_utf8_raise():
    for raw in (b'["\xff"]', b'["\xc3"]', b'["\xed\xa0\x80"]', b'[1, "\xe4\xb8"]'):  # bad, cut, surrogate, truncated
        with pytest.raises(UnicodeDecodeError):
            raw.decode()
        with pytest.raises(JSONSplitError, match="not UTF-8"):
            split(raw)


def test_bounds_and_the_empty_list():
    data = np.frombuffer(b' [1, [2, 3], "4,"]', dtype=np.uint8)
    assert element_bounds(data).tolist() == [1, 3, 11, 17]
    assert element_bounds(np.frombuffer(b"[ ]", dtype=np.uint8)).tolist() == [2]
    assert split_records(bytearray(b"[1]")).type == pa.string()  # large_string only past 2 GiB


WORDS = ["a", "é", "中文", "😀", '"', "\\", '\\"', "\\\\", "[", "]", "{", "}", ",", ":", "\n", "\t", "\u2028",
         "\x00", "\x7f", "'", "/", " ", "<image>", "\\n", "null", "1"]


def value(rng: random.Random, depth: int = 0):
    """A random JSON value: nested objects and lists, strings full of JSON's special characters, numbers."""
    roll = rng.random()
    if depth < 4 and roll < 0.25:
        return {"".join(rng.choices(WORDS, k=rng.randint(0, 3))): value(rng, depth + 1)
                for _ in range(rng.randint(0, 4))}
    if depth < 4 and roll < 0.45:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if roll < 0.8:
        return "".join(rng.choices(WORDS, k=rng.randint(0, 8)))
    return rng.choice([0, -7, 2**70, 1.5, -0.0, 1e-300, 1e300, True, False, None])


def dumps(rng: random.Random, items: list) -> str:
    """A JSON list of `items` in a random style: pretty or compact, ASCII or UTF-8, odd whitespace between items."""
    style = {"indent": rng.choice([None, 0, 2, "\t"]), "ensure_ascii": rng.random() < 0.5,
             "separators": rng.choice([None, (",", ":"), (" , ", " : ")])}
    if rng.random() < 0.5:
        return json.dumps(items, **style)
    ws = lambda: "".join(rng.choices(" \t\n\r", k=rng.randint(0, 3)))  # noqa: E731
    return ws() + "[" + ws() + f"{ws()},{ws()}".join(json.dumps(x, **style) for x in items) + ws() + "]" + ws()


@pytest.mark.parametrize("seed", range(6))
def test_random_lists_round_trip_through_json_loads(seed):
    rng = random.Random(seed)
    for _ in range(150):
        items = [value(rng) for _ in range(rng.randint(0, 12))]
        text = dumps(rng, items)
        assert [json.loads(t) for t in split(text)] == items == json.loads(text), text


@pytest.mark.parametrize("seed", range(4))
def test_random_damage_is_caught_by_the_split_or_by_an_element_parse(seed):
    """A damaged text is valid JSON exactly when the split succeeds and every element parses (to the same list)."""
    rng = random.Random(100 + seed)
    for _ in range(300):
        raw = bytearray(dumps(rng, [value(rng) for _ in range(rng.randint(1, 6))]).encode())
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(len(raw) + 1)
            how = rng.random()
            if how < 0.3:
                del raw[at:]
            elif how < 0.6 and at < len(raw):
                del raw[at]
            else:
                raw[at:at] = rng.choice([b'"', b"\\", b"[", b"]", b"{", b"}", b",", b" ", b"1", b":", b"\xc3"])
        try:
            whole = json.loads(bytes(raw).decode())
        except ValueError:
            whole = None
        try:
            parts = [json.loads(t) for t in split(bytes(raw))]
        except ValueError:
            parts = None
        assert parts == (whole if isinstance(whole, list) else None), bytes(raw)


def test_a_file_across_several_chunks(tmp_path, monkeypatch):
    import data.json_split as js

    monkeypatch.setattr(js, "CHUNK", 7)  # every boundary case of the chunked passes, on a small file
    rng = random.Random(7)
    items = [value(rng) for _ in range(40)]
    path = tmp_path / "x.json"
    path.write_text("\n\n  " + json.dumps(items, indent=1) + "  \n")
    assert [json.loads(t) for t in read_records(path).to_pylist()] == items
    path.write_text("[1] " + " " * 20 + "x")
    with pytest.raises(JSONSplitError, match="byte 24"):
        read_records(path)
    path.write_text(" " * 20 + "x[1]")
    with pytest.raises(JSONSplitError, match="byte 20"):
        read_records(path)


# data/prepare.py on the split: the same shards, manifests and errors as the parse + re-serialisation it replaces

Sample = namedtuple("Sample", "id input_ids labels images image_positions")


def tokenize_everything(records, image_root):
    """Ids from every character of the record as parsed (key order, nesting, unicode, numbers), one dropped sample
    per record with "drop" set."""
    samples, dropped = [], Counter()
    for r in records:
        text = json.dumps(r, ensure_ascii=False)
        if r.get("drop"):
            dropped["too long"] += 1
            continue
        ids = [ord(c) for c in text]
        images = [Path(image_root) / p for p in record_images(r)]
        samples.append(Sample(str(r.get("id", "?")), ids, ids[::-1], images, list(range(len(images)))))
    return samples, dropped


def old_record_table(json_path):
    """What data/prepare.py built before data/json_split.py: a full parse, then json.dumps of every record."""
    records = read_llava_json(json_path)
    return pa.table({"record": pa.array(range(len(records)), pa.int64()),
                     "json": pa.array([json.dumps(r) for r in records], pa.string())})


def turns(*values):
    return [{"from": "human" if i % 2 == 0 else "gpt", "value": v} for i, v in enumerate(values)]


def mixture() -> list:
    records = [
        {"id": "plain", "image": "a.png", "conversations": turns("<image>\nWhat is it?", "A red square.")},
        {"id": "unicode-é", "image": "b.png",
         "conversations": turns("<image>\nQu'est-ce que c'est ? 中文 😀", "Ünïcødé \u2028")},
        {"id": 'quotes "x"', "conversations": turns('say "hi" and \\"bye\\"', 'a \\ b \\\\ c "\\"', "[{,}]", '"]}')},
        {"id": "multi", "image": ["a.png", "b.png"], "conversations": turns("<image> and <image>: same?", "no")},
        {"id": "nested", "conversations": turns("q", "a"),
         "meta": {"lists": [[1, [2, [3, []]]], {"k": [None, True]}], "floats": [1.5, -0.0, 1e300, 2**70],
                  "esc": "\\n\t\x00"}},
        {"id": "dropped", "drop": True, "conversations": turns("long?", "yes")},
        {"id": "missing-image", "image": "nope.png", "conversations": turns("<image>\nq", "a")},
        7,  # not an object: a bad record, skipped with skip_bad
        {"id": "odd-turns", "conversations": turns("q", "a", "q2")},
        {"conversations": turns("no id", "here")},
    ]
    return records + [{"id": f"r{i}", "conversations": turns(*(f"t{i}.{j} \\ \" é" for j in range(2 * (i % 3 + 1))))}
                      for i in range(30)]


STYLES = [{}, {"indent": 2}, {"indent": "\t", "ensure_ascii": False}, {"separators": (",", ":")},
          {"separators": (",", ":"), "ensure_ascii": False}]
KEY = {"tokenizer": "everything", "max_length": 1 << 20}


def _prepare(tmp_path, monkeypatch, table_fn, cache, skip_bad=True, workers=0):
    monkeypatch.setattr(prep, "record_table", table_fn)
    # Ray's workers import the tokenizer by module name (pytest may import this file under another)
    tokenize = tokenize_everything
    if workers:
        tokenize = importlib.import_module("tests.data.test_json_split").tokenize_everything
    try:
        return prep.prepare_source(Source(tmp_path / "d.json", tmp_path), tokenize, KEY, cache,
                                   skip_bad=skip_bad, workers=workers, log=lambda m: None)
    finally:
        prep.release_ray()


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("style, workers", [(s, 0) for s in STYLES] + [
    pytest.param(STYLES[1], 1, marks=pytest.mark.slow)])  # 1: through Ray (~25 s: its start)
def test_prepared_shards_are_byte_identical_to_the_parse_and_reserialise_path(tmp_path, monkeypatch, style, workers):
    Image.new("RGB", (8, 8), (200, 10, 10)).save(tmp_path / "a.png")
    Image.new("RGB", (8, 8), (10, 200, 10)).save(tmp_path / "b.png")
    (tmp_path / "d.json").write_text(json.dumps(mixture(), **style) + "\n", encoding="utf-8")
    new_table = prep.record_table
    old, old_info = _prepare(tmp_path, monkeypatch, old_record_table, tmp_path / "old")
    new, new_info = _prepare(tmp_path, monkeypatch, new_table, tmp_path / "new", workers=workers)
    assert old.name == new.name  # the cache key does not depend on how the file is split
    old_info.pop("seconds"), new_info.pop("seconds"), new_info.update(workers=0)
    assert new_info == old_info and new_info["num_records"] == len(mixture())
    assert new_info["skipped"] == {"missing image": 1, "is not a JSON object": 1,
                                   "ends with a human turn that has no gpt answer": 1}
    assert new_info["dropped"] == {"too long": 1}
    old_files, new_files = _files(old), _files(new)
    old_files.pop("manifest.json"), new_files.pop("manifest.json")
    assert new_files == old_files and len(new_files) == 1
    texts = new_table(tmp_path / "d.json")
    assert [json.loads(t) for t in texts["json"].to_pylist()] == read_llava_json(tmp_path / "d.json")
    assert texts["record"].to_pylist() == list(range(len(mixture())))


def test_a_bad_record_is_the_same_error_as_before(tmp_path, monkeypatch):
    Image.new("RGB", (8, 8), (200, 10, 10)).save(tmp_path / "a.png")
    Image.new("RGB", (8, 8), (10, 200, 10)).save(tmp_path / "b.png")
    (tmp_path / "d.json").write_text(json.dumps(mixture(), indent=2))
    new_table, errors = prep.record_table, []
    for fn, cache in ((old_record_table, "old"), (new_table, "new")):
        with pytest.raises(DataError) as err:
            _prepare(tmp_path, monkeypatch, fn, tmp_path / cache, skip_bad=False)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and "record missing-image: image file" in errors[1]


ELEMENT_NOT_JSON = b'[{"id": "a"}, {"id": tru}]'  # the frame splits; a worker's parse finds it


@pytest.mark.parametrize("raw, workers", [(raw, 0) for raw in [
    b'[{"id": "a", "conversations": []}, {"id": "b"', b'[{"id": "a"}] x', b'{"id": "a", "conversations": []}',
    b'"just a string"', b"", b"\xef\xbb\xbf[]", b'[{"id": "a"},]', ELEMENT_NOT_JSON, b'[{"id": "a"} {}]',
    b'[{"id": "a"}, {"id": "b", "x": [1}]', b'[{"id": "\xff"}]', b'[{"id": "a"}]\n]', b'[{"id": "a\\"}]',
    b'[{"id": "a", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}, 1e]',
]] + [pytest.param(ELEMENT_NOT_JSON, 1, marks=pytest.mark.slow)])  # 1: through Ray
def test_malformed_json_is_the_error_read_llava_json_gives(tmp_path, monkeypatch, raw, workers):
    """The same exception and message as the full parse: a DataError naming the file, or (bytes that are not UTF-8)
    the UnicodeDecodeError it raised before."""
    (tmp_path / "d.json").write_bytes(raw)
    with pytest.raises(Exception) as old:
        read_llava_json(tmp_path / "d.json")
    for fn, cache, n in ((old_record_table, "old", 0), (prep.record_table, "new", workers)):
        with pytest.raises(type(old.value)) as new:
            _prepare(tmp_path, monkeypatch, fn, tmp_path / cache, workers=n)
        assert str(new.value) == str(old.value)
    if isinstance(old.value, DataError):
        assert str(tmp_path / "d.json") in str(old.value)


def test_a_missing_file_is_the_same_error(tmp_path):
    with pytest.raises(DataError, match="file not found") as err:
        prep.record_table(tmp_path / "nope.json")
    with pytest.raises(DataError) as old:
        read_llava_json(tmp_path / "nope.json")
    assert str(err.value) == str(old.value)
