"""Particle files through the doors beside one CLI call in one process: Dask (``--scheduler local``, and a real
scheduler and worker started as processes in another folder, as on a cluster) writes the bytes the CLI writes;
reports (stats, info, preview) on a STAR say what NumPy, mrcfile and starfile say of its rows' images."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mrcfile
import numpy as np
import pytest
from PIL import Image

from tests.helpers import REPO, assert_same_file, free_port, noa, stop_server, write_mrc
from tests.particles import tables
from tests.particles.tables import binned, oracle_images

RELION = REPO / "tests" / "data" / "relion_particles"
DASK = Path(sys.executable).parent / "dask"


@pytest.fixture()
def project(tmp_path) -> Path:
    folder = tables.project(tmp_path)
    (folder / "out").mkdir()
    return folder


def cli_reference(project: Path) -> tuple[Path, Path]:
    """``noa bin particles.star out/cli.star --factor 2`` in the project folder, checked against NumPy."""
    done = noa("bin", "particles.star", "out/cli.star", "--factor", "2", cwd=project)
    assert done.returncode == 0, done.stderr
    expected = binned(oracle_images(project / "particles.star", project), 2)[:, 0]
    np.testing.assert_allclose(mrcfile.read(project / "out/cli.mrcs"), expected, rtol=1e-6)
    return project / "out/cli.star", project / "out/cli.mrcs"


def assert_same_particles(star: Path, reference: Path) -> None:
    """The same stack bytes (but noa's time stamp) and the same STAR but for the stack's name."""
    assert_same_file(star.with_suffix(".mrcs"), reference.with_suffix(".mrcs"))
    ours = star.read_text().replace(f"@out/{star.with_suffix('.mrcs').name}", "@STACK")
    theirs = reference.read_text().replace(f"@out/{reference.with_suffix('.mrcs').name}", "@STACK")
    assert ours == theirs and ours.count("@STACK") == 11


pytest.importorskip("distributed")


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_dask_local_writes_the_bytes_the_cli_writes(project):
    reference, _ = cli_reference(project)
    done = noa("bin", "particles.star", "out/dask.star", "--factor", "2", "--scheduler", "local", cwd=project)
    assert done.returncode == 0, done.stderr
    assert_same_particles(project / "out/dask.star", reference)


@pytest.fixture()
def scheduler(tmp_path):
    """A Dask scheduler and one worker, started as processes (``dask scheduler``, ``dask worker``) in a folder of
    their own, as a cluster's are: the address."""
    if not DASK.exists():
        pytest.skip("the dask command is not installed")
    from distributed import Client

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    address = f"tcp://127.0.0.1:{free_port()}"
    log = open(tmp_path / "dask.log", "wb")  # noqa: SIM115 - the processes write to it until the fixture ends
    processes = [subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":")[-1],
                                   "--no-dashboard"], cwd=elsewhere, stdout=log, stderr=subprocess.STDOUT)]
    try:
        processes.append(subprocess.Popen([str(DASK), "worker", address, "--nworkers", "1", "--nthreads", "1",
                                           "--no-dashboard"], cwd=elsewhere, stdout=log, stderr=subprocess.STDOUT))
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=120)
        yield address
    finally:
        for process in reversed(processes):
            stop_server(process)
        log.close()


def test_a_running_scheduler_s_workers_in_another_folder_write_the_bytes_the_cli_writes(project, scheduler):
    """The stacks a STAR names, and the name of the stack written, are relative to the folder the command runs in
    (RELION's project folder), not to the folder a worker was started in."""
    reference, _ = cli_reference(project)
    done = noa("bin", project / "particles.star", project / "out/remote.star", "--factor", "2",
               "--scheduler", scheduler, cwd=project)
    assert done.returncode == 0, done.stderr
    assert_same_particles(project / "out/remote.star", reference)
    (project / "sub").mkdir()
    done = noa("bin", project / "particles.star", project / "out/remote2.star", "--factor", "2",
               "--project-dir", "..", "--scheduler", scheduler, cwd=project / "sub")
    assert done.returncode == 0, done.stderr
    assert_same_particles(project / "out/remote2.star", reference)


# -- reports ---------------------------------------------------------------------------------------------------


def test_stats_of_a_star_are_numpy_s_of_its_rows_images(project):
    images = oracle_images(project / "particles.star", project).astype(np.float64)
    done = noa("stats", "particles.star", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    assert stats["shape"] == [11, 1, 32, 32]
    for name, value in (("min", images.min()), ("max", images.max()), ("mean", images.mean()),
                        ("std", images.std())):
        assert stats[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name


def test_info_and_preview_of_a_star(project):
    done = noa("info", "particles.star", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["format"] == "particles" and info["shape"] == [11, 1, 32, 32] and info["pixel_size"] == [1.5] * 3
    # the montage of a STAR is the montage of a stack of its rows' images, written by mrcfile
    write_mrc(project / "rows.mrcs", oracle_images(project / "particles.star", project)[:, 0], stack=True,
              voxel_size=1.5)
    for name in ("particles.star", "rows.mrcs"):
        done = noa("preview", name, f"{name}.png", "--montage", cwd=project)
        assert done.returncode == 0, done.stderr
    with Image.open(project / "particles.star.png") as ours, Image.open(project / "rows.mrcs.png") as theirs:
        assert ours.size == theirs.size
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
