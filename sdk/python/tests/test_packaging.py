"""`pip install --no-build-isolation ./sdk/python` works with Debian's pip, setuptools and wheel.

Installs a copy of the source tree (so no build/ or *.egg-info lands in the
checkout) into a throwaway virtual environment that sees the system's
packages (Debian's psycopg satisfies the dependency; --no-index proves no
package index is needed), then imports the installed library from outside
the source tree. Everything lives in a temporary directory, removed after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import support


class PackagingTest(unittest.TestCase):
    def run_ok(self, *cmd: str, cwd: str) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "PIP_REQUIRE_VIRTUALENV")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            self.fail(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
        return proc.stdout

    def test_pip_install_no_build_isolation(self):
        tmp = tempfile.mkdtemp(prefix="drainer-client-pip-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        src = os.path.join(tmp, "python")
        shutil.copytree(
            support.SDK_DIR,
            src,
            ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "tests"),
        )
        venv = os.path.join(tmp, "venv")
        # --without-pip: needs no ensurepip (Debian's python3-venv); the
        # system's pip installs into the venv through --python.
        self.run_ok(sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv, cwd=tmp)
        py = os.path.join(venv, "bin", "python")
        self.run_ok(
            sys.executable, "-m", "pip", "--python", py, "install", "--no-build-isolation", "--no-index", "./python",
            cwd=tmp,
        )
        out = self.run_ok(
            py,
            "-c",
            "import os, drainer_client as dc; "
            "d = os.path.dirname(dc.__file__); "
            "print(d); print(os.path.exists(os.path.join(d, 'py.typed'))); "
            "print(dc.idempotency_key('run_01HZX3', 'step-1', 'charge_card', 'invoice:inv_555'))",
            cwd=tmp,
        )
        where, typed, key = out.split()
        self.assertTrue(where.startswith(venv), f"imported from {where}, not from the venv")
        self.assertEqual(typed, "True", "py.typed is not installed")
        self.assertEqual(key, "idem_v1_e6c7c02ac181f33f094c9c4dcb4ee22d")
        meta = self.run_ok(py, "-c", "import importlib.metadata as m; print(m.version('drainer-client'))", cwd=tmp)
        self.assertEqual(meta.strip(), "0.1.0")


if __name__ == "__main__":
    unittest.main()
