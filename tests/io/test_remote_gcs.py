"""Inputs and outputs on Google Cloud Storage (``gs://bucket/key``, issue 46 item 3).

A GCS server (gcp-storage-emulator, objects in memory) runs on a loopback port for the module and counts the
requests and the bytes it answers, so a read that needs a header and one section is seen to fetch about that.
Values are checked against mrcfile and NumPy on the local copy, stores written into the bucket against zarr and
ome-zarr-py reading them through gcsfs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import mrcfile
import numpy as np
import pytest

from helpers import GcsStore, assert_user_error, gcs_store, in_environment, noa, write_mrc
from noa_core import io
from noa_core.errors import FileFormatError, MissingFileError
from noa_core.io import mapped, remote

BUCKET = "maps"
SHAPE = (16, 64, 96)  # a small map for the commands
LARGE = (96, 128, 128)  # sections of 64 KiB (float32); 6 MiB in all: gcsfs uploads it in a resumable upload
SECTION_BYTES = LARGE[1] * LARGE[2] * 4
# What a read may fetch beyond the data it needs: headers read ahead by at most one block, a few times over (the
# server's counts include its answers' headers)
HEADER_ALLOWANCE = 4 * (1024 + remote.HEADER_BLOCK_BYTES)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A small and a larger float32 volume as MRC in a local folder."""
    folder = tmp_path_factory.mktemp("gcs")
    rng = np.random.default_rng(46)
    write_mrc(folder / "map.mrc", rng.normal(size=SHAPE).astype(np.float32), voxel_size=1.5)
    write_mrc(folder / "large.mrc", rng.normal(size=LARGE).astype(np.float32), voxel_size=2.0)
    return {p.name: p for p in folder.iterdir()}


@pytest.fixture(scope="module")
def gcs(files) -> Iterator[GcsStore]:
    """The GCS server with the files in the bucket ``maps``."""
    with gcs_store(BUCKET) as store:
        for name, path in files.items():
            store.fs.put_file(str(path), f"{BUCKET}/{name}")
        yield store


@pytest.fixture
def gcs_env(gcs, monkeypatch) -> Iterator[GcsStore]:
    """The GCS server's endpoint in this process's environment, its counts reset (and its refusals after)."""
    yield in_environment(gcs, monkeypatch)
    gcs.reset()


def _oracle(path: Path) -> np.ndarray:
    with mrcfile.open(path, permissive=False) as f:
        return np.asarray(f.data)


def _downloaded(store: GcsStore, key: str, folder: Path) -> Path:
    path = folder / key.replace("/", "_")
    store.fs.get_file(f"{BUCKET}/{key}", str(path))
    return path


def _halved(data: np.ndarray) -> np.ndarray:
    """The mean of each 2 x 2 x 2 box (even sizes): the next level of a pyramid of ``data``."""
    d, h, w = data.shape
    return data.astype(np.float64).reshape(d // 2, 2, h // 2, 2, w // 2, 2).mean(axis=(1, 3, 5))


def _levels_read_back(store: GcsStore, key: str) -> list[np.ndarray]:
    """Every level of the OME-Zarr store at ``gs://maps/key`` as ome-zarr-py reads it through gcsfs, checked equal
    to zarr's reading."""
    import zarr
    from gcsfs.core import GCSFileSystem
    from ome_zarr.format import format_from_version
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    fs = GCSFileSystem(endpoint_url=store.endpoint, token="anon", asynchronous=True, skip_instance_cache=True)
    zarr_store = zarr.storage.FsspecStore(fs, path=f"{BUCKET}/{key}", read_only=True)
    group = zarr.open_group(zarr_store, mode="r")
    attrs = group.attrs.asdict()
    image = (attrs["ome"]["multiscales"] if "ome" in attrs else attrs["multiscales"])[0]
    by_zarr = [np.asarray(group[d["path"]][...]) for d in image["datasets"]]
    # the store's own version: ome-zarr-py reopens another version's by its path, which names no server
    location = parse_url(zarr_store, fmt=format_from_version(image["version"]))
    by_ome_zarr_py = [np.asarray(level) for level in next(iter(Reader(location)())).data]
    assert len(by_zarr) == len(by_ome_zarr_py)
    for ours, theirs in zip(by_zarr, by_ome_zarr_py):
        np.testing.assert_array_equal(ours, theirs)
    return by_zarr


# -- reading ------------------------------------------------------------------------------------------------


def test_probe_reads_the_header_of_a_gs_map(gcs_env, files):
    probe = io.probe("gs://maps/map.mrc")
    assert probe.shape == (1, *SHAPE)
    assert probe.metadata.pixel_size == pytest.approx((1.5, 1.5, 1.5))
    assert probe.metadata.path == "gs://maps/map.mrc"


def test_one_section_of_a_gs_map_is_read_by_byte_ranges(gcs_env, files):
    array, _ = io.read("gs://maps/large.mrc", tiles=True)
    header = gcs_env.sent["maps/large.mrc"]  # what the object is (gcsfs asks at each open) and its header
    gcs_env.requests.clear()
    section = mapped.read_view(array.numpy()[0, 41])
    np.testing.assert_array_equal(section, _oracle(files["large.mrc"])[41])
    assert gcs_env.requests == [("GET", "maps/large.mrc")]  # the section's run: one range
    fetched = gcs_env.sent["maps/large.mrc"]
    whole = files["large.mrc"].stat().st_size
    assert header <= HEADER_ALLOWANCE
    assert SECTION_BYTES <= fetched <= SECTION_BYTES + HEADER_ALLOWANCE < whole / 8, (fetched, whole)


@pytest.mark.parametrize("url, message", [
    ("gs://maps/absent.mrc", "gs://maps/absent.mrc: no such object"),
    ("gs://no-such-bucket/map.mrc", "gs://no-such-bucket/map.mrc: no such bucket"),
])
def test_a_missing_gs_object_or_bucket_is_one_line(gcs_env, url, message):
    with pytest.raises(MissingFileError) as caught:
        io.probe(url)
    assert str(caught.value) == message


def test_access_refused_by_gcs_is_one_line_naming_where_credentials_come_from(gcs_env):
    gcs_env.refusing = lambda method, name: name == "maps/map.mrc"
    with pytest.raises(FileFormatError) as caught:
        io.probe("gs://maps/map.mrc")
    assert str(caught.value) == ("gs://maps/map.mrc: access refused (HTTP 403); check the credentials "
                                 "(GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login)")


def test_without_gcsfs_a_gs_url_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "gcsfs.core", None)  # import gcsfs.core: ImportError
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # settings no file system was made for yet
    with pytest.raises(FileFormatError) as caught:
        io.probe("gs://maps/map.mrc")
    assert str(caught.value).startswith("gs://maps/map.mrc: reading gs:// URLs needs gcsfs, which is not installed: "
                                        "install noa[remote]")


# -- the command line ---------------------------------------------------------------------------------------


def test_cli_info_and_copy_of_a_gs_map(gcs, files, tmp_path):
    info = noa("info", "gs://maps/map.mrc", env=gcs.env())
    assert info.returncode == 0, info.stderr
    assert "gs://maps/map.mrc" in info.stdout and "1, 16, 64, 96" in info.stdout
    assert info.stderr == ""  # no back end's warnings
    copied = noa("copy", "gs://maps/map.mrc", tmp_path / "out.mrc", env=gcs.env())
    assert copied.returncode == 0, copied.stderr
    np.testing.assert_array_equal(_oracle(tmp_path / "out.mrc"), _oracle(files["map.mrc"]))
    with mrcfile.open(tmp_path / "out.mrc") as out:
        assert float(out.voxel_size.x) == pytest.approx(1.5)


def test_cli_one_section_of_a_gs_map_fetches_about_that(gcs, files, tmp_path):
    gcs.reset()
    result = noa("sections", "gs://maps/large.mrc", tmp_path / "one.mrc", "--keep", "41", env=gcs.env())
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(_oracle(tmp_path / "one.mrc"), _oracle(files["large.mrc"])[41])
    assert SECTION_BYTES <= gcs.sent["maps/large.mrc"] <= SECTION_BYTES + HEADER_ALLOWANCE


def test_cli_copy_to_gs_writes_an_mrc_object_and_refuses_to_replace_it(gcs, files, tmp_path):
    before = files["map.mrc"].read_bytes()
    copied = noa("copy", files["map.mrc"], "gs://maps/cli/y.mrc", env=gcs.env())
    assert copied.returncode == 0, copied.stderr
    assert _oracle(_downloaded(gcs, "cli/y.mrc", tmp_path)).tobytes() == _oracle(files["map.mrc"]).tobytes()
    written = gcs.fs.cat_file(f"{BUCKET}/cli/y.mrc")
    again = noa("copy", files["large.mrc"], "gs://maps/cli/y.mrc", env=gcs.env())
    assert_user_error(again, "gs://maps/cli/y.mrc: exists; give --force to replace it")
    assert gcs.fs.cat_file(f"{BUCKET}/cli/y.mrc") == written and files["map.mrc"].read_bytes() == before
    forced = noa("copy", files["large.mrc"], "gs://maps/cli/y.mrc", "--force", env=gcs.env())
    assert forced.returncode == 0, forced.stderr
    assert _oracle(_downloaded(gcs, "cli/y.mrc", tmp_path)).tobytes() == _oracle(files["large.mrc"]).tobytes()


def test_cli_copy_to_gs_writes_an_ome_zarr_pyramid(gcs, files):
    result = noa("copy", files["map.mrc"], "gs://maps/cli/z.ome.zarr", "--levels", "2", env=gcs.env())
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == ["wrote gs://maps/cli/z.ome.zarr"]  # no back end's warnings
    levels = _levels_read_back(gcs, "cli/z.ome.zarr")
    source = _oracle(files["map.mrc"])
    np.testing.assert_array_equal(levels[0], source[None] if levels[0].ndim == 4 else source)
    np.testing.assert_allclose(levels[1].reshape(_halved(source).shape), _halved(source), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("url, message", [
    ("gs://maps/absent.mrc", "gs://maps/absent.mrc: no such object"),
    ("gs://no-such-bucket/map.mrc", "gs://no-such-bucket/map.mrc: no such bucket"),
])
def test_cli_a_missing_gs_object_or_bucket_is_one_line_exit_2(gcs, tmp_path, url, message):
    result = noa("copy", url, tmp_path / "out.mrc", env=gcs.env())
    assert_user_error(result, message)
    assert not (tmp_path / "out.mrc").exists()


def test_cli_an_output_in_a_missing_gs_bucket_is_one_line_exit_2(gcs, files):
    result = noa("copy", files["map.mrc"], "gs://no-such-bucket/y.mrc", env=gcs.env())
    assert_user_error(result, "gs://no-such-bucket/y.mrc: no such bucket")


def test_a_gs_object_is_looked_up_once_whatever_opens_it(gcs_env, files, monkeypatch):
    """What the store says of the object is asked once a path: gcsfs's file asked again as each open made it (its
    format's detection, its header, its reading: 10 requests for a probe; 3 now, its head fetched once)."""
    fs = remote._filesystem(remote.as_path("gs://maps/map.mrc"))
    looked_up, info = [], fs.info

    def counted(path, **kwargs):
        looked_up.append(path)
        return info(path, **kwargs)

    monkeypatch.setattr(fs, "info", counted)
    gcs_env.requests.clear()
    probe = io.probe("gs://maps/map.mrc")
    assert probe.shape == (1, *SHAPE)
    assert len(looked_up) == 1, looked_up
    assert len(gcs_env.requests) == 3, gcs_env.requests  # the lookup (the object, the folder test), the head
