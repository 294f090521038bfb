"""numba kernels of STAR tables (:mod:`noa_core.io.star`): the index of the lines, the end of a loop's rows and
the count of each row's values, the tokenizer that finds one column's values, and the
assembly of rows with some values replaced or added.

Values are separated by blanks (space, tab; a carriage return is a blank too); a value that starts with a
quote (' or ") runs to the same quote followed by a blank or the line's end, as RELION's ``nextTokenInSTAR``
reads it. Rows are lines (:func:`line_starts` indexes them all); a loop's rows end at a blank line, a
``data_`` or ``loop_`` line, or the end of the text (:func:`rows_stop`). Cached on disk.

Serial: compiled with ``parallel=True`` they cost four times as long to compile (13 s more of a new
installation's ``noa warmup`` on 2 cores) and read, take three columns of and rewrite a 1M-row, 280 MB table
no faster (3.0-3.4 s either way, most of it NumPy's work on the values).
"""

from __future__ import annotations

import numba
import numpy as np

from noa_core.kernels import runtime

_NEWLINE, _SPACE, _TAB, _RETURN = 10, 32, 9, 13
_QUOTE, _APOSTROPHE = 34, 39


@numba.njit(inline="always")
def _blank(c):
    return c == _SPACE or c == _TAB or c == _RETURN


@numba.njit(inline="always")
def _token_end(text, at, stop):
    """Where the value that starts at ``at`` (not a blank) ends (exclusive), within ``stop``."""
    c = text[at]
    if c == _QUOTE or c == _APOSTROPHE:
        pos = at + 1
        while pos < stop:
            if text[pos] == c and (pos + 1 == stop or _blank(text[pos + 1])):
                return pos + 1
            pos += 1
        return stop  # an unterminated quote runs to the line's end
    pos = at
    while pos < stop and not _blank(text[pos]):
        pos += 1
    return pos


@numba.njit(inline="always")
def _row_end(text, first, end):
    """Where the row ``text[first:end]`` ends without its newline."""
    return end - 1 if end > first and text[end - 1] == _NEWLINE else end


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def line_starts(text):
    """The byte offset of each line of ``text`` and the end of the text (``lines + 1`` offsets: line ``i``
    spans ``starts[i] .. starts[i + 1]``, its newline included). Two passes: count the newlines (a loop
    without branches, which the compiler vectorizes), then write their positions."""
    size = text.size
    newlines = 0
    for i in range(size):
        newlines += text[i] == _NEWLINE
    unended = 1 if size > 0 and text[size - 1] != _NEWLINE else 0  # a last line without its newline
    starts = np.empty(newlines + 1 + unended, np.int64)
    starts[0] = 0
    at = 1
    for i in range(size):
        if text[i] == _NEWLINE:
            starts[at] = i + 1
            at += 1
    if unended:
        starts[starts.size - 1] = size
    return starts


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def rows_stop(text, starts, first):
    """The first line from line ``first`` that ends a loop's rows: a blank line, or one that starts with
    ``data_`` or ``loop_`` (the number of lines when none does). Looks at the start of each line only."""
    lines = starts.size - 1
    for line in range(first, lines):
        at = starts[line]
        end = starts[line + 1]
        while at < end and _blank(text[at]):
            at += 1
        if at == end or text[at] == _NEWLINE:
            return line
        if end - at >= 5 and text[at + 4] == 95 and (  # '_'
                (text[at] == 100 and text[at + 1] == 97 and text[at + 2] == 116 and text[at + 3] == 97)  # data
                or (text[at] == 108 and text[at + 1] == 111 and text[at + 2] == 111 and text[at + 3] == 112)):  # loop
            return line
    return lines


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def count_values(text, starts, first, stop):
    """How many values each of lines ``first .. stop-1`` holds. Each line is counted without branches (the
    blanks followed by a value, which the compiler vectorizes); a line with a quote in it is counted again
    value by value (:func:`_count_quoted`), since a quoted value may hold blanks."""
    counts = np.empty(stop - first, np.int64)
    for row in range(stop - first):
        at = starts[first + row]
        end = starts[first + row + 1]
        count = 0
        quotes = 0
        previous_blank = 1
        for i in range(at, end):
            c = text[i]
            blank = (c == _SPACE) | (c == _TAB) | (c == _RETURN) | (c == _NEWLINE)
            count += previous_blank & (1 - blank)
            quotes |= (c == _QUOTE) | (c == _APOSTROPHE)
            previous_blank = blank
        counts[row] = _count_quoted(text, at, end) if quotes else count
    return counts


@numba.njit(inline="always")
def _count_quoted(text, at, end):
    """How many values ``text[at:end]`` holds, a quoted value (which may hold blanks) counted as one."""
    count = 0
    inside = False
    quote = 0
    while at < end:
        c = text[at]
        if quote != 0:  # inside a quoted value: it ends at its quote followed by a blank or the line's end
            if c == quote and (at + 1 == end or _blank(text[at + 1]) or text[at + 1] == _NEWLINE):
                quote = 0
        elif _blank(c) or c == _NEWLINE:
            inside = False
        elif not inside:
            inside = True
            count += 1
            if c == _QUOTE or c == _APOSTROPHE:
                quote = c
        at += 1
    return count


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def column_spans(text, offsets, column):
    """Where value ``column`` (0-based) of each row lies: ``(starts, stops)`` byte offsets, quotes included.
    The rows were walked by :func:`walk_rows`, so each has the value."""
    count = offsets.size - 1
    starts = np.empty(count, np.int64)
    stops = np.empty(count, np.int64)
    for row in range(count):
        at = offsets[row]
        end = _row_end(text, at, offsets[row + 1])
        seen = -1
        while at < end:
            if _blank(text[at]):
                at += 1
                continue
            stop = _token_end(text, at, end)
            seen += 1
            if seen == column:
                starts[row] = at
                stops[row] = stop
                break
            at = stop
        if seen < column:  # not walked: give an empty value rather than garbage
            starts[row] = end
            stops[row] = end
    return starts, stops


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def gather_values(text, starts, stops, width):
    """The values ``text[starts[i]:stops[i]]`` as rows of a ``(count, width)`` byte array (zero-padded: a NumPy
    ``S<width>`` array), their quotes taken off."""
    count = starts.size
    out = np.zeros((count, width), np.uint8)
    for row in range(count):
        first = starts[row]
        stop = stops[row]
        if (stop - first >= 2 and (text[first] == _QUOTE or text[first] == _APOSTROPHE)
                and text[stop - 1] == text[first]):
            first += 1
            stop -= 1
        for i in range(stop - first):
            out[row, i] = text[first + i]
    return out


@numba.njit(nogil=True, cache=runtime.CACHE_ENABLED)
def assemble_rows(text, offsets, rows, starts, stops, values, value_offsets, added, added_offsets):
    """The text of rows ``rows`` (indices into ``offsets``), in that order, each with some values replaced and
    some added at its end.

    ``starts``/``stops`` (k, n): the spans of the k values replaced in each of the n rows (in the order they
    lie in the row); ``values`` the bytes of the new values and ``value_offsets`` (k, n + 1)... flattened as
    ``value_offsets[j, i] .. value_offsets[j, i + 1]`` for value j of row i. ``added``/``added_offsets`` likewise
    for values appended, each after one space. Every row ends with a newline."""
    n = rows.size
    k = starts.shape[0]
    m = added_offsets.shape[0]
    lengths = np.empty(n + 1, np.int64)
    lengths[0] = 0
    for i in range(n):
        row = rows[i]
        first = offsets[row]
        end = _row_end(text, first, offsets[row + 1])
        size = end - first + 1
        for j in range(k):
            size += (value_offsets[j, i + 1] - value_offsets[j, i]) - (stops[j, i] - starts[j, i])
        for j in range(m):
            size += 1 + added_offsets[j, i + 1] - added_offsets[j, i]
        lengths[i + 1] = size
    ends = np.cumsum(lengths)
    out = np.empty(ends[n], np.uint8)
    for i in range(n):
        row = rows[i]
        first = offsets[row]
        end = _row_end(text, first, offsets[row + 1])
        at = ends[i]
        pos = first
        for j in range(k):
            for p in range(pos, starts[j, i]):
                out[at] = text[p]
                at += 1
            for p in range(value_offsets[j, i], value_offsets[j, i + 1]):
                out[at] = values[p]
                at += 1
            pos = stops[j, i]
        for p in range(pos, end):
            out[at] = text[p]
            at += 1
        for j in range(m):
            out[at] = _SPACE
            at += 1
            for p in range(added_offsets[j, i], added_offsets[j, i + 1]):
                out[at] = added[p]
                at += 1
        out[at] = _NEWLINE
    return out
