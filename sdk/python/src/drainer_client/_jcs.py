"""RFC 8785 (JCS) canonical JSON of a request body, as the receiver's
fingerprint uses it (docs/receiver.md): the same bytes as the Go receiver's
``receiver.CanonicalBody`` (github.com/gowebpki/jcs).

Numbers are IEEE 754 doubles written the ECMAScript way; object members are
sorted by their names' UTF-16 code units; strings are escaped as
:func:`drainer_client._key._jcs_string` does. A text that is not strict
JSON (duplicate member names, NaN or Infinity, a number out of range, a lone
surrogate, trailing data, invalid UTF-8) has no canonical form:
:func:`canonical_json` returns None and the fingerprint takes the bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional, Tuple

from ._key import _jcs_string


class _NotCanonical(Exception):
    pass


def _pairs(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    d: Dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            raise _NotCanonical("duplicate member name")
        d[k] = v
    return d


def _constant(name: str) -> Any:
    raise _NotCanonical(f"{name} is not JSON")


def _float(text: str) -> float:
    f = float(text)
    if math.isinf(f):
        raise _NotCanonical("number out of range")
    return f


def _int(text: str) -> float:
    try:
        f = float(int(text))
    except OverflowError:
        raise _NotCanonical("number out of range") from None
    return f


def es6_number(x: float) -> str:
    """Write a finite double the way ECMAScript's Number.prototype.toString does."""
    if x != x or math.isinf(x):
        raise _NotCanonical("not a finite number")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    r = repr(abs(x))  # the shortest text that reads back as the same double
    mant, _, exp_s = r.partition("e")
    exp = int(exp_s) if exp_s else 0
    intpart, _, frac = mant.partition(".")
    if frac == "0":
        frac = ""
    all_digits = intpart + frac
    digits = all_digits.lstrip("0")
    stripped = digits.rstrip("0")
    k = len(stripped)
    # value = stripped * 10^(n - k)
    n = k + exp - len(frac) + (len(digits) - len(stripped))
    d = stripped
    if k <= n <= 21:
        out = d + "0" * (n - k)
    elif 0 < n <= 21:
        out = d[:n] + "." + d[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + d
    else:
        e = n - 1
        es = ("+" if e >= 0 else "-") + str(abs(e))
        out = (d if k == 1 else d[0] + "." + d[1:]) + "e" + es
    return sign + out


def _write(v: Any, out: List[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, float):
        out.append(es6_number(v))
    elif isinstance(v, str):
        out.append(_jcs_string(v))
    elif isinstance(v, list):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(v, dict):
        out.append("{")
        for i, name in enumerate(sorted(v, key=lambda s: s.encode("utf-16-be", "surrogatepass"))):
            if i:
                out.append(",")
            out.append(_jcs_string(name))
            out.append(":")
            _write(v[name], out)
        out.append("}")
    else:  # pragma: no cover - json.loads yields nothing else
        raise _NotCanonical(f"unexpected {type(v).__name__}")


def canonical_json(body: bytes) -> Optional[bytes]:
    """The JCS canonical form of a JSON text, or None if it has none."""
    try:
        text = body.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant,
                           parse_float=_float, parse_int=_int)
        out: List[str] = []
        _write(value, out)
        return "".join(out).encode("utf-8")  # a lone surrogate fails here
    except (ValueError, _NotCanonical, RecursionError, UnicodeError):
        return None
