"""Setup shim: metadata lives in pyproject.toml; this adds the optional C speedups.

``liftbridge_sync._speedups`` (``liftbridge_sync/_speedups.c``, CPython C API only) is
built when a C compiler is available. Building it must never fail an install: without a
compiler, or if compiling fails for any reason, a warning is printed and the package
uses its pure-Python fallback (``liftbridge_sync._wire.speedups``).
"""

from pathlib import Path
from typing import Any

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.editable_wheel import editable_wheel

#: The directory holding only the top-level ``pyspark_liftbridge`` module (not itself a
#: package, so ``find_packages`` does not take it into ``liftbridge_sync``).
PLUGIN_DIR = "liftbridge_sync/spark/plugin"


class OptionalBuildExt(build_ext):
    """``build_ext`` whose failures fall back to pure Python instead of failing."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers, ...
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc)

    @staticmethod
    def _skip(exc: Exception) -> None:
        print(f"WARNING: liftbridge_sync._speedups not built ({exc}); using pure Python")


class _PluginPath:
    """Wraps an editable strategy: also puts :data:`PLUGIN_DIR` on ``sys.path``.

    PySpark finds Python data sources with ``pkgutil.iter_modules()``, which lists the
    modules of ``sys.path`` directories but not those that setuptools' editable
    import hook maps. A ``.pth`` line naming :data:`PLUGIN_DIR` (which holds nothing but
    ``pyspark_liftbridge``) makes ``format("liftbridge")`` work in an editable install
    from any working directory, without exposing ``tests`` or ``bench``.
    """

    def __init__(self, strategy: Any, directory: Path) -> None:
        self._strategy = strategy
        self._directory = directory

    def __call__(self, wheel: Any, files: list[str], mapping: dict[str, str]) -> None:
        self._strategy(wheel, files, mapping)
        name = "__editable__.liftbridge_sync_spark_plugin.pth"
        wheel.writestr(name, f"{self._directory}\n".encode())

    def __enter__(self) -> Any:
        self._strategy.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._strategy.__exit__(*exc)


class EditableWheel(editable_wheel):
    """``pip install -e .`` that keeps ``pyspark_liftbridge`` discoverable by PySpark."""

    def _select_strategy(self, name: str, tag: str, build_lib: Any) -> Any:
        strategy = super()._select_strategy(name, tag, build_lib)
        return _PluginPath(strategy, Path(self.project_dir or ".", PLUGIN_DIR).resolve())


setup(
    packages=[
        *find_packages(include=["liftbridge_sync", "liftbridge_sync.*"]),
        "pyspark_liftbridge",
    ],
    package_dir={"pyspark_liftbridge": f"{PLUGIN_DIR}/pyspark_liftbridge"},
    ext_modules=[
        Extension(
            "liftbridge_sync._speedups",
            [
                "liftbridge_sync/_speedups.c",
                "liftbridge_sync/_speedups_acks.c",
                "liftbridge_sync/_speedups_ack.c",
                "liftbridge_sync/_speedups_entry.c",
                "liftbridge_sync/_speedups_future.c",
                "liftbridge_sync/_speedups_gate.c",
                "liftbridge_sync/_speedups_io.c",
                "liftbridge_sync/_speedups_lock.c",
                "liftbridge_sync/_speedups_outbound.c",
                "liftbridge_sync/_speedups_submit.c",
                "liftbridge_sync/_speedups_table.c",
            ],
            depends=["liftbridge_sync/_speedups.h"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt, "editable_wheel": EditableWheel},
)
