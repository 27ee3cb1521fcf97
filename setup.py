"""Setup shim: metadata lives in pyproject.toml; this adds the optional C speedups.

``liftbridge_sync._speedups`` (``liftbridge_sync/_speedups.c``, CPython C API only) is
built when a C compiler is available. Building it must never fail an install: without a
compiler, or if compiling fails for any reason, a warning is printed and the package
uses its pure-Python fallback (``liftbridge_sync._wire.speedups``).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


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


setup(
    ext_modules=[
        Extension(
            "liftbridge_sync._speedups",
            [
                "liftbridge_sync/_speedups.c",
                "liftbridge_sync/_speedups_acks.c",
                "liftbridge_sync/_speedups_io.c",
                "liftbridge_sync/_speedups_submit.c",
            ],
            depends=["liftbridge_sync/_speedups.h"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
