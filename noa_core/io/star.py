"""STAR files, RELION's tables of metadata, kept as their text: read in one pass, written back byte for byte.

A :class:`Star` holds the file's bytes once and an index of where its blocks, labels and rows lie. Values are
parsed only for the columns asked for (:meth:`Star.values`, one pass of a compiled tokenizer over the rows),
and a table written back (:meth:`Star.edited`) copies every byte it does not change: other columns, other
blocks, comments, spacing and the order of everything stay as they were, which is what labs' pipelines that
add their own columns need. A million rows are read, checked and written in well under a second.

The grammar is RELION's (``MetaDataTable::readStar``): ``data_NAME`` starts a block; a block holds pairs
(``_label value`` lines) or a loop (``loop_``, ``_label`` lines, then one row of values per line, ending at a
blank line). Values are separated by blanks; a value may be quoted (' or "). Labels are named without their
underscore (``rlnImageName``); rows are counted from 1 in messages, as the user counts them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from noa_core import kernels  # a face: the STAR kernels (numba) load when a STAR is first parsed
from noa_core.errors import FileFormatError, MissingFileError
from noa_core.io import atomic

SUFFIX = ".star"


class StarError(FileFormatError):
    """A STAR file that is not one, or that lacks what was asked of it: the message names the file, the
    block and the row or label."""


@dataclass(frozen=True)
class Block:
    """One ``data_`` block: where its text lies in the file, and its pairs or its loop.

    Attributes:
        name: what follows ``data_`` ('' for a bare ``data_``).
        start, stop: the block's bytes: from the comments and blank lines before its ``data_`` line to the
            next block's.
        pairs: the ``_label value`` pairs of a block without a loop, in order (values as written, unquoted).
        labels: the loop's labels in column order (empty for a block without a loop).
        labels_stop: the byte after the line of the loop's last label (where new labels go).
        rows_start, rows_stop: the bytes of the loop's rows (their lines, newlines included).
        offsets: the byte offset of each row and of the line after the last (``rows + 1`` offsets).
    """

    name: str
    start: int
    stop: int
    pairs: Mapping[str, str] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    labels_stop: int = 0
    rows_start: int = 0
    rows_stop: int = 0
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64), repr=False)

    @property
    def loop(self) -> bool:
        return bool(self.labels)

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    def column(self, label: str) -> int:
        """The 0-based column of ``label`` in the loop; KeyError when absent."""
        return self.labels.index(label) if label in self.labels else _raise_key(label)


def _raise_key(label: str) -> int:
    raise KeyError(label)


@dataclass(frozen=True)
class LoopEdit:
    """How a loop changes when written: which rows, in which order, and which values are new.

    Attributes:
        rows: the 0-based rows kept, in the order written (None: all, in order).
        replace: label -> new value of each row written (bytes, as NumPy ``S`` array, unquoted).
        add: new label -> value of each row written, appended as the last columns.
    """

    rows: np.ndarray | None = None
    replace: Mapping[str, np.ndarray] = field(default_factory=dict)
    add: Mapping[str, np.ndarray] = field(default_factory=dict)


class Star:
    """A STAR file read: its bytes (:attr:`text`, read-only) and its blocks in order."""

    def __init__(self, path: Path, text: bytes) -> None:
        self.path = path
        self.data = text
        self.text = np.frombuffer(text, np.uint8)
        self.blocks: tuple[Block, ...] = tuple(_blocks(path, text, self.text))

    def __iter__(self) -> Iterator[Block]:
        return iter(self.blocks)

    def __contains__(self, name: str) -> bool:
        return any(block.name == name for block in self.blocks)

    def block(self, name: str) -> Block:
        """The block ``data_<name>``; a StarError naming the file when there is none."""
        for block in self.blocks:
            if block.name == name:
                return block
        have = ", ".join(f"data_{b.name}" for b in self.blocks) or "none"
        raise StarError(f"{self.path}: no data_{name} block (it has {have})")

    def spans(self, block: Block, label: str) -> tuple[np.ndarray, np.ndarray]:
        """Where the value of ``label`` lies in each row of ``block``'s loop: byte starts and stops."""
        return kernels.star.column_spans(self.text, block.offsets, self._column(block, label))

    def values(self, block: Block, label: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The values of ``label`` in each row of ``block``'s loop (or in ``rows``), as bytes (a NumPy ``S``
        array, quotes taken off)."""
        starts, stops = self.spans(block, label)
        if rows is not None:
            starts, stops = starts[rows], stops[rows]
        width = int((stops - starts).max()) if starts.size else 1
        return kernels.star.gather_values(self.text, starts, stops, max(width, 1)).view(f"S{max(width, 1)}").ravel()

    def numbers(self, block: Block, label: str, dtype: type = np.float64, rows: np.ndarray | None = None) -> np.ndarray:
        """The values of ``label`` as numbers; a StarError naming the row of the first that is not one."""
        values = self.values(block, label, rows)
        try:
            return values.astype(dtype)
        except ValueError:
            bad = _first_not_number(values, dtype)
            row = bad if rows is None else int(rows[bad])
            raise StarError(f"{self.path}: data_{block.name}, row {row + 1}, {label}: "
                            f"{values[bad].decode(errors='replace')!r} is not a number") from None

    def _column(self, block: Block, label: str) -> int:
        try:
            return block.column(label)
        except KeyError:
            raise StarError(f"{self.path}: data_{block.name} has no {label} column") from None

    # -- writing ------------------------------------------------------------------------------------

    def edited(self, loops: Mapping[str, LoopEdit] | None = None,
               pairs: Mapping[str, Mapping[str, str]] | None = None,
               blocks: Sequence[str] | None = None) -> list[bytes | np.ndarray]:
        """The file's text with ``loops`` (block name -> :class:`LoopEdit`) and ``pairs`` (block name ->
        label -> new value) changed, as pieces to write one after another; ``blocks``: only these blocks,
        in this order (default: all). Everything not changed is copied as it was."""
        loops, pairs = loops or {}, pairs or {}
        chosen = self.blocks if blocks is None else [self.block(name) for name in blocks]
        pieces: list[bytes | np.ndarray] = []
        for block in chosen:
            if block.name in loops and block.loop:
                pieces.extend(self._edited_loop(block, loops[block.name]))
            elif block.name in pairs and not block.loop:
                pieces.append(self._edited_pairs(block, pairs[block.name]))
            else:
                pieces.append(self.text[block.start:block.stop])  # a view: the text is never held twice
        return pieces

    def _edited_loop(self, block: Block, edit: LoopEdit) -> list[bytes | np.ndarray]:
        body = self.loop_rows(block, edit)
        head = self.data[block.start:block.labels_stop]
        if edit.add:
            head += b"".join(f"_{label} #{len(block.labels) + 1 + i} \n".encode()
                             for i, label in enumerate(edit.add))
        return [head, self.data[block.labels_stop:block.rows_start], body, self.data[block.rows_stop:block.stop]]

    def loop_rows(self, block: Block, edit: LoopEdit) -> np.ndarray:
        """The text of ``block``'s rows as ``edit`` writes them (the rows alone, no labels: what joins the rows
        of several files under one loop's labels)."""
        rows = np.arange(block.rows) if edit.rows is None else np.asarray(edit.rows, np.int64)
        for label, values in (*edit.replace.items(), *edit.add.items()):
            if len(values) != len(rows):
                raise ValueError(f"{label}: {len(values)} values for {len(rows)} rows")
        replaced = sorted(edit.replace, key=block.column)
        if rows.size and (rows.min() < 0 or rows.max() >= block.rows):
            raise IndexError(f"data_{block.name} has {block.rows} rows")
        starts = np.empty((len(replaced), rows.size), np.int64)
        stops = np.empty((len(replaced), rows.size), np.int64)
        for j, label in enumerate(replaced):
            s, e = self.spans(block, label)
            starts[j], stops[j] = s[rows], e[rows]
        values, value_offsets = _packed([star_values(edit.replace[label]) for label in replaced], rows.size)
        added, added_offsets = _packed([star_values(v) for v in edit.add.values()], rows.size)
        return kernels.star.assemble_rows(self.text, block.offsets, rows, starts, stops, values, value_offsets,
                                     added, added_offsets)

    def _edited_pairs(self, block: Block, changes: Mapping[str, str]) -> bytes:
        lines = self.data[block.start:block.stop].split(b"\n")
        for i, line in enumerate(lines):
            words = line.split(None, 1)
            if words and words[0].startswith(b"_") and words[0][1:].decode() in changes:
                label = words[0][1:].decode()
                lines[i] = f"_{label} {_quoted(changes[label])}".encode()
        return b"\n".join(lines)


def read(path: str | os.PathLike) -> Star:
    """Read and index the STAR file ``path``; a StarError naming the block, row and label of what is wrong."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise MissingFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise StarError(f"{path}: is a folder, not a STAR file") from None
    return Star(path, text)


def write(path: str | os.PathLike, pieces: Sequence[bytes | np.ndarray], *, overwrite: bool = False) -> None:
    """Write the text ``pieces`` (from :meth:`Star.edited` or :func:`loop_text`) to ``path`` atomically."""
    path = atomic.check_output(path, overwrite)
    temp = prepared(path, pieces, overwrite)
    try:
        temp.commit()
    except BaseException:
        temp.abort()
        raise


def prepared(path: Path, pieces: Iterable[bytes | np.ndarray], overwrite: bool) -> atomic.TemporaryOutput:
    """The text ``pieces`` (a STAR's, or any text as bytes and ``S`` arrays) written to a temporary file beside
    ``path``, to place with others (:func:`noa_core.io.atomic.commit_together`) or alone (its ``commit``)."""
    temp = atomic.TemporaryOutput(path, overwrite)
    try:
        with open(temp.temp, "wb") as out:
            for piece in pieces:
                out.write(piece if isinstance(piece, bytes) else piece.data)
    except BaseException:
        temp.abort()
        raise
    return temp


def loop_text(name: str, columns: Mapping[str, np.ndarray | Sequence], *,
              version: int | None = 30001) -> list[bytes | np.ndarray]:
    """A new ``data_<name>`` block with a loop of ``columns`` (label -> values, one per row, any NumPy type:
    numbers are written as Python writes them, shortest first), as RELION lays it out."""
    head = (f"\n# version {version}\n" if version else "") + f"\ndata_{name}\n\nloop_ \n"
    head += "".join(f"_{label} #{i + 1} \n" for i, label in enumerate(columns))
    count = len(next(iter(columns.values()))) if columns else 0
    added, offsets = _packed([star_values(v) for v in columns.values()], count)
    empty = np.zeros(count + 1, np.int64)
    no_text = kernels.runtime.read_only(np.zeros(0, np.uint8))  # typed as a parsed file's text: one compiled version
    body = kernels.star.assemble_rows(no_text, empty, np.zeros(count, np.int64),
                                 np.zeros((0, count), np.int64), np.zeros((0, count), np.int64),
                                 np.zeros(0, np.uint8), np.zeros((0, count + 1), np.int64), added, offsets)
    return [head.encode(), body, b"\n"]


def star_values(values: np.ndarray | Sequence) -> np.ndarray:
    """``values`` as the bytes a STAR file holds (an ``S`` array): text as is, numbers as Python writes
    them (the shortest text that reads back the same), quoted where a value is empty or holds a blank."""
    array = np.asarray(values)
    if array.dtype.kind == "U":
        array = np.strings.encode(array, "utf-8")
    elif array.dtype.kind == "f":
        array = np.array([repr(float(v)) for v in array.tolist()], "S") if array.size < 64 else \
            array.astype(np.float64).astype("S32")
    elif array.dtype.kind in "iub":
        array = array.astype(np.int64).astype("S21")
    elif array.dtype.kind != "S":
        array = array.astype("S")
    needs = _needs_quotes(array)
    if needs.any():
        array = array.astype(f"S{array.dtype.itemsize + 2}")
        array[needs] = np.strings.add(np.strings.add(b'"', array[needs]), b'"')
    return array


def _packed(columns: Sequence[np.ndarray], count: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns of ``S`` values packed end to end (one byte array) and each value's offsets ``(k, count + 1)``."""
    offsets = np.zeros((len(columns), count + 1), np.int64)
    pieces, total = [], 0
    for j, column in enumerate(columns):
        width = column.dtype.itemsize
        raw = np.ascontiguousarray(column).view(np.uint8).reshape(count, width)
        lengths = np.strings.str_len(column).astype(np.int64)
        pieces.append(raw[np.arange(width) < lengths[:, None]])
        offsets[j, 1:] = total + np.cumsum(lengths)
        offsets[j, 0] = total
        total = int(offsets[j, -1])
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)), offsets


# A value read back as something else unless quoted: empty, holding a blank, or beginning as a label, a comment or
# a keyword does at the start of a line (a row whose first value is _0 would be read as the label _0)
_BLANKS = (b" ", b"\t")
_STARTS = (b"_", b"#", b"data_", b"loop_")


def _needs_quotes(array: np.ndarray) -> np.ndarray:
    """Which of the ``S`` values of ``array`` must be written quoted."""
    needs = np.strings.str_len(array) == 0
    for blank in _BLANKS:
        needs |= np.strings.find(array, blank) >= 0
    for start in _STARTS:
        needs |= np.strings.startswith(array, start)
    return needs


def _quoted(value: str) -> str:
    return f'"{value}"' if _needs_quotes(np.array([value.encode()], "S"))[0] else value


def _first_not_number(values: np.ndarray, dtype: type) -> int:
    for i, value in enumerate(values.tolist()):
        try:
            np.array([value]).astype(dtype)
        except ValueError:
            return i
    return 0


# -- the index --------------------------------------------------------------------------------------


class _Lines:
    """The lines of a text, by number (0-based): where each starts, and its content without blanks around."""

    def __init__(self, data: bytes, text: np.ndarray) -> None:
        self.data = data
        self.starts = kernels.star.line_starts(text)
        self.count = len(self.starts) - 1

    def __getitem__(self, line: int) -> bytes:
        return self.data[self.starts[line]:self.starts[line + 1]].strip()


def _blocks(path: Path, data: bytes, text: np.ndarray) -> list[Block]:
    """Index the blocks of ``data``: each block's pairs, or its labels and the offsets of its rows."""
    lines = _Lines(data, text)
    blocks: list[Block] = []
    name: str | None = None  # the block whose pairs are being read
    start = 0
    pairs: dict[str, str] = {}
    content_end = 0  # after the last line with content: a block's text starts there
    number = 0
    while number < lines.count:
        line = lines[number]
        number += 1
        if not line or line.startswith(b"#"):
            continue
        if line.startswith(b"data_"):
            if name is not None:
                blocks.append(Block(name, start, content_end, pairs))
            name, start, pairs = _decoded(path, line[5:], number).strip(), content_end, {}
            content_end = int(lines.starts[number])
            continue
        if name is None:
            where = f"after data_{blocks[-1].name}'s rows" if blocks else "before any data_ block"
            raise StarError(f"{path}: line {number}: {_shown(line)} is outside any block ({where})")
        if line.startswith(b"loop_"):
            if pairs:
                raise StarError(f"{path}: data_{name}: a loop_ after the block's pairs (a block holds one or the "
                                "other)")
            block, number = _loop(path, lines, text, name, start, number)
            blocks.append(block)
            name, content_end = None, block.rows_stop
            continue
        if line.startswith(b"_"):
            words = _words(line)
            label = words[0][1:].decode(errors="replace")
            if len(words) < 2:
                raise StarError(f"{path}: data_{name}, _{label}: no value")
            if label in pairs:
                raise StarError(f"{path}: data_{name}: _{label} is given twice")
            pairs[label] = words[1].decode(errors="replace")
            content_end = int(lines.starts[number])
            continue
        raise StarError(f"{path}: data_{name}, line {number}: {_shown(line)} is neither a _label nor loop_")
    if name is not None:
        blocks.append(Block(name, start, content_end, pairs))
    # each block runs to the next one's start (the comments and blank lines before a data_ line lead into it)
    stops = [b.start for b in blocks[1:]] + [len(data)]
    return [_with_stop(block, stop) for block, stop in zip(blocks, stops)]


def _with_stop(block: Block, stop: int) -> Block:
    return Block(block.name, block.start, stop, block.pairs, block.labels, block.labels_stop, block.rows_start,
                 block.rows_stop, block.offsets)


def _loop(path: Path, lines: _Lines, text: np.ndarray, name: str, start: int, number: int) -> tuple[Block, int]:
    """The loop of block ``name`` whose labels start at line ``number`` (0-based); returns it and the number
    of the line after its rows."""
    labels: list[str] = []
    labels_stop = int(lines.starts[number])
    first = lines.count
    while number < lines.count:
        line = lines[number]
        if not line or line.startswith((b"#", b";")):
            number += 1
            continue
        if not line.startswith(b"_"):
            first = number
            break
        label = line[1:].split(None, 1)[0].decode(errors="replace") if len(line) > 1 else ""
        if not label:
            raise StarError(f"{path}: data_{name}, line {number + 1}: a label with no name")
        if label in labels:
            raise StarError(f"{path}: data_{name}: the column {label} is given twice "
                            f"(columns {labels.index(label) + 1} and {len(labels) + 1})")
        labels.append(label)
        number += 1
        labels_stop = int(lines.starts[number])
    if not labels:
        raise StarError(f"{path}: data_{name}: loop_ with no labels")
    stop = int(kernels.star.rows_stop(text, lines.starts, first)) if first < lines.count else first
    counts = kernels.star.count_values(text, lines.starts, first, stop)
    bad = np.flatnonzero(counts != len(labels))
    if bad.size:
        row = int(bad[0])
        raise StarError(f"{path}: data_{name}, row {row + 1} (line {first + row + 1}): {counts[row]} values for "
                        f"{len(labels)} columns: {_shown(lines[first + row])}")
    offsets = lines.starts[first:stop + 1]
    return Block(name, start, int(offsets[-1]), labels=tuple(labels), labels_stop=labels_stop,
                 rows_start=int(offsets[0]), rows_stop=int(offsets[-1]), offsets=offsets), stop


def _words(line: bytes) -> list[bytes]:
    """The values of a short line (a pair), unquoted, as RELION's nextTokenInSTAR reads them."""
    words, pos = [], 0
    while pos < len(line):
        if line[pos] in b" \t\r":
            pos += 1
            continue
        quote = line[pos:pos + 1]
        if quote in (b"'", b'"'):
            end = pos + 1
            while end < len(line) and not (line[end:end + 1] == quote and (end + 1 == len(line)
                                                                              or line[end + 1] in b" \t\r")):
                end += 1
            words.append(line[pos + 1:end])
            pos = end + 1
            continue
        end = pos
        while end < len(line) and line[end] not in b" \t\r":
            end += 1
        words.append(line[pos:end])
        pos = end
    return words


def _decoded(path: Path, raw: bytes, number: int) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise StarError(f"{path}: line {number}: the block name is not UTF-8 text") from None


def _shown(line: bytes, limit: int = 80) -> str:
    text = line.decode(errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")
