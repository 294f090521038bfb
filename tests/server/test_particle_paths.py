"""Particle files over HTTP (issue 42 item 4): paths mode and jobs read a STAR or .cs under the data root and write
the stack and the particle file, the values NumPy's binning of the stacks mrcfile reads, the table what starfile
parses, the bytes the CLI writes; every stack a file names resolves under the data root (a row naming '..', an
absolute path or a link out is refused 403 naming the row and the column, nothing written); a particle file
uploaded alone is refused, pointing to paths mode."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import mrcfile
import numpy as np
import pytest
import starfile

from helpers import REPO, assert_problem, assert_same_file, noa, start_server, stop_server, wait_job
from tests.particles.tables import binned, cs_file, oracle_images

RELION = REPO / "tests" / "data" / "relion_particles"


@pytest.fixture()
def root(tmp_path) -> Path:
    """A data root holding the RELION particle set as a project folder ``parts``, and a file outside the root."""
    data = tmp_path / "root"
    shutil.copytree(RELION, data / "parts")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(RELION / "Particles/Movies/mic0.mrcs", outside / "x.mrcs")
    return data


@pytest.fixture()
def client(root, make_client):
    return make_client(data_root=root)


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes, but the service's own (its jobs' records)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] != ".noa-jobs"}


def assert_binned_particles(star: Path, project: Path, stack: str) -> None:
    """``star`` names ``stack`` (as the project names it), whose images are NumPy's binning of the source's."""
    expected = binned(oracle_images(project / "particles.star", project), 2)[:, 0]
    np.testing.assert_allclose(mrcfile.read(star.with_suffix(".mrcs")), expected, rtol=1e-6)
    table = starfile.read(star)
    assert table["particles"]["rlnImageName"].tolist() == [f"{i:06d}@{stack}" for i in range(1, 12)]
    assert table["optics"]["rlnImagePixelSize"].tolist() == [3.0] and table["optics"]["rlnImageSize"].tolist() == [16]
    before = starfile.read(project / "particles.star")["particles"]
    others = [c for c in before.columns if c != "rlnImageName"]
    assert table["particles"][others].equals(before[others])


def test_paths_mode_bins_the_particles_of_a_project_folder(client, root):
    (root / "parts/out").mkdir()
    response = client.post("/v1/paths/bin", json={"src": "parts/particles.star", "dst": "parts/out/binned.star",
                                                  "factor": 2, "project_dir": "parts"})
    assert response.status_code == 201, response.text
    assert response.json()["output"] == "parts/out/binned.star"
    assert response.headers["location"] == "/v1/files/parts/out/binned.star"
    assert_binned_particles(root / "parts/out/binned.star", root / "parts", "out/binned.mrcs")
    assert client.get("/v1/files/parts/out/binned.mrcs").content == (root / "parts/out/binned.mrcs").read_bytes()


def test_the_data_root_is_the_project_folder_by_default(client, root):
    for name in ("particles.star", "Particles"):
        shutil.move(root / "parts" / name, root / name)
    response = client.post("/v1/paths/bin", json={"src": "particles.star", "dst": "binned.star", "factor": 2})
    assert response.status_code == 201, response.text
    assert_binned_particles(root / "binned.star", root, "binned.mrcs")


def test_reports_on_a_star(client, root):
    images = oracle_images(root / "parts/particles.star", root / "parts").astype(np.float64)
    stats = client.post("/v1/paths/stats", json={"path": "parts/particles.star", "project_dir": "parts"})
    assert stats.status_code == 200, stats.text
    for name, value in (("min", images.min()), ("max", images.max()), ("mean", images.mean()),
                        ("std", images.std())):
        assert stats.json()[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name
    info = client.post("/v1/paths/info", json={"path": "parts/particles.star", "project_dir": "parts"}).json()
    assert info["format"] == "particles" and info["shape"] == [11, 1, 32, 32] and info["pixel_size"] == [1.5] * 3


@pytest.mark.parametrize("project_dir", ["/tmp", "../", "parts/../../"])
def test_a_project_folder_outside_the_data_root_is_refused(client, root, project_dir):
    before = files(root)
    body = assert_problem(client.post("/v1/paths/bin", json={"src": "parts/particles.star", "dst": "parts/b.star",
                                                             "factor": 2, "project_dir": project_dir}),
                          403, "path-refused")
    assert body["detail"].startswith("project_dir: ")
    assert files(root) == before


def test_an_output_outside_the_project_folder_is_refused(client, root):
    before = files(root)
    body = assert_problem(client.post("/v1/paths/bin", json={"src": "parts/particles.star", "dst": "out.star",
                                                             "factor": 2, "project_dir": "parts"}),
                          403, "path-refused")
    assert "outside the project folder parts" in body["detail"]
    assert files(root) == before


# -- stacks outside the data root -----------------------------------------------------------------------------


def escaping(root: Path, kind: str) -> str:
    """How a row names ``outside/x.mrcs`` from the project folder ``parts``: through '..', absolutely, or through
    a link in the project that points out of the root."""
    if kind == "link":
        (root / "parts/Particles/Movies/link.mrcs").symlink_to(root.parent / "outside/x.mrcs")
        return "Particles/Movies/link.mrcs"
    return {"dotdot": "../../outside/x.mrcs", "absolute": str(root.parent / "outside/x.mrcs")}[kind]


KINDS = ("dotdot", "absolute", "link")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("operation, body", [("bin", {"dst": "parts/out.star", "factor": 2}), ("stats", {})])
def test_a_star_naming_a_stack_outside_the_root_is_refused(client, root, kind, operation, body):
    text = (root / "parts/particles.star").read_text()
    name = escaping(root, kind)
    (root / "parts/bad.star").write_text(text.replace("000003@Particles/Movies/mic0.mrcs", f"000003@{name}"))
    before = files(root)
    source = {"src": "parts/bad.star"} if operation == "bin" else {"path": "parts/bad.star"}
    problem = assert_problem(client.post(f"/v1/paths/{operation}", json={**source, **body, "project_dir": "parts"}),
                             403, "path-refused")
    assert problem["detail"].startswith("parts/bad.star: data_particles, row 3, rlnImageName: "), problem
    assert str(root) not in problem["detail"]
    assert files(root) == before


@pytest.mark.parametrize("kind", KINDS)
def test_a_cs_naming_a_stack_outside_the_root_is_refused(client, root, kind):
    name = escaping(root, kind)
    cs_file(root / "parts/bad.cs", [("Particles/Movies/mic0.mrcs", 0), (name, 1)], prefix="" if kind == "absolute"
            else ">")
    before = files(root)
    problem = assert_problem(client.post("/v1/paths/bin", json={"src": "parts/bad.cs", "dst": "parts/out.cs",
                                                                "factor": 2, "project_dir": "parts"}),
                             403, "path-refused")
    assert problem["detail"].startswith("parts/bad.cs: row 2, blob/path: "), problem
    assert files(root) == before


def test_a_job_naming_a_stack_outside_the_root_fails_with_the_same_problem(client, root):
    text = (root / "parts/particles.star").read_text()
    (root / "parts/bad.star").write_text(text.replace("000003@Particles/Movies/mic0.mrcs",
                                                      f"000003@{escaping(root, 'dotdot')}"))
    before = files(root)
    submitted = client.post("/v1/jobs", json={"operation": "bin", "src": "parts/bad.star", "dst": "parts/out.star",
                                              "factor": 2, "project_dir": "parts"})
    assert submitted.status_code == 202, submitted.text
    state = wait_job(client, submitted.headers["location"])
    assert state["status"] == "failed" and state["error"]["status"] == 403, state
    assert state["error"]["detail"].startswith("parts/bad.star: data_particles, row 3, rlnImageName: "), state
    assert files(root) == before


# -- uploads ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, operation, data", [("particles.star", "bin", {"factor": "2"}),
                                                   ("particles.star", "stats", {}), ("p.cs", "bin", {"factor": "2"})])
def test_a_particle_file_uploaded_alone_is_refused_pointing_to_paths_mode(client, root, name, operation, data):
    if name.endswith(".cs"):
        cs_file(root / "parts" / name, [("Particles/Movies/mic0.mrcs", 0)])
    problem = assert_problem(client.post(f"/v1/upload/{operation}", data=data,
                                         files={"file": (name, (root / "parts" / name).read_bytes())}), 422)
    assert problem["detail"].startswith(f"{name}: ") and "/v1/paths/" in problem["detail"], problem


# -- the doors give the CLI's bytes -------------------------------------------------------------------------------


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_paths_mode_and_jobs_of_a_running_service_write_the_bytes_the_cli_writes(root, tmp_path):
    project = root / "parts"
    for door in ("cli", "paths", "job"):
        (project / door).mkdir()
    done = noa("bin", "particles.star", "cli/b.star", "--factor", "2", cwd=project)
    assert done.returncode == 0, done.stderr
    proc, url = start_server(root, tmp_path / "server.log")
    try:
        with httpx.Client(base_url=url, timeout=120) as api:
            response = api.post("/v1/paths/bin", json={"src": "parts/particles.star", "dst": "parts/paths/b.star",
                                                       "factor": 2, "project_dir": "parts"})
            assert response.status_code == 201, response.text
            submitted = api.post("/v1/jobs", json={"operation": "bin", "src": "parts/particles.star",
                                                   "dst": "parts/job/b.star", "factor": 2, "project_dir": "parts"})
            assert submitted.status_code == 202, submitted.text
            state = wait_job(api, submitted.headers["location"])
            assert state["status"] == "succeeded", state
            assert api.get(submitted.headers["location"] + "/result").json()["output"] == "parts/job/b.star"
    finally:
        stop_server(proc)
    reference = (project / "cli/b.star").read_text()
    assert "000001@cli/b.mrcs" in reference
    for door in ("paths", "job"):
        assert_same_file(project / door / "b.mrcs", project / "cli/b.mrcs")
        assert (project / door / "b.star").read_text() == reference.replace("@cli/b.mrcs", f"@{door}/b.mrcs")
