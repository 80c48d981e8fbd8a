"""A count with its noun, for every message that names one (the engine's and the server budget's stop reasons, the
CLI, the app): one rule, so that no message says "stopped after 1 ticks". And a latency as the CLI writes it, and a
cost in dollars as the planner's CLI and page write it."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 tick', '2 ticks', '1,200 replicas', '3 stalled stretches' (`plural` where it is not the noun and an s):
    a count and its noun, singular for one."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def latency_text(v_s: float) -> str:
    """A latency in the CLI's lines: in ms under a second ("41.9 ms"), in seconds from one ("7.17 s"), as the app's
    figures and tables switch to seconds (it read "TTFT p50 7,173.5 ms")."""
    return f"{v_s * 1e3:,.1f} ms" if abs(v_s) < 1.0 else f"{v_s:,.2f} s"


def usd_text(usd: float, symbol: str = "$") -> str:
    """Dollars with the decimals their size needs: '$0.053', '$2.41', '$23,789' ($ per million output tokens at a
    tiny target rate read "$23789.164", three decimals on five digits, past the CLI column's 8 characters); `symbol`
    '' under a column headed in dollars."""
    return symbol + (f"{usd:,.0f}" if abs(usd) >= 1000 else f"{usd:,.2f}" if abs(usd) >= 1 else f"{usd:.3f}")


def percent(share: float) -> str:
    """A share as a whole percentage ('42%'), with the decimals it needs never to round a miss away: 299 of 300
    requests meeting the SLOs read '100%', the same as all 300; now '99.7%'. Only 1 is '100%' and only 0 is '0%'
    ('≥99.9%' and '≤0.1%' past three decimals: a leading '>' made a Markdown table's cell a quote); 'n/a' for NaN."""
    if share != share:
        return "n/a"
    share = round(share, 9)  # (a float sum's error: a GPU that never idled read busy 0.9999999999999997, "≥99.9%")
    for decimals in range(4):
        text = f"{share * 100:.{decimals}f}"
        if (float(text) == 100) == (share >= 1) and (float(text) == 0) == (share <= 0):
            return f"{text}%"
    return "≥99.9%" if share > 0.5 else "≤0.1%"
