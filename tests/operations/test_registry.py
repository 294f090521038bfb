"""The operation registry: declarations, parameter checks, and every door derived from a declaration.

A throw-away operation registered by the test alone (no edit in noa_cli, noa_server or warmup)
must appear as a CLI command, as both HTTP routes and as a job type, and run through each of them.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import EXAMPLE_MAP, REPO, assert_user_error, load, noa, wait_job, write_mrc
from noa_core import operations
from noa_core.array import dtypes
from noa_core.compute import expr
from noa_core.errors import ParameterError
from noa_core.operations import ewise as ewise_declaration
from noa_core.operations.spec import Choice, Flag, Integer, Integers, Real, Reals, Text

# -- a throw-away operation, declared here only ---------------------------------------------------------


def plan_offset(inputs, options):
    from noa_core.compute.expr import compile_expression
    from noa_core.operations.plan import evaluator, tiled_plan

    array, meta = inputs.open(inputs[0])
    compiled = compile_expression(f"a * {options.scale!r} + {options.amount}", 1)
    return tiled_plan(options, inputs=inputs, read=[array], compute=evaluator(compiled), meta=meta, dtype="float32")


OFFSET = operations.Writes(
    name="offset",
    summary="Add a constant to every voxel.",
    examples=("noa offset in.mrc out.mrc --amount 5",),
    params=(operations.Param("amount", Integer(-100, 100), "What to add.", default=operations.REQUIRED),
            operations.Param("scale", Real(0, 10), "What to multiply by first.", default=1.0),
            *operations.spec.READING, operations.spec.DEVICE),
    plan=plan_offset,
)


@pytest.fixture
def offset():
    operations.register(OFFSET)
    yield OFFSET
    operations.unregister("offset")


def test_builtin_operations_in_order():
    assert operations.names()[:7] == ["info", "preview", "stats", "permute", "broadcast", "copy", "ewise"]
    for op in operations.operations():
        assert op.summary and op.examples and all(e.startswith(f"noa {op.name} ") for e in op.examples), op.name
        assert isinstance(op, (operations.Writes, operations.WritesSeveral, operations.Reports, operations.Edits))


def test_register_refuses_bad_names_and_duplicates(offset):
    with pytest.raises(ParameterError, match="already registered"):
        operations.register(OFFSET)
    with pytest.raises(ParameterError, match="lower-case"):
        operations.register(operations.Reports(name="Bad-Name", summary="x", examples=("noa x",),
                                               report=lambda p, o: {}, text=str))
    with pytest.raises(ParameterError, match=r"unknown operation 'nope'.*offset"):
        operations.get("nope")
    with pytest.raises(TypeError):  # a kind without its function
        operations.Writes(name="both", summary="x", examples=("noa both",))


def test_declared_limits_match_the_code_that_enforces_them():
    # Declarations import no NumPy or numba, so they spell these out; the enforcing modules are the truth.
    assert operations.spec.ELEMENT_TYPES == dtypes.SCALAR_NAMES
    assert (ewise_declaration.MAX_INPUTS, ewise_declaration.MAX_LENGTH) == (expr.MAX_INPUTS, expr.MAX_LENGTH)


# -- parameter checks ---------------------------------------------------------------------------------


def test_options_fill_defaults_and_name_the_bad_parameter():
    copy = operations.get("copy")
    reading = {"as_stack": None, "series": None, "channel": None, "level": None, "eer_group": None,
               "eer_group_last": "drop", "eer_upsampling": 1, "gain": None, "gain_flip_y": False, "gain_rotate": None,
               "project_dir": None}
    assert copy.options() == {"order": "C", "dtype": None, "clamp": False, "flip_y": False, "uint8_mode": "widen",
                              **reading, "device": "cpu", "pixel_size": None, "chunks": None, "shards": None,
                              "ngff": "0.4", "levels": None, "pyramid": False, "downsample": None,
                              "stack_per_input": False,
                              "side_files": True}  # every writing operation takes the output's options
    assert operations.get("info").options() == reading
    assert copy.options(order="F", dtype="int16").order == "F"
    for values, param, fragment in (({"order": "X"}, "order", "not one of C, F, K"),
                                    ({"dtype": "float128"}, "dtype", "not one of"),
                                    ({"clamp": "yes"}, "clamp", "not true or false"),
                                    ({"series": -1}, "series", "-1 must be between 0 and 10000"),
                                    ({"series": True}, "series", "not an integer")):
        with pytest.raises(ParameterError) as caught:
            copy.options(values)
        assert caught.value.param == param and fragment in caught.value.problem, str(caught.value)
    with pytest.raises(ParameterError, match="unknown parameter 'colour'"):
        copy.options(colour="blue")
    with pytest.raises(ParameterError) as caught:
        operations.get("permute").options()
    assert caught.value.param == "axes" and caught.value.problem == "is required"


@given(st.lists(st.integers(-3, 7), min_size=0, max_size=6))
def test_integers_accept_exactly_what_the_declaration_says(values):
    kind = Integers(4, 4, 0, 3)
    ok = len(values) == 4 and all(0 <= v <= 3 for v in values)
    if ok:
        assert kind.check("axes", values) == tuple(values)
        assert kind.parse("axes", ",".join(map(str, values))) == tuple(values)
    else:
        with pytest.raises(ParameterError):
            kind.check("axes", values)


def test_real_numbers_are_finite_and_within_bounds():
    assert Real(0, 10).check("scale", 2) == 2.0 and Reals(2, 2).parse("range", "0.1, 99.9") == (0.1, 99.9)
    for bad, words in [(float("nan"), "not a finite number"), (float("inf"), "not a finite number"),
                       (True, "not a number"), ("1", "not a number"), (-1, "-1 must be between 0 and 10")]:
        with pytest.raises(ParameterError, match=words):
            Real(0, 10).check("scale", bad)
    with pytest.raises(ParameterError, match="3 values given, 2 expected"):
        Reals(2, 2).check("range", [1, 2, 3])
    with pytest.raises(ParameterError, match="not a comma-separated list of numbers"):
        Reals().parse("range", "1,x")


def test_parameter_types_refuse_wrong_kinds():
    with pytest.raises(ParameterError, match="not a list"):
        Integers().check("shape", "1,2")
    with pytest.raises(ParameterError, match="comma-separated"):
        Integers().parse("shape", "1,x")
    with pytest.raises(ParameterError, match="not true or false"):
        Flag().check("clamp", 1)
    with pytest.raises(ParameterError, match="not text"):
        Text().check("expression", 3)
    with pytest.raises(ParameterError, match="characters"):
        Text(1, 4).check("expression", "a + b + c")
    assert Choice(("C", "F")).check("order", "F") == "F"
    assert Integer(0, None).check("series", np.int64(3)) == 3


def test_tasks_carry_shared_inputs_only_where_the_operation_reads_several(tmp_path):
    ewise = operations.get("ewise").task(expression="a * b", shared=[tmp_path / "b.mrc"])
    assert ewise.inputs(tmp_path / "a.mrc") == [tmp_path / "a.mrc", tmp_path / "b.mrc"]
    with pytest.raises(ParameterError, match="at most 1 input"):
        operations.get("permute").task(axes=(0, 1, 3, 2), shared=[tmp_path / "b.mrc"])
    assert not hasattr(operations.get("info"), "task")  # a report writes no file: it has no task


# -- the doors, derived: a throw-away operation reaches the CLI, both HTTP modes and jobs --------------


def test_a_registered_operation_is_a_cli_command(offset, tmp_path, capsys):
    from noa_cli import main

    data = write_mrc(tmp_path / "in.mrc", np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(SystemExit) as done:
        main.run(["--help"])
    assert done.value.code == 0 and "offset" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main.run(["offset", "--help"])
    helped = capsys.readouterr().out
    assert done.value.code == 0 and "noa offset in.mrc out.mrc --amount 5" in helped and "--out-dir" in helped
    with pytest.raises(SystemExit) as done:
        main.run(["offset", str(tmp_path / "in.mrc"), str(tmp_path / "out.mrc"), "--amount", "5", "--scale", "2.5"])
    assert done.value.code == 0, capsys.readouterr().err
    np.testing.assert_array_equal(load(tmp_path / "out.mrc"), data * 2.5 + 5)
    with pytest.raises(SystemExit) as done:  # the declared range, checked before any file is read
        main.run(["offset", str(tmp_path / "in.mrc"), str(tmp_path / "bad.mrc"), "--amount", "500"])
    assert done.value.code == 2 and not (tmp_path / "bad.mrc").exists()


def test_a_registered_operation_is_two_routes_and_a_job(offset, tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = write_mrc(root / "in.mrc", np.arange(12, dtype=np.float32).reshape(3, 4))
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
        schema = client.get("/openapi.json").json()
        assert {"/v1/upload/offset", "/v1/paths/offset"} <= schema["paths"].keys()
        job_types = schema["components"]["schemas"]["OffsetJob"]["properties"]["operation"]
        assert job_types["const"] == "offset"

        uploaded = client.post("/v1/upload/offset", data={"amount": "-3"},
                               files={"file": ("in.mrc", (root / "in.mrc").read_bytes())})
        assert uploaded.status_code == 200, uploaded.text
        assert uploaded.headers["content-disposition"] == 'attachment; filename="in_offset.mrc"'
        (tmp_path / "up.mrc").write_bytes(uploaded.content)
        np.testing.assert_array_equal(load(tmp_path / "up.mrc"), data - 3)

        written = client.post("/v1/paths/offset", json={"src": "in.mrc", "dst": "p.mrc", "amount": 7, "scale": 0.5})
        assert written.status_code == 201, written.text
        np.testing.assert_array_equal(load(root / "p.mrc"), data * 0.5 + 7)
        too_large = client.post("/v1/paths/offset", json={"src": "in.mrc", "dst": "q.mrc", "amount": 7, "scale": 11})
        assert too_large.status_code in (400, 422) and not (root / "q.mrc").exists()
        refused = client.post("/v1/paths/offset", json={"src": "in.mrc", "dst": "q.mrc", "amount": 7.5})
        assert refused.status_code == 400 and not (root / "q.mrc").exists()

        job = client.post("/v1/jobs", json={"operation": "offset", "src": "in.mrc", "dst": "j.mrc", "amount": 1})
        assert job.status_code == 202, job.text
        state = wait_job(client, job.headers["location"], 30)
        assert state["status"] == "succeeded", state
        np.testing.assert_array_equal(load(root / "j.mrc"), data + 1)


def test_operations_from_noa_operations_reach_a_fresh_process(tmp_path):
    """A plugin module named in NOA_OPERATIONS is loaded by every process (the CLI here)."""
    (tmp_path / "noa_test_plugin.py").write_text(textwrap.dedent('''
        from noa_core import operations
        from noa_core.operations.spec import DEVICE, READING, Flag


        def plan(inputs, options):
            from noa_core.compute.expr import compile_expression
            from noa_core.operations.plan import evaluator, tiled_plan

            array, meta = inputs.open(inputs[0])
            return tiled_plan(options, inputs=inputs, read=[array], compute=evaluator(compile_expression("-a", 1)),
                              meta=meta)


        OPERATION = operations.Writes(name="negate", summary="Negate every voxel.",
                                      examples=("noa negate in.mrc out.mrc",), params=(*READING, DEVICE), plan=plan)
    '''))
    env = {"NOA_OPERATIONS": "noa_test_plugin", "PYTHONPATH": str(tmp_path)}
    done = noa("negate", EXAMPLE_MAP, tmp_path / "neg.mrc", env=env)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(load(tmp_path / "neg.mrc"), -load(EXAMPLE_MAP))
    assert_user_error(noa("info", EXAMPLE_MAP, env={"NOA_OPERATIONS": "no_such_module_here"}), "NOA_OPERATIONS")


# -- packaging and the README ---------------------------------------------------------------------------


def test_no_top_level_server_module_is_installed(tmp_path):
    """The service installs as noa_server: a module called `server` would shadow, or be shadowed by, others."""
    code = ("import importlib.util, json; print(json.dumps([importlib.util.find_spec(n) is not None "
            "for n in ('server', 'noa_server', 'noa_core', 'noa_cli')]))")
    found = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert json.loads(found.stdout) == [False, True, True, True], found.stderr
    assert importlib.util.find_spec("noa_server").origin.startswith(str(REPO / "server"))


def test_readme_table_is_the_registry():
    readme = (REPO / "README.md").read_text()
    start, end = "<!-- operations: generated by `python -m noa_core.operations` -->\n", "<!-- /operations -->"
    assert start in readme and end in readme
    assert readme.split(start, 1)[1].split(end, 1)[0] == operations.markdown_table()


def test_the_cli_spellings_of_choices_are_the_declared_words():
    copy = operations.get("copy")
    assert copy.options(order="f", dtype="f4") == copy.options(order="F", dtype="float32")
    assert operations.get("ewise").options(expression="a", dtype="single").dtype == "float32"
    with pytest.raises(ParameterError, match="not one of"):
        copy.options(dtype="float128")  # NumPy knows it; noa does not support it


def test_docs_relion_names_real_commands_and_options():
    """docs/relion.md's table: every noa command and option it names is declared (the doc stays true)."""
    import re

    text = (REPO / "docs" / "relion.md").read_text()
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `noa ")]
    assert len(rows) >= 9
    for cell in rows:
        name = re.search(r"`noa (\w+)", cell).group(1)
        operation = operations.get(name)
        declared = {f"--{p.name.replace('_', '-')}" for p in operation.params}
        declared |= {flag.split("/")[i] for p in operation.params for flag in p.flags for i in (0, -1)}
        for option in re.findall(r"--[a-z][a-z-]*", cell):
            assert option in declared, (name, option)


def test_the_architecture_page_names_every_module_and_only_modules():
    """docs/architecture.md's map lists every module of noa_core, noa_cli and server, and names no file
    that is not there (it had drifted: a dozen modules missing, a function that had moved)."""
    import re

    text = (REPO / "docs" / "architecture.md").read_text()
    block = text.split("```\n", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"\b([a-z_]+\.py)\b", block))
    operation_modules = {REPO / "noa_core" / "operations" / folder / f"{name}.py" for name in operations.BUILTIN
                         for folder in (".", "implementations")}  # a declaration and its work per operation
    actual = {p.name for package in ("noa_core", "noa_cli", "server") for p in (REPO / package).rglob("*.py")
              if p not in operation_modules}  # those are "one module per operation" (the README's table)
    assert actual <= named, sorted(actual - named)
    assert named <= actual, sorted(named - actual)
