"""noa_core.geometry.transforms (transform_2d, transform_3d, matrices) against scipy.ndimage.affine_transform."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

import noa_core as noa
from noa_core.errors import DTypeError, ParameterError, ShapeError
from noa_core.geometry import transforms

SETTINGS = settings(max_examples=25, deadline=None)
ORDERS = {"nearest": 0, "linear": 1, "cubic": 3}
MODES = {"zero": "grid-constant", "clamp": "nearest", "mirror": "reflect"}  # noa's borders in scipy's words
# float32 kernels against scipy's float64 (cubic coefficients are rounded to float32); float64 to rounding
TOLERANCE = {"float32": 2e-4, "float64": 1e-9}


def laid_out(values: np.ndarray, kind: str) -> noa.Array:
    if kind == "C":
        return noa.asarray(values)
    if kind == "F":
        return noa.asarray(values).copy("F")
    big = np.zeros((values.shape[0], values.shape[1], values.shape[2] * 2, values.shape[3] + 2), values.dtype)
    big[:, :, 1::2, 2:] = values
    return noa.asarray(big)[:, :, 1::2, 2:]


def scipy_transform(values: np.ndarray, matrix: np.ndarray, out_shape, interp: str, border: str) -> np.ndarray:
    n = values.ndim
    return ndimage.affine_transform(values.astype(np.float64), matrix[:n, :n], offset=matrix[:n, n],
                                    output_shape=out_shape, order=ORDERS[interp], mode=MODES[border])


def random_matrix(rng: np.random.Generator, shape) -> np.ndarray:
    return transforms.affine_2d(shape, rotate=rng.uniform(-180, 180), shift=rng.uniform(-4, 4, 2),
                              scale=rng.uniform(0.6, 1.6))


@SETTINGS
@given(batch=st.integers(1, 3), h=st.integers(1, 12), w=st.integers(1, 12),
       out_hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       interp=st.sampled_from(list(ORDERS)), border=st.sampled_from(list(MODES)),
       kind=st.sampled_from(["C", "F", "view"]), out_order=st.sampled_from("CF"),
       dtype=st.sampled_from(["float32", "float64"]), one_input=st.booleans(), one_matrix=st.booleans(),
       seed=st.integers(0, 2**16))
def test_transform_2d_matches_scipy(batch, h, w, out_hw, interp, border, kind, out_order, dtype, one_input, one_matrix,
                                    seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(1 if one_input else batch, 1, h, w)).astype(dtype)
    matrices = np.stack([random_matrix(rng, (h, w)) for _ in range(1 if one_matrix else batch)])
    out = noa.zeros((batch, 1, *out_hw), dtype, order=out_order)
    assert transforms.transform_2d(laid_out(values, kind), out, matrices, interp, border) is out
    for b in range(batch):
        expected = scipy_transform(values[b % values.shape[0], 0], matrices[b % len(matrices)], out_hw, interp, border)
        np.testing.assert_allclose(out.numpy()[b, 0], expected, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


@pytest.mark.parametrize("interp", list(ORDERS))
@pytest.mark.parametrize("border", list(MODES))
def test_transform_3d_matches_scipy(interp, border):
    rng = np.random.default_rng(len(interp) + len(border))
    values = rng.normal(size=(2, 7, 6, 9)).astype(np.float32)
    matrices = np.stack([transforms.affine_3d(values.shape, euler=rng.uniform(-180, 180, 3),
                                              shift=rng.uniform(-2, 2, 3), scale=rng.uniform(0.8, 1.25))
                         for _ in range(2)])
    out = noa.zeros((2, 5, 8, 6), "float32", order="F")
    transforms.transform_3d(laid_out(values, "view"), out, matrices, interp, border)
    for b in range(2):
        expected = scipy_transform(values[b], matrices[b], (5, 8, 6), interp, border)
        np.testing.assert_allclose(out.numpy()[b], expected, atol=2e-4, rtol=2e-4)


@settings(max_examples=15, deadline=None)
@given(shape=st.tuples(st.integers(1, 2), st.integers(2, 5), st.integers(1, 6), st.integers(1, 6)),
       out_shape=st.tuples(st.integers(2, 5), st.integers(1, 5), st.integers(1, 5)),
       interp=st.sampled_from(list(ORDERS)), border=st.sampled_from(list(MODES)),
       kind=st.sampled_from(["C", "F", "view"]), seed=st.integers(0, 2**16))
def test_transform_3d_random_shapes_match_scipy(shape, out_shape, interp, border, kind, seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=shape)
    matrices = np.stack([transforms.affine_3d(shape, euler=rng.uniform(-180, 180, 3), shift=rng.uniform(-2, 2, 3),
                                            scale=rng.uniform(0.7, 1.4)) for _ in range(shape[0])])
    out = noa.zeros((shape[0], *out_shape), "float64")
    transforms.transform_3d(laid_out(values, kind), out, matrices, interp, border)
    for b in range(shape[0]):
        expected = scipy_transform(values[b], matrices[b], out_shape, interp, border)
        np.testing.assert_allclose(out.numpy()[b], expected, atol=1e-9, rtol=1e-9)


def test_helpers_rotate_about_the_centre_counter_clockwise_with_y_up():
    image = np.random.default_rng(0).normal(size=(1, 1, 9, 9))
    out = noa.zeros(image.shape, "float64")
    transforms.transform_2d(image, out, transforms.affine_2d(image.shape, rotate=90))
    in_numpy = np.zeros(image.shape)  # a NumPy output is written in place
    transforms.transform_2d(image, in_numpy, transforms.affine_2d(image.shape, rotate=90))
    np.testing.assert_array_equal(in_numpy, out.numpy())
    # Row 0 is y = 0 (the bottom, MRC's first row): counter-clockwise with y up is clockwise as NumPy prints it.
    np.testing.assert_allclose(out.numpy()[0, 0], np.rot90(image[0, 0], -1), atol=1e-12)
    transforms.transform_2d(image, out, transforms.affine_2d(image.shape, shift=(2, -3)))
    expected = np.zeros((9, 9))
    expected[2:, :6] = image[0, 0, :7, 3:]
    np.testing.assert_allclose(out.numpy()[0, 0], expected, atol=1e-12)
    even = np.random.default_rng(1).normal(size=(1, 1, 8, 8))  # even size: the centre is n // 2, a pixel
    out = noa.zeros(even.shape, "float64")
    transforms.transform_2d(even, out, transforms.affine_2d(even.shape, rotate=180))
    np.testing.assert_allclose(out.numpy()[0, 0, 1:, 1:], even[0, 0, 1:, 1:][::-1, ::-1], atol=1e-12)
    transforms.transform_2d(even, out, transforms.affine_2d(even.shape, scale=2.0))
    assert out.numpy()[0, 0, 4, 4] == pytest.approx(even[0, 0, 4, 4])  # the centre stays
    assert out.numpy()[0, 0, 6, 4] == pytest.approx(even[0, 0, 5, 4])


def test_euler_rot_or_psi_alone_turns_every_section_clockwise():
    volume = np.random.default_rng(2).normal(size=(1, 5, 11, 10))
    sections = noa.zeros((5, 1, 11, 10), "float64")
    # RELION's A for rot (or psi) alone is Rz(-rot): x right and y up, the content turns clockwise
    transforms.transform_2d(volume[0][:, None], sections, transforms.affine_2d(volume.shape, rotate=-37.0))
    for euler in ((37.0, 0.0, 0.0), (0.0, 0.0, 37.0)):
        out3 = noa.zeros(volume.shape, "float64")
        transforms.transform_3d(volume, out3, transforms.affine_3d(volume.shape, euler=euler))
        np.testing.assert_allclose(out3.numpy()[0], sections.numpy()[:, 0], atol=1e-12)
    rotation = transforms.euler_zyz(20, 50, -70)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(rotation) == pytest.approx(1.0)
    # tilt turns by -tilt about y (right-handed, active): z goes to -x (vectors in (z, y, x) order)
    np.testing.assert_allclose(transforms.euler_zyz(0, 90, 0) @ [1.0, 0.0, 0.0], [0.0, 0.0, -1.0], atol=1e-12)
    # A = Rz(-psi) Ry(-tilt) Rz(-rot) in active rotations: the old noa meaning with every angle negated
    def rz(a: float) -> np.ndarray:  # active about z, on (x, y, z)
        c, s = np.cos(np.radians(a)), np.sin(np.radians(a))
        return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])

    def ry(a: float) -> np.ndarray:
        c, s = np.cos(np.radians(a)), np.sin(np.radians(a))
        return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])

    np.testing.assert_allclose(rotation[::-1, ::-1], rz(70) @ ry(-50) @ rz(-20), atol=1e-12)


def test_matrix_element_arrays_square_matrices_and_integer_inputs():
    values = np.arange(30, dtype=np.int16).reshape(1, 1, 5, 6)
    forward = [transforms.affine_2d(values.shape, rotate=a) for a in (10.0, -30.0)]
    elements = noa.zeros((2, 1, 1, 1), noa.matrix("float64", 3, 3))
    elements.numpy()[:, 0, 0, 0] = forward
    out = noa.zeros((2, 1, 5, 6), "float32")
    transforms.transform_2d(values, out, elements, "cubic", "mirror")
    for b in range(2):
        expected = scipy_transform(values[0, 0], forward[b], (5, 6), "cubic", "mirror")
        np.testing.assert_allclose(out.numpy()[b, 0], expected, atol=2e-4)


def test_refusals_name_the_shapes():
    volume, stack = noa.zeros((1, 4, 6, 6)), noa.zeros((3, 1, 6, 6))
    with pytest.raises(ShapeError, match=r"\(1, 4, 6, 6\) is a volume.*transform_3d"):
        transforms.transform_2d(volume, noa.zeros((1, 4, 6, 6)), np.eye(3))
    with pytest.raises(ShapeError, match=r"\(3, 1, 6, 6\) is not a volume.*transform_2d"):
        transforms.transform_3d(stack, noa.zeros((3, 1, 6, 6)), np.eye(4))
    with pytest.raises(ShapeError, match="2 matrices for an output batch of 3"):
        transforms.transform_2d(stack, noa.zeros((3, 1, 6, 6)), np.stack([np.eye(3)] * 2))
    with pytest.raises(ShapeError, match=r"batch of 3.*must be 1 or the output's, 2"):
        transforms.transform_2d(stack, noa.zeros((2, 1, 6, 6)), np.eye(3))
    with pytest.raises(ShapeError, match="2x3 or 3x3"):
        transforms.transform_2d(stack, noa.zeros((3, 1, 6, 6)), np.eye(4))
    with pytest.raises(DTypeError, match="float32 or float64"):
        transforms.transform_2d(stack, noa.zeros((3, 1, 6, 6), "int16"), np.eye(3))
    with pytest.raises(ParameterError, match="interp"):
        transforms.transform_2d(stack, noa.zeros((3, 1, 6, 6)), np.eye(3), interp="quintic")
    with pytest.raises(ParameterError, match="finite"):
        transforms.transform_2d(stack, noa.zeros((3, 1, 6, 6)), np.full((3, 3), np.nan))


def test_read_matrices_from_text_and_npy(tmp_path):
    forward = np.stack([transforms.affine_2d((8, 8), rotate=a, shift=(1, 2)) for a in (0.0, 15.0, 30.0)])
    np.savetxt(tmp_path / "square.txt", forward.reshape(-1, 3))
    np.savetxt(tmp_path / "short.txt", forward[:, :2].reshape(-1, 3))
    np.save(tmp_path / "m.npy", forward)
    for name in ("square.txt", "short.txt", "m.npy"):
        np.testing.assert_allclose(transforms.read_matrices(tmp_path / name, 2), forward[:, :2], atol=1e-15)
    (tmp_path / "ragged.txt").write_text("1 0 0\n0 1 0\n1 0 0\n")
    with pytest.raises(ParameterError, match="3 rows do not make whole 2x3"):
        transforms.read_matrices(tmp_path / "ragged.txt", 2)
    (tmp_path / "wide.txt").write_text("1 0 0 0\n0 1 0 0\n")
    with pytest.raises(ParameterError, match="rows of 3 numbers"):
        transforms.read_matrices(tmp_path / "wide.txt", 2)
    with pytest.raises(ParameterError, match="cannot be read"):
        transforms.read_matrices(tmp_path / "missing.txt", 2)


def test_matrices_from_a_pipe_a_device_or_too_large_a_file_are_refused_unread(tmp_path):
    """Issue 32 item 15: --matrices /dev/zero grew past 6 GB and a FIFO blocked forever."""
    import os
    import threading

    fifo = tmp_path / "xf.txt"
    os.mkfifo(fifo)
    done = threading.Event()
    errors = []

    def read() -> None:
        try:
            transforms.read_matrices(fifo, 2)
        except ParameterError as exc:
            errors.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10), "a FIFO blocked"
    assert errors and "not a regular file" in str(errors[0]) and errors[0].param == "matrices"
    with pytest.raises(ParameterError, match="not a regular file"):
        transforms.read_matrices("/dev/zero", 2)
    big = tmp_path / "big.txt"
    big.write_text("1 0 0\n0 1 0\n" * 2000)  # 2000 matrices for a batch of 3
    with pytest.raises(ParameterError, match="more than the"):
        transforms.read_matrices(big, 2, 3)
    np.testing.assert_allclose(transforms.read_matrices(big, 2, 2000)[0], [[1, 0, 0], [0, 1, 0]])


@pytest.mark.parametrize("interp", ["linear", "cubic"])
def test_transform_kernel_reads_every_input_as_read_only(interp):
    """Inputs reach the kernel read-only, whether a file, a conversion (cubic's prefilter) or Python made them: one
    compiled version per element type, not two (a writable array is another type to numba)."""
    from noa_core.kernels import transform as transform_kernels

    values = np.random.default_rng(3).random((1, 6, 7, 8), dtype=np.float32)
    for writable in (True, False):
        volume = values.copy()
        volume.flags.writeable = writable
        out = np.zeros_like(values)
        transforms.transform_3d(volume, out, transforms.affine_3d(values.shape, euler=(10, 20, 30)), interp)
    kernel = transform_kernels.cpu_kernels()["3d"]
    assert kernel.signatures
    assert all(not signature[0].mutable for signature in kernel.signatures)
