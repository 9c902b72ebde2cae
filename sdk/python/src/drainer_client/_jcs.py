"""RFC 8785 (JCS) canonical JSON of a request body, as the receiver's
fingerprint uses it (docs/receiver.md): the same bytes as the Go receiver's
``receiver.CanonicalBody`` (github.com/gowebpki/jcs).

Numbers are IEEE 754 doubles written the ECMAScript way; object members are
sorted by their names' UTF-16 code units; strings are escaped as
:func:`drainer_client._key._jcs_string` does. A text that is not strict
JSON (duplicate member names, NaN or Infinity, a number out of range, a lone
surrogate, trailing data, invalid UTF-8) has no canonical form:
:func:`canonical_json` returns None and the fingerprint takes the bytes.
Nor has a text with a number whose value differs from the value of the text
JCS writes for its double (9007199254740993, 0.10000000000000001, 1e-400;
not 0.1 or 1e23): JCS would make it one request with its neighbour, where
drainer compares numbers as exact decimals.
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


# A nonzero number whose exponent has more digits than this (leading zeros
# aside) is out of double range or not exact.
_MAX_EXPONENT_DIGITS = 9


def _decimal_value(text: str) -> Optional[str]:
    """A form of a decimal number text that two texts share exactly when
    their values are equal, as the Go receiver's decimalValue writes it: "0"
    for zero (of either sign), else the sign, the significant digits without
    leading or trailing zeros, "e" and the position of the decimal point
    relative to the first of them. None for a nonzero number whose exponent
    has more than _MAX_EXPONENT_DIGITS digits."""
    sign = ""
    if text.startswith("-"):
        sign, text = "-", text[1:]
    mantissa, _, exp = text.lower().partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    if not digits:
        return "0"
    point = len(whole) - (len(whole) + len(frac) - len(digits))
    if exp:
        exp_sign = -1 if exp.startswith("-") else 1
        e = exp.lstrip("+-").lstrip("0")
        if len(e) > _MAX_EXPONENT_DIGITS:
            return None
        point += exp_sign * int(e or "0")
    return sign + digits.rstrip("0") + "e" + str(point)


def _exact(text: str, f: float) -> float:
    """f, the double of the number text, if JCS's text for it has the
    text's exact value."""
    want = _decimal_value(text)
    if want is None or want != _decimal_value(es6_number(f)):
        raise _NotCanonical("number not exact as a double")
    return f


def _float(text: str) -> float:
    f = float(text)
    if math.isinf(f):
        raise _NotCanonical("number out of range")
    return _exact(text, f)


def _int(text: str) -> float:
    try:
        f = float(int(text))
    except OverflowError:
        raise _NotCanonical("number out of range") from None
    return _exact(text, f)


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
