"""Generated kernel source: every template renders and compiles, generated code has file names of its
own in tracebacks and numba's messages (linecache), NOA_DUMP_KERNELS prints it, generated_sources()
lists it, and kernels compiled from it are still cached on disk."""

from __future__ import annotations

import inspect
import linecache
import os
import re
import subprocess
import sys
import traceback

import numba
import numpy as np
import pytest

from helpers import REPO
from noa_core import kernels
from noa_core.compute import expr
from noa_core.kernels import cpu, runtime
from noa_core.kernels import cuda as cuda_backend

BACKENDS = {"cpu": cpu, "cuda": cuda_backend}


def _rendered(backend) -> list[tuple[str, str, str]]:
    """(kind, variant, source) for every template of ``backend`` and each of its variants."""
    out = []
    for kind, render in backend.TEMPLATES.items():
        for variant in backend.template_variants(kind):
            name = f"{kind}_test_{re.sub(r'[^0-9a-z]', '_', variant)}"
            out.append((kind, variant, render(name, variant)))
    return out


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_every_template_renders_and_compiles_for_each_variant(backend):
    module = BACKENDS[backend]
    rendered = _rendered(module)
    # A kind without variants would be rendered by nothing here.
    assert {kind for kind, _, _ in rendered} == set(module.TEMPLATES)
    for kind, variant, source in rendered:
        assert "{" not in source.replace("{}", ""), (kind, variant, source)  # no format field left
        name = f"{kind}_test_{re.sub(r'[^0-9a-z]', '_', variant)}"
        code = compile(source, f"<{kind} {variant}>", "exec")
        assert name in code.co_names, (kind, variant)  # the source defines the kernel it is named for
        scope = kernels.compile_source(source, name, {})
        assert inspect.isfunction(scope[name])
    # Variants of one kind differ where their operands do.
    ewise = [source for kind, _, source in rendered if kind == "ewise"]
    assert len(set(ewise)) == len(ewise)


@pytest.mark.parametrize("backend", BACKENDS, ids=str)
def test_every_module_template_is_rendered(backend):
    """A template string added to a back-end without a TEMPLATES entry fails here."""
    module = BACKENDS[backend]
    sources = [source for _, _, source in _rendered(module)]
    templates = {attr: value for attr, value in vars(module).items()
                 if isinstance(value, str) and "def {name}(" in value}
    assert templates, "no templates found: the test no longer sees how they are written"
    for attr, template in templates.items():
        fixed = [line for line in template.splitlines() if line.strip() and "{" not in line]
        assert any(all(line in source.splitlines() for line in fixed) for source in sources), attr


def _expression_using(op: str) -> str:
    """Text of an expression over a and b that the writer turns into expr._TEMPLATES[op]."""
    for name, (arity, operation) in expr.FUNCTIONS.items():
        if operation == op:
            return f"{name}({', '.join('ab'[:arity])})"
    symbol = expr._SYMBOLS[op]
    return f"{symbol} a" if op in expr._UNARY.values() else f"a {symbol} b"


@pytest.mark.parametrize("op", sorted(expr._TEMPLATES))
def test_every_expression_template_renders_and_compiles(op):
    source = expr.compile_expression(_expression_using(op), 2).source(np.float64, np.float64)
    pieces = [piece for piece in re.split(r"\{\d\}", expr._TEMPLATES[op]) if piece.strip()]
    assert pieces and all(piece in source for piece in pieces), (op, source)
    compile(source, "<expression>", "exec")
    element = expr._define(source)
    assert inspect.getsourcefile(element).startswith("<noa kernel expression #")
    assert inspect.getsource(element) == source.lstrip("\n")


# -- tracebacks ----------------------------------------------------------------------------------


def _plus_one(x):
    return x + 1


def test_traceback_through_a_generated_kernel_shows_its_own_lines():
    kernel = cpu._kernel("ewise", "a_1", {"op": _plus_one})
    func = kernel.py_func
    filename = func.__code__.co_filename
    assert filename.startswith("<noa kernel ewise_user") and filename.endswith(">")
    source = kernels.generated_sources()[filename]
    assert inspect.getsource(func) == source.lstrip("\n")

    shape, strides = (1, 1, 1, 4), np.array([[4, 4, 4, 1], [4, 4, 4, 1]], dtype=np.int64)
    with pytest.raises(IndexError) as info:  # the output holds 2 of the 4 elements written
        func(np.arange(4.0), np.zeros(2), shape, strides, True, 4, np.array([0, 1, 0]))  # one part: every task
    frames = traceback.extract_tb(info.value.__traceback__)
    last = frames[-1]
    assert last.filename == filename
    assert last.line == "v_out0[i] = op(v_in0[i])"
    assert source.splitlines()[last.lineno - 1].strip() == last.line
    printed = "".join(traceback.format_tb(info.tb))
    assert f'File "{filename}", line {last.lineno}, in {func.__name__}\n    v_out0[i] = op(v_in0[i])' in printed


def test_numba_errors_in_a_generated_kernel_quote_its_lines():
    def pair(x):
        return x, x

    kernel = cpu._kernel("ewise", "a_1", {"op": pair})
    filename = kernel.py_func.__code__.co_filename
    shape, strides = (1, 1, 1, 4), np.array([[4, 4, 4, 1], [4, 4, 4, 1]], dtype=np.int64)
    with pytest.raises(numba.core.errors.TypingError) as info:  # a tuple stored into a float array
        kernel(np.arange(4.0), np.zeros(4), shape, strides, True, 4, np.array([0, 1, 0]))
    message = str(info.value)
    assert f'File "{filename}"' in message
    assert "v_out0[i] = op(v_in0[i])" in message
    assert "cpu.py" not in message


def test_traceback_through_an_expression_shows_its_lines():
    source = expr.compile_expression("sqrt(a) + b", 2).source(np.float64, np.float64)
    element = expr._define(source)
    with pytest.raises(TypeError) as info:
        element(4.0, "text")
    last = traceback.extract_tb(info.value.__traceback__)
    generated = [frame for frame in last if frame.filename.startswith("<noa kernel expression #")]
    assert generated, [frame.filename for frame in last]
    assert generated[-1].line in [line.strip() for line in source.splitlines()]
    assert "b" in generated[-1].line


def test_compile_source_names_distinct_sources_apart():
    a = kernels.compile_source("def f():\n    return 1\n", "same", {})
    b = kernels.compile_source("def f():\n    return 2\n", "same", {})
    fa, fb = a["f"].__code__.co_filename, b["f"].__code__.co_filename
    assert fa != fb and fa.startswith("<noa kernel same #") and fb.startswith("<noa kernel same #")
    assert linecache.getline(fb, 2) == "    return 2\n"
    linecache.checkcache()  # no file to compare with: the entries stay
    assert linecache.getline(fa, 2) == "    return 1\n"
    assert kernels.generated_sources()[fa] == "def f():\n    return 1\n"


def test_generated_sources_lists_kernels_compiled_in_this_process():
    out = np.empty(6)
    cpu.ewise(kernels.BUILTIN_OPS["negate"], [np.arange(6.0)], [out], (1, 1, 2, 3), [(6, 6, 3, 1)], [(6, 6, 3, 1)])
    np.testing.assert_array_equal(out, -np.arange(6.0))
    names = [name for name in kernels.generated_sources() if name.startswith("<noa kernel ewise_negate_")]
    assert names, sorted(kernels.generated_sources())
    assert all(re.fullmatch(r"<noa kernel ewise_negate_\w+ #[0-9a-f]{8}>", name) for name in names)
    source = kernels.generated_sources()[names[0]]
    assert "def ewise_negate_" in source and "op(v_in0[i])" in source


# -- NOA_DUMP_KERNELS and the on-disk cache, in fresh processes -----------------------------------

_SCRIPT = """
import numpy as np
from noa_core import kernels
from noa_core.kernels import cpu
out = np.empty(6)
for _ in range(2):
    cpu.ewise(kernels.BUILTIN_OPS["negate"], [np.arange(6.0)], [out], (1, 1, 2, 3), [(6, 6, 3, 1)], [(6, 6, 3, 1)])
assert (out == -np.arange(6.0)).all()
for name, source in kernels.generated_sources().items():
    print("LISTED", name, len(source))
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOA_DUMP", "NUMBA_DEBUG_CACHE"))}
    environment.update(env)
    result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=REPO, env=environment, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_dump_kernels_prints_each_source_once_and_the_cache_still_works(tmp_path):
    env = {"NOA_DUMP_KERNELS": "1", "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_DEBUG_CACHE": "1"}
    for run in ("compiles and saves", "loads from the cache"):
        result = _run(env)
        dumped = re.findall(r"^# ---- (<noa kernel ewise_negate_\w+ #[0-9a-f]{8}>)$", result.stderr, re.M)
        assert len(dumped) == 1, (run, result.stderr[-3000:])  # two calls, one kernel, printed once
        name = dumped[0]
        body = result.stderr.split(f"# ---- {name}\n", 1)[1].split(f"# ---- end {name}", 1)[0]
        assert body.startswith("def ewise_negate_") and "v_out0[i] = op(v_in0[i])" in body
        listed = dict(re.findall(r"^LISTED (<noa kernel [^>]*>) (\d+)$", result.stdout, re.M))
        assert name in listed, result.stdout
        # numba's cache is still used for generated kernels (NUMBA_DEBUG_CACHE reports on stdout).
        entry = name[len("<noa kernel "):].split(" #")[0]
        verb = "saved" if run == "compiles and saves" else "loaded"
        assert re.search(rf"\[cache\] data {verb} to .*cpu\.{entry}-|\[cache\] data {verb} from .*cpu\.{entry}-",
                         result.stdout), (run, result.stdout[-3000:])
    assert any(path.name.startswith(f"cpu.{entry}-") for path in tmp_path.rglob("*.nbi"))


def test_without_the_variable_nothing_is_dumped(tmp_path):
    result = _run({"NUMBA_CACHE_DIR": str(tmp_path)})
    assert "<noa kernel" not in result.stderr
    assert "LISTED <noa kernel ewise_negate_" in result.stdout


def test_parted_runs_the_task_loop_part_by_part():
    source = "def k(out, control):\n    n = out.shape[0]\n    for task in parts_of(n):\n        out[task] = task\n"
    text = kernels.sources.parted(source)
    assert "parts_of" not in text and "take_part(control)" in text and text.rstrip().endswith("part_done(control)")
    scope = kernels.compile_source(text, "k", dict(runtime.PART_HELPERS))
    out = np.zeros(6, np.int64)
    control = np.array([0, 4, 0])
    scope["k"](out, control)  # in Python: one thread takes every part
    assert out.tolist() == [0, 1, 2, 3, 4, 5] and control.tolist() == [5, 4, 4]


@pytest.mark.parametrize("source", [
    "def k(out, control):\n    for task in range(3):\n        out[task] = 1\n",
    "def k(out, control):\n    for task in parts_of(3):\n        out[task] = 1\n    out[0] = 2\n",
    "def k(out, control):\n    for a in parts_of(3):\n        pass\n    for b in parts_of(3):\n        pass\n",
])
def test_parted_refuses_a_template_without_one_last_task_loop(source):
    with pytest.raises(ValueError, match="parts_of"):
        kernels.sources.parted(source)
