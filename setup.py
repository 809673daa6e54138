"""Builds libnnc.so with cmake and puts it into the nnc package (pyproject.toml has the rest).

The cmake build goes to build-py/ in this checkout (or $NNC_CMAKE_BUILD_DIR), configured once
for a release build without MPI (one process: mpirun is the command's business); later installs
rebuild only what changed.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        build = os.path.abspath(os.environ.get("NNC_CMAKE_BUILD_DIR") or os.path.join(ROOT, "build-py"))
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DNNC_MPI=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "nnc_shared", "-j", str(os.cpu_count() or 2)])
        os.makedirs(os.path.join(self.build_lib, "nnc"), exist_ok=True)
        shutil.copy2(os.path.join(build, "libnnc.so"), os.path.join(self.build_lib, "nnc", "libnnc.so"))


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution,
      options={"build": {"build_base": os.path.join("build-py", "setuptools")}})
