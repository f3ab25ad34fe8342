"""Split the text of a JSON list into one string per top-level element, without parsing the elements.

`read_records(path)` reads a file's bytes once and returns a pyarrow string array holding each element's text, in
order (`json.loads` of element i is `json.load(file)[i]`); `split_records(buffer)` does the same on bytes already in
a `bytearray` or uint8 array. No Python object is made per element: the offsets come from a vectorised numpy scan
and the array is built on the file's own bytes (`pa.Array.from_buffers`, zero copy), so whoever parses the
elements (the workers of data/prepare.py) does all the per-record work.

The scan (`element_bounds`), in passes over the bytes in chunks of `CHUNK` (so the temporaries stay small):
1. the positions of the bytes that matter: `"`, `\\`, `[`, `{`, `]`, `}` and `,` (byte comparisons, `np.flatnonzero`);
   everything else (text, numbers, literals, whitespace) is never looked at again;
2. escaped quotes: a quote is escaped when the run of backslashes right before it has an odd length (`\\\\"` is a
   backslash then the end of a string); the runs come from the backslash positions (a new run starts where a
   position is not the previous one plus 1), and the quote that ends a run of odd length is escaped;
3. string state: the unescaped quotes alternate open/close, so a byte is inside a string when an odd number of them
   come before it (`np.bitwise_xor.accumulate`); brackets and commas inside strings are dropped;
4. bracket depth: +1 for `[` `{`, -1 for `]` `}` (`np.cumsum`); the list opens with the first non-whitespace byte
   (which must be `[`) and closes with the first bracket back at depth 0 (which must be `]`); the commas at depth 1
   separate the elements; only whitespace may follow the close.

Element i spans from its delimiter (the `[` or the comma before it) to the next one; `split_records` overwrites the
`[` and those commas with spaces in the buffer (which it owns from then on), so the strings are contiguous, as an
Arrow string array needs, and each is the element with whitespace around it (the whitespace `json.loads` allows).
`[]` (any whitespace inside) has no element; a non-object element (a number, a string, a list) is an element like
any other: deciding what an element must be is the caller's job.

The scan checks the list's frame (`[`, strings closed, brackets balanced, `]`, nothing after it) and that the bytes
are UTF-8 (Arrow's validation), raising `JSONSplitError` with the byte position; a malformed element inside the frame
(`[1, tru]`, `[{"a" 1}]`, an empty element as in `[1,]`, mismatched brackets inside an element) is not seen here:
`json.loads` of that element's text raises. A file is valid JSON exactly when the scan succeeds and every element
parses. Memory: the file's bytes, a few temporary bytes per byte of the chunk in hand, and a few bytes per special
byte (positions: int32 for a file under 2 GiB, else int64).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

CHUNK = 1 << 20  # bytes per pass of the byte scan (1 MiB): small temporaries, in cache (~2x faster than 16 MiB)
QUOTE, BACKSLASH, OPEN_LIST, OPEN_OBJECT, CLOSE_LIST, CLOSE_OBJECT, COMMA = range(1, 8)
KIND = np.zeros(256, dtype=np.uint8)
for _char, _kind in zip(b'"\\[{]},', range(1, 8)):
    KIND[_char] = _kind
DEPTH = np.array([0, 0, 0, 1, 1, -1, -1, 0], dtype=np.int8)  # per kind: what it does to the bracket depth
WHITESPACE = np.zeros(256, dtype=bool)
WHITESPACE[list(b" \t\n\r")] = True  # JSON's whitespace (json.loads allows no other)
SPACE = ord(" ")


class JSONSplitError(ValueError):
    """The text is not a JSON list (its frame: the opening `[`, strings, brackets, the closing `]`) or not UTF-8."""


def read_records(path: str | Path) -> pa.Array:
    """The text of each element of the JSON list in the file at `path` (see the module docstring)."""
    with open(path, "rb") as f:
        buffer = np.empty(os.fstat(f.fileno()).st_size, dtype=np.uint8)  # not zeroed first, as a bytearray is
        size = 0
        while size < len(buffer) and (n := f.readinto(buffer[size:])):
            size += n
    return split_records(buffer[:size])  # (fewer bytes: the file shrank while being read)


def split_records(buffer: bytearray | np.ndarray) -> pa.Array:
    """The text of each element of the JSON list in `buffer` (UTF-8 bytes, writable: a bytearray or a uint8 array),
    as a string array (large_string past 2 GiB) over `buffer` itself; the list's `[` and separating commas in
    `buffer` become spaces."""
    data = np.frombuffer(buffer, dtype=np.uint8)
    bounds = element_bounds(data)
    data[bounds[:-1]] = SPACE  # element i is buffer[bounds[i]:bounds[i + 1]]: its delimiter becomes whitespace
    large = len(data) > np.iinfo(np.int32).max
    offsets = bounds.astype(np.int64 if large else np.int32, copy=False)
    texts = pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(offsets) - 1,
                                  [None, pa.py_buffer(offsets), pa.py_buffer(buffer)])
    try:
        texts.validate(full=True)
    except pa.ArrowInvalid as err:
        raise JSONSplitError(f"not UTF-8 text ({err})") from err
    return texts


def element_bounds(data: np.ndarray) -> np.ndarray:
    """The n + 1 delimiters of the n elements of the JSON list in `data` (uint8): the position of the `[`, of each
    comma between elements, and of the `]`; element i is `data[bounds[i] + 1:bounds[i + 1]]`. For `[]`, n = 0 and
    `bounds` is the position of the `]` alone. JSONSplitError if the frame is not a JSON list."""
    pos, kind = _special_bytes(data)
    quotes = _unescaped_quotes(pos, kind)
    if np.count_nonzero(quotes) % 2:
        raise JSONSplitError("a string is not closed before the end of the text (truncated?)")
    inside = np.bitwise_xor.accumulate(quotes.view(np.uint8))  # 1 within a string (and on its opening quote)
    keep = (kind >= OPEN_LIST) & (inside == 0)
    del quotes, inside
    pos, kind = pos[keep], kind[keep]
    del keep
    if not len(pos) or kind[0] != OPEN_LIST or not _all_whitespace(data, 0, int(pos[0])):
        raise JSONSplitError(f"expected a JSON list: the text does not start with '[' "
                             f"(byte {_first_non_whitespace(data, 0)})")
    depth = np.cumsum(DEPTH[kind], dtype=np.int32)
    ends = np.flatnonzero(depth == 0)
    if not len(ends):
        raise JSONSplitError(f"the list opened at byte {int(pos[0])} is not closed before the end of the text "
                             "(truncated?)")
    end = int(ends[0])
    del ends
    if kind[end] != CLOSE_LIST:
        raise JSONSplitError(f"the list opened at byte {int(pos[0])} is closed by '}}' at byte {int(pos[end])}")
    close = int(pos[end])
    if end != len(pos) - 1 or not _all_whitespace(data, close + 1, len(data)):
        raise JSONSplitError(f"extra data after the list closed at byte {close} "
                             f"(byte {_first_non_whitespace(data, close + 1)})")
    commas = pos[:end][(kind[:end] == COMMA) & (depth[:end] == 1)]
    del depth
    if not len(commas) and _all_whitespace(data, int(pos[0]) + 1, close):
        return np.array([close], dtype=np.int64)  # []
    return np.concatenate([pos[:1], commas, pos[end:end + 1]]).astype(np.int64)


def _special_bytes(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions (ascending) and kinds of the quotes, backslashes, brackets and commas in `data`."""
    dtype = np.int32 if len(data) <= np.iinfo(np.int32).max else np.int64
    positions = []
    for lo in range(0, len(data), CHUNK):  # comparisons, not a table lookup: a few times faster per byte
        folded = data[lo:lo + CHUNK] | 0x20  # [ \ ] → { | }; " , stay (as do 0x02, 0x0C)
        candidate = folded == ord('"')
        candidate |= folded == ord(",")
        folded -= ord("{")
        candidate |= folded < 3  # { | }
        del folded
        at = np.flatnonzero(candidate)
        del candidate
        at += lo
        positions.append(at.astype(dtype))
    pos = np.concatenate(positions) if positions else np.zeros(0, dtype=dtype)
    del positions
    kind = KIND[data[pos]]
    if not kind.all():  # the candidates that are none of them: |, 0x02, 0x0C
        pos, kind = pos[kind > 0], kind[kind > 0]
    return pos, kind


def _unescaped_quotes(pos: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Per special byte: whether it is a quote that no backslash escapes (an odd run of backslashes right before)."""
    quotes = kind == QUOTE
    backslash = np.flatnonzero(kind == BACKSLASH)  # where the backslashes are among the special bytes
    if not len(backslash):
        return quotes
    at = pos[backslash]
    new_run = np.diff(at, prepend=at[0] - 2) != 1
    starts, ends = np.flatnonzero(new_run), np.append(np.flatnonzero(new_run[1:]), len(at) - 1)
    after = backslash[ends[(ends - starts) % 2 == 0]] + 1  # the special byte after each run of odd length
    after = after[after < len(pos)]
    after = after[(kind[after] == QUOTE) & (pos[after] == pos[after - 1] + 1)]  # a quote right after the run
    quotes[after] = False
    return quotes


def _all_whitespace(data: np.ndarray, lo: int, hi: int) -> bool:
    return all(WHITESPACE[data[a:min(a + CHUNK, hi)]].all() for a in range(lo, hi, CHUNK))


def _first_non_whitespace(data: np.ndarray, lo: int) -> int:
    """The position of the first byte from `lo` that is not whitespace (`len(data)` if none)."""
    for a in range(lo, len(data), CHUNK):
        other = np.flatnonzero(~WHITESPACE[data[a:a + CHUNK]])
        if len(other):
            return a + int(other[0])
    return len(data)
