"""Layout rules of 4-d BDHW arrays, as small pure functions on 4-tuples.

Shapes and strides are 4-tuples ``(batch, depth, height, width)``; strides count elements, not
bytes. They have distinct types, :class:`Shape4` and :class:`Strides4`, so that a shape passed as
strides (or the converse) is refused instead of silently computing nonsense; plain tuples and lists
are accepted everywhere. Nothing here touches memory: :mod:`noa_core.array` and the kernels call
these functions and the tests check each of them exhaustively against brute-force definitions and
NumPy.

Negative strides are refused everywhere (:class:`StrideError`): every function here assumes
strides >= 0, and :func:`check_strides` is the single gate through which strides enter an Array.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from noa_core.errors import BroadcastError, LayoutError, PermutationError, ReshapeError, ShapeError, StrideError

Order = Literal["C", "F"]
# An axis permutation of 0..3: ``out[i] = values[perm[i]]``.
Permutation4 = tuple[int, int, int, int]


class _Dims4(tuple):
    """Four integers, BDHW. A plain tuple for comparison, hashing, pickling and JSON."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}{tuple.__repr__(self)}"

    # Messages and f-strings show the plain tuple, as the user wrote it.
    __str__ = tuple.__repr__


class Shape4(_Dims4):
    """Sizes of the batch, depth, height and width dimensions. Build one with :func:`as_shape4`."""

    __slots__ = ()


class Strides4(_Dims4):
    """Element strides of the batch, depth, height and width dimensions. Build one with
    :func:`as_strides4` or :func:`check_strides`."""

    __slots__ = ()


AXIS_NAMES = ("batch", "depth", "height", "width")
# Orders that storage and copies may use. 'K' (keep) is resolved by the caller into C or F.
ORDERS = ("C", "F")
# F order swaps only height and width: iterating an F array in this order visits packed memory.
F_SWAP: Permutation4 = (0, 1, 3, 2)


# ---------------------------------------------------------------------------------------------
# Shapes and orders
# ---------------------------------------------------------------------------------------------


def _refuse_swap(shape: Sequence[int], strides: Sequence[int]) -> None:
    """Raise LayoutError when a Strides4 is given as a shape or a Shape4 as strides."""
    # Exact class checks: this runs several times per kernel launch.
    if shape.__class__ is Strides4 or strides.__class__ is Shape4:
        what = [part for part, wrong in (("the value given as the shape holds strides", shape.__class__ is Strides4),
                                         ("the value given as the strides holds a shape", strides.__class__ is Shape4))
                if wrong]
        raise LayoutError(f"shape {shape} and strides {strides} are swapped: {' and '.join(what)}")


def _refuse_strides_as_shape(shape: int | Sequence[int]) -> None:
    if shape.__class__ is Strides4:
        raise LayoutError(f"strides {shape} were given where a shape is expected")


def as_shape4(shape: int | Sequence[int]) -> Shape4:
    """Pad a shape of up to 4 dimensions on the left with 1s: ``(5,)`` -> ``(1, 1, 1, 5)``.

    Refuses a :class:`Strides4` (strides passed where a shape belongs).
    """
    if type(shape) is Shape4 and len(shape) == 4 and min(shape) >= 0:
        return shape
    _refuse_strides_as_shape(shape)
    if isinstance(shape, int):
        shape = (shape,)
    dims = tuple(shape)
    if len(dims) > 4:
        raise ShapeError(f"shape {dims} has {len(dims)} dimensions; noa arrays have at most 4 (BDHW)")
    for n in dims:
        if not isinstance(n, int) and not hasattr(n, "__index__"):
            raise ShapeError(f"shape {dims} has a non-integer size {n!r}")
    dims = tuple(int(n) for n in dims)
    if any(n < 0 for n in dims):
        raise ShapeError(f"shape {dims} has a negative size")
    return Shape4((1,) * (4 - len(dims)) + dims)


def as_strides4(strides: Sequence[int]) -> Strides4:
    """Four non-negative integer element strides; refuses a :class:`Shape4` (a shape passed where
    strides belong). Negative strides are not supported."""
    if isinstance(strides, Shape4):
        raise LayoutError(f"shape {strides} was given where strides are expected")
    return _validated_strides(strides)


def _validated_strides(strides: Sequence[int], shape: Sequence[int] | None = None) -> Strides4:
    """``strides`` as a Strides4 after checking them; messages name ``shape`` when given."""
    if type(strides) is Strides4 and len(strides) == 4 and min(strides) >= 0:
        return strides
    values = tuple(int(s) for s in strides)
    if len(values) == 4 and min(values) >= 0:
        return Strides4(values)
    for_shape = "" if shape is None else f" for shape {shape}"
    if len(values) != 4:
        raise StrideError(f"strides {values} must have 4 values (BDHW){for_shape}")
    raise StrideError(
        f"strides {values}{for_shape} are negative; noa does not support negative strides "
        "(make a contiguous copy first, e.g. numpy.ascontiguousarray)"
    )


def as_order(order: str) -> Order:
    """Normalise 'c'/'C'/'f'/'F' and refuse anything else."""
    upper = str(order).upper()
    if upper not in ORDERS:
        raise LayoutError(f"order {order!r} is not one of 'C' (row-major) or 'F' (height and width swapped)")
    return upper  # type: ignore[return-value]


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape)


def ndim(shape: Shape4) -> int:
    """Dimensionality ignoring the batch: 3 if D > 1, else 2 if H > 1 and W > 1, else 1."""
    _, d, h, w = shape
    if d > 1:
        return 3
    if h > 1 and w > 1:
        return 2
    return 1


def kind(shape: Sequence[int]) -> str:
    """What a shape holds, in the words of microscopy: image, image stack, volume, volume stack."""
    b, d, _, _ = shape
    if d > 1:
        return "volume stack" if b > 1 else "volume"
    return "image stack" if b > 1 else "image"


# ---------------------------------------------------------------------------------------------
# Strides and contiguity
# ---------------------------------------------------------------------------------------------


def strides_for(shape: Sequence[int], order: str = "C") -> Strides4:
    """Packed strides: C ``(D*H*W, H*W, W, 1)``; F ``(D*H*W, H*W, 1, H)`` (only H and W swap)."""
    _refuse_strides_as_shape(shape)
    _, d, h, w = shape
    if as_order(order) == "C":
        return Strides4((d * h * w, h * w, w, 1))
    return Strides4((d * h * w, h * w, 1, h))


def check_strides(shape: Shape4, strides: Sequence[int]) -> Strides4:
    """Validate element strides for ``shape``: four non-negative integers (see :func:`as_strides4`)."""
    _refuse_swap(shape, strides)
    return _validated_strides(strides, shape)


def are_contiguous(shape: Shape4, strides: Strides4, order: str = "C") -> bool:
    """Whole-array contiguity: each dimension has size 1 or exactly the packed stride of ``order``."""
    _refuse_swap(shape, strides)
    packed = strides_for(shape, order)
    return all(n == 1 or s == p for n, s, p in zip(shape, strides, packed))


def _is_contiguous_c(shape: Sequence[int], strides: Sequence[int]) -> tuple[bool, bool, bool, bool]:
    out = [True, True, True, True]
    # Walking from the innermost dimension, 'inner' is the span (size*stride) of the next inner
    # dimension that is neither size 1 nor broadcast; 1 when there is none yet.
    inner = 1
    for i in (3, 2, 1, 0):
        n, s = shape[i], strides[i]
        if n == 1:
            continue  # size-1 dimensions merge with anything
        if s == 0:
            out[i] = False  # broadcast: cannot merge, and is skipped by outer dimensions
            continue
        out[i] = s == inner
        inner = n * s
    return tuple(out)  # type: ignore[return-value]


def is_contiguous(shape: Shape4, strides: Strides4, order: str = "C") -> tuple[bool, bool, bool, bool]:
    """Per-dimension contiguity.

    Dimension i is contiguous when it can be merged with the next inner dimension that is neither
    broadcast nor of size 1 (or, when there is none, when its stride is 1). Size-1 dimensions are
    always contiguous; broadcast dimensions (stride 0, size > 1) never are. For 'F', "inner" follows
    the F traversal: width is outside height.
    """
    _refuse_swap(shape, strides)
    if as_order(order) == "C":
        return _is_contiguous_c(shape, strides)
    swapped = _is_contiguous_c(permute(shape, F_SWAP), permute(strides, F_SWAP))
    return permute(swapped, F_SWAP)


def order_of(shape: Shape4, strides: Strides4) -> str:
    """'C' or 'F' when the array is packed in that order ('C' wins a tie), else 'strided'."""
    if are_contiguous(shape, strides, "C"):
        return "C"
    if are_contiguous(shape, strides, "F"):
        return "F"
    return "strided"


def memory_extent(shape: Shape4, strides: Strides4) -> int:
    """Number of elements from the first to the last addressed element, inclusive (0 if empty)."""
    _refuse_swap(shape, strides)
    if element_count(shape) == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def is_broadcast(shape: Shape4, strides: Strides4) -> bool:
    """True when some dimension of size > 1 has stride 0 (writing through it would race).

    Empty arrays are never broadcast: nothing is written through them.
    """
    _refuse_swap(shape, strides)
    return element_count(shape) > 0 and any(n > 1 and s == 0 for n, s in zip(shape, strides))


# ---------------------------------------------------------------------------------------------
# Permutation and broadcasting
# ---------------------------------------------------------------------------------------------


def check_permutation(perm: Sequence[int]) -> Permutation4:
    """Return ``perm`` as a 4-tuple if it is a permutation of 0..3, else raise PermutationError."""
    try:
        values = tuple(int(p) for p in perm)
    except (TypeError, ValueError):
        raise PermutationError(f"axes {perm!r} must be 4 integers, a permutation of 0,1,2,3") from None
    if sorted(values) != [0, 1, 2, 3]:
        raise PermutationError(f"axes {values} are not a permutation of (0, 1, 2, 3)")
    return values  # type: ignore[return-value]


def permute(values: Sequence, perm: Sequence[int]) -> tuple:
    """Reorder a 4-tuple: ``out[i] = values[perm[i]]``; a Shape4 stays a Shape4, Strides4 Strides4."""
    permuted = tuple(values[p] for p in perm)
    return type(values)(permuted) if isinstance(values, _Dims4) else permuted


def inverse_permutation(perm: Sequence[int]) -> Permutation4:
    out = [0, 0, 0, 0]
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)  # type: ignore[return-value]


def broadcast_strides(shape: Shape4, strides: Strides4, target: Shape4) -> Strides4:
    """Strides that view ``shape`` as ``target``: size-1 dimensions grow with stride 0."""
    _refuse_swap(shape, strides)
    _refuse_strides_as_shape(target)
    out = []
    for n, s, t in zip(shape, strides, target):
        if n == t:
            out.append(s)
        elif n == 1:
            out.append(0)
        else:
            raise BroadcastError(f"cannot broadcast shape {shape} to shape {target}")
    return Strides4(out)


def broadcast_shapes(*shapes: Shape4) -> Shape4:
    """The common shape of several shapes; each dimension is 1 or the common size."""
    if not shapes:
        raise BroadcastError("broadcast_shapes needs at least one shape")
    for shape in shapes:
        _refuse_strides_as_shape(shape)
    out = list(shapes[0])
    for shape in shapes[1:]:
        for i, n in enumerate(shape):
            if out[i] == 1:
                out[i] = n
            elif n != 1 and n != out[i]:
                listed = ", ".join(str(s) for s in shapes)
                raise BroadcastError(f"shapes {listed} cannot be broadcast together (dimension {AXIS_NAMES[i]})")
    return Shape4(out)


# ---------------------------------------------------------------------------------------------
# Reshape
# ---------------------------------------------------------------------------------------------


def infer_shape(count: int, shape: int | Sequence[int]) -> Shape4:
    """Resolve one ``-1`` in a requested shape so that it holds ``count`` elements; pad to 4-d."""
    _refuse_strides_as_shape(shape)
    dims = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
    if len(dims) > 4:
        raise ShapeError(f"shape {dims} has {len(dims)} dimensions; noa arrays have at most 4 (BDHW)")
    unknown = [i for i, n in enumerate(dims) if n == -1]
    if len(unknown) > 1:
        raise ReshapeError(f"shape {dims} has more than one -1; only one size can be inferred")
    if any(n < -1 for n in dims):
        raise ShapeError(f"shape {dims} has a negative size")
    if unknown:
        known = math.prod(n for n in dims if n != -1)
        if known == 0 or count % known:
            raise ReshapeError(f"cannot reshape {count} elements into shape {dims}")
        dims = tuple(count // known if n == -1 else n for n in dims)
    new_shape = as_shape4(dims)
    if element_count(new_shape) != count:
        raise ReshapeError(f"cannot reshape {count} elements into shape {new_shape}")
    return new_shape


def reshape_strides(shape: Shape4, strides: Strides4, new_shape: Shape4) -> Strides4 | None:
    """Strides viewing the same elements (in C order) as ``new_shape``, or None if no view exists.

    The sizes must hold the same element count. Groups of old dimensions that map onto groups of new
    dimensions must each be contiguous among themselves; size-1 dimensions are free.
    """
    _refuse_swap(shape, strides)
    _refuse_strides_as_shape(new_shape)
    if element_count(shape) != element_count(new_shape):
        raise ReshapeError(f"cannot reshape shape {shape} into shape {new_shape}: element counts differ")
    if element_count(shape) == 0:
        return strides_for(new_shape, "C")
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    new_strides = [0, 0, 0, 0]
    oi = ni = 0
    while ni < 4 and oi < len(old):
        nj, oj = ni + 1, oi + 1
        new_size, old_size = new_shape[ni], old[oi][0]
        while new_size != old_size:
            if new_size < old_size:
                new_size *= new_shape[nj]
                nj += 1
            else:
                old_size *= old[oj][0]
                oj += 1
        # The old dimensions oi..oj-1 collapse into one run: each must be contiguous with the next.
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        new_strides[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            new_strides[k - 1] = new_strides[k] * new_shape[k]
        ni, oi = nj, oj
    # Trailing size-1 dimensions of the new shape: any stride works; use the packed one.
    last = new_strides[ni - 1] if ni > 0 else 1
    for k in range(ni, 4):
        new_strides[k] = last
    return Strides4(new_strides)


# ---------------------------------------------------------------------------------------------
# Slicing (keeps 4 dimensions)
# ---------------------------------------------------------------------------------------------


def slice_view(shape: Shape4, strides: Strides4, key) -> tuple[int, Shape4, Strides4]:
    """Apply an index ``key`` (ints, slices, one Ellipsis) and keep 4 dimensions.

    Returns ``(offset, shape, strides)`` with the offset in elements. An integer keeps its dimension
    with size 1, so the result is always BDHW. Negative steps are refused (no negative strides).
    """
    _refuse_swap(shape, strides)
    items = key if isinstance(key, tuple) else (key,)
    if sum(1 for k in items if k is Ellipsis) > 1:
        raise LayoutError(f"index {key!r} has more than one Ellipsis")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        fill = 4 - (len(items) - 1)
        items = items[:at] + (slice(None),) * fill + items[at + 1 :]
    if len(items) > 4:
        raise LayoutError(f"index {key!r} has {len(items)} items; arrays have 4 dimensions (BDHW)")
    items = items + (slice(None),) * (4 - len(items))

    offset = 0
    new_shape: list[int] = []
    new_strides: list[int] = []
    for axis, (item, n, s) in enumerate(zip(items, shape, strides)):
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            if step < 0:
                raise StrideError(f"index {key!r} has a negative step on the {AXIS_NAMES[axis]} axis; negative "
                                  "strides are not supported")
            size = max(0, (stop - start + step - 1) // step)
            if size > 0:
                offset += start * s
            new_shape.append(size)
            new_strides.append(s * step)
        elif hasattr(item, "__index__"):
            i = int(item)
            if not -n <= i < n:
                raise LayoutError(f"index {i} is out of bounds for the {AXIS_NAMES[axis]} axis of size {n}")
            offset += (i % n) * s
            new_shape.append(1)
            new_strides.append(s)
        else:
            raise LayoutError(f"index {item!r} on the {AXIS_NAMES[axis]} axis must be an integer or a slice")
    return offset, Shape4(new_shape), Strides4(new_strides)


# ---------------------------------------------------------------------------------------------
# Iteration planning (used by the kernels)
# ---------------------------------------------------------------------------------------------


def iteration_order(shape: Sequence[int], strides: Sequence[int]) -> Permutation4:
    """The permutation that makes ``strides`` as rightmost as possible.

    Stable sort of the dimensions by decreasing stride, with size-1 dimensions moved outermost (their
    stride is meaningless). Applying it to a C array is the identity; to an F array it swaps H, W.
    """
    _refuse_swap(shape, strides)
    return _iteration_order(shape, strides)


def _iteration_order(shape: Sequence[int], strides: Sequence[int]) -> Permutation4:
    return tuple(sorted(range(4), key=lambda i: (shape[i] != 1, -strides[i])))  # type: ignore[return-value]


def merge_dimensions(shape: Sequence[int], *strides: Sequence[int]
                     ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Merge neighbouring dimensions that are contiguous in every operand; pad on the left to 4-d.

    ``shape`` and each of ``strides`` must already be in iteration order (outermost first). Size-1
    dimensions are dropped. The result addresses the same elements in the same order, as plain
    tuples of ints: they are what the kernels (numba) receive.
    """
    for st in strides:
        _refuse_swap(shape, st)
    return _merge_dimensions(shape, strides)


def _merge_dimensions(shape: Sequence[int], strides: Sequence[Sequence[int]]
                      ) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    if element_count(shape) == 0:
        return tuple(shape), tuple(tuple(st) for st in strides)
    dims = [i for i in range(4) if shape[i] != 1]
    merged_shape: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for i in reversed(dims):  # innermost first
        n = shape[i]
        if merged_shape and all(st[i] == merged_shape[0] * m[0] for st, m in zip(strides, merged)):
            merged_shape[0] *= n
            continue
        merged_shape.insert(0, n)
        for st, m in zip(strides, merged):
            m.insert(0, st[i])
    pad = 4 - len(merged_shape)
    out_shape = (1,) * pad + tuple(merged_shape)
    out_strides = []
    for m in merged:
        outer = m[0] * merged_shape[0] if m else 1
        out_strides.append((outer,) * pad + tuple(m))
    return out_shape, tuple(out_strides)


def plan_iteration(shape: Shape4, *strides: Strides4) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Fastest traversal for operands sharing ``shape``; the first strides (the output's) decide.

    Returns the permuted and merged shape and the strides of every operand in that order: a kernel
    iterating rightmost over the result touches memory as sequentially as the first operand allows.
    """
    for st in strides:
        _refuse_swap(shape, st)
    perm = _iteration_order(shape, strides[0])
    return _merge_dimensions(tuple(shape[p] for p in perm), [tuple(st[p] for p in perm) for st in strides])


# ---------------------------------------------------------------------------------------------
# Memory overlap (used by the kernels to refuse outputs that alias their inputs)
# ---------------------------------------------------------------------------------------------


def memory_span(offset: int, shape: Sequence[int], strides: Sequence[int], itemsize: int = 1) -> tuple[int, int]:
    """Half-open range ``[start, stop)`` of memory units addressed by a layout (empty if no element).

    ``offset`` and ``strides`` count units (elements, or bytes with ``itemsize`` the element size).
    """
    _refuse_swap(shape, strides)
    if element_count(shape) == 0:
        return offset, offset
    return offset, offset + sum((n - 1) * s for n, s in zip(shape, strides)) + itemsize


def may_overlap(offset_a: int, shape_a: Sequence[int], strides_a: Sequence[int],
                offset_b: int, shape_b: Sequence[int], strides_b: Sequence[int], itemsize: int = 1,
                itemsize_b: int | None = None) -> bool:
    """True when the memory spans of two layouts intersect (conservative: interleaved views that
    share no element still count as overlapping); ``itemsize_b``: the second's elements, when of another size."""
    start_a, stop_a = memory_span(offset_a, shape_a, strides_a, itemsize)
    start_b, stop_b = memory_span(offset_b, shape_b, strides_b, itemsize if itemsize_b is None else itemsize_b)
    return start_a < stop_b and start_b < stop_a


def same_elements(offset_a: int, strides_a: Sequence[int], offset_b: int, strides_b: Sequence[int],
                  shape: Sequence[int]) -> bool:
    """True when two layouts of ``shape`` address exactly the same memory for every index."""
    _refuse_swap(shape, strides_a)
    _refuse_swap(shape, strides_b)
    return offset_a == offset_b and all(n == 1 or sa == sb for n, sa, sb in zip(shape, strides_a, strides_b))
