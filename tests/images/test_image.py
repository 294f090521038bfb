"""Operations on (array, metadata) pairs return the header their command writes (read by mrcfile)."""

from __future__ import annotations

import mrcfile
import numpy as np
import pytest

import noa_core as noa
from helpers import fei1_stack, load, random_values
from helpers import noa as noa_command
from noa_core import io
from noa_core.compute import compute_path
from noa_core.errors import ParameterError, ShapeError


def values(shape, dtype="float32", seed=0) -> np.ndarray:
    return random_values(shape, dtype, seed, mean=3, sd=10)


# -- headers from Python: what the command writes ------------------------------------------------------------


def _volume(path):
    """A volume with an anisotropic pixel size, an origin and start indices to carry."""
    with mrcfile.new(path, values((17, 20, 23))) as f:
        f.voxel_size = (1.1, 1.2, 1.5)  # X, Y, Z
        f.header.origin = (5.0, -4.0, 3.0)
        f.header.nxstart, f.header.nystart, f.header.nzstart = -11, -10, -8
    return path


def _header(path) -> dict:
    """What mrcfile reads of a header, but for the labels and statistics (the command's own words)."""
    with mrcfile.open(path, permissive=True) as f:
        h = f.header
        return {"shape": f.data.shape, "voxel_size": f.voxel_size.tolist(), "origin": h.origin.tolist(),
                "start": (int(h.nxstart), int(h.nystart), int(h.nzstart)),
                "sampling": (int(h.mx), int(h.my), int(h.mz)),
                "cell": h.cella.tolist(), "ispg": int(h.ispg), "exttyp": bytes(h.exttyp),
                "extended": f.extended_header.tobytes()}


# (input, the Python call on an (array, metadata) pair, the same command's arguments)
HEADER_CASES = {
    "bin depth": ("volume", lambda x: noa.bin_voxels(x, 2, depth=True), ["bin", "--factor", "2", "--depth"]),
    "bin records": ("stack", lambda x: noa.bin_voxels(x, 2), ["bin", "--factor", "2"]),
    "rescale": ("volume", lambda x: noa.rescale(x, 0.6), ["rescale", "--factor", "0.6"]),
    "rescale to a pixel size like relion": ("stack", lambda x: noa.rescale(x, pixel_size=2.0, like="relion"),
                                            ["rescale", "--pixel-size", "2", "--like", "relion"]),
    "resize": ("volume", lambda x: noa.resize(x, (12, 30, 16), fill="zero"),
               ["resize", "--shape", "12,30,16", "--fill", "zero"]),
    "flip z": ("volume", lambda x: noa.flip(x, "z", about="centre"), ["flip", "--axis", "z", "--about", "centre"]),
    "rotx": ("volume", noa.rotx, ["rotx"]),
    "permute": ("volume", lambda x: noa.Image(*x).permute((0, 2, 3, 1)), ["permute", "--axes", "0,2,3,1"]),
    "sections": ("stack", lambda x: noa.sections(x, keep="2,0"), ["sections", "--keep", "2,0"]),
    "average": ("volume", lambda x: noa.average(x, 4), ["average", "--group", "4"]),
}


@pytest.mark.parametrize("case", HEADER_CASES)
def test_an_operation_on_a_pair_returns_the_header_the_command_writes(tmp_path, case):
    """Issue 40 item 5: `b = noa.bin_voxels(vol, 2, depth=True); io.write("b.mrc", b, meta)` wrote the input's pixel
    size (the command writes twice it). Given io.read's (array, metadata), an operation returns the header its
    command derives (one rule for both): pixel size, origin, start, sampling, cell and extended-header records as
    mrcfile reads both files."""
    kind, call, command = HEADER_CASES[case]
    src = _volume(tmp_path / "in.mrc") if kind == "volume" else tmp_path / "in.mrcs"
    if kind == "stack":
        fei1_stack(src, sections=4)
    with compute_path.using("numpy"):  # headers are the matter here, not which kernels compute the values
        result = call(io.read(src))
        assert isinstance(result, noa.Image)
        io.write(tmp_path / "python.mrc", *result)
    done = noa_command(command[0], src, tmp_path / "command.mrc", *command[1:])
    assert done.returncode == 0, done.stderr
    assert _header(tmp_path / "python.mrc") == _header(tmp_path / "command.mrc")
    np.testing.assert_allclose(load(tmp_path / "python.mrc"), load(tmp_path / "command.mrc"), rtol=1e-5, atol=1e-5)


def test_split_and_join_of_pairs_carry_the_headers_the_commands_write(tmp_path):
    src = _volume(tmp_path / "in.mrc")
    with compute_path.using("numpy"):
        parts = noa.split(io.read(src), 8)
        for i, part in enumerate(parts):
            io.write(tmp_path / f"python_{i}.mrcs", *part)
        joined = noa.join([io.read(tmp_path / "python_0.mrcs"), io.read(tmp_path / "python_2.mrcs")])
        io.write(tmp_path / "joined.mrcs", *joined)
    assert noa_command("split", src, "--out-dir", tmp_path / "parts", "--every", "8").returncode == 0
    commands = sorted((tmp_path / "parts").iterdir())
    assert len(commands) == len(parts) == 3
    for i, written in enumerate(commands):
        assert _header(tmp_path / f"python_{i}.mrcs") == _header(written)
    assert noa_command("join", commands[0], commands[2], "-o", tmp_path / "command.mrcs").returncode == 0
    assert _header(tmp_path / "joined.mrcs") == _header(tmp_path / "command.mrcs")


def test_a_pair_whose_metadata_is_of_another_shape_is_refused(tmp_path):
    array, meta = io.read(_volume(tmp_path / "in.mrc"))
    smaller = noa.bin_voxels(array, 2)
    assert isinstance(smaller, noa.Array)  # an array alone: an array, as before
    with pytest.raises(ShapeError, match=r"metadata describes shape \(1, 17, 20, 23\), its array has shape"):
        noa.flip((smaller, meta), "x")
    with pytest.raises(ParameterError, match="not both"):
        noa.join([(array, meta), array])
