"""How lrdoctor writes a number for a person: one formatter, one call per style.

Findings' messages, the text tables, the fix table and the report page each keep
their own look (thousands separators or not, 4 or 6 significant digits, when a
whole float prints as an integer), but they say it here with keywords instead of
each growing its own helper.
"""

from __future__ import annotations

import math
import numbers
from typing import Any


def number(x: Any, *, digits: int = 4, grouping: bool = True, whole_below: float = math.inf,
           none: str = "-") -> str:
    """``x`` for a person.

    - None or NaN: ``none``; a list or tuple: its items joined by ", ";
    - an integer: whole, with thousands separators when ``grouping``;
    - a float: whole like an integer when it is one and ``abs(x) < whole_below``
      (``whole_below=0``: never), else ``digits`` significant digits;
    - anything else (bools, strings): ``str(x)``.
    """
    if x is None:
        return none
    if isinstance(x, (list, tuple)):
        return ", ".join(number(v, digits=digits, grouping=grouping, whole_below=whole_below,
                                none=none) for v in x)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return str(x)
    sep = "," if grouping else ""
    if isinstance(x, numbers.Integral):
        return f"{int(x):{sep}}"
    x = float(x)
    if math.isnan(x):
        return none
    if x.is_integer() and abs(x) < whole_below:
        return f"{int(x):{sep}}"
    return f"{x:{sep}.{digits}g}"
