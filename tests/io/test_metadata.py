"""One rule for the extended header's records, whichever operation picks the sections: ``sections``,
``split``, ``join``, ``average`` and ``flip`` give the same records for the same picks (read back with
mrcfile), per-section records (FEI1, SERI) follow their sections and a CCP4 symmetry block stays with
the map. Before, ``noa sections`` kept a CCP4 block that ``noa split`` dropped."""

from __future__ import annotations

import mrcfile
import numpy as np
import pytest

from helpers import fei1_stack
from noa_core import operations
from noa_core.run import local

CCP4_BLOCK = b"X,Y,Z".ljust(80) + b"-X,Y+1/2,-Z".ljust(80)  # two symmetry operators, 80-character records


def records(path) -> tuple[bytes, bytes]:
    """(exttyp, extended header bytes) as mrcfile reads them."""
    with mrcfile.open(path, permissive=True) as f:
        return bytes(f.header.exttyp), bytes(f.extended_header.tobytes())


def seri_stack(path, sections: int = 6) -> bytes:
    """An image stack with a SerialEM block: 4 bytes per section, the section number in each."""
    block = np.arange(sections, dtype="<i4").tobytes()
    with mrcfile.new(path, np.arange(sections * 12, dtype=np.float32).reshape(sections, 3, 4), overwrite=True) as f:
        f.set_image_stack()
        f.set_extended_header(np.frombuffer(block, np.uint8))
        f.header.exttyp = b"SERI"
        f.header.nint, f.header.nreal = 4, 0
    return block


def ccp4_volume(path) -> None:
    with mrcfile.new(path, np.arange(6 * 4 * 5, dtype=np.float32).reshape(6, 4, 5), overwrite=True) as f:
        f.set_volume()
        f.set_extended_header(np.frombuffer(CCP4_BLOCK, np.uint8))
        f.header.exttyp = b"CCP4"


def run(tmp_path, name: str, src, out_name: str, **options):
    dst = tmp_path / out_name
    task = operations.get(name).task(options)
    if task.operation.writes == "folder":
        local.write_several(task, src, dst)
    else:
        local.write(task, src, dst)
    return dst


@pytest.mark.parametrize("kind", ["FEI1", "SERI"])
def test_sections_split_join_average_and_flip_agree_on_the_records(tmp_path, kind):
    src = tmp_path / "in.mrcs"
    if kind == "FEI1":
        _, fei = fei1_stack(src, 6)
        size, whole = fei.dtype.itemsize, fei.tobytes()
    else:
        whole = seri_stack(src, 6)
        size = 4
    record = [whole[i * size:(i + 1) * size] for i in range(6)]
    picked = run(tmp_path, "sections", src, "picked.mrcs", keep="2-3")
    split = run(tmp_path, "split", src, "parts", every=2)
    averaged = run(tmp_path, "average", src, "averaged.mrcs", group=2)
    flipped = run(tmp_path, "flip", src, "flipped.mrcs", axis="x")
    parts = sorted(split.iterdir())
    joined = tmp_path / "joined.mrcs"
    local.write(operations.get("join").task({}, shared=parts[1:]), parts[0], joined)
    wanted = kind.encode()
    assert records(picked) == records(parts[1]) == (wanted, record[2] + record[3])  # the same picks: sections 2, 3
    assert records(averaged) == (wanted, record[0] + record[2] + record[4])  # each group keeps its first's
    assert records(flipped) == records(joined) == (wanted, whole)  # every section, in its place


def test_a_symmetry_block_stays_with_the_map_whichever_operation_picks_sections(tmp_path):
    src = tmp_path / "map.mrc"
    ccp4_volume(src)
    picked = run(tmp_path, "sections", src, "picked.mrc", keep="1-4")
    split = run(tmp_path, "split", src, "parts", every=3)
    flipped = run(tmp_path, "flip", src, "flipped.mrc", axis="z")
    averaged = run(tmp_path, "average", src, "averaged.mrc", group=2)
    for out in (picked, *sorted(split.iterdir()), flipped, averaged):
        assert records(out) == (b"CCP4", CCP4_BLOCK), out.name


def test_joined_inputs_keep_records_only_when_every_input_has_them(tmp_path):
    a, b = tmp_path / "a.mrcs", tmp_path / "b.mrcs"
    _, fei = fei1_stack(a, 3)
    with mrcfile.new(b, np.zeros((2, 4, 6), np.float32)) as f:
        f.set_image_stack()
    joined = tmp_path / "joined.mrcs"
    notices = local.write(operations.get("join").task({}, shared=[b]), a, joined)
    assert records(joined)[1] == b""
    assert any("extended header dropped" in n and "b.mrcs has none" in n for n in notices), notices
    local.write(operations.get("join").task({}, shared=[a]), a, joined, overwrite=True)
    assert records(joined) == (b"FEI1", fei.tobytes() * 2)
