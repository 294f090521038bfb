"""Memory-mapped I/O turns a shrinking input and a full disk into SIGBUS, which kills a process without a
word and leaves its temporary file behind. noa reads tiles with pread and reserves its outputs before
writing, so both are errors (exit 2, one line) and nothing is left. Each case runs in a subprocess, so
that a regression shows as a signal instead of killing the test run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers import NOA, load, write_mrc


def test_an_input_truncated_after_it_was_mapped_is_an_error(tmp_path):
    src, pristine = tmp_path / "in.mrc", tmp_path / "pristine.mrc"
    write_mrc(pristine, np.arange(64 * 256 * 256, dtype=np.float32).reshape(64, 256, 256))  # 16 MiB
    code = textwrap.dedent(f"""
        import os, shutil
        from noa_core import io, operations
        from noa_core.errors import TruncatedFileError
        from noa_core.io.stream import batch_statistics
        from noa_core.run import local

        for axes in ((0, 1, 2, 3), (0, 2, 1, 3)):  # a plain copy, and a permutation crossing sections
            shutil.copy({str(pristine)!r}, {str(src)!r})
            plan = operations.get("permute").task(axes=axes).plan({str(src)!r})  # the input is mapped now
            os.truncate({str(src)!r}, 1024 + (8 << 20))  # half the data gone, as another program may do
            try:
                local.write_plan(plan, {str(tmp_path / 'out.mrc')!r})
            except TruncatedFileError as exc:
                print("refused:", exc)

        shutil.copy({str(pristine)!r}, {str(src)!r})  # what `noa stats` reads: tiles of the mapped input
        array, _ = io.read({str(src)!r})
        os.truncate({str(src)!r}, 1024 + (8 << 20))
        try:
            batch_statistics(array)
        except TruncatedFileError as exc:
            print("refused:", exc)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -7 would be SIGBUS
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all("in.mrc: data: the file changed size while being read" in x for x in lines), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mrc", "pristine.mrc"]  # no output, no temporary file


def _in_small_tmpfs(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    """Run ``command`` (sh) in a mount namespace where ``tmp_path/small`` is an 8 MiB tmpfs."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to mount a small tmpfs in a namespace")
    small = tmp_path / "small"
    small.mkdir()
    script = f"mount -t tmpfs -o size=8m tmpfs {small} || exit 99; {command}; echo rc=$?; ls -A {small}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    if "rc=" not in done.stdout and done.returncode in (1, 99):
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {done.stderr.strip()[:200]}")
    return done


def test_a_full_disk_is_found_before_writing_and_leaves_nothing(tmp_path):
    src = tmp_path / "in.mrc"
    data = write_mrc(src, np.ones((4, 1024, 1024), np.float32))  # 16 MiB: twice the disk
    done = _in_small_tmpfs(tmp_path, f"{NOA[0]} copy {src} {tmp_path / 'small' / 'out.mrc'}")
    listing = done.stdout.splitlines()
    assert listing[0] == "rc=2", (done.stdout, done.stderr)  # not 135 (128 + SIGBUS)
    assert listing[1:] == []  # nothing left on the small disk
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "out.mrc: no space left on device" in errors[0], done.stderr
    # the same input fits elsewhere: the refusal was about space, not about the file
    out = tmp_path / "fits.mrc"
    assert subprocess.run([*NOA, "copy", str(src), str(out)], capture_output=True, timeout=120).returncode == 0
    np.testing.assert_array_equal(load(out), data)

