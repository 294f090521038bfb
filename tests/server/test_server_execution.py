"""Requests run (server/execution.py): a path request walks each path once, a job is planned again as it starts, and
an upload's format is found once."""

from __future__ import annotations

import io

import mrcfile
import numpy as np
import pytest

from helpers import write_mrc
from noa_core import operations
from noa_core.io import formats
from noa_server import execution
from noa_server.models import job_model, params_model, request_model
from noa_server.problems import ProblemError
from noa_server.sandbox import Sandbox
from noa_server.service import Service
from noa_server.settings import Settings


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    write_mrc(root / "a.mrc", np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5))
    write_mrc(root / "b.mrc", np.ones((2, 4, 5), np.float32))
    return root


def test_a_request_planned_and_run_at_once_walks_each_path_once(root, tmp_path, monkeypatch):
    """A request's paths are resolved as it is planned, and its files are opened by what that gave (beneath the
    root, no link followed), without walking their components again. The answer is the file's."""
    sandbox = Sandbox(root, None, tmp_path)
    walked = []
    follow = Sandbox._follow
    monkeypatch.setattr(Sandbox, "_follow", lambda self, pure: walked.append(pure.as_posix()) or follow(self, pure))
    request = request_model(operations.get("info")).model_validate({"path": "a.mrc"})
    described = execution.plan_and_run(request, sandbox, 1 << 30)
    assert walked == ["a.mrc"]
    with mrcfile.open(root / "a.mrc", header_only=True) as mrc:
        assert described["shape"] == [1, int(mrc.header.nz), int(mrc.header.ny), int(mrc.header.nx)]
    assert described["path"] == "a.mrc"


def test_a_job_opens_its_files_as_their_paths_resolve_when_it_starts(root, tmp_path):
    """A job is checked as it is submitted and planned again as it starts: a file replaced meanwhile by a link to
    another file under the root is read through the link, as a request sent then would be (opened by the path
    planned at submission, the link would be refused)."""
    service = Service(Settings(data_root=root, state_dir=tmp_path / "state", warmup=False))
    try:
        request = job_model(operations.get("info")).model_validate({"operation": "info", "path": "a.mrc"})
        work = service.job_work(request)
        (root / "a.mrc").unlink()
        (root / "a.mrc").symlink_to("b.mrc")
        assert work(execution.ignore_progress)["shape"] == [1, 2, 4, 5]
        (root / "a.mrc").unlink()
        (root / "a.mrc").symlink_to(tmp_path / "outside.mrc")
        write_mrc(tmp_path / "outside.mrc", np.zeros((1, 4, 5), np.float32))
        with pytest.raises(ProblemError) as refused:
            work(execution.ignore_progress)
        assert (refused.value.status, refused.value.detail) == (403, "'a.mrc' resolves outside the data root")
    finally:
        service.stop()


def test_an_upload_is_detected_once_and_its_output_keeps_its_format(tmp_path, monkeypatch):
    """An upload's format is found once: to refuse a movie or a particle file, and to name the output, which keeps
    the input's format. The output holds the input's values moved as asked (NumPy's transpose)."""
    data = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    write_mrc(tmp_path / "a.mrc", data)
    detected = []
    detect = formats.detect
    monkeypatch.setattr(formats, "detect", lambda path: detected.append(path.name) or detect(path))
    params = params_model(operations.get("permute"), uploads=True).model_validate({"axes": [0, 1, 3, 2]})
    upload = execution.Upload("a.mrc", io.BytesIO((tmp_path / "a.mrc").read_bytes()))
    result = execution.run_on_uploads(params, [upload], tmp_path, None, 1 << 30)
    assert detected == ["0-a.mrc"]
    assert (result.path.name, result.media_type) == ("a_permute.mrc", execution.MEDIA_TYPES["mrc"])
    (tmp_path / "out.mrc").write_bytes(result.content)
    np.testing.assert_array_equal(mrcfile.read(tmp_path / "out.mrc"), data.transpose(0, 2, 1))
