"""The two registry kinds beyond plan and report: an operation writing several files per input (``plans``)
and one changing its input in place (``edit``). Throw-away operations declared here alone (no edit in
noa_cli or noa_server) reach the CLI, both HTTP modes and the job type."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from helpers import load, noa, wait_job, write_mrc
from noa_core import operations
from noa_core.io import formats
from noa_core.operations.spec import Integer, Text


def plans_halves(inputs, options):
    """Two outputs: the input times 1 and times ``factor``."""
    from noa_core.compute.expr import compile_expression
    from noa_core.operations.plan import evaluator, tiled_plan

    array, meta = inputs.open(inputs[0])
    return [(f"_x{k}.mrc", tiled_plan(options, inputs=inputs, read=[array], meta=meta, dtype="float32",
                                      compute=evaluator(compile_expression(f"a * {k}", 1)), detail=f"x{k}"))
            for k in (1, options.factor)]


def edit_touch(path, options, dry_run):
    """Appends the note to the file itself (unless a dry run)."""
    if not dry_run:
        with open(path, "a") as f:
            f.write(options.note)
    return {"path": str(path), "dry_run": dry_run, "note": options.note}


TWICE = operations.WritesSeveral(name="twice", summary="Write the input and a multiple of it.",
                                 examples=("noa twice in.mrc --out-dir d",),
                                 params=(operations.Param("factor", Integer(2, 9), "The multiple.", default=2),),
                                 plans=plans_halves)
NOTE = operations.Edits(name="note", summary="Write a note beside a file.", examples=("noa note in.mrc --note hi",),
                        params=(operations.Param("note", Text(1, 20), "The note.", default=operations.REQUIRED),),
                        edit=edit_touch, text=lambda r: f"{r['path']}: {r['note']}")


@pytest.fixture
def kinds():
    operations.register(TWICE)
    operations.register(NOTE)
    yield
    operations.unregister("twice")
    operations.unregister("note")


def test_each_kind_is_a_class_of_its_own():
    """Issue 39 item 1: a kind is its class, with the one function it runs; nothing else to branch on."""
    assert (TWICE.writes, TWICE.changes_input, NOTE.writes, NOTE.changes_input) == ("folder", False, None, True)
    assert not NOTE.reads_data  # an edit changes the header: no voxel limit applies
    with pytest.raises(TypeError):
        operations.WritesSeveral(name="two", summary="x", examples=("noa two",), edit=edit_touch)
    with pytest.raises(ValueError, match="reads one input"):
        operations.WritesSeveral(name="many", summary="x", examples=("noa many",), plans=plans_halves, max_inputs=2)
    assert not hasattr(NOTE, "task") and not hasattr(TWICE, "apply")


def test_the_new_kinds_are_cli_commands(kinds, tmp_path, capsys):
    from noa_cli import main

    data = write_mrc(tmp_path / "in.mrc", np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(SystemExit) as done:
        main.run(["twice", str(tmp_path / "in.mrc"), "--out-dir", str(tmp_path / "d"), "--factor", "3"])
    assert done.value.code == 0, capsys.readouterr().err
    np.testing.assert_array_equal(load(tmp_path / "d" / "in_x3.mrc"), data * 3)
    np.testing.assert_array_equal(load(tmp_path / "d" / "in_x1.mrc"), data)
    (tmp_path / "notes.txt").write_text("start;")
    with pytest.raises(SystemExit) as done:
        main.run(["note", str(tmp_path / "notes.txt"), "--note", "hello", "--dry-run"])
    assert done.value.code == 0 and "notes.txt: hello" in capsys.readouterr().out
    assert (tmp_path / "notes.txt").read_text() == "start;"
    with pytest.raises(SystemExit) as done:
        main.run(["note", str(tmp_path / "notes.txt"), "--note", "hello", "--json"])
    assert done.value.code == 0 and json.loads(capsys.readouterr().out)["dry_run"] is False
    assert (tmp_path / "notes.txt").read_text() == "start;hello"


def test_several_inputs_of_a_split_go_on_past_a_bad_one(tmp_path):
    write_mrc(tmp_path / "a.mrcs", np.zeros((2, 2, 2), np.float32), stack=True)
    (tmp_path / "bad.mrcs").write_bytes(b"x" * 2000)
    done = noa("split", tmp_path / "bad.mrcs", tmp_path / "a.mrcs", "--out-dir", tmp_path / "out")
    assert done.returncode == 2 and "bad.mrcs" in done.stderr and "1 of 2 inputs failed" in done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a_000.mrcs", "a_001.mrcs"]
    missing = noa("split", tmp_path / "a.mrcs")  # click's usage error
    assert missing.returncode == 2 and "Missing option '--out-dir'" in missing.stderr


def test_the_new_kinds_are_routes_and_jobs(kinds, tmp_path):
    from fastapi.testclient import TestClient

    from noa_server.app import create_app
    from noa_server.settings import Settings

    root = tmp_path / "root"
    root.mkdir()
    data = write_mrc(root / "in.mrc", np.arange(6, dtype=np.float32).reshape(2, 3))
    with TestClient(create_app(Settings(warmup=False, data_root=root))) as client:
        schema = client.get("/openapi.json").json()
        assert {"/v1/upload/twice", "/v1/paths/twice", "/v1/upload/note", "/v1/paths/note"} <= schema["paths"].keys()
        assert schema["components"]["schemas"]["TwiceJob"]["properties"]["operation"]["const"] == "twice"
        assert "dry_run" in schema["components"]["schemas"]["NoteRequest"]["properties"]
        body = {"src": "in.mrc", "dst": "made/here", "factor": 4}
        missing = client.post("/v1/paths/twice", json=body)  # the folder is made, not its parents
        assert missing.status_code == 404 and "the folder made does not exist" in missing.json()["detail"]
        (root / "made").mkdir()
        written = client.post("/v1/paths/twice", json=body)
        assert written.status_code == 201, written.text
        assert written.json()["outputs"] == ["made/here/in_x1.mrc", "made/here/in_x4.mrc"]
        np.testing.assert_array_equal(load(root / "made" / "here" / "in_x4.mrc"), data * 4)
        sent = client.post("/v1/upload/twice", files={"file": ("in.mrc", (root / "in.mrc").read_bytes())})
        assert sent.status_code == 200 and zipfile.ZipFile(io.BytesIO(sent.content)).namelist() == [
            "in_x1.mrc", "in_x2.mrc"]
        (root / "notes.txt").write_text("start;")
        noted = client.post("/v1/paths/note", json={"path": "notes.txt", "note": "hi"})  # the server's file, edited
        assert noted.status_code == 200 and noted.json() == {"path": "notes.txt", "dry_run": False, "note": "hi"}
        assert (root / "notes.txt").read_text() == "start;hi"
        sent = client.post("/v1/upload/note", data={"note": "up"}, files={"file": ("n.txt", b"mine;")})
        assert sent.status_code == 200 and sent.content == b"mine;up"  # an edited copy comes back
        assert (root / "notes.txt").read_text() == "start;hi"
        job = client.post("/v1/jobs", json={"operation": "twice", "src": "in.mrc", "dst": "job"})
        assert job.status_code == 202, job.text
        state = wait_job(client, job.headers["location"], 30)
        assert state["result"]["outputs"] == ["job/in_x1.mrc", "job/in_x2.mrc"], state


def test_an_operation_needing_one_of_its_parameters_says_so_at_every_door(tmp_path, capsys):
    """An edit with nothing to change is refused by the declaration (one rule): the CLI names its flags, the HTTP
    schema says it (anyOf required, so a client or a fuzzer can tell a valid request) and the model refuses it."""
    from fastapi.testclient import TestClient

    from noa_cli import main
    from noa_server.app import create_app
    from noa_server.settings import Settings

    params = (operations.Param("note", Text(1, 20), "The note."), operations.Param("mark", Integer(0, 9), "A mark."))
    with pytest.raises(ValueError, match="needs_one_of names no parameter"):
        operations.Edits(name="mark", summary="x", examples=("noa mark",), params=params, edit=edit_touch,
                         text=str, needs_one_of=("note", "colour"))
    marks = operations.Edits(name="mark", summary="Mark a file.", examples=("noa mark in.mrc --note hi",),
                             params=params, edit=edit_touch, text=str, needs_one_of=("note", "mark"))
    with pytest.raises(operations.ParameterError, match="nothing to change: give note or mark"):
        marks.options({})
    assert marks.options(mark=3).mark == 3
    (tmp_path / "notes.txt").write_text("start;")
    operations.register(marks)
    try:
        with pytest.raises(SystemExit) as refused:
            main.run(["mark", str(tmp_path / "notes.txt")])
        assert refused.value.code == 2 and "nothing to change: give --note or --mark" in capsys.readouterr().err
        with TestClient(create_app(Settings(warmup=False, data_root=tmp_path))) as client:
            schemas = client.get("/openapi.json").json()["components"]["schemas"]
            assert schemas["MarkRequest"]["anyOf"] == [{"required": ["note"]}, {"required": ["mark"]}]
            assert schemas["Body_mark_v1_upload_mark_post"]["anyOf"] == schemas["MarkRequest"]["anyOf"]
            # a value per axis is one or three, never two: said in the schema, refused by the declaration
            assert schemas["HeaderRequest"]["properties"]["origin"]["not"] == {"minItems": 2, "maxItems": 2}
            refused = client.post("/v1/paths/header", json={"path": "notes.txt", "origin": [1, 2]})
            assert refused.status_code == 400 and "origin: 2 values given" in refused.json()["detail"]
            sent = client.post("/v1/upload/mark", files={"file": ("n.txt", b"mine;")})
            assert sent.status_code == 400 and "nothing to change: give note or mark" in sent.json()["detail"]
            answer = client.post("/v1/paths/mark", json={"path": "notes.txt"})
            assert answer.status_code == 400 and "nothing to change: give note or mark" in answer.json()["detail"]
    finally:
        operations.unregister("mark")
    assert (tmp_path / "notes.txt").read_text() == "start;"


def test_a_report_of_headers_alone_looks_up_no_sizes(tmp_path, monkeypatch):
    """The sizes of a report's inputs choose where its data are computed; a report of headers alone (info) computes
    nothing, so it does not look them up (a stat of each input a request). A report reading data still does."""
    data = np.arange(2 * 4 * 5, dtype=np.float32).reshape(2, 4, 5)
    write_mrc(tmp_path / "a.mrc", data)
    sized = []
    input_bytes = formats.input_bytes
    monkeypatch.setattr(formats, "input_bytes", lambda paths: sized.append(list(paths)) or input_bytes(paths))
    assert operations.get("info").describe(tmp_path / "a.mrc")["shape"] == [1, 2, 4, 5]
    assert sized == []
    assert operations.get("stats").describe(tmp_path / "a.mrc")["mean"] == pytest.approx(data.mean())
    assert sized == [[tmp_path / "a.mrc"]]
