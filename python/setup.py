"""`pip install ./python`: the reckon package into the Python that runs pip
(a venv made with --system-site-packages beside Debian's python3-torch),
offline:

    python3 -m venv --system-site-packages ~/reckon-venv
    ~/reckon-venv/bin/pip install --no-build-isolation --no-index ./python

The extension (reckon._reckon) is the project's CMake target `_reckon`,
built for this Python from the checkout this folder is in, with Debian's
toolchain and libraries (deploy/install-deps.sh); --no-build-isolation lets
pip use Debian's setuptools rather than fetch one. RECKON_BUILD_DIR names a
CMake build tree to build the target in (an existing `build` is reused:
nothing is compiled again); else one is made under python/build-cmake
(about ten minutes on 2 cores).
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    """Builds `_reckon` with the project's CMake and puts it in the package."""

    def build_extension(self, ext):
        tree = os.environ.get("RECKON_BUILD_DIR") or os.path.join(HERE, "build-cmake")
        if not os.path.exists(os.path.join(tree, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", tree, "-G", "Ninja",
                            "-DCMAKE_BUILD_TYPE=Release", f"-DRECKON_PYTHON={sys.executable}"],
                           check=True)
        subprocess.run(["cmake", "--build", tree, "--target", "_reckon"], check=True)
        built = os.path.join(tree, "python", "reckon")
        module = next((f for f in os.listdir(built) if f.startswith("_reckon.")), None)
        if module is None:
            sys.exit(f"reckon: no _reckon module in {built}: was pybind11-dev found? "
                     "(deploy/install-deps.sh)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, module), target)


setup(
    name="reckon",
    version="0.1.0",
    description="One network trained on many machines by Strom's threshold gossip",
    packages=["reckon"],
    package_dir={"reckon": "reckon"},
    ext_modules=[Extension("reckon._reckon", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
)
