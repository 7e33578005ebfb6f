"""tracekit.parsers.common.pairing: which work annotation belongs to which c10d dispatcher op."""

from __future__ import annotations

from tracekit.parsers.common.pairing import Call, pair_works, work_fits


def op(key: int, comm_type: str, rf: int | None, order: float, lane: object = 1, start: float | None = None) -> Call:
    return Call(key, comm_type, lane, rf, order, start)


def test_kinds_that_fit() -> None:
    assert work_fits("ALL_REDUCE", "ALL_REDUCE") and work_fits("ALL_REDUCE", "REDUCE_SCATTER")
    assert work_fits("ALL_REDUCE", "BARRIER") and not work_fits("ALL_REDUCE", "BROADCAST")


def test_greatest_smaller_rf_id_of_a_fitting_kind_in_the_lane() -> None:
    ops = [op(1, "BROADCAST", 10, 0), op(2, "ALL_REDUCE", 5, 1), op(3, "ALL_REDUCE", 8, 2, lane=2)]
    works = [op(11, "ALL_REDUCE", 11, 3), op(12, "ALL_REDUCE", 9, 4, lane=2)]
    assert pair_works(ops, works) == {11: 2, 12: 3}


def test_a_work_never_takes_an_op_that_started_after_it() -> None:
    ops = [op(1, "ALL_REDUCE", 10, 0, start=50.0)]
    assert pair_works(ops, [op(2, "ALL_REDUCE", 11, 1, start=40.0)]) == {}
    assert pair_works(ops, [op(2, "ALL_REDUCE", 11, 1, start=50.0)]) == {2: 1}


def test_without_ids_enclosing_then_first_in_first_out() -> None:
    ops = [op(1, "ALL_REDUCE", None, 0), op(2, "ALL_REDUCE", None, 1), op(3, "BROADCAST", None, 2)]
    works = [op(11, "ALL_REDUCE", None, 5), op(12, "ALL_REDUCE", None, 6), op(13, "BROADCAST", None, 7)]
    assert pair_works(ops, works) == {11: 1, 12: 2, 13: 3}
    assert pair_works(ops, works, enclosing={11: [2]}) == {11: 2, 12: 1, 13: 3}


def test_an_id_is_never_overruled_by_a_guess() -> None:
    ops = [op(1, "ALL_REDUCE", 50, 0), op(2, "ALL_REDUCE", None, 1)]
    # rf 40 has no op below it: it may only fall back on the op without an id
    assert pair_works(ops, [op(11, "ALL_REDUCE", 40, 5)]) == {11: 2}
