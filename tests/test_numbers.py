"""lrdoctor.core.numbers.number: the one formatter behind messages, tables and the report."""

from __future__ import annotations

import math

import numpy as np

from lrdoctor.core.numbers import number


def test_integers_and_whole_floats():
    assert number(1234567) == "1,234,567"
    assert number(1234567.0) == "1,234,567"
    assert number(1234567, grouping=False) == "1234567"
    assert number(np.int64(2048), grouping=False) == "2048"
    # whole_below: past it (or 0: always) a whole float keeps its significant digits
    assert number(3.0, digits=6, whole_below=0) == "3"
    assert number(1e20, digits=6, grouping=False, whole_below=0) == "1e+20"
    assert number(1e16, grouping=False, whole_below=1e15) == "1e+16"


def test_fractions_missing_values_and_others():
    assert number(0.123456789) == "0.1235"
    assert number(0.123456789, digits=6) == "0.123457"
    assert number(1234.5) == "1,234"
    assert number(np.float32(0.5)) == "0.5"
    assert number(None) == "-" and number(None, none="n/a") == "n/a"
    assert number(math.nan, none="n/a") == "n/a"
    assert number(math.inf) == "inf"
    assert number([1000, 0.25]) == "1,000, 0.25"
    assert number(True) == "True" and number("cosine") == "cosine"
