"""The exceptions of drainer_client.

Every exception the library raises itself derives from :class:`DrainerError`.
Errors of the database (a different payload for the same tuple, SQLSTATE
23505; a serialization failure, 40001; ...) are psycopg's own exceptions and
propagate unchanged, so ``except psycopg.errors.UniqueViolation`` works as
with any other statement. :class:`ConnectionClosed` is both a
:class:`DrainerError` and a :class:`psycopg.OperationalError`.

No message ever contains a payload or a part of one: payloads can hold
personal or secret data. Messages name fields, JSON paths, types and sizes.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import psycopg

__all__ = [
    "DrainerError",
    "InvalidTuple",
    "PayloadError",
    "PayloadTooLarge",
    "WaitTimeout",
    "ConnectionClosed",
    "UsageError",
]


class DrainerError(Exception):
    """Base class of every error raised by drainer_client itself."""


class InvalidTuple(DrainerError, ValueError):
    """A field of the four-tuple breaks the rules of docs/reference.md §1.

    Raised before the database is touched. ``field`` names the first invalid
    field (``agent_run_id``, ``step_id``, ``tool_name`` or
    ``business_scope``) and ``reason`` says what is wrong with it;
    ``problems`` lists every ``(field, reason)`` found, in tuple order.
    """

    field: str
    reason: str
    problems: Tuple[Tuple[str, str], ...]

    def __init__(self, problems: Sequence[Tuple[str, str]]) -> None:
        if not problems:
            raise ValueError("InvalidTuple needs at least one problem")
        self.problems = tuple(problems)
        self.field, self.reason = self.problems[0]
        text = "; ".join(f"{f} {r}" for f, r in self.problems)
        super().__init__(f"invalid intent tuple: {text}")


class PayloadError(DrainerError, ValueError):
    """The payload cannot be stored as the intent's JSON body.

    ``path`` locates the offending value, e.g. ``payload["items"][2]``
    (``payload`` for the whole payload); ``reason`` says what is wrong. The
    value itself is never part of the message.
    """

    path: str
    reason: str

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path} {reason}")


class PayloadTooLarge(PayloadError):
    """The serialised payload is larger than the limit.

    ``size`` is the size of the compact UTF-8 JSON text in bytes and
    ``limit`` the limit it exceeds.
    """

    size: int
    limit: int

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            "payload",
            f"is {size} bytes of JSON, more than the limit of {limit} "
            "(drainer.enqueue refuses payloads above the setting drainer.max_payload_bytes, default 1 MiB)",
        )


class WaitTimeout(DrainerError, TimeoutError):
    """:func:`drainer_client.wait` gave up before the intent settled.

    ``key`` is the intent's key, ``timeout`` the timeout in seconds, and
    ``last_status`` the status read last (``None`` when no row with that key
    was visible: not committed yet, rolled back, or never enqueued).
    """

    key: str
    timeout: float
    last_status: Optional[str]

    def __init__(self, key: str, timeout: float, last_status: Optional[str]) -> None:
        self.key = key
        self.timeout = timeout
        self.last_status = last_status
        if last_status is None:
            state = "no row with this key is visible (not committed yet, rolled back, or never enqueued)"
        else:
            state = f"its status is still {last_status}"
        super().__init__(f"wait {key}: not terminal or parked after {timeout:g}s: {state}")


class ConnectionClosed(DrainerError, psycopg.OperationalError):
    """The connection is closed or broken; nothing was done on it.

    Also a :class:`psycopg.OperationalError`, so handlers written for
    psycopg's own connection errors catch it. When the connection broke
    during a statement, ``__cause__`` holds psycopg's error.
    """


class UsageError(DrainerError):
    """The library was called in a way that cannot do what was asked.

    For example: :func:`~drainer_client.enqueue` on an autocommit connection
    outside any transaction block, :func:`~drainer_client.wait` inside a
    transaction, an ``@outbox_tool`` function called outside
    :func:`~drainer_client.agent_step`, or an invalid schema name.
    """
