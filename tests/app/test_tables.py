"""Tables that fit their rows and a phone (app/components/tables.py)."""

from app.components import tables


def test_a_short_tables_height_holds_its_rows_and_header_and_no_blank_rows():
    # a review: eight requests at a fixed 420 px showed three blank rows under the last one
    assert tables.fitted_height_px(8, 420) == 9 * tables.ROW_PX + tables.TABLE_BORDER_PX == 318
    assert tables.fitted_height_px(0, 420) == tables.ROW_PX + tables.TABLE_BORDER_PX  # (the header alone)
    # a long one stops at the cap and scrolls; every height between grows a row at a time
    assert tables.fitted_height_px(11, 420) == 420 and tables.fitted_height_px(10_000, 420) == 420
    steps = {tables.fitted_height_px(n + 1, 420) - tables.fitted_height_px(n, 420) for n in range(10)}
    assert steps == {tables.ROW_PX}
