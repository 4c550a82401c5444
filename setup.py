"""Build of the optional C accelerator (pymq._speedups, from pymq/_speedups_src/); everything else is in pyproject.toml.

``optional=True``: where it cannot be compiled (no compiler, no Python headers) the install
goes on without it and pymq runs its pure-Python code (see docs/ARCHITECTURE.md, "Accelerator").
The CRC is zlib's when zlib's header and library are there, the extension's own table otherwise.
"""

import os
import tempfile
from glob import glob

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


# One extension module from several C files, each with one job (speedups.h there maps them).
# All of the directory's .c files: one left out would leave the module unbuilt (it is optional) or unimportable,
# and record.py would quietly run pure Python. Not a pymq/_speedups/ directory: where no .so was built, that
# would import as an empty namespace package under the extension's name.
# depends: an edit of the shared header rebuilds every file (and the sdist carries it).
SPEEDUPS_SRC = "pymq/_speedups_src"
SPEEDUPS = Extension(
    "pymq._speedups",
    sorted(glob(f"{SPEEDUPS_SRC}/*.c")),
    depends=sorted(glob(f"{SPEEDUPS_SRC}/*.h")),
    optional=True,
)

setup(
    ext_modules=[SPEEDUPS],
    cmdclass={"build_ext": BuildExt},
)
