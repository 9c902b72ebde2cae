"""Shared helpers of the drainer_client tests.

Unit tests need nothing but the library. Database tests need
DRAINER_TEST_DATABASE_URL (a database migrated by `drainer migrate`) and
DRAINER_TEST_SCHEMA (default drainer); end-to-end tests also need
DRAINER_TEST_DAEMON=1, meaning a `drainer run` on that database routes the
tools of test_e2e.py (integration/sdk_python_test.go sets all of this up).
Without them those tests are skipped with a message saying what is missing.
"""

from __future__ import annotations

import os
import pathlib
import sys
import unittest
import uuid
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
SDK_DIR = HERE.parent
REPO_ROOT = SDK_DIR.parent.parent

# Run from a checkout without installing: import the library from src/.
_SRC = str(SDK_DIR / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

import psycopg  # noqa: E402
import psycopg.sql  # noqa: E402

DATABASE_URL = os.environ.get("DRAINER_TEST_DATABASE_URL", "")
SCHEMA = os.environ.get("DRAINER_TEST_SCHEMA", "") or "drainer"
DAEMON = os.environ.get("DRAINER_TEST_DAEMON", "") == "1"

NO_DATABASE = "set DRAINER_TEST_DATABASE_URL to a database migrated by `drainer migrate` (and DRAINER_TEST_SCHEMA if not drainer) to run the database tests"
NO_DAEMON = "set DRAINER_TEST_DAEMON=1 with a `drainer run` routing the py_* tools (see integration/sdk_python_test.go) to run the end-to-end tests"


def unique(prefix: str) -> str:
    """A name no other test (or earlier run) uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


class DatabaseTestCase(unittest.TestCase):
    """A test case with a fresh non-autocommit connection per test; skipped without a database."""

    conn: "psycopg.Connection[Any]"

    @classmethod
    def setUpClass(cls) -> None:
        if not DATABASE_URL:
            raise unittest.SkipTest(NO_DATABASE)
        super().setUpClass()

    def setUp(self) -> None:
        self.conn = psycopg.connect(DATABASE_URL)
        self.addCleanup(self.conn.close)

    def connect(self, **kwargs: Any) -> "psycopg.Connection[Any]":
        """Another connection, closed when the test ends."""
        c = psycopg.connect(DATABASE_URL, **kwargs)
        self.addCleanup(c.close)
        return c

    def count(self, query: "str | psycopg.sql.Composable", *params: Any) -> int:
        """Run a count on a separate autocommit connection: what others see committed."""
        with psycopg.connect(DATABASE_URL, autocommit=True) as c:
            row = c.execute(query, params).fetchone()  # type: ignore[arg-type]
            assert row is not None
            return int(row[0])

    def outbox_rows(self, key: str) -> int:
        return self.count(f'SELECT count(*) FROM "{SCHEMA}".outbox WHERE key = %s', key)


class DaemonTestCase(DatabaseTestCase):
    """A database test case that also needs a running `drainer run`."""

    @classmethod
    def setUpClass(cls) -> None:
        if not DATABASE_URL:
            raise unittest.SkipTest(NO_DATABASE)
        if not DAEMON:
            raise unittest.SkipTest(NO_DAEMON)
        super().setUpClass()
