"""Declarations name their work (spec.Implementation: a module and a function), so that they stay light: the names
resolve, a command loads only the implementation it runs, and a task pickles its work by name."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import mrcfile
import numpy as np

from helpers import EXAMPLE_MAP, random_values, write_mrc
from noa_core import operations
from noa_core.operations.spec import IMPLEMENTATIONS, Implementation
from noa_core.run import local

WORK = ("plan", "plans", "report", "edit", "show")  # an operation's fields that do its work


def declared_work(operation: operations.Operation) -> dict[str, Implementation]:
    """The Implementation references of ``operation``: its work, its query's answer, its parameters' spellings."""
    named = {field: getattr(operation, field) for field in WORK if getattr(operation, field, None) is not None}
    query = getattr(operation, "query", None)
    if query is not None:
        named["query"] = query.answer
    named.update((f"{param.name} spelling", param.type.spelling) for param in operation.params
                 if getattr(param.type, "spelling", None) is not None)
    return {field: value for field, value in named.items() if isinstance(value, Implementation)}


def test_every_built_in_operation_names_functions_of_its_implementation_module():
    for name in operations.BUILTIN:
        operation = operations.get(name)
        work = declared_work(operation)
        assert {field for field in WORK if getattr(operation, field, None) is not None} <= set(work), name
        for field, reference in work.items():
            assert callable(getattr(importlib.import_module(reference.module), reference.function)), (name, field)
            if field in WORK or field == "query":
                assert reference.module == f"{IMPLEMENTATIONS}.{name}", (name, field)


def test_a_reference_imports_its_module_on_the_first_call_and_pickles_as_its_names():
    reference = Implementation(f"{IMPLEMENTATIONS}.element_types", "element_type_name")
    assert pickle.loads(pickle.dumps(reference)) == reference
    assert [reference(text) for text in ("f4", "<i2", "complex", "no such type")] == [
        np.dtype("f4").name, np.dtype("<i2").name, np.dtype("complex").name, "no such type"]
    probe = ("import sys\nfrom noa_core import operations\noperations.operations()\n"
             "loaded = sorted(m for m in sys.modules if m.startswith('noa_core.operations.implementations'))\n"
             "print('numpy' in sys.modules, 'noa_core.operations.plan' in sys.modules, loaded)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "False False []"  # every declaration, none of their work


def test_a_plain_command_loads_only_the_implementation_it_runs(tmp_path):
    probe = ("import sys\nfrom noa_cli.main import run\ntry:\n    run(sys.argv[1:])\nexcept SystemExit as done:\n"
             "    assert done.code == 0, done.code\n"
             "print(sorted(m for m in sys.modules if m.startswith('noa_core.operations.implementations')))\n")
    out = tmp_path / "o.mrc"
    for args, loaded in ((["info", str(EXAMPLE_MAP)], ["info"]), (["copy", str(EXAMPLE_MAP), str(out), "-q"], ["copy"]),
                         (["copy", str(EXAMPLE_MAP), str(tmp_path / "f.mrc"), "--dtype", "f4", "-q"],
                          ["copy", "element_types"])):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stderr)
        expected = [IMPLEMENTATIONS] + [f"{IMPLEMENTATIONS}.{module}" for module in loaded]
        assert done.stdout.splitlines()[-1] == repr(expected), args
    with mrcfile.open(tmp_path / "f.mrc") as written, mrcfile.open(EXAMPLE_MAP) as given:
        assert written.data.dtype == np.float32 and np.array_equal(written.data, given.data)


def test_a_pickled_task_runs_its_work_named_by_reference(tmp_path):
    data = write_mrc(tmp_path / "in.mrc", random_values((3, 8, 10), seed=4))
    task = pickle.loads(pickle.dumps(operations.get("permute").task(axes=(0, 1, 3, 2))))  # as Dask sends it
    assert task.operation.plan == Implementation(f"{IMPLEMENTATIONS}.permute", "plan")
    local.write(task, tmp_path / "in.mrc", tmp_path / "out.mrc")
    with mrcfile.open(tmp_path / "out.mrc") as written:
        assert np.array_equal(written.data, np.swapaxes(data, 1, 2))
