"""Check what `make dist` built, as PyPI and a user's ``pip install`` will see it.

Usage: ``python .ci/check_dist.py DIST_DIR 3.11 3.12 ...``

* the sdist holds what building and testing from it need: C sources, protos, tests,
  examples, LICENSE, CHANGELOG;
* one ``manylinux`` wheel per version, holding the compiled extension, ``py.typed``,
  the ``.pyi`` stubs and the license, and no C sources;
* the metadata carries the license expression, the classifiers and the URLs;
* each wheel installs into a fresh virtualenv of its interpreter, where the C speedups
  import from site-packages, ``liftbridge-sync`` without the ``cli`` extra says what to
  install (one line, exit 1), and with it ``--version`` reports the speedups active.

Exits non-zero with every problem listed. Not thread-safe (a script).
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SDIST_NEEDS = [
    "LICENSE",
    "CHANGELOG.md",
    "README.md",
    "pyproject.toml",
    "setup.py",
    "protos/liftbridge_sync/_proto/api.proto",
    "tests/conftest.py",
    "tests/unit/test_package.py",
    "examples/demo.py",
    "liftbridge_sync/_speedups.c",
    "liftbridge_sync/_speedups.h",
]
WHEEL_NEEDS = ["liftbridge_sync/py.typed", "liftbridge_sync/_speedups.pyi"]
METADATA_NEEDS = [
    ("License-Expression", "Apache-2.0"),
    ("License-File", "LICENSE"),
    ("Requires-Python", ">=3.11"),
    ("Classifier", "Typing :: Typed"),
    ("Classifier", "Programming Language :: Python :: 3.11"),
    ("Classifier", "Programming Language :: Python :: 3.12"),
    ("Classifier", "Programming Language :: Python :: 3.13"),
]

INSTALLED_CHECK = """
import sys, sysconfig
from pathlib import Path
import liftbridge_sync
from liftbridge_sync import _speedups
site = Path(sysconfig.get_paths()["purelib"]).resolve()
for module in (liftbridge_sync, _speedups):
    assert Path(module.__file__).resolve().is_relative_to(site), module.__file__
assert liftbridge_sync.speedups_active(), "the wheel's speedups do not load"
print(liftbridge_sync.__version__)
"""


def _metadata_problems(text: str, where: str) -> list[str]:
    message = email.parser.Parser().parsestr(text)
    problems = []
    for key, value in METADATA_NEEDS:
        if value not in (message.get_all(key) or []):
            problems.append(f"{where}: metadata lacks {key}: {value}")
    if not any(url.startswith("Source, ") for url in message.get_all("Project-URL") or []):
        problems.append(f"{where}: metadata lacks a Source URL")
    return problems


def check_sdist(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        top = names[0].split("/")[0]
        member = archive.extractfile(f"{top}/PKG-INFO")
        assert member is not None
        pkg_info = member.read().decode()
    inside = {name.removeprefix(top + "/") for name in names}
    problems = [f"{sdist.name}: lacks {need}" for need in SDIST_NEEDS if need not in inside]
    stray = [name for name in inside if name.endswith((".so", ".pyc"))]
    problems += [f"{sdist.name}: ships a build product {name}" for name in stray]
    return problems + _metadata_problems(pkg_info, sdist.name)


def check_wheel(wheel: Path, version: str) -> list[str]:
    tag = "cp" + version.replace(".", "")
    problems = []
    if "manylinux" not in wheel.name:
        problems.append(f"{wheel.name}: not a manylinux wheel")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata_name).decode()
    problems += [f"{wheel.name}: ships C source {n}" for n in names if n.endswith((".c", ".h"))]
    problems += [f"{wheel.name}: lacks {need}" for need in WHEEL_NEEDS if need not in names]
    extension = f"liftbridge_sync/_speedups.cpython-{tag[2:]}-"
    if not any(n.startswith(extension) and n.endswith(".so") for n in names):
        problems.append(f"{wheel.name}: lacks the compiled extension {extension}*.so")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append(f"{wheel.name}: lacks dist-info/licenses/LICENSE")
    return problems + _metadata_problems(metadata, wheel.name)


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result: subprocess.CompletedProcess[str] = subprocess.run(
        command, capture_output=True, text=True, timeout=600, **kwargs
    )
    return result


def check_install(wheel: Path, version: str) -> list[str]:
    """Install ``wheel`` into a fresh virtualenv of ``version`` and use it."""
    python = _run([str(HERE / "python-for"), version], check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix=f"lb-wheel-{version}-") as tmp:
        venv = Path(tmp) / "venv"
        _run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        installed = _run([*pip, str(wheel)])
        if installed.returncode:
            return [f"{wheel.name}: pip install failed:\n{installed.stderr}"]
        # -P and a neutral cwd: the checkout must not shadow site-packages.
        used = _run([str(venv / "bin" / "python"), "-P", "-c", INSTALLED_CHECK], cwd=tmp)
        if used.returncode:
            return [f"{wheel.name}: installed package fails:\n{used.stderr}"]
        problems = []
        command = str(venv / "bin" / "liftbridge-sync")
        bare = _run([command, "--version"], cwd=tmp)
        lines = bare.stderr.splitlines()
        if bare.returncode != 1 or len(lines) != 1 or "liftbridge-sync[cli]" not in lines[0]:
            problems.append(f"{wheel.name}: without the cli extra: {bare.returncode} {lines}")
        _run([*pip, f"{wheel}[cli]"], check=True)
        full = _run([command, "--version"], cwd=tmp)
        if full.returncode or "C speedups active" not in full.stdout:
            problems.append(f"{wheel.name}: --version: {full.stdout!r} {full.stderr!r}")
        return problems


def main(dist: Path, versions: list[str]) -> int:
    sdists = sorted(dist.glob("*.tar.gz"))
    problems = [f"{dist}: expected one sdist, found {len(sdists)}"] if len(sdists) != 1 else []
    problems += [p for sdist in sdists for p in check_sdist(sdist)]
    for version in versions:
        tag = "cp" + version.replace(".", "")
        wheels = sorted(dist.glob(f"*-{tag}-{tag}-*.whl"))
        if len(wheels) != 1:
            problems.append(f"{dist}: expected one {tag} wheel, found {wheels}")
            continue
        problems += check_wheel(wheels[0], version)
        problems += check_install(wheels[0], version)
        print(f"{wheels[0].name}: ok" if not problems else f"{wheels[0].name}: checked")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(f"dist ok: {', '.join(p.name for p in sorted(dist.iterdir()))}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
