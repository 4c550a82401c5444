"""Build of the optional C accelerator (pymq._speedups); everything else is in pyproject.toml.

``optional=True``: where it cannot be compiled (no compiler, no Python headers) the install
goes on without it and pymq runs its pure-Python code (see docs/ARCHITECTURE.md, "Accelerator").
The CRC is zlib's when zlib's header and library are there, the extension's own table otherwise.
"""

import os
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_ZLIB_CHECK = "#include <zlib.h>\nint main(void) { return (int)crc32(0L, (const Bytef *)\"\", 0); }\n"


class BuildExt(build_ext):
    def _has_zlib(self) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "zlib_check.c")
            with open(src, "w") as f:
                f.write(_ZLIB_CHECK)
            try:
                objects = self.compiler.compile([src], output_dir=tmp)
                self.compiler.link_executable(objects, "zlib_check", output_dir=tmp, libraries=["z"])
            except Exception:  # no zlib headers or library (or no compiler: the build then fails optionally)
                return False
        return True

    def build_extensions(self) -> None:
        if self._has_zlib():
            for ext in self.extensions:
                ext.define_macros.append(("HAVE_ZLIB", "1"))
                ext.libraries.append("z")
        super().build_extensions()


setup(
    ext_modules=[Extension("pymq._speedups", ["pymq/_speedups.c"], optional=True)],
    cmdclass={"build_ext": BuildExt},
)
