"""Builds the two native pieces of the zipccl package:

* libzipccl.so, the Go engine: ``go build -buildmode=c-shared ./capi`` from
  the repository root (the Go module), written into the package directory
  (python/zipccl/ for editable installs, build/lib.../zipccl/ otherwise);
* zipccl._C, the C++ c10d shim: a torch CppExtension of torchext/*.cpp,
  compiled against the installed torch (build with --no-build-isolation).

Environment:
  GO                     the go binary (default: `go` on PATH)
  ZIPCCL_PREBUILT_LIB    copy this libzipccl.so instead of running go build
"""

import glob
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.errors import SetupError

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise SetupError(
        "zipccl: building needs torch installed in this Python; install it "
        "first and build with `pip install --no-build-isolation .`"
    ) from exc

ROOT = os.path.dirname(os.path.abspath(__file__))


def _version():
    with open(os.path.join(ROOT, "python", "zipccl", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _torch_requirement():
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    # The shim is C++ against torch's ABI: only the minor it was built for.
    return f"torch>={major}.{minor},<{major}.{minor + 1}"


class build_ext(BuildExtension):
    """Builds libzipccl.so next to the extension, then the extension."""

    def run(self):
        self._build_go_library()
        super().run()

    def _build_go_library(self):
        pkg_dir = os.path.dirname(self.get_ext_fullpath("zipccl._C"))
        os.makedirs(pkg_dir, exist_ok=True)
        out = os.path.join(pkg_dir, "libzipccl.so")

        prebuilt = os.environ.get("ZIPCCL_PREBUILT_LIB")
        if prebuilt:
            print(f"zipccl: using prebuilt {prebuilt}")
            shutil.copyfile(prebuilt, out)
            return

        go = os.environ.get("GO") or shutil.which("go")
        if not go:
            raise SetupError(
                "zipccl: building libzipccl.so needs the Go toolchain (go 1.26 or "
                "newer) on PATH, or GO=/path/to/go; get it from https://go.dev/dl/ "
                "(or set ZIPCCL_PREBUILT_LIB to an already built libzipccl.so)"
            )
        cmd = [
            go, "build",
            "-buildmode=c-shared",
            "-trimpath",
            "-buildvcs=false",
            "-ldflags", f"-X main.version={_version()}",
            "-o", out,
            "./capi",
        ]
        print("zipccl:", " ".join(cmd))
        try:
            subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, CGO_ENABLED="1"), check=True)
        except subprocess.CalledProcessError as exc:
            raise SetupError(f"zipccl: go build failed (exit {exc.returncode})") from exc
        # cgo's header is not part of the package (the shim uses zipccl_abi.h).
        header = os.path.join(pkg_dir, "libzipccl.h")
        if os.path.exists(header):
            os.remove(header)


setup(
    version=_version(),
    install_requires=[_torch_requirement()],
    ext_modules=[
        CppExtension(
            name="zipccl._C",
            sources=sorted(glob.glob("torchext/*.cpp", root_dir=ROOT)),
            include_dirs=[os.path.join(ROOT, "capi"), os.path.join(ROOT, "torchext")],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            libraries=["dl"],
        )
    ],
    cmdclass={"build_ext": build_ext},
)
