"""Build pymq._speedups with AddressSanitizer + UndefinedBehaviorSanitizer into fuzz/build/ (not the venv's install).

    python fuzz/build_sanitized.py          # prints the .so's path

With clang the C code is also built with ``-fsanitize=fuzzer-no-link`` so libFuzzer (inside
atheris) sees its coverage; with gcc only the sanitizers (the Python code's coverage still
guides). UBSan stops at the first report (``-fno-sanitize-recover``). Loading the result
needs the ASan runtime preloaded into Python: :func:`sanitizer_env` gives the environment
fuzz/run.py runs the targets with (``LD_PRELOAD``, ``ASAN_OPTIONS``, ``PYMQ_FUZZ_SPEEDUPS``).
The build is redone when a C source or header is newer than it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SRC = ROOT / "pymq" / "_speedups_src"
BUILD = HERE / "build"


def compiler() -> str:
    for cc in ("clang", "gcc", "cc"):
        if shutil.which(cc):
            return cc
    raise SystemExit("no C compiler (clang or gcc) on the PATH: the sanitized build needs one")


def _asan_runtime(cc: str) -> str:
    """atheris's ASan runtime with libFuzzer linked in (its wheel ships it): a plain ASan runtime
    would provide the coverage hooks itself and blind libFuzzer to every edge (cov stays 0)."""
    import atheris

    merged = Path(atheris.path()) / "asan_with_fuzzer.so"
    if merged.is_file():
        return str(merged)
    return _compiler_asan_runtime(cc)


def _compiler_asan_runtime(cc: str) -> str:
    name = "libclang_rt.asan-x86_64.so" if "clang" in cc else "libasan.so"
    path = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()
    if not Path(path).is_file():
        raise SystemExit(f"{cc} has no ASan runtime ({name}): install it (Debian: clang or libasan8)")
    return str(Path(path).resolve())


def _has_zlib(cc: str) -> bool:
    probe = BUILD / "zlib_check.c"
    probe.write_text('#include <zlib.h>\nint main(void) { return (int)crc32(0L, (const Bytef *)"", 0); }\n')
    r = subprocess.run([cc, str(probe), "-lz", "-o", str(BUILD / "zlib_check")], capture_output=True, check=False)
    return r.returncode == 0


def build() -> Path:
    """The sanitized extension's path (built now if missing or older than its sources)."""
    BUILD.mkdir(exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = BUILD / f"_speedups{suffix}"
    sources = sorted(SRC.glob("*.c"))
    newest = max(p.stat().st_mtime for p in [*sources, *SRC.glob("*.h"), Path(__file__)])
    if out.exists() and out.stat().st_mtime > newest:
        return out
    cc = compiler()
    sanitize = "address,undefined" + (",fuzzer-no-link" if "clang" in cc else "")
    flags = [
        "-shared",
        "-fPIC",
        "-g",
        "-O1",
        "-fno-omit-frame-pointer",
        f"-fsanitize={sanitize}",
        "-fno-sanitize-recover=undefined",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{SRC}",
    ]
    libs = []
    if _has_zlib(cc):
        flags.append("-DHAVE_ZLIB=1")
        libs.append("-lz")
    cmd = [cc, *flags, *map(str, sources), "-o", str(out), *libs, "-lpthread"]
    print(" ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    return out


def sanitizer_env(so: Path) -> dict[str, str]:
    """The environment a target process needs to load ``so``."""
    cc = compiler()
    return {
        "PYMQ_FUZZ_SPEEDUPS": str(so),
        "LD_PRELOAD": _asan_runtime(cc),
        # Python's own allocations are not instrumented and it frees at exit what it likes: no leak check.
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1:abort_on_error=0:halt_on_error=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }


if __name__ == "__main__":
    print(build())
