"""Every bad value of every operation's parameters, from the registry: one `noa: error:` line naming the
option as the user typed it (`--factor`, not `factor`), exit 2, and no output file. The CLI runs in this
process (the way `noa` runs it: noa_cli.main.run), so the hundreds of cases take seconds."""

from __future__ import annotations

import math
import shlex

import numpy as np
import pytest

from helpers import write_mrc
from noa_cli.main import run
from noa_core import operations
from noa_core.operations.spec import Choice, Integer, Integers, Real, Reals, Text


def bad_values(param) -> list[str]:
    """Values the declaration of ``param`` refuses, as a user would type them."""
    kind = param.type
    if isinstance(kind, Integer):
        return ["abc", "1.5", *([str(kind.low - 1)] if kind.low is not None else []),
                *([str(kind.high + 1)] if kind.high is not None else [])]
    if isinstance(kind, Real):
        below = [] if kind.low is None else [repr(kind.low - 1.0), *([repr(kind.low / 2)] if kind.low > 0 else [])]
        above = [] if kind.high is None or math.isinf(kind.high) else [repr(kind.high + 1.0), repr(kind.high * 2)]
        return ["abc", "nan", "inf", *below, *above]
    if isinstance(kind, (Integers, Reals)):
        return ["1,x", ",".join(["1"] * ((kind.max_length or 8) + 1))]
    if isinstance(kind, Choice):
        return ["no-such-choice"]
    if isinstance(kind, Text) and kind.max_length is not None and not param.argument:
        return ["x" * (kind.max_length + 1)]
    return []


def cases():
    for operation in operations.operations():
        for param in operation.params_for("cli"):
            if param.argument:
                continue
            for value in bad_values(param):
                yield operation.name, param, value


CASES = list(cases())


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad-values")
    write_mrc(folder / "in.mrc", np.random.default_rng(0).normal(size=(8, 8, 8)).astype(np.float32), voxel_size=1.5)
    return folder / "in.mrc"


def command_line(name: str, flag: str, value: str, volume, out) -> list[str]:
    operation = operations.get(name)
    required = [arg for p in operation.params_for("cli") if p.required and not p.argument
                and p.cli_flags[0] != flag for arg in (p.cli_flags[0], example_value(operation, p))]
    text = [arg for p in operation.params_for("cli") if p.argument for arg in ("a",)]
    if operation.writes == "folder":
        files = [str(volume), "--out-dir", str(out.parent / "parts")]
    elif operation.writes == "file":
        files = [str(volume), "-o", str(out)] if operation.max_inputs > 1 else [str(volume), str(out)]
    elif operation.changes_input:
        files = [str(volume), "--dry-run"]
    else:
        files = [str(volume)]
    return [name, *text, *files, *required, f"{flag}={value}"]


def example_value(operation, param) -> str:
    """The value a required parameter has in the operation's own examples (they are tested elsewhere)."""
    for example in operation.examples:
        words = shlex.split(example)
        if param.cli_flags[0] in words:
            return words[words.index(param.cli_flags[0]) + 1]
    raise AssertionError(f"{operation.name}: no example gives {param.cli_flags[0]}")


@pytest.mark.parametrize("name, param, value", CASES, ids=[f"{n}-{p.name}-{v[:12]}" for n, p, v in CASES])
def test_a_bad_value_is_one_line_naming_the_option(tmp_path, capsys, volume, name, param, value):
    flag = param.cli_flags[0].split("/")[0]
    out = tmp_path / "out.mrc"
    with pytest.raises(SystemExit) as exited:
        run(command_line(name, flag, value, volume, out))
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert exited.value.code == 2, (captured.err, captured.out)
    assert len(lines) == 1 and lines[0].startswith("noa: error:"), captured.err
    assert flag in lines[0], lines[0]
    assert "Usage" not in captured.err and "Traceback" not in captured.err
    assert not out.exists() and not (tmp_path / "parts").exists()


def test_every_kind_of_parameter_is_covered():
    kinds = {type(param.type).__name__ for _, param, _ in CASES}
    assert {"Integer", "Real", "Choice", "Integers"} <= kinds, kinds
    assert len(CASES) > 100


# Every operation with a pixel size, at both ends of the range every pixel-size parameter shares: an answer
# (exit 0) or one line (exit 2), never an overflow or a division by zero (exit 1). Issue 38 item 6.
EXTREMES = [("filter", ["--lowpass", "8"], "angpix"), ("preview", ["--scale-bar"], "angpix"),
            ("fsc", [], "angpix"), ("mask", ["--threshold", "0.1", "--lowpass", "8"], "angpix"),
            ("powerspectrum", ["--table", "csv"], "angpix"), ("rescale", ["--factor", "0.5"], "angpix"),
            ("rescale", [], "pixel_size"), ("copy", [], "pixel_size"), ("header", [], "pixel_size")]


def test_every_pixel_size_parameter_has_the_shared_range():
    from noa_core.operations.spec import PIXEL_SIZE, PIXEL_SIZES

    named = [(op.name, p.name) for op in operations.operations() for p in op.params
             if p.name in ("angpix", "pixel_size")]
    assert len(named) > 10
    for name, param in named:
        assert operations.get(name).params[[p.name for p in operations.get(name).params].index(param)].type in (
            PIXEL_SIZE, PIXEL_SIZES), (name, param)
    assert {(name, param) for name, _, param in EXTREMES} <= set(named)


@pytest.mark.parametrize("name, args, param", EXTREMES, ids=[f"{n}-{p}" for n, _, p in EXTREMES])
@pytest.mark.parametrize("value", ["1e-06", "1e+09"])
def test_pixel_sizes_at_the_ends_of_their_range_answer_or_refuse_in_one_line(tmp_path, capsys, volume, name, args,
                                                                             param, value):
    import shutil

    operation = operations.get(name)
    flag = next(p for p in operation.params if p.name == param).cli_flags[0]
    out = tmp_path / ("out.png" if name == "preview" else "out.csv" if name == "powerspectrum" else "out.mrc")
    if name == "header":
        shutil.copy(volume, tmp_path / "edited.mrc")
        line = [name, str(tmp_path / "edited.mrc")]
    elif name == "fsc":
        line = [name, str(volume), str(volume)]
    else:
        line = [name, str(volume), str(out)]
    with pytest.raises(SystemExit) as exited:
        run([*line, *args, flag, value])
    captured = capsys.readouterr()
    assert exited.value.code in (0, 2), captured.err
    assert "Traceback" not in captured.err and "internal error" not in captured.err, captured.err
    if exited.value.code == 2:
        assert len([line for line in captured.err.splitlines() if line.strip()]) == 1, captured.err


@pytest.mark.parametrize("line", [["filter", "--lowpass", "8", "--angpix", "1e-300"],
                                  ["preview", "--scale-bar", "--angpix", "1e308"]], ids=["filter", "preview"])
def test_pixel_sizes_beyond_the_range_are_refused_naming_the_option(tmp_path, capsys, volume, line):
    """Issue 38 item 6: a ZeroDivisionError and an OverflowError (exit 1, HTTP 500) before the shared range."""
    out = tmp_path / ("out.png" if line[0] == "preview" else "out.mrc")
    with pytest.raises(SystemExit) as exited:
        run([line[0], str(volume), str(out), *line[1:]])
    captured = capsys.readouterr()
    assert exited.value.code == 2, captured.err
    assert captured.err.startswith("noa: error: --angpix: ") and "must be between 1e-06 and 1e+09" in captured.err
    assert not out.exists()
