"""The curl example of docs/service.md ("From a shell"), run as the page shows it against a live server.

The lines between ``<!-- curl -->`` and ``<!-- /curl -->`` run unchanged in bash, with ``$NOA_URL`` and
``$NOA_API_KEY`` set as the page says, in a folder holding the example map (the server's data root holds it
too); what they print and download is then checked against mrcfile, tifffile and NumPy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from helpers import EXAMPLE_MAP, REPO, load, start_server, stop_server

PAGE = REPO / "docs" / "service.md"
KEY = "curl-example-key"
BLOCK = re.compile(r"<!-- curl -->\s*```sh\n(.*?)```\s*<!-- /curl -->", re.S)


def curl_lines() -> str:
    """The shell lines between the page's curl markers."""
    found = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert len(found) == 1, f"{PAGE}: expected one ```sh block between <!-- curl --> and <!-- /curl -->"
    return found[0]


def json_values(text: str) -> list:
    """The JSON documents printed one after the other (curl adds no newline between bodies)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def test_the_page_shows_every_way_with_curl():
    lines = curl_lines()
    assert "/v1/upload/" in lines and "/v1/paths/" in lines and "/v1/jobs" in lines and "/v1/files/" in lines
    assert lines.count("curl ") >= 3 and "$NOA_URL" in lines


@pytest.mark.skipif(shutil.which("curl") is None, reason="the curl command is not installed (apt-get install curl)")
def test_the_curl_example_of_docs_service_md(tmp_path):
    root, here, scratch = tmp_path / "root", tmp_path / "here", tmp_path / "tmp"
    for folder in (root, here, scratch):
        folder.mkdir()
        if folder is not scratch:
            shutil.copy(EXAMPLE_MAP, folder / "emd_3197.map")
    env = {"NOA_API_KEY": KEY, "NOA_TMP_DIR": str(scratch)}
    proc, url = start_server(root, tmp_path / "server.log", env)
    try:
        result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + curl_lines()], cwd=here, capture_output=True,
                                text=True, timeout=120, env=dict(os.environ, NOA_URL=url, NOA_API_KEY=KEY))
    finally:
        stop_server(proc)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert result.stderr == ""
    expected = load(EXAMPLE_MAP)

    # 1. the upload: height and width swapped, saved under the server's name
    permuted = load(here / "emd_3197_permute.mrc")
    assert permuted.dtype == expected.dtype
    np.testing.assert_array_equal(permuted, np.swapaxes(expected, -1, -2))

    # 2. the path request's description, then 3. the job's result, as printed
    info, job_result = json_values(result.stdout)
    assert info["path"] == "emd_3197.map" and info["dtype"] == "float32"
    assert info["shape"] == [1, *expected.shape]
    assert info["statistics"]["min"] == pytest.approx(float(expected.min()))
    assert info["statistics"]["max"] == pytest.approx(float(expected.max()))
    assert info["statistics"]["mean"] == pytest.approx(float(expected.mean(dtype=np.float64)), rel=1e-6)
    assert job_result["output"] == "emd_3197.tif"

    # 3. the job wrote the TIFF under the data root, and the download is that file
    assert (here / "emd_3197.tif").read_bytes() == (root / "emd_3197.tif").read_bytes()
    copied = load(here / "emd_3197.tif")
    assert copied.dtype == expected.dtype
    np.testing.assert_array_equal(copied, expected)
