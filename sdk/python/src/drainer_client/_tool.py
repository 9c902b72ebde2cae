"""The agent-side decorator: a tool call becomes an intent in the caller's transaction."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type, TypeVar, Union

from ._client import DEFAULT_SCHEMA, enqueue
from ._errors import InvalidTuple, UsageError
from ._key import tuple_problems
from ._payload import DEFAULT_MAX_PAYLOAD_BYTES

__all__ = ["AgentStep", "agent_step", "current_step", "outbox_tool", "OutboxTool", "Scope"]


@dataclass(frozen=True)
class AgentStep:
    """The step an agent is executing: where ``@outbox_tool`` calls enqueue to.

    Set by :func:`agent_step` for the code inside its ``with`` block.
    """

    #: A psycopg Connection or a SQLAlchemy Session/Connection (sync tools),
    #: or their async counterparts (tools of drainer_client.aio).
    conn: Any
    agent_run_id: str
    step_id: str
    schema: str = DEFAULT_SCHEMA
    max_payload_bytes: Optional[int] = DEFAULT_MAX_PAYLOAD_BYTES


_current: "contextvars.ContextVar[Optional[AgentStep]]" = contextvars.ContextVar("drainer_client_agent_step", default=None)


@contextlib.contextmanager
def agent_step(
    conn: Any,
    agent_run_id: str,
    step_id: str,
    *,
    schema: str = DEFAULT_SCHEMA,
    max_payload_bytes: Optional[int] = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Iterator[AgentStep]:
    """Make ``(conn, agent_run_id, step_id)`` the current step for ``@outbox_tool`` calls.

    Inside the ``with`` block, every call of an ``@outbox_tool`` function
    enqueues its intent on ``conn`` under this run and step; nest it inside
    your transaction so the intents commit with your own writes::

        with conn.transaction(), agent_step(conn, run_id, "charge"):
            conn.execute("UPDATE invoices SET state = 'charging' WHERE id = %s", [inv])
            key = charge_card(invoice_id=inv, amount_cents=500)

    The step is held in a :mod:`contextvars` variable, so it is local to
    the thread (and to the asyncio task) that entered the block, and blocks
    nest (the innermost wins until it exits). ``step_id`` must be the same
    on every retry of the step: derive it from the plan, never from time or
    randomness. The run and step are validated on entry
    (:class:`InvalidTuple`).

    ``conn`` is whatever :func:`enqueue` takes: a psycopg ``Connection`` or
    a SQLAlchemy ``Session``/``Connection``; for the awaited tools of
    :func:`drainer_client.aio.outbox_tool`, a psycopg ``AsyncConnection`` or
    a SQLAlchemy ``AsyncSession``/``AsyncConnection``. The block itself does
    no I/O, so async code enters it with a plain ``with``.
    """
    problems = [p for p in tuple_problems(agent_run_id, step_id, "-", "") if p[0] in ("agent_run_id", "step_id")]
    if problems:
        raise InvalidTuple(problems)
    step = AgentStep(conn, agent_run_id, step_id, schema, max_payload_bytes)
    token = _current.set(step)
    try:
        yield step
    finally:
        _current.reset(token)


def current_step() -> Optional[AgentStep]:
    """The step set by the innermost enclosing :func:`agent_step`, or ``None``."""
    return _current.get()


Scope = Union[str, Callable[..., str], None]


class OutboxTool:
    """A tool function replaced by its intent: what ``@outbox_tool`` returns.

    Calling it enqueues ``(run, step, tool_name, scope)`` with the call's
    arguments as payload in the current :func:`agent_step` and returns the
    key; the function's body is not run (it is kept as ``__wrapped__``, for
    the provider side or tests). :meth:`enqueue` does the same and returns
    ``(key, created)``.
    """

    def __init__(self, func: Callable[..., Any], tool_name: str, scope: Scope) -> None:
        self.__wrapped__ = func
        self.tool_name = tool_name
        self.scope = scope
        self._signature = inspect.signature(func)
        functools.update_wrapper(self, func)

    def __repr__(self) -> str:
        return f"<outbox_tool {self.tool_name!r} of {getattr(self.__wrapped__, '__qualname__', self.__wrapped__)!r}>"

    def arguments(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        """The payload of a call: every parameter by name, defaults applied.

        ``**kwargs`` parameters are merged in by name and ``*args`` ones
        become a list under their name. A call that does not fit the
        function's signature raises ``TypeError``, as the call itself would.
        """
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        out: Dict[str, Any] = {}
        extra: Dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self._signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                extra.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                out[name] = list(value)
            else:
                out[name] = value
        for name, value in extra.items():
            if name in out:
                raise TypeError(f"{self.tool_name}: argument {name!r} given twice (by position and in **kwargs)")
            out[name] = value
        return out

    def business_scope(self, arguments: Dict[str, Any]) -> str:
        """The business scope of a call with these arguments."""
        if self.scope is None:
            return ""
        if isinstance(self.scope, str):
            return self.scope
        value = self.scope(**arguments)
        if not isinstance(value, str):
            raise InvalidTuple([("business_scope", f"must be a str, not {type(value).__name__} (returned by the scope function of {self.tool_name})")])
        return value

    def _intent(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[AgentStep, Dict[str, Any], str]:
        """The current step, the payload and the scope of a call."""
        step = _current.get()
        if step is None:
            raise UsageError(
                f"{self.tool_name} was called outside `with agent_step(conn, run_id, step_id):`; "
                "an outbox tool needs the run, the step and the transaction to enqueue into"
            )
        arguments = self.arguments(*args, **kwargs)
        return step, arguments, self.business_scope(arguments)

    def enqueue(self, *args: Any, **kwargs: Any) -> Tuple[str, bool]:
        """Enqueue the call in the current agent step; return ``(key, created)``."""
        step, arguments, scope = self._intent(args, kwargs)
        key, created = enqueue(
            step.conn,
            step.agent_run_id,
            step.step_id,
            self.tool_name,
            scope,
            arguments,
            schema=step.schema,
            max_payload_bytes=step.max_payload_bytes,
        )
        return key, created

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        """Enqueue the call in the current agent step and return its key."""
        return self.enqueue(*args, **kwargs)[0]


def outbox_tool(tool_name: str, *, scope: Scope = None) -> Callable[[Callable[..., Any]], OutboxTool]:
    """Decorate a tool function so that calling it enqueues an intent instead of running it.

    ::

        @outbox_tool("charge_card", scope=lambda invoice_id, **_: f"invoice:{invoice_id}")
        def charge_card(invoice_id: str, amount_cents: int) -> None:
            ...  # never runs in the agent: the provider does the work

        with conn.transaction(), agent_step(conn, run_id, "charge"):
            key = charge_card(invoice_id="inv_555", amount_cents=500)

    A call takes the connection, run and step from the enclosing
    :func:`agent_step` (:class:`UsageError` outside one; the connection may be
    a SQLAlchemy ``Session`` or ``Connection`` too), enqueues
    ``(run, step, tool_name, scope)`` with the call's arguments as JSON
    object payload (every parameter by name, defaults applied) in that
    connection's current transaction, and returns the key. A retried step
    making the same call gets the same key; the same call with other
    arguments in the same step and scope raises psycopg's
    ``UniqueViolation``.

    ``scope`` is the business scope: a fixed ``str``, or a function called
    with every argument of the call by name (so ``lambda invoice_id, **_:``
    picks one), or ``None`` for the empty scope. ``tool_name`` is validated
    now (:class:`InvalidTuple`). Coroutine functions are refused
    (``TypeError``): async agents use :func:`drainer_client.aio.outbox_tool`,
    whose calls are awaited.
    """
    return _decorator(tool_name, scope, OutboxTool, allow_coroutine=False)


_Tool = TypeVar("_Tool", bound=OutboxTool)


def _decorator(
    tool_name: str, scope: Scope, cls: Type[_Tool], *, allow_coroutine: bool
) -> Callable[[Callable[..., Any]], _Tool]:
    """The decorator of outbox_tool (sync) and drainer_client.aio.outbox_tool (async)."""
    problems = [p for p in tuple_problems("-", "-", tool_name, "") if p[0] == "tool_name"]
    if problems:
        raise InvalidTuple(problems)
    if scope is not None and not isinstance(scope, str) and not callable(scope):
        raise TypeError(f"outbox_tool({tool_name!r}): scope must be a str, a function returning a str, or None")
    if isinstance(scope, str):
        bad = [p for p in tuple_problems("-", "-", "-", scope) if p[0] == "business_scope"]
        if bad:
            raise InvalidTuple(bad)

    def decorate(func: Callable[..., Any]) -> _Tool:
        if not callable(func):
            raise TypeError(f"outbox_tool({tool_name!r}) decorates a function, not {type(func).__name__}")
        if not allow_coroutine and inspect.iscoroutinefunction(func):
            raise TypeError(
                f"outbox_tool({tool_name!r}): {getattr(func, '__qualname__', func)} is a coroutine function; "
                "for async agents use drainer_client.aio.outbox_tool (its calls are awaited)"
            )
        return cls(func, tool_name, scope)

    return decorate
