"""The runnable examples in examples/, run as a user would and checked against NumPy and mrcfile.

- gain_pipeline.sh: the gain-corrected movie equals NumPy's product, the F copy is column-major on
  disk and reads back equal, and the printed statistics and `noa info` agree with the data;
- walkthrough.py: runs to its end (its asserts are the design guide's layout examples);
- slurm_apptainer.sh: run with the local `noa` (NOA=noa) as every task of an array, each task
  processes exactly its share of the files and the outputs are right.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import mrcfile
import numpy as np
import pytest

from helpers import REPO
from noa_core import io

EXAMPLES = REPO / "examples"
BIN = Path(sys.executable).parent  # where this environment's `noa` is


def run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    proc = subprocess.run(args, check=False, capture_output=True, text=True, env=environ, cwd=cwd, timeout=300)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def test_gain_pipeline(tmp_path: Path) -> None:
    proc = run(["bash", str(EXAMPLES / "gain_pipeline.sh"), str(tmp_path)])

    movie = mrcfile.read(tmp_path / "movie.mrcs")
    gain = mrcfile.read(tmp_path / "gain.mrc")
    assert movie.shape == (8, 64, 64) and movie.dtype == np.uint16 and gain.shape == (64, 64)
    want = movie.astype(np.float32) * gain[None]  # the gain broadcast over every frame

    with mrcfile.open(tmp_path / "corrected.mrcs") as m:
        assert m.header.ispg == 0 and m.header.mode == 2  # still an image stack, now float32
        np.testing.assert_array_equal(m.data, want)

    # The F copy: each section stored column-major and recorded (mapc=2, mapr=1); a reader that
    # ignores the mapping (mrcfile) sees every frame transposed, noa reads it back as it was.
    with mrcfile.open(tmp_path / "corrected_F.mrcs") as m:
        assert (int(m.header.mapc), int(m.header.mapr), int(m.header.maps)) == (2, 1, 3)
        np.testing.assert_array_equal(m.data, want.transpose(0, 2, 1))
    back, _ = io.read(tmp_path / "corrected_F.mrcs")
    assert back.order == "F" and back.shape == (8, 1, 64, 64) and back.strides == (4096, 4096, 1, 64)
    np.testing.assert_array_equal(np.asarray(back)[:, 0], want)

    # What the script printed: per-frame statistics, and `noa info` of the F copy.
    rows = re.findall(r"^\s+(\d)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$", proc.stdout, re.MULTILINE)
    assert [int(r[0]) for r in rows] == list(range(8))
    got = np.array([[float(x) for x in r[1:]] for r in rows])
    frames = want.reshape(8, -1).astype(np.float64)
    expected = np.stack([frames.min(1), frames.max(1), frames.mean(1), frames.std(1)], axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    info_f = proc.stdout.split("== 3.")[1]
    assert re.search(r"^order\s+F$", info_f, re.MULTILINE)
    assert re.search(r"^strides\s+4096, 4096, 1, 64", info_f, re.MULTILINE)
    assert re.search(r"^shape \(BDHW\)\s+8, 1, 64, 64$", info_f, re.MULTILINE)


def test_walkthrough() -> None:
    proc = run([sys.executable, str(EXAMPLES / "walkthrough.py")])
    assert proc.stdout.rstrip().endswith("walkthrough: all checks passed")
    assert "(24, 12, 1, 3)" in proc.stdout and "(True, True, False, True)" in proc.stdout


@pytest.fixture()
def folder(tmp_path: Path) -> tuple[Path, list[str]]:
    """Seven small volumes (distinct data) and one file the pattern must skip."""
    src = tmp_path / "in"
    src.mkdir()
    rng = np.random.default_rng(7)
    names = [f"vol_{i:02d}.mrc" for i in range(7)]
    for name in names:
        with mrcfile.new(src / name) as m:
            m.set_data(rng.standard_normal((3, 4, 5)).astype(np.float32))
            m.set_volume()
    (src / "notes.txt").write_text("not an image\n")
    return src, names


def test_slurm_array_splits_files(folder: tuple[Path, list[str]], tmp_path: Path) -> None:
    src, names = folder
    # An array declared as --array=1-3: ids 1, 2, 3 (min 1); each task writes to its own folder
    # here so that what each one processed can be told apart.
    shares = {}
    for task in (1, 2, 3):
        out = tmp_path / f"out{task}"
        env = {
            "NOA": "noa",
            "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_ARRAY_TASK_MIN": "1",
            "SLURM_ARRAY_TASK_COUNT": "3",
            "SLURM_CPUS_PER_TASK": "1",
            "TMPDIR": str(tmp_path),
        }
        proc = run(["bash", str(EXAMPLES / "slurm_apptainer.sh"), str(src), str(out)], env=env)
        assert proc.stdout.startswith(f"task {task} ({task} of 3): ")
        shares[task] = sorted(p.name for p in out.iterdir())
    assert shares == {1: names[0::3], 2: names[1::3], 3: names[2::3]}
    for task, share in shares.items():
        for name in share:
            got = mrcfile.read(tmp_path / f"out{task}" / name)
            np.testing.assert_array_equal(got, mrcfile.read(src / name).transpose(0, 2, 1))
    # The cache went to node-local scratch (TMPDIR), as on a cluster node.
    assert (tmp_path / f"noa-numba-{os.getuid()}").is_dir()


def test_slurm_other_command_and_step(folder: tuple[Path, list[str]], tmp_path: Path) -> None:
    src, names = folder
    # --array=0-6:3 gives ids 0, 3, 6 (step 3, count 3); id 3 is the second task.
    env = {
        "NOA": "noa",
        "SLURM_ARRAY_TASK_ID": "3",
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_STEP": "3",
        "SLURM_ARRAY_TASK_COUNT": "3",
        "TMPDIR": str(tmp_path),
    }
    out = tmp_path / "out"
    run(["bash", str(EXAMPLES / "slurm_apptainer.sh"), str(src), str(out), "copy", "--order", "F"], env=env)
    assert sorted(p.name for p in out.iterdir()) == names[1::3]
    for name in names[1::3]:
        back, _ = io.read(out / name)
        assert back.order == "F"
        np.testing.assert_array_equal(np.asarray(back)[0], mrcfile.read(src / name))


def test_slurm_refuses_bad_usage(tmp_path: Path) -> None:
    script = str(EXAMPLES / "slurm_apptainer.sh")
    proc = subprocess.run(["bash", script, str(tmp_path)], check=False, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("slurm_apptainer.sh: error: usage")
    proc = subprocess.run(
        ["bash", script, str(tmp_path), str(tmp_path / "o"), "ewise"], check=False, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "COMMAND must be" in proc.stderr
    # No NOA override and no apptainer: a clear error, not a half-run job.
    env = {k: v for k, v in os.environ.items() if k != "NOA"} | {"APPTAINER": "", "PATH": "/usr/bin:/bin"}
    (tmp_path / "a.mrc").write_bytes((EXAMPLES / "data" / "emd_3197.map").read_bytes())
    proc = subprocess.run(
        ["bash", script, str(tmp_path), str(tmp_path / "o")], check=False, capture_output=True, text=True, env=env
    )
    if proc.returncode == 2 and "neither apptainer nor singularity" in proc.stderr:
        return
    assert proc.returncode == 2 and "no image" in proc.stderr  # apptainer is installed here
