"""``noa particles`` as a user runs it: each subcommand's output and exit code, bad input as one line naming the
option, file or row with exit 2 and no output, problems found by ``check`` as exit 1; ``noa --help`` lists it."""

from __future__ import annotations

import json

import starfile

from tests.helpers import assert_user_error, noa
from tests.particles.tables import project, relion31


def test_noa_help_lists_particles_and_its_help_lists_the_subcommands():
    assert "particles" in noa("--help").stdout
    shown = noa("particles", "--help").stdout
    for sub in ("info", "select", "join", "split", "convert", "check"):
        assert sub in shown


def test_info_prints_counts_and_json(tmp_path):
    folder = project(tmp_path)
    src = relion31(folder / "in.star", rows=20)
    shown = noa("particles", "info", src, "--project-dir", folder)
    assert shown.returncode == 0 and "RELION 3.1, 20 rows" in shown.stdout and "stacks: 2, 0 missing" in shown.stdout
    found = json.loads(noa("particles", "info", src, "--json", cwd=tmp_path).stdout)
    assert found["rows"] == 20 and found["stacks"]["missing"] == ["Particles/Movies/mic0.mrcs",
                                                                  "Particles/Movies/mic1.mrcs"]


def test_select_writes_the_rows_chosen(tmp_path):
    src = relion31(tmp_path / "in.star", rows=30)
    result = noa("particles", "select", src, tmp_path / "out.star", "--where", "rlnClassNumber in (3, 5)",
                 "--rows", "0-19")
    frame = starfile.read(src)["particles"][:20]
    kept = frame[frame["rlnClassNumber"].isin([3, 5])]
    assert result.returncode == 0, result.stderr
    assert f"{len(kept)} of 30 rows" in result.stderr
    assert starfile.read(tmp_path / "out.star")["particles"]["rlnImageName"].tolist() == kept["rlnImageName"].tolist()


def test_bad_choices_are_one_line_naming_the_option(tmp_path):
    src = relion31(tmp_path / "in.star", rows=5)
    assert_user_error(noa("particles", "select", src, tmp_path / "o.star", "--where", "rlnClassNumbr == 1"),
                      "--where:", "no column rlnClassNumbr", "rlnClassNumber")
    assert_user_error(noa("particles", "select", src, tmp_path / "o.star", "--rows", "3-9"), "--rows:", "5 rows")
    assert_user_error(noa("particles", "split", src, "--parts", "9"), "--parts:", "5 rows")
    assert_user_error(noa("particles", "join", src, tmp_path / "o.star"), "IN... OUT")
    assert_user_error(noa("particles", "convert", src, tmp_path / "o.star"), "--layout:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.star"]


def test_split_join_and_convert_round_trip(tmp_path):
    src = relion31(tmp_path / "in.star", rows=12)
    assert noa("particles", "split", src, "--parts", "2").returncode == 0
    joined = noa("particles", "join", tmp_path / "in_split1.star", tmp_path / "in_split2.star", tmp_path / "j.star")
    assert joined.returncode == 0, joined.stderr
    assert (tmp_path / "j.star").read_bytes() == src.read_bytes()
    assert noa("particles", "convert", src, tmp_path / "p.cs").returncode == 0
    assert "12 rows, RELION 3.1" in noa("particles", "convert", tmp_path / "p.cs", tmp_path / "p.star").stderr


def test_check_exits_1_with_one_line_per_problem_and_0_without(tmp_path):
    folder = project(tmp_path)
    sound = noa("particles", "check", "particles.star", cwd=folder)
    assert sound.returncode == 0 and sound.stdout == ""
    (folder / "Particles" / "Movies" / "mic1.mrcs").unlink()
    found = noa("particles", "check", "particles.star", cwd=folder)
    assert found.returncode == 1 and found.stdout.splitlines() == [
        "particles.star: data_particles, row 6, rlnImageName: Particles/Movies/mic1.mrcs: no such file "
        "(6 row(s) name it)"]
