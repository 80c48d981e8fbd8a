"""Tables that fit a phone: a results table opens on the few columns that fit 390 px (each at a width in px that adds
up to less than a phone's ~356-px box), an "All columns" toggle brings the rest back with the first of them pinned
while the numbers scroll. The width of the browser is not known to the server, so the table cannot pick by itself;
the data is the same either way.

The page calls `all_columns_toggle` inside an `st.fragment` (the toggle then redraws the table alone: a rerun of the
page would run its search or sweep again), builds its column config knowing which view it draws, and draws it with
`dataframe`."""

from __future__ import annotations

import streamlit as st

# The px a table's compact columns may take at 390 px: the page's box there is ~356 px, less the grid's borders.
PHONE_TABLE_PX = 352


# Streamlit's grid: a row and the header are 35 px each, and its border 3 px.
ROW_PX = 35
TABLE_BORDER_PX = 3


def fitted_height_px(num_rows: int, max_px: int) -> int:
    """A table's height that holds `num_rows` rows and its header, at most `max_px` (then it scrolls): at a fixed height a
    short run's table showed blank rows under its last (eight requests and three empty rows at 420 px, a review)."""
    return min(max_px, ROW_PX * (num_rows + 1) + TABLE_BORDER_PX)


def all_columns_toggle(key: str, adds: str) -> bool:
    """The "All columns" toggle; `adds` names what it brings back (its help)."""
    return st.toggle("All columns", key=key, help=f"{adds}. Off: the columns that fit a phone.")


def dataframe(data, *, key: str, all_columns: bool, compact_px: dict[str, int], column_config: dict[str, dict],
              pinned: str | None = None, **kwargs) -> None:  # fmt: skip
    """`data` as a table (no index): compact, the columns of `compact_px` in its order at its widths; with all columns,
    every column at its natural width, `pinned` (default: the first compact column) kept in view."""
    pinned = pinned or next(iter(compact_px))
    config = {}
    for name, column in column_config.items():
        column = dict(column)  # (st.column_config's columns are dicts)
        if all_columns:
            column["pinned"] = True if name == pinned else column.get("pinned")
        elif name in compact_px:
            column["width"] = compact_px[name]
        config[name] = column
    if not all_columns:  # a compact column without a config of its own still gets its width
        config |= {name: {"width": px} for name, px in compact_px.items() if name not in config}
    st.dataframe(data, hide_index=True, key=key, column_order=None if all_columns else list(compact_px),
                 column_config=config, **kwargs)  # fmt: skip
