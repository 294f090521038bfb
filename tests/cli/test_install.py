"""Installing noa as a user does, and the install advice noa gives.

- README's Install: a wheel of the checkout installed with its extras into a fresh, plain virtual environment
  (no system site-packages) gives a working ``noa`` there (``--version``, ``info``) and what examples/client.py
  imports; marked slow (minutes). It skips when no package index can be reached for the dependencies.
- scripts/demo installs the extras that what the README shows needs (``serve``, ``dask``, ``client``).
- The errors for a missing optional dependency name commands that work from a checkout (noa is not on a
  package index: ``pip install 'noa[dask]'`` finds nothing there).
- The CUDA tests that this process skips say why, and where they run instead.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from helpers import EXAMPLE_MAP, REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
CHECKOUT_COMMANDS = ("pip install -e '.[{extra}]'", "pip install '.[{extra}]'")


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked and not ignored), without .venv or build outputs."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True, timeout=60)
    if listed.returncode != 0:  # not a git checkout (an unpacked archive): copy it, less what builds leave
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache"))
        return dest
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def clean_env() -> dict[str, str]:
    """This environment less what points Python at the test environment's packages."""
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}


def run(argv: list, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, env=clean_env(),
                          timeout=timeout)


@pytest.mark.slow
def test_a_wheel_of_the_checkout_installs_into_a_fresh_venv(tmp_path):
    # Is an index (the configured one, or PyPI) reachable for noa's dependencies? Else skip, saying so.
    probe = run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest", tmp_path / "probe",
                 "typer", "setuptools>=77"], tmp_path, timeout=300)
    if probe.returncode != 0:
        pytest.skip("no package index reachable for noa's dependencies (pip download failed: "
                    f"{(probe.stderr.strip().splitlines() or ['?'])[-1]})")

    source = checkout_copy(tmp_path / "checkout")
    wheels = tmp_path / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, "."], source)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    # issue 40 item 10: setuptools' 40-line "Package 'noa_server.static' is absent ... would be ignored" box
    assert "would be ignored" not in built.stdout + built.stderr and "BuildBackendWarning" not in built.stderr
    (wheel,) = wheels.glob("noa-*.whl")
    import zipfile

    assert {"noa_server/static/view.html", "noa_server/static/view.js", "noa_server/static/view.css"} <= set(
        zipfile.ZipFile(wheel).namelist())

    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", venv], tmp_path, timeout=300)
    assert made.returncode == 0, made.stderr
    config = (venv / "pyvenv.cfg").read_text()
    assert re.search(r"include-system-site-packages\s*=\s*false", config), config
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    # README: pip install '.[serve,dask]'; scripts/demo adds client (httpx, for examples/client.py)
    installed = run([python, "-m", "pip", "install", "--quiet", f"{wheel}[serve,dask,client]"], tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    version = run([bin_dir / "noa", "--version"], tmp_path, timeout=300)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"noa {PYPROJECT['project']['version']}"
    where = run([python, "-c", "import noa_core, noa_cli, noa_server; print(noa_core.__file__)"], tmp_path)
    assert where.returncode == 0 and Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr

    info = run([bin_dir / "noa", "info", EXAMPLE_MAP.relative_to(REPO)], REPO, timeout=300)
    assert info.returncode == 0, info.stderr
    assert "float32" in info.stdout and "20" in info.stdout, info.stdout

    client = run([python, REPO / "examples" / "client.py", "--help"], tmp_path, timeout=300)
    assert client.returncode == 0 and "--url" in client.stdout, client.stderr
    extras = run([python, "-c", "import distributed, dask.array, httptools"], tmp_path, timeout=300)
    assert extras.returncode == 0, extras.stderr


def test_every_package_of_the_checkout_is_installed():
    """A package folder missing from [tool.setuptools] packages is left out of the wheel and the container image
    (noa_core.tomography was, so `noa tiltseries` failed there with ModuleNotFoundError while every checkout test
    passed): every folder holding an __init__.py is listed."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    folders = {"noa_core": REPO / "noa_core", "noa_cli": REPO / "noa_cli", "noa_server": REPO / "server"}
    found = {".".join([name, *init.parent.relative_to(root).parts])
             for name, root in folders.items() for init in root.rglob("__init__.py")}
    assert found - listed == set(), f"packages not in pyproject.toml's [tool.setuptools] packages: {found - listed}"


def test_scripts_demo_installs_what_the_readme_shows():
    demo = (REPO / "scripts" / "demo").read_text(encoding="utf-8")
    installs = re.findall(r"pip install (?:--quiet )?-e '\.\[([\w,]+)\]'", demo)
    assert len(installs) == 1, demo
    extras = set(installs[0].split(","))
    assert {"serve", "dask", "client"} <= extras and extras <= EXTRAS.keys()
    # what examples/client.py imports beyond the standard library is in the client extra
    client = (REPO / "examples" / "client.py").read_text(encoding="utf-8")
    assert re.search(r"^import httpx$", client, re.M)
    assert any(re.match(r"httpx\b", requirement) for requirement in EXTRAS["client"])


def _names_checkout_commands(message: str, extra: str) -> None:
    assert extra in EXTRAS, extra
    for command in CHECKOUT_COMMANDS:
        assert command.format(extra=extra) in message, (command, message)
    assert "pip install 'noa[" not in message, message  # noa is on no index: that finds nothing


def test_missing_dask_says_the_command_that_works_from_a_checkout(monkeypatch):
    from noa_core.errors import SchedulerError
    from noa_core.run import cluster

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed: ImportError
    with pytest.raises(SchedulerError) as caught:
        cluster._distributed()
    _names_checkout_commands(str(caught.value), "dask")


def test_missing_cupy_says_the_command_that_works_from_a_checkout():
    from noa_core.fourier.fft import CUPY_HINT

    _names_checkout_commands(CUPY_HINT, "cupy")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_skip_reason_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["test_cuda_kernels", "test_cuda_transform", "test_interop_sim"])
def test_cuda_tests_skipped_here_say_where_they_run(name):
    module = _load(REPO / "tests" / "kernels" / "cuda_sim" / f"{name}.py")
    reason = module.pytestmark.kwargs["reason"]  # the module's one skipif
    if importlib.util.find_spec("numba_cuda") is not None:
        assert "tests/kernels/test_cuda_sim.py (in its own process)" in reason and "simulator" in reason, reason
    else:
        assert "needs numba-cuda (pip install -e '.[cuda]')" in reason, reason
    assert "cuda" in EXTRAS


def test_one_summary_of_what_noa_is():
    """Issue 40 item 11: `noa --help`, the package and the service said "reshape, reorder and convert MRC and TIFF"."""
    from noa_core import SUMMARY

    assert PYPROJECT["project"]["description"] == SUMMARY
    assert all(word in SUMMARY for word in ("cryo-EM", "OME-Zarr", "EER", "filter"))
    result = subprocess.run([sys.executable, "-m", "noa_cli.main", "--help"], capture_output=True, text=True,
                            cwd=REPO, timeout=60)
    assert SUMMARY in " ".join(result.stdout.split())  # the help wraps it
