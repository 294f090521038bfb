"""Layout rules against brute-force definitions: every small case, then random ones (hypothesis)."""

import copy
import itertools
import json
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noa_core.array import layout
from noa_core.errors import BroadcastError, LayoutError, PermutationError, ReshapeError, ShapeError, StrideError

SMALL_SHAPES = list(itertools.product((1, 2, 3), repeat=4))
PERMUTATIONS = list(itertools.permutations(range(4)))


# --- brute-force definitions (independent of noa_core.array.layout) ----------------------------------


def offsets(shape, strides, axes_order=(0, 1, 2, 3)):
    """Element offsets visited when looping over the axes in ``axes_order`` (outermost first)."""
    ranges = [range(shape[a]) for a in axes_order]
    out = []
    for idx in itertools.product(*ranges):
        out.append(sum(i * strides[a] for i, a in zip(idx, axes_order)))
    return out


def brute_are_contiguous(shape, strides, order):
    axes = (0, 1, 2, 3) if order == "C" else (0, 1, 3, 2)
    return offsets(shape, strides, axes) == list(range(int(np.prod(shape))))


def brute_is_contiguous(shape, strides, order):
    axes = (0, 1, 2, 3) if order == "C" else (0, 1, 3, 2)  # outermost first
    out = {}
    for pos, i in enumerate(axes):
        n, s = shape[i], strides[i]
        if n == 1:
            out[i] = True
            continue
        if s == 0:
            out[i] = False
            continue
        inner = [j for j in axes[pos + 1 :] if shape[j] > 1 and strides[j] != 0]
        if not inner:
            out[i] = offsets((n,), (s,), (0,)) == list(range(n))
            continue
        j = inner[0]
        grid = [a * s + b * strides[j] for a in range(n) for b in range(shape[j])]
        out[i] = grid == [k * strides[j] for k in range(n * shape[j])]
    return tuple(out[i] for i in range(4))


def layouts_of(shape):
    """Strides of every packed axis order of ``shape``, plus a broadcast and a padded variant."""
    for perm in PERMUTATIONS:
        packed_perm = layout.strides_for(layout.permute(shape, perm), "C")
        strides = [0, 0, 0, 0]
        for i, p in enumerate(perm):
            strides[p] = packed_perm[i]
        yield tuple(strides)
        yield tuple(0 if i == perm[1] else s for i, s in enumerate(strides))  # one broadcast axis
        yield tuple(2 * s if i != perm[3] else s for i, s in enumerate(strides))  # padded rows


# --- the examples of the design guide and of the issue -------------------------------------------


def test_guide_examples():
    assert layout.strides_for((1, 2, 3, 4), "C") == (24, 12, 4, 1)
    assert layout.strides_for((1, 2, 3, 4), "F") == (24, 12, 1, 3)
    assert layout.strides_for((1, 30, 64, 128), "C") == (245760, 8192, 128, 1)
    assert layout.strides_for((1, 30, 64, 128), "F") == (245760, 8192, 1, 64)
    assert layout.strides_for((1, 3, 4, 5)) == (60, 20, 5, 1)
    assert layout.strides_for((2, 3, 4, 5)) == (60, 20, 5, 1)
    assert layout.as_shape4((5,)) == (1, 1, 1, 5)
    assert layout.as_shape4((5, 1)) == (1, 1, 5, 1)
    assert layout.as_shape4((7, 9)) == (1, 1, 7, 9)
    assert layout.as_shape4(5) == (1, 1, 1, 5)


def test_guide_per_dimension_contiguity():
    # A C array of shape (2, 3, 4, 5) sliced out of one twice as wide: B, D and H strides doubled.
    shape, strides = (2, 3, 4, 5), (120, 40, 10, 1)
    assert layout.is_contiguous(shape, strides, "C") == (True, True, False, True)
    assert layout.is_contiguous((3, 128, 32, 64), (0, 64, 0, 1), "C") == (False, True, False, True)


def test_ndim_and_kind():
    assert layout.ndim((64, 1, 32, 32)) == 2 and layout.kind((64, 1, 32, 32)) == "image stack"
    assert layout.ndim((1, 64, 32, 32)) == 3 and layout.kind((1, 64, 32, 32)) == "volume"
    assert layout.kind((4, 64, 32, 32)) == "volume stack"
    assert layout.kind((1, 1, 32, 32)) == "image"
    assert layout.ndim((1, 1, 1, 5)) == 1 and layout.ndim((1, 1, 5, 1)) == 1
    assert layout.ndim((9, 1, 1, 5)) == 1  # the batch is ignored


# --- contiguity: every small case ----------------------------------------------------------------


@pytest.mark.parametrize("order", ["C", "F"])
def test_contiguity_exhaustive(order):
    checked = 0
    for shape in SMALL_SHAPES:
        for strides in layouts_of(shape):
            assert layout.are_contiguous(shape, strides, order) == brute_are_contiguous(shape, strides, order), (
                shape, strides)
            assert layout.is_contiguous(shape, strides, order) == brute_is_contiguous(shape, strides, order), (
                shape, strides)
            checked += 1
    assert checked == len(SMALL_SHAPES) * 24 * 3


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[st.integers(1, 4)] * 4), st.tuples(*[st.integers(0, 30)] * 4), st.sampled_from("CF"))
def test_contiguity_random_strides(shape, strides, order):
    assert layout.are_contiguous(shape, strides, order) == brute_are_contiguous(shape, strides, order)
    assert layout.is_contiguous(shape, strides, order) == brute_is_contiguous(shape, strides, order)


def test_order_of():
    assert layout.order_of((1, 2, 3, 4), (24, 12, 4, 1)) == "C"
    assert layout.order_of((1, 2, 3, 4), (24, 12, 1, 3)) == "F"
    assert layout.order_of((1, 2, 3, 4), (48, 24, 8, 1)) == "strided"
    assert layout.order_of((1, 1, 1, 4), (4, 4, 4, 1)) == "C"  # both: C wins


# --- permutation, broadcasting ---------------------------------------------------------------------


def test_permutations_are_validated():
    for perm in PERMUTATIONS:
        assert layout.check_permutation(perm) == perm
        assert layout.permute(layout.permute((10, 20, 30, 40), perm), layout.inverse_permutation(perm)) == (
            10, 20, 30, 40)
    for bad in [(0, 1, 2), (0, 1, 2, 3, 4), (0, 1, 1, 3), (0, 1, 2, 4), (-1, 0, 1, 2), ("a", 1, 2, 3)]:
        with pytest.raises(PermutationError, match="permutation"):
            layout.check_permutation(bad)


def test_broadcast_rules():
    assert layout.broadcast_strides((1, 3, 4, 5), (60, 20, 5, 1), (10, 3, 4, 5)) == (0, 20, 5, 1)
    with pytest.raises(BroadcastError, match=r"\(1, 3, 4, 5\).*\(1, 3, 4, 6\)"):
        layout.broadcast_strides((1, 3, 4, 5), (60, 20, 5, 1), (1, 3, 4, 6))
    with pytest.raises(BroadcastError, match=r"\(2, 3, 4, 5\).*\(4, 3, 4, 5\)"):
        layout.broadcast_strides((2, 3, 4, 5), (60, 20, 5, 1), (4, 3, 4, 5))  # 2 -> 4 is not a broadcast
    assert layout.broadcast_shapes((64, 1, 32, 32), (1, 1, 32, 32)) == (64, 1, 32, 32)
    assert layout.broadcast_shapes((1, 1, 1, 5), (1, 1, 5, 1)) == (1, 1, 5, 5)
    with pytest.raises(BroadcastError, match=r"\(1, 1, 4, 5\).*\(1, 1, 3, 5\)"):
        layout.broadcast_shapes((1, 1, 4, 5), (1, 1, 3, 5))


@settings(max_examples=200, deadline=None)
@given(st.tuples(*[st.integers(1, 4)] * 4), st.tuples(*[st.integers(1, 3)] * 4))
def test_broadcast_matches_numpy(small, grow):
    target = tuple(n * g if n == 1 else n for n, g in zip(small, grow))
    try:
        expected = np.broadcast_shapes(small, target)
    except ValueError:
        expected = None
    assert expected == target
    strides = layout.broadcast_strides(small, layout.strides_for(small), target)
    x = np.arange(int(np.prod(small))).reshape(small)
    got = [x.ravel()[o] for o in offsets(target, strides)]
    assert got == list(np.broadcast_to(x, target).ravel())


def test_shape_errors():
    with pytest.raises(ShapeError, match="5 dimensions"):
        layout.as_shape4((1, 2, 3, 4, 5))
    with pytest.raises(ShapeError, match="negative"):
        layout.as_shape4((1, -2, 3, 4))
    with pytest.raises(StrideError, match="negative"):
        layout.check_strides((1, 1, 2, 2), (4, 4, -2, 1))
    with pytest.raises(LayoutError, match="order"):
        layout.strides_for((1, 1, 2, 2), "K")


# --- reshape ---------------------------------------------------------------------------------------


def test_reshape_examples():
    assert layout.infer_shape(60, (3, -1)) == (1, 1, 3, 20)
    assert layout.reshape_strides((1, 3, 4, 5), (60, 20, 5, 1), (1, 1, 12, 5)) == (60, 60, 5, 1)
    # An F array cannot be reshaped as a view across its swapped H and W.
    assert layout.reshape_strides((1, 1, 4, 5), (20, 20, 1, 4), (1, 1, 1, 20)) is None
    with pytest.raises(ReshapeError, match="more than one -1"):
        layout.infer_shape(60, (-1, -1))
    with pytest.raises(ReshapeError, match="60 elements into shape"):
        layout.infer_shape(60, (7, -1))
    with pytest.raises(ReshapeError, match="60 elements into shape"):
        layout.infer_shape(60, (1, 1, 7, 9))
    with pytest.raises(ReshapeError, match="element counts differ"):
        layout.reshape_strides((1, 1, 2, 2), (4, 4, 2, 1), (1, 1, 1, 5))


def _factor_shapes(count):
    divisors = [d for d in range(1, count + 1) if count % d == 0] if count else [0, 1]
    for a, b, c in itertools.product(divisors, repeat=3):
        if count == 0 or (a * b * c and count % (a * b * c) == 0):
            d = count // (a * b * c) if count else 1
            yield (a, b, c, d)


@settings(max_examples=150, deadline=None)
@given(
    st.tuples(*[st.integers(1, 4)] * 4),
    st.permutations(range(4)),
    st.tuples(*[st.integers(1, 2)] * 4),
    st.data(),
)
def test_reshape_matches_numpy(shape, perm, steps, data):
    base = np.arange(int(np.prod([n * s for n, s in zip(shape, steps)]))).reshape(
        [n * s for n, s in zip(shape, steps)])
    view = base[tuple(slice(None, None, s) for s in steps)].transpose(perm)
    vshape = view.shape
    strides = tuple(s // base.itemsize for s in view.strides)
    new_shape = data.draw(st.sampled_from(list(_factor_shapes(view.size))))
    got = layout.reshape_strides(vshape, strides, new_shape)
    try:
        expected = view.reshape(new_shape, copy=False)
    except ValueError:
        expected = None
    assert (got is None) == (expected is None), (vshape, strides, new_shape)
    if got is not None:
        start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        values = [base.ravel()[start // base.itemsize + o] for o in offsets(new_shape, got)]
        assert values == list(expected.ravel())


def test_reshape_empty():
    assert layout.reshape_strides((0, 3, 4, 5), (60, 20, 5, 1), (1, 1, 0, 7)) == (0, 0, 7, 1)


# --- slicing ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.tuples(*[st.integers(0, 5)] * 4), st.data())
def test_slicing_matches_numpy(shape, data):
    x = np.arange(int(np.prod(shape))).reshape(shape)
    key = []
    numpy_key = []
    for n in shape:
        if n and data.draw(st.booleans()):
            i = data.draw(st.integers(-n, n - 1))
            key.append(i)
            numpy_key.append(slice(i % n, i % n + 1))
        else:
            start = data.draw(st.none() | st.integers(-6, 6))
            stop = data.draw(st.none() | st.integers(-6, 6))
            step = data.draw(st.none() | st.integers(1, 3))
            key.append(slice(start, stop, step))
            numpy_key.append(slice(start, stop, step))
    offset, new_shape, new_strides = layout.slice_view(shape, layout.strides_for(shape), tuple(key))
    expected = x[tuple(numpy_key)]
    assert new_shape == expected.shape
    assert [x.ravel()[offset + o] for o in offsets(new_shape, new_strides)] == list(expected.ravel())


def test_slicing_errors_and_ellipsis():
    shape, strides = (2, 3, 4, 5), (60, 20, 5, 1)
    assert layout.slice_view(shape, strides, (..., 1)) == (1, (2, 3, 4, 1), strides)
    assert layout.slice_view(shape, strides, (1, ...)) == (60, (1, 3, 4, 5), strides)
    with pytest.raises(StrideError, match="negative step"):
        layout.slice_view(shape, strides, (slice(None, None, -1),))
    with pytest.raises(LayoutError, match="out of bounds"):
        layout.slice_view(shape, strides, (2,))
    with pytest.raises(LayoutError, match="5 items"):
        layout.slice_view(shape, strides, (0, 0, 0, 0, 0))
    with pytest.raises(LayoutError, match="more than one Ellipsis"):
        layout.slice_view(shape, strides, (..., 0, ...))
    with pytest.raises(LayoutError, match="integer or a slice"):
        layout.slice_view(shape, strides, ([0, 1],))


# --- iteration planning -------------------------------------------------------------------------


def test_iteration_order_examples():
    assert layout.iteration_order((1, 2, 3, 4), (24, 12, 4, 1)) == (0, 1, 2, 3)
    assert layout.iteration_order((1, 2, 3, 4), (24, 12, 1, 3)) == (0, 1, 3, 2)
    # size-1 dimensions go outermost whatever their stride
    assert layout.iteration_order((3, 1, 4, 5), (20, 999, 5, 1)) == (1, 0, 2, 3)


def test_plan_merges_packed_arrays_to_one_dimension():
    for order in "CF":
        shape = (2, 3, 4, 5)
        s = layout.strides_for(shape, order)
        assert layout.plan_iteration(shape, s, s) == ((1, 1, 1, 120), ((120, 120, 120, 1), (120, 120, 120, 1)))
    # C output, F input: height and width cannot merge in both, B and D can.
    shape = (2, 3, 4, 5)
    merged_shape, (out, inp) = layout.plan_iteration(shape, layout.strides_for(shape, "C"),
                                                     layout.strides_for(shape, "F"))
    assert merged_shape == (1, 6, 4, 5) and out == (120, 20, 5, 1) and inp == (120, 20, 1, 4)


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[st.integers(0, 4)] * 4), st.permutations(range(4)), st.permutations(range(4)),
       st.tuples(*[st.booleans()] * 4))
def test_plan_visits_the_same_pairs(shape, out_perm, in_perm, broadcast_axes):
    """The planned traversal visits exactly the (output, input) offset pairs of the original one."""

    def packed_in(perm):
        p = layout.strides_for(layout.permute(shape, perm), "C")
        s = [0] * 4
        for i, a in enumerate(perm):
            s[a] = p[i]
        return tuple(s)

    out_strides = packed_in(out_perm)
    in_strides = tuple(0 if b else s for b, s in zip(broadcast_axes, packed_in(in_perm)))
    planned_shape, (p_out, p_in) = layout.plan_iteration(shape, out_strides, in_strides)
    assert int(np.prod(planned_shape)) == int(np.prod(shape))
    before = sorted(zip(offsets(shape, out_strides), offsets(shape, in_strides)))
    after = list(zip(offsets(planned_shape, p_out), offsets(planned_shape, p_in)))
    assert sorted(after) == before
    if shape.count(0) == 0:
        # The output is packed: the planned traversal writes it sequentially.
        assert [o for o, _ in after] == list(range(len(after)))


def test_merge_keeps_broadcast_inputs_apart():
    shape = (4, 1, 8, 8)
    out = layout.strides_for(shape)
    image = (0, 64, 8, 1)  # one image broadcast over the batch
    merged_shape, (m_out, m_in) = layout.plan_iteration(shape, out, image)
    assert merged_shape == (1, 1, 4, 64) and m_out == (256, 256, 64, 1) and m_in == (0, 0, 0, 1)


def test_memory_extent_and_broadcast_flags():
    assert layout.memory_extent((1, 3, 4, 5), (60, 20, 5, 1)) == 60
    assert layout.memory_extent((1, 3, 4, 5), (0, 0, 5, 1)) == 20
    assert layout.memory_extent((0, 3, 4, 5), (60, 20, 5, 1)) == 0
    assert layout.is_broadcast((2, 1, 1, 1), (0, 1, 1, 1))
    assert not layout.is_broadcast((1, 1, 1, 1), (0, 0, 0, 0))
    assert not layout.is_broadcast((0, 1, 2, 1), (0, 0, 0, 1))  # empty: nothing is written


# --- Shape4 and Strides4: distinct types, so that swapped arguments are refused ---------------------


# Every layout function that takes a shape and strides, called with ``(shape, strides)``.
SHAPE_AND_STRIDES_FUNCTIONS = {
    "check_strides": lambda sh, st: layout.check_strides(sh, st),
    "are_contiguous C": lambda sh, st: layout.are_contiguous(sh, st, "C"),
    "are_contiguous F": lambda sh, st: layout.are_contiguous(sh, st, "F"),
    "is_contiguous C": lambda sh, st: layout.is_contiguous(sh, st, "C"),
    "is_contiguous F": lambda sh, st: layout.is_contiguous(sh, st, "F"),
    "order_of": layout.order_of,
    "memory_extent": layout.memory_extent,
    "is_broadcast": layout.is_broadcast,
    "broadcast_strides": lambda sh, st: layout.broadcast_strides(sh, st, sh),
    "reshape_strides": lambda sh, st: layout.reshape_strides(sh, st, sh),
    "slice_view": lambda sh, st: layout.slice_view(sh, st, (..., slice(1, None))),
    "iteration_order": layout.iteration_order,
    "merge_dimensions": layout.merge_dimensions,
    "plan_iteration": layout.plan_iteration,
    "memory_span": lambda sh, st: layout.memory_span(1, sh, st, 4),
    "may_overlap": lambda sh, st: layout.may_overlap(0, sh, st, 7, sh, st),
    "same_elements": lambda sh, st: layout.same_elements(0, st, 0, st, sh),
}


def test_shape4_and_strides4_are_distinct_tuples():
    shape, strides = layout.as_shape4((2, 3, 4)), layout.strides_for((1, 2, 3, 4))
    assert type(shape) is layout.Shape4 and type(strides) is layout.Strides4
    assert not isinstance(shape, layout.Strides4) and not isinstance(strides, layout.Shape4)
    assert shape == (1, 2, 3, 4) and shape == (1, 2, 3, 4) and hash(shape) == hash((1, 2, 3, 4))
    assert strides == [24, 12, 4, 1] or strides == (24, 12, 4, 1)
    assert repr(shape) == "Shape4(1, 2, 3, 4)" and repr(strides) == "Strides4(24, 12, 4, 1)"
    assert str(shape) == f"{shape}" == "(1, 2, 3, 4)"  # messages show the tuple the user wrote
    assert layout.as_strides4([24, 12, 4, 1]) == strides and type(layout.as_strides4((0, 0, 0, 1))) is layout.Strides4
    assert shape + (5,) == (1, 2, 3, 4, 5) and type(shape[1:]) is tuple


def test_shape4_and_strides4_survive_pickle_json_and_copies():
    shape, strides = layout.as_shape4((2, 3, 4)), layout.strides_for((1, 2, 3, 4), "F")
    for value in (shape, strides):
        for copied in (pickle.loads(pickle.dumps(value)), copy.deepcopy(value), copy.copy(value)):
            assert copied == value and type(copied) is type(value)
        assert json.loads(json.dumps(value)) == list(value)


def test_results_keep_their_type_and_kernels_get_plain_tuples():
    shape, strides = layout.as_shape4((2, 3, 4, 5)), layout.strides_for((2, 3, 4, 5))
    perm = (0, 2, 1, 3)
    assert type(layout.permute(shape, perm)) is layout.Shape4
    assert type(layout.permute(strides, perm)) is layout.Strides4
    assert type(layout.permute((1, 2, 3, 4), perm)) is tuple
    _, sliced_shape, sliced_strides = layout.slice_view(shape, strides, (0,))
    assert (type(sliced_shape), type(sliced_strides)) == (layout.Shape4, layout.Strides4)
    assert type(layout.broadcast_shapes(shape, (1, 1, 1, 5))) is layout.Shape4
    assert type(layout.broadcast_strides((1, 3, 4, 5), (60, 20, 5, 1), shape)) is layout.Strides4
    assert type(layout.reshape_strides(shape, strides, (1, 1, 6, 20))) is layout.Strides4
    assert type(layout.infer_shape(120, (-1, 20))) is layout.Shape4
    # numba cannot type tuple subclasses: what plan_iteration hands to the kernels is plain.
    for planned in (layout.plan_iteration(shape, strides), layout.plan_iteration((0, 1, 2, 3), strides)):
        planned_shape, (planned_strides,) = planned
        assert type(planned_shape) is tuple and type(planned_strides) is tuple


def test_a_shape_is_refused_as_strides_and_strides_as_a_shape():
    shape, strides = layout.as_shape4((1, 2, 3, 4)), layout.strides_for((1, 2, 3, 4))
    with pytest.raises(LayoutError, match=r"strides \(24, 12, 4, 1\) were given where a shape is expected"):
        layout.as_shape4(strides)
    with pytest.raises(LayoutError, match=r"shape \(1, 2, 3, 4\) was given where strides are expected"):
        layout.as_strides4(shape)
    with pytest.raises(LayoutError, match="where a shape is expected"):
        layout.strides_for(strides)
    with pytest.raises(LayoutError, match="where a shape is expected"):
        layout.broadcast_shapes(shape, strides)
    with pytest.raises(LayoutError, match=r"shape \(24, 12, 4, 1\) and strides \(1, 2, 3, 4\) are swapped"):
        layout.broadcast_strides(strides, shape, shape)  # the target is a shape, the first pair is swapped
    with pytest.raises(LayoutError, match="where a shape is expected"):
        layout.broadcast_strides(shape, strides, strides)  # strides given as the target shape
    with pytest.raises(LayoutError, match="where a shape is expected"):
        layout.reshape_strides(shape, strides, strides)
    with pytest.raises(LayoutError, match="where a shape is expected"):
        layout.infer_shape(24, strides)


@pytest.mark.parametrize("name", sorted(SHAPE_AND_STRIDES_FUNCTIONS))
def test_every_swapped_pair_is_refused_exhaustive(name):
    """Typed arguments give the results of plain tuples; swapped ones (or one labelled wrongly)
    are refused with a message naming both, whatever the values."""
    function = SHAPE_AND_STRIDES_FUNCTIONS[name]
    checked = 0
    for plain_shape in SMALL_SHAPES:
        shape = layout.as_shape4(plain_shape)
        for plain_strides in layouts_of(plain_shape):
            strides = layout.as_strides4(plain_strides)
            assert function(shape, strides) == function(plain_shape, plain_strides)
            for swapped_shape, swapped_strides in ((strides, shape), (strides, plain_shape), (plain_strides, shape)):
                with pytest.raises(LayoutError, match="swapped") as refused:
                    function(swapped_shape, swapped_strides)
                assert f"shape {swapped_shape} and strides {swapped_strides}" in str(refused.value)
            checked += 1
    assert checked == len(SMALL_SHAPES) * 24 * 3


def test_swapped_pairs_of_equal_values_are_refused_too():
    """The types decide, not the values: a (1, 1, 1, 1) shape with strides (1, 1, 1, 1)."""
    ones = (1, 1, 1, 1)
    assert layout.are_contiguous(layout.as_shape4(ones), layout.as_strides4(ones))
    with pytest.raises(LayoutError, match="the value given as the shape holds strides and the value given as the "
                                          "strides holds a shape"):
        layout.are_contiguous(layout.as_strides4(ones), layout.as_shape4(ones))
