"""noa extract against relion_preprocess --extract (issue 43 item 1): the same boxes, within float32 precision, for
particles at every edge and corner, fractional coordinates (truncated), each option; and the edge rules of
noa_core.images.extraction against NumPy's own padding."""

from __future__ import annotations

from pathlib import Path

import mrcfile
import numpy as np
import pytest
import starfile

from helpers import load, noa, relion, write_mrc
from noa_core.images import extraction
from tests.particles.tables import micrographs_star

HEIGHT, WIDTH, PIXEL = 90, 110, 1.5
# every edge and corner, fractional (truncated toward zero: -0.5 -> 0), the middle, and an odd place
PICKS = [(0, 0), (WIDTH - 0.3, HEIGHT - 0.1), (0, HEIGHT - 1), (WIDTH - 1, 0), (3.6, 50.2), (60, 2), (-0.5, 40),
         (55.5, 44.9), (WIDTH - 2, 45), (30, HEIGHT - 3)]
MICROGRAPHS_STAR = micrographs_star(["Mics/a.mrc", "Mics/b.mrc"], PIXEL)


def coordinate_star(picks) -> str:
    return "\ndata_\nloop_\n_rlnCoordinateX\n_rlnCoordinateY\n" + "".join(f"{x} {y}\n" for x, y in picks)


@pytest.fixture()
def project(tmp_path) -> Path:
    """A RELION project: two micrographs (noise and a ramp, so that every pixel differs), their coordinate files
    (_pick.star) and the micrographs STAR."""
    rng = np.random.default_rng(7)
    (tmp_path / "Mics").mkdir()
    ramp = np.add.outer(np.arange(HEIGHT) * 0.05, np.arange(WIDTH) * 0.02)
    for name, picks in (("a", PICKS), ("b", PICKS[::-1][:6])):
        write_mrc(tmp_path / f"Mics/{name}.mrc", (rng.normal(size=(HEIGHT, WIDTH)) + ramp).astype(np.float32),
                  voxel_size=PIXEL)
        (tmp_path / f"Mics/{name}_pick.star").write_text(coordinate_star(picks))
    (tmp_path / "mics.star").write_text(MICROGRAPHS_STAR)
    return tmp_path


def relion_extract(project: Path, box: int, *options) -> dict[str, np.ndarray]:
    relion("relion_preprocess", "--i", "mics.star", "--coord_dir", "./", "--coord_suffix", "_pick.star",
           "--part_dir", "Relion/", "--part_star", "relion.star", "--extract", "--extract_size", box, *options,
           cwd=project)
    return {name: load(project / f"Relion/Mics/{name}.mrcs") for name in ("a", "b")}


def noa_extract(project: Path, box: int, *options) -> dict[str, np.ndarray]:
    (project / "noa").mkdir(exist_ok=True)
    done = noa("extract", "mics.star", "--coord-suffix", "_pick.star", "--box", box, *options, "-o", "noa/out.star",
               cwd=project)
    assert done.returncode == 0, done.stderr
    return {name: load(project / f"noa/Particles/Mics/{name}.mrcs") for name in ("a", "b")}


@pytest.mark.parametrize(("box", "relion_options", "noa_options"), [
    (16, (), ()),
    (32, ("--scale", "24"), ("--scale", "24")),
    (24, ("--norm", "--bg_radius", "9"), ("--norm", "--bg-radius", "9")),
    (20, ("--scale", "14", "--norm", "--bg_radius", "5", "--invert_contrast"),
     ("--scale", "14", "--norm", "--bg-radius", "5", "--invert-contrast")),
])
def test_the_boxes_are_relions(project, box, relion_options, noa_options):
    expected = relion_extract(project, box, *relion_options)
    got = noa_extract(project, box, *noa_options)
    for name in ("a", "b"):
        assert got[name].shape == expected[name].shape and got[name].dtype == np.float32
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5 * np.abs(expected[name]).max())


@pytest.mark.parametrize(("box", "relion_runs", "noa_options"), [
    # the data set OUT names at the box, another at 12 px: each RELION's own run at that size
    (16, [(), ("--scale", "12")], ("--also-scale", "12")),
    # OUT at --scale 24, more at 16 and 40 (padded), normalised with the same circle in each one's pixels and inverted
    (32, [("--scale", "24", "--norm", "--bg_radius", "9", "--invert_contrast"),
          ("--scale", "16", "--norm", "--bg_radius", "6", "--invert_contrast"),
          ("--scale", "40", "--norm", "--bg_radius", "15", "--invert_contrast")],
     ("--scale", "24", "--norm", "--bg-radius", "9", "--invert-contrast", "--also-scale", "16,40")),
])
def test_each_size_of_one_read_is_relions_run_at_that_size(project, box, relion_runs, noa_options):
    """Issue 43 item 3: several data sets from one read of each micrograph, each equal to relion_preprocess run
    for that size alone, with its own STAR (pixel size and box of that size) that RELION reads back."""
    noa_extract(project, box, *noa_options)
    sizes = [int(run[1]) if run else box for run in relion_runs]
    for size, run in zip(sizes, relion_runs):
        expected = relion_extract(project, box, *run)
        suffix = "" if size == sizes[0] else f"_{size}px"
        folder = project / f"noa/Particles{suffix}/Mics"
        for name in ("a", "b"):
            got = load(folder / f"{name}.mrcs")
            assert got.shape == expected[name].shape, (size, name)
            np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-5 * np.abs(expected[name]).max())
        ours, theirs = starfile.read(project / f"noa/out{suffix}.star"), starfile.read(project / "relion.star")
        assert ours["optics"]["rlnImageSize"].tolist() == theirs["optics"]["rlnImageSize"].tolist() == [size]
        assert ours["optics"]["rlnImagePixelSize"].tolist() == pytest.approx(
            theirs["optics"]["rlnImagePixelSize"].tolist())
        relion("relion_stack_create", "--i", f"noa/out{suffix}.star", "--o", f"restacked{size}", cwd=project)
        np.testing.assert_array_equal(load(project / f"restacked{size}.mrcs"),
                                      np.concatenate([load(folder / f"{n}.mrcs") for n in ("a", "b")]))


def test_the_particles_star_is_relions(project):
    relion_extract(project, 16, "--scale", "12")
    noa_extract(project, 16, "--scale", "12")
    ours, theirs = starfile.read(project / "noa/out.star"), starfile.read(project / "relion.star")
    for column in theirs["optics"].columns:
        assert ours["optics"][column].tolist() == pytest.approx(theirs["optics"][column].tolist()) \
            if theirs["optics"][column].dtype.kind in "if" else ours["optics"][column].tolist() == \
            theirs["optics"][column].tolist(), column
    assert list(ours["optics"].columns) == list(theirs["optics"].columns)
    assert list(ours["particles"].columns) == list(theirs["particles"].columns)
    for column in ("rlnCoordinateX", "rlnCoordinateY", "rlnOpticsGroup"):
        np.testing.assert_allclose(ours["particles"][column], theirs["particles"][column], rtol=1e-6)
    assert ours["particles"]["rlnMicrographName"].tolist() == theirs["particles"]["rlnMicrographName"].tolist()
    assert [n.replace("noa/Particles", "Relion") for n in ours["particles"]["rlnImageName"]] == \
        theirs["particles"]["rlnImageName"].tolist()
    # RELION reads what noa wrote: its stack of the STAR's images is noa's stacks, in row order
    relion("relion_stack_create", "--i", "noa/out.star", "--o", "restacked", cwd=project)
    restacked = load(project / "restacked.mrcs")
    np.testing.assert_array_equal(restacked, np.concatenate([load(project / f"noa/Particles/Mics/{n}.mrcs")
                                                             for n in ("a", "b")]))


@pytest.mark.parametrize("edge", ["repeat", "zero", "mean"])
def test_edge_fills_are_numpys_padding(edge):
    rng = np.random.default_rng(3)
    micrograph = rng.normal(size=(20, 30)).astype(np.float32)
    positions = np.array([[0, 0], [29, 19], [15, 10], [2, 17]])
    box = 9
    mode = {"repeat": {"mode": "edge"}, "zero": {"mode": "constant"},
            "mean": {"mode": "constant", "constant_values": micrograph.mean(dtype=np.float64)}}[edge]
    padded = np.pad(micrograph, box, **mode)
    got = extraction.boxes(micrograph, positions, box, edge, float(micrograph.mean(dtype=np.float64)))
    for (x, y), image in zip(positions, got):
        start = np.array([y, x]) + box - box // 2
        np.testing.assert_array_equal(image, padded[start[0]:start[0] + box, start[1]:start[1] + box])
    # boxes all within the micrograph take a path of their own: the same boxes
    np.testing.assert_array_equal(extraction.boxes(micrograph, positions[2:3], box, edge), got[2:3])


def test_positions_truncate_toward_zero_and_boxes_know_the_edges():
    positions = extraction.integer_positions(np.array([[-0.5, 2.9], [10.99, -1.2]]))
    assert positions.tolist() == [[0, 2], [10, -1]]
    assert extraction.outside(positions, (10, 20)).tolist() == [False, True]
    assert extraction.crossing_edge(np.array([[5, 5], [2, 5]]), 6, (20, 20)).tolist() == [False, True]


def test_float16_stacks_hold_the_float32_values_rounded(project):
    got32 = noa_extract(project, 16)
    (project / "half").mkdir()
    done = noa("extract", "mics.star", "--coord-suffix", "_pick.star", "--box", 16, "--float16", "-o",
               "half/out.star", cwd=project)
    assert done.returncode == 0, done.stderr
    with mrcfile.open(project / "half/Particles/Mics/a.mrcs") as f:
        assert f.header.mode == 12
        np.testing.assert_array_equal(f.data, got32["a"].astype(np.float16))
