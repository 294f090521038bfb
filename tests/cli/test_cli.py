"""The installed `noa` command, run as a subprocess on real files, checked with mrcfile/tifffile/NumPy."""

import json
import logging
import re
import shutil
from pathlib import Path

import mrcfile
import numpy as np
import pytest
import tifffile

from helpers import EXAMPLE_MAP, REPO, SHARED, assert_user_error, load, mrc_data, noa, write_mrc


@pytest.mark.parametrize("args, message", [(["permute"], "Missing argument")])
# an unknown command or option is one line with the closest names: test_a_mistyped_command_gets_did_you_mean,
# test_option_mistakes_are_one_line_with_the_closest_options
def test_parser_errors_are_usage_errors(args, message):
    """A missing argument: exit 2, click's usage line and error, no traceback, nothing internal."""
    result = noa(*args)
    assert result.returncode == 2, result.stderr
    assert f"Error: {message}" in result.stderr and "Usage: noa" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (["serve", "--workers", "0"], "Invalid value for '--workers'"),
    (["serve", "--port", "70000"], "Invalid value for '--port'"),
])
def test_bad_values_the_parser_refuses_are_one_line(args, message):
    """A value given but refused by the parser: exit 2 and one line, as every other bad value."""
    assert_user_error(noa(*args), message)


@pytest.fixture()
def volume():
    with mrcfile.open(EXAMPLE_MAP, permissive=True) as f:
        return np.array(f.data), f.voxel_size.copy()


def test_version_and_help():
    version = noa("--version")
    assert version.returncode == 0 and version.stdout.startswith("noa ")
    helped = noa("--help")
    assert helped.returncode == 0
    for command in ("info", "permute", "broadcast", "copy", "ewise", "stats", "warmup"):
        assert command in helped.stdout
    for command in ("info", "permute", "broadcast", "copy", "ewise", "stats"):
        sub = noa(command, "--help")
        assert sub.returncode == 0 and "Example" in sub.stdout, command


def test_info_json_matches_mrcfile():
    result = noa("info", EXAMPLE_MAP, "--json")
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    with mrcfile.open(EXAMPLE_MAP, permissive=True) as f:
        nz, ny, nx = f.data.shape
        voxel = f.voxel_size
    assert described["shape"] == [1, nz, ny, nx]
    assert described["kind"] == "volume" and described["format"] == "mrc" and described["order"] == "C"
    assert described["dtype"] == "float32" and described["mode"] == 2
    assert np.allclose(described["pixel_size"], [voxel.z, voxel.y, voxel.x])
    text = noa("info", EXAMPLE_MAP)
    assert text.returncode == 0 and "volume" in text.stdout and "(1, 20, 20, 20)" not in text.stdout
    assert "1, 20, 20, 20" in text.stdout


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data (real files from other software) is absent")
def test_info_on_every_shared_file():
    files = sorted(p for p in SHARED.iterdir() if p.suffix != ".md")
    result = noa("info", *files, "--json")
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert len(described) == len(files)
    by_name = {Path(d["path"]).name: d for d in described}
    assert by_name["zyx_uint16.tiff"]["shape"] == [1, 10, 8, 5]
    assert by_name["emd_3197.map.gz"]["shape"] == [1, 20, 20, 20]


def test_permute_matches_numpy_and_moves_the_header(tmp_path):
    volume = np.random.default_rng(2).normal(size=(6, 7, 8)).astype(np.float32)  # Z, Y, X
    src = tmp_path / "aniso.mrc"
    with mrcfile.new(src, volume) as f:
        f.voxel_size = (1.5, 2.5, 3.5)  # x, y, z
        f.header.origin = (10.0, 20.0, 30.0)
    out = tmp_path / "p.mrc"
    result = noa("permute", src, out, "--axes", "0,3,2,1")  # swap depth (Z) and width (X)
    assert result.returncode == 0, result.stderr
    got, header, voxel = mrc_data(out)
    assert np.array_equal(got, volume.transpose(2, 1, 0))
    assert (float(voxel.x), float(voxel.y), float(voxel.z)) == pytest.approx((3.5, 2.5, 1.5))
    origin = header.origin
    assert (float(origin.x), float(origin.y), float(origin.z)) == pytest.approx((30.0, 20.0, 10.0))
    assert any(b"noa permute" in bytes(label) for label in header.label[: int(header.nlabl)])
    assert mrcfile.validate(str(out))


def test_broadcast_and_ewise_gain_correction(tmp_path):
    rng = np.random.default_rng(0)
    movie = rng.normal(size=(6, 16, 12)).astype(np.float32)
    gain = rng.uniform(0.5, 1.5, size=(16, 12)).astype(np.float32)
    write_mrc(tmp_path / "movie.mrcs", movie, stack=True)  # as motion-correction software writes movies
    mrcfile.new(tmp_path / "gain.mrc", gain).close()
    result = noa("ewise", "a * b", tmp_path / "movie.mrcs", tmp_path / "gain.mrc", "-o", tmp_path / "corrected.mrc")
    assert result.returncode == 0, result.stderr
    corrected, header, _ = mrc_data(tmp_path / "corrected.mrc")
    assert np.allclose(corrected, movie * gain)
    assert header.ispg == 0  # still an image stack
    assert json.loads(noa("info", tmp_path / "corrected.mrc", "--json").stdout)["shape"] == [6, 1, 16, 12]
    result = noa("broadcast", tmp_path / "gain.mrc", tmp_path / "gains.mrcs", "--shape", "6,1,16,12")
    assert result.returncode == 0, result.stderr
    gains, header, _ = mrc_data(tmp_path / "gains.mrcs")
    assert np.array_equal(gains, np.broadcast_to(gain, (6, 16, 12))) and header.ispg == 0


def test_copy_orders_types_and_formats(tmp_path, volume):
    data, _ = volume
    f_mrc = tmp_path / "f.mrc"
    assert noa("copy", EXAMPLE_MAP, f_mrc, "--order", "F").returncode == 0
    with mrcfile.open(f_mrc, permissive=True) as f:
        assert (int(f.header.mapc), int(f.header.mapr), int(f.header.maps)) == (2, 1, 3)
        assert np.array_equal(np.asarray(f.data), data.transpose(0, 2, 1))  # raw bytes are column-major
    described = json.loads(noa("info", f_mrc, "--json").stdout)
    assert described["order"] == "F" and described["shape"] == [1, 20, 20, 20]
    back = tmp_path / "back.mrc"
    assert noa("copy", f_mrc, back).returncode == 0
    assert np.array_equal(mrc_data(back)[0], data)

    tif = tmp_path / "v.tif"
    assert noa("copy", EXAMPLE_MAP, tif).returncode == 0
    assert np.array_equal(tifffile.imread(tif), data)

    clamped = tmp_path / "u8.mrc"
    assert_user_error(noa("copy", EXAMPLE_MAP, clamped, "--dtype", "uint8"), "do not fit uint8")  # negatives
    assert not clamped.exists()
    assert noa("copy", EXAMPLE_MAP, clamped, "--dtype", "uint8", "--clamp").returncode == 0
    assert np.array_equal(mrc_data(clamped)[0], np.clip(data, 0, 255).astype(np.uint8))


def test_stats_matches_numpy(tmp_path):
    stack = np.random.default_rng(1).normal(size=(3, 8, 9)).astype(np.float32)
    write_mrc(tmp_path / "s.mrcs", stack, stack=True)
    result = noa("stats", tmp_path / "s.mrcs", "--per-batch", "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["mean"] == pytest.approx(float(stack.mean()), rel=1e-5)
    assert got["std"] == pytest.approx(float(stack.std()), rel=1e-5)
    assert len(got["per_batch"]) == 3
    for b, row in enumerate(got["per_batch"]):
        assert row["min"] == pytest.approx(float(stack[b].min()))
        assert row["max"] == pytest.approx(float(stack[b].max()))


def test_batch_continues_past_a_bad_file(tmp_path):
    good = [tmp_path / f"g{i}.mrc" for i in range(3)]
    for i, p in enumerate(good):
        mrcfile.new(p, np.full((4, 5), i, np.float32)).close()
    bad = tmp_path / "bad.mrc"
    bad.write_bytes(b"not an mrc file at all" * 10)
    out = tmp_path / "out"
    out.mkdir()
    result = noa("permute", good[0], bad, good[1], good[2], "--axes", "0,1,3,2", "--out-dir", out, "-q")
    assert result.returncode == 2
    assert "bad.mrc" in result.stderr and "1 of 4 inputs failed" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["g0.mrc", "g1.mrc", "g2.mrc"]
    for i in range(3):
        assert np.array_equal(mrc_data(out / f"g{i}.mrc")[0], np.full((5, 4), i, np.float32))


# -- bad input: one line, exit 2, no output --------------------------------------------------------


def test_missing_input(tmp_path):
    result = noa("permute", tmp_path / "nope.mrc", tmp_path / "out.mrc", "--axes", "0,1,3,2")
    assert_user_error(result, "nope.mrc")
    assert not (tmp_path / "out.mrc").exists()


@pytest.mark.parametrize("axes", ["0,1,2", "0,1,1,3", "0,1,2,4", "a,b,c,d"])
def test_bad_axes(tmp_path, axes):
    result = noa("permute", EXAMPLE_MAP, tmp_path / "out.mrc", "--axes", axes)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not (tmp_path / "out.mrc").exists()


def test_bad_broadcast_names_both_shapes(tmp_path):
    result = noa("broadcast", EXAMPLE_MAP, tmp_path / "out.mrc", "--shape", "2,20,20,21")
    assert_user_error(result, "(1, 20, 20, 20)", "(2, 20, 20, 21)")
    assert not (tmp_path / "out.mrc").exists()


def test_existing_output_is_kept_without_force(tmp_path):
    out = tmp_path / "out.mrc"
    out.write_bytes(b"precious")
    result = noa("copy", EXAMPLE_MAP, out)
    assert_user_error(result, "exists")
    assert out.read_bytes() == b"precious"
    assert noa("copy", EXAMPLE_MAP, out, "--force").returncode == 0
    assert out.read_bytes() != b"precious"


def test_corrupt_and_truncated_inputs_leave_nothing(tmp_path):
    truncated = tmp_path / "trunc.mrc"
    truncated.write_bytes(EXAMPLE_MAP.read_bytes()[:2000])
    result = noa("copy", truncated, tmp_path / "out.mrc")
    assert_user_error(result, "trunc.mrc")
    empty = tmp_path / "empty.tif"
    empty.write_bytes(b"")
    assert_user_error(noa("info", empty), "empty.tif")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.tif", "trunc.mrc"]


def test_bad_expressions(tmp_path):
    assert_user_error(noa("ewise", "a * c", EXAMPLE_MAP, "-o", tmp_path / "o.mrc"), "'c'")
    assert_user_error(noa("ewise", "__import__('os')", EXAMPLE_MAP, "-o", tmp_path / "o.mrc"), "__import__")
    assert not (tmp_path / "o.mrc").exists()


def test_input_is_never_modified(tmp_path):
    src = tmp_path / "in.mrc"
    shutil.copy(EXAMPLE_MAP, src)
    before = src.read_bytes()
    for args in (["permute", src, tmp_path / "a.mrc", "--axes", "0,1,3,2"],
                 ["copy", src, tmp_path / "b.mrc", "--order", "F"],
                 ["ewise", "a + 1", src, "-o", tmp_path / "c.mrc"], ["stats", src], ["info", src]):
        assert noa(*args).returncode == 0
    assert src.read_bytes() == before


def test_output_may_not_be_the_input_even_with_force(tmp_path):
    src = tmp_path / "in.mrc"
    shutil.copy(EXAMPLE_MAP, src)
    before = src.read_bytes()
    assert_user_error(noa("permute", src, src, "--axes", "0,1,3,2", "--force"), "is the input")
    assert_user_error(noa("ewise", "a * 2", src, "-o", src, "--force"), "is the input")
    assert src.read_bytes() == before


def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    from noa_core.array.devices import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    assert_user_error(noa("copy", EXAMPLE_MAP, tmp_path / "o.mrc", "--device", "cuda"), "CUDA")
    assert not (tmp_path / "o.mrc").exists()


def _broken(path, options):
    raise RuntimeError("kaboom")


def test_internal_errors_exit_1_with_a_hint(capsys):
    from noa_cli import main
    from noa_core import operations

    operations.register(operations.Reports(name="broken", summary="Fails.", examples=("noa broken x.mrc",),
                                           report=_broken, text=str))
    logger = logging.getLogger("noa")  # --debug gives it a handler on this test's stderr, closed after it
    handlers, level = list(logger.handlers), logger.level
    try:
        with pytest.raises(SystemExit) as exit_info:
            main.run(["broken", str(EXAMPLE_MAP)])
        assert exit_info.value.code == 1
        err = capsys.readouterr().err
        assert "kaboom" in err and "--debug" in err and "Traceback" not in err
        with pytest.raises(SystemExit) as exit_info:
            main.run(["--debug", "broken", str(EXAMPLE_MAP)])
        assert exit_info.value.code == 1 and "Traceback" in capsys.readouterr().err
    finally:
        operations.unregister("broken")
        logger.handlers[:] = handlers
        logger.setLevel(level)


# -- issue 20, items 7-9: hostile expressions -----------------------------------------------------

HOSTILE_INT8 = np.array([[-128, -1, 0, 1], [2, 5, 100, 127]], dtype=np.int8)


@pytest.mark.parametrize("expression, message", [
    ("a + 9**9**9", "too large a number"), ("a + 2**100000", "too large a number"),
    ("a * 1000", "'1000' is out of range for int8"), ("1 // 0 + a", "'1 // 0' divides by zero"),
    ("a ** -1", "negative power"), ("+".join(["a"] * 1000), "nested more than 100 levels"),
])
def test_ewise_refuses_hostile_expressions_in_one_line_at_once(tmp_path, expression, message):
    write_mrc(tmp_path / "a.mrc", HOSTILE_INT8)
    result = noa("ewise", expression, tmp_path / "a.mrc", "-o", tmp_path / "out.mrc")
    assert_user_error(result, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mrc"]  # no output, no temporary


@pytest.mark.parametrize("expression, reference", [
    ("(a * 100) // 7", lambda a: (a * 100) // 7),  # int8 intermediates, as NumPy computes them
    ("a + 1e999", lambda a: a + 1e999),
    ("not not a", lambda a: np.logical_not(np.logical_not(a)).astype(np.uint8)),
    ("0 < a < 3 <= 3", lambda a: ((a > 0) & (a < 3)).astype(np.uint8)),
])
def test_ewise_computes_what_numpy_computes(tmp_path, expression, reference):
    write_mrc(tmp_path / "a.mrc", HOSTILE_INT8)
    result = noa("ewise", expression, tmp_path / "a.mrc", "-o", tmp_path / "out.tif")  # TIFF keeps every type
    assert result.returncode == 0, result.stderr
    with np.errstate(all="ignore"):
        expected = reference(HOSTILE_INT8)
    got = load(tmp_path / "out.tif").reshape(expected.shape)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_bad_numbers_are_one_line_naming_the_option(tmp_path):
    """Issue 32 item 16 (and issue 28 item 4): click's range checks printed a four-line usage block, and
    took nan for 'less than or equal to 64'; a pixel size that implies an absurd factor crashed (exit 1)."""
    src = tmp_path / "s.mrcs"
    write_mrc(src, np.zeros((3, 8, 10), np.float32), stack=True, voxel_size=1.5)
    for args, words in ((["rescale", "--factor", "nan"], ["--factor", "nan is not a finite number"]),
                        (["rescale", "--factor", "100"], ["--factor", "100 must be between"]),
                        (["average", "--group", "0"], ["--group", "0 must be"]),
                        (["bin", "--factor", "abc"], ["--factor", "valid integer"]),
                        (["rescale", "--pixel-size", "1", "--angpix", "0"],
                         ["--angpix", "0 must be between 1e-06 and 1e+09"]),
                        (["rescale", "--pixel-size", "1e-300"], ["--pixel-size", "must be between 1e-06 and 1e+09"]),
                        (["rescale", "--pixel-size", "1e-5"], ["--pixel-size", "at most 64"])):
        result = noa(args[0], src, tmp_path / "out.mrcs", *args[1:])
        assert_user_error(result, *words)
        assert len(result.stderr) < 200, result.stderr  # no 300-digit sizes
        assert not (tmp_path / "out.mrcs").exists()


def test_editing_several_files_reports_each_and_goes_on_past_a_bad_one(tmp_path):
    """Issue 32 item 16: a failing file in `noa header a.mrc b.tif` hid that a.mrc had been changed."""
    import tifffile

    write_mrc(tmp_path / "a.mrc", np.zeros((2, 3, 4), np.float32), voxel_size=1.5)
    tifffile.imwrite(tmp_path / "b.tif", np.zeros((3, 4), np.uint16))
    write_mrc(tmp_path / "c.mrc", np.zeros((2, 3, 4), np.float32), voxel_size=1.5)
    result = noa("header", tmp_path / "a.mrc", tmp_path / "b.tif", tmp_path / "c.mrc", "--pixel-size", "2")
    assert result.returncode == 2
    assert f"{tmp_path / 'a.mrc'}: changed" in result.stdout and f"{tmp_path / 'c.mrc'}: changed" in result.stdout
    assert "b.tif: only MRC headers" in result.stderr and "1 of 3 files failed" in result.stderr
    for name in ("a.mrc", "c.mrc"):
        _, _, voxel = mrc_data(tmp_path / name)
        assert float(voxel.x) == pytest.approx(2.0)


def test_out_dir_is_created_when_missing_for_every_writing_command(tmp_path):
    """Issue 28 item 3: a batch into a missing --out-dir failed with one identical error per input."""
    for name in ("a.mrc", "b.mrc"):
        write_mrc(tmp_path / name, np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    result = noa("permute", tmp_path / "a.mrc", tmp_path / "b.mrc", "--out-dir", tmp_path / "new", "--axes", "0,1,3,2")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["a.mrc", "b.mrc"]
    np.testing.assert_array_equal(load(tmp_path / "new" / "a.mrc"), load(tmp_path / "a.mrc").transpose(0, 2, 1))
    assert noa("copy", tmp_path / "a.mrc", "--out-dir", tmp_path / "no" / "such").returncode == 0  # as mkdir -p
    assert (tmp_path / "no" / "such" / "a.mrc").exists()
    assert_user_error(noa("copy", tmp_path / "a.mrc", "--out-dir", tmp_path / "a.mrc"), "names a file")
    assert_user_error(noa("copy", tmp_path / "a.mrc", "--out-dir", tmp_path / "a.mrc" / "x"), "is a file")
    refused = noa("permute", tmp_path / "a.mrc", "--out-dir", tmp_path / "never", "--axes", "0,1,2")
    assert refused.returncode == 2 and not (tmp_path / "never").exists()  # a refused call makes no folder


def test_results_beyond_float32_are_refused_not_written_as_inf(tmp_path):
    """Issue 32 items 2, 6 and 16: sums and Fourier transforms of values near float32's largest overflowed to
    inf or NaN, written with Python RuntimeWarnings on stderr. Now one line naming the cause, nothing written."""
    write_mrc(tmp_path / "big.mrcs", np.full((4, 8, 10), 3e38, np.float32), stack=True, voxel_size=1.0)
    for args, words in ((["average", "--group", "2", "--sum"], ["sums exceed what float32 holds", "without --sum"]),
                        (["filter", "--lowpass", "4"], ["big.mrcs", "too large for a float32 Fourier transform"]),
                        (["rescale", "--factor", "2"], ["big.mrcs", "too large for a float32 Fourier transform"])):
        result = noa(args[0], tmp_path / "big.mrcs", tmp_path / "out.mrcs", *args[1:])
        assert_user_error(result, *words)  # one line: no RuntimeWarning either
        assert sorted(p.name for p in tmp_path.iterdir()) == ["big.mrcs"]
    ok = noa("average", tmp_path / "big.mrcs", tmp_path / "out.mrcs", "--group", "2")  # the means fit
    assert ok.returncode == 0 and "Warning" not in ok.stderr, ok.stderr
    np.testing.assert_array_equal(load(tmp_path / "out.mrcs"), np.full((2, 8, 10), 3e38, np.float32))


def test_serve_says_where_it_listens_and_its_limits_defaults(tmp_path):
    """Issue 28 item 7: `noa serve` printed no URL; --max-body-bytes and --max-voxels showed no default."""
    from helpers import start_server
    from noa_server.settings import Settings

    help_text = " ".join(noa("serve", "--help").stdout.split())
    defaults = Settings()
    assert f"default {defaults.max_body_bytes}" in help_text and f"default {defaults.max_voxels}" in help_text
    (tmp_path / "root").mkdir()
    proc, url = start_server(tmp_path / "root", tmp_path / "server.log")
    try:
        logged = (tmp_path / "server.log").read_text()
        assert f"noa serve: {url} (API docs at /docs; data root {tmp_path / 'root'}" in logged
    finally:
        proc.terminate()
        proc.wait(30)


def test_join_help_speaks_of_join_and_ewise_help_of_named_inputs():
    """`noa join --help` once showed ewise's words (inputs named a, b, c for an expression)."""
    join = noa("join", "--help")
    ewise = noa("ewise", "--help")
    assert join.returncode == ewise.returncode == 0
    assert "named a, b, c" not in join.stdout and "Inputs b, c" not in join.stdout
    assert "Input files, in order" in join.stdout
    assert "named a, b, c" in ewise.stdout and "Inputs b, c" in ewise.stdout


def test_an_expression_may_begin_with_a_minus(tmp_path):
    """`noa ewise "-a" ...` is an expression, not an unknown option -a; a mistyped long option still is one."""
    data = write_mrc(tmp_path / "in.mrc", np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5)
    result = noa("ewise", "-a * 2", tmp_path / "in.mrc", "-o", tmp_path / "out.mrc")
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(load(tmp_path / "out.mrc"), -data * 2)
    assert noa("ewise", "--outptu", "x.mrc", "a", tmp_path / "in.mrc").returncode == 2


@pytest.mark.parametrize("typed, meant", [("bni", "bin"), ("normalise", "normalize"), ("sectoins", "sections"),
                                          ("powerspecturm", "powerspectrum")])
def test_a_mistyped_command_gets_did_you_mean(typed, meant):
    result = noa(typed, "in.mrc", "out.mrc")
    assert_user_error(result, f"no command {typed!r}", f"did you mean {meant}")
    assert "Usage" not in result.stderr


def test_an_unknown_command_says_where_the_commands_are():
    assert_user_error(noa("zzzz"), "no command 'zzzz'", "noa --help")


def test_option_mistakes_are_one_line_with_the_closest_options(tmp_path):
    """Issue 38 item 14: Typer's 4-line usage block for an unknown option, click's own "Error:" for a value given
    to a switch: one `noa: error:` line each, as for an unknown command."""
    write_mrc(tmp_path / "a.mrc", np.zeros((2, 3, 4), np.float32))
    for args, words in ((["--forse"], ["no option --forse for noa copy; did you mean --force"]),
                        (["--eer-grup", "3"], ["no option --eer-grup", "--eer-group"]),
                        (["--zzzz"], ["no option --zzzz", "noa copy --help"]),
                        (["--force=1"], ["--force takes no value"])):
        result = noa("copy", tmp_path / "a.mrc", tmp_path / "b.mrc", *args)
        assert_user_error(result, *words)
        assert result.stderr.startswith("noa: error: ") and "Usage" not in result.stderr
        assert not (tmp_path / "b.mrc").exists()


def test_short_help_of_a_command_taking_text_first():
    """Issue 38 item 14: `noa ewise -h` read -h as the expression."""
    result = noa("ewise", "-h")
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout and "EXPRESSION" in result.stdout


@pytest.mark.parametrize("command", ["info", "stats"])
def test_reports_over_many_files_report_every_file(tmp_path, command):
    """Issue 40 item 2: `noa info good bad good2` printed only the error: every file is reported, a bad one in
    one line (in --json an entry with its error), and exit 2 says how many failed."""
    import json

    write_mrc(tmp_path / "a.mrc", np.ones((2, 3, 4), np.float32))
    (tmp_path / "half.mrc").write_bytes(b"\0" * 100)  # a half-copied file
    write_mrc(tmp_path / "c.mrc", np.full((2, 3, 4), 3, np.float32))
    files = [tmp_path / "a.mrc", tmp_path / "half.mrc", tmp_path / "c.mrc"]
    result = noa(command, *files)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 2 and "half.mrc" in errors[0] and errors[1] == "noa: error: 1 of 3 inputs failed", errors
    assert "a.mrc" in result.stdout and "c.mrc" in result.stdout
    result = noa(command, *files, "--json")
    assert result.returncode == 2
    entries = json.loads(result.stdout)
    assert [e.get("path", "").endswith(n) for e, n in zip(entries, ["a.mrc", "half.mrc", "c.mrc"])] == [True] * 3
    assert "error" in entries[1] and "error" not in entries[0] and "error" not in entries[2]
    if command == "stats":
        assert entries[0]["mean"] == 1 and entries[2]["mean"] == 3


@pytest.mark.parametrize("command", [["bin", "--factor", "2"], ["split"]])
def test_out_dir_is_made_with_its_parents_and_removed_when_the_run_fails(tmp_path, command):
    """Issue 40 item 11: `--out-dir new/deeper` refused a missing parent; a failed run left the folder it made."""
    write_mrc(tmp_path / "a.mrcs", np.ones((2, 4, 4), np.float32), stack=True)
    (tmp_path / "bad.mrc").write_bytes(b"\0" * 10)
    result = noa(command[0], tmp_path / "a.mrcs", "--out-dir", tmp_path / "new" / "deeper", *command[1:])
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "new" / "deeper").iterdir())
    result = noa(command[0], tmp_path / "bad.mrc", tmp_path / "bad.mrc", "--out-dir", tmp_path / "x" / "y",
                 *command[1:])
    assert result.returncode == 2
    assert not (tmp_path / "x").exists()


def test_the_cli_names_options_as_it_spells_them(tmp_path):
    """Issue 40 item 1: `noa bin` twice said "pass overwrite=True to replace it", `noa scale --dtype uint8` noted
    "uint8_mode=imod" and `noa info` of several series "pass series=N": each names the option as the CLI spells it
    (the library names parameters, errors.param; the CLI spells them)."""
    write_mrc(tmp_path / "map.mrc", np.random.default_rng(0).normal(size=(4, 6, 8)).astype(np.float32))
    assert noa("bin", tmp_path / "map.mrc", tmp_path / "out.mrc", "--factor", "2").returncode == 0
    again = noa("bin", tmp_path / "map.mrc", tmp_path / "out.mrc", "--factor", "2")
    assert_user_error(again, "exists; give --force to replace it")
    scaled = noa("scale", tmp_path / "map.mrc", tmp_path / "u8.mrc", "--to-range", "0,255", "--dtype", "uint8")
    assert scaled.returncode == 0 and "--uint8-mode imod writes IMOD's" in scaled.stderr, scaled.stderr
    tifffile.imwrite(tmp_path / "two.tif", np.zeros((3, 4), np.uint16))
    with tifffile.TiffWriter(tmp_path / "two.tif", append=True) as tif:
        tif.write(np.zeros((5, 6), np.uint8))
    described = noa("info", tmp_path / "two.tif")
    assert described.returncode == 0 and "give --series N" in described.stdout + described.stderr, described
    for output in (again.stderr, scaled.stderr, described.stdout, described.stderr):
        assert not re.search(r"\b[a-z_]+=(True|False|N|imod)\b|\x1f", output), output


def test_the_library_names_no_command_line_flag_in_its_messages():
    """Issue 39 item 4: noa_core's messages name parameters (errors.param); no flag spelling outside the
    declarations (the operations' help texts) and docstrings."""
    import ast

    package = REPO / "noa_core"
    found = []
    for path in package.rglob("*.py"):
        if path.relative_to(package).parts[0] == "operations" and path.name not in ("plan.py", "spec.py"):
            continue  # the operations, declarations and their work alike: help texts and messages in CLI words
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and getattr(node.func, "attr", "") in
                                                ("append", "extend")):
                for text in (n.value for n in ast.walk(node)
                             if isinstance(n, ast.Constant) and isinstance(n.value, str)):
                    if re.search(r"(?<![\w-])--[a-z]", text) and "relion" not in text.lower():
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text!r}")
    assert not found, "\n".join(found)
