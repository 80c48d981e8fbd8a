"""Numbers for people: durations in ms below a second and in s above, counts as integers."""

from __future__ import annotations

import math

# What a table shows for a number that is not there (NaN, or a metric an instance has no part in); tables say it
# with st.dataframe(placeholder=MISSING), which showed "None" by default.
MISSING = "–"


def fmt_number(x: float, digits: int = 3, strip_zeros: bool = True) -> str:
    """About `digits` significant digits, never in exponent form (Python's '{:.3g}' wrote 1,143 ms as '1.14e+03'):
    '1,143', '412', '9.8', '0.35'; whole numbers from 10^(digits-1) up, with thousands separators; '–' for NaN, '∞'
    for infinity, '0' for -0.0 (the format raised on NaN and printed '-0'). `strip_zeros=False` keeps a decimal's
    trailing zeros ('9.80'), for figures read side by side (Compare's "1.9 s" beside "2.11 s" looked less precise)."""
    if math.isnan(x):
        return MISSING
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    x = x + 0.0  # (-0.0 + 0.0 is 0.0)
    ax = abs(x)
    decimals = 0 if ax >= 10 ** (digits - 1) or ax == 0 else max(0, digits - 1 - int(math.floor(math.log10(ax))))
    if decimals and abs(round(x, decimals)) >= 10 ** (digits - decimals):  # 0.99999 rounds to 1.000: a digit too many
        decimals -= 1
    text = f"{x:,.{decimals}f}"
    if strip_zeros and "." in text:  # 9.80 ms -> 9.8 ms, 3.00 s -> 3 s
        text = text.rstrip("0").rstrip(".")
    return text


def fmt_seconds(v: float, digits: int = 3, strip_zeros: bool = True) -> str:
    """'–' for NaN; '412 ms', '9.8 ms', '0.35 ms'; '1.42 s', '68.3 s', '1,204 s' (about `digits` significant digits;
    `strip_zeros`: as `fmt_number`)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    unit, x = ("s", v) if abs(v) >= 1 else ("ms", v * 1e3)
    return f"{fmt_number(x, digits, strip_zeros)} {unit}"


def time_unit(values_s) -> tuple[float, str]:
    """(scale, unit) to draw durations: ms when the bulk (p50) is under a second, else s."""
    import numpy as np

    v = np.asarray(values_s, dtype=float)
    v = v[~np.isnan(v)]
    return (1.0, "s") if v.size and float(np.median(v)) >= 1.0 else (1e3, "ms")


def fmt_setting(value: object) -> str:
    """A setting's value as the app writes numbers elsewhere: whole numbers with thousands separators (3,350 GB/s and
    4,096 tokens, not 3350 and 4096), other numbers as Python's shortest form with separators; a switch as the sidebar's
    toggle shows it, on or off (lesson 10's banner read "Prefix caching = `True`"; bool is an int to Python: True would
    read "1"); text as it is."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,g}"


def fmt_count(v: float) -> str:
    return MISSING if v is None or (isinstance(v, float) and math.isnan(v)) else f"{round(v):,}"
