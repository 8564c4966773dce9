"""Planning acks for a batch of finished deliveries."""

from __future__ import annotations

from common.consumer.ack_plan import plan_acks


def test_a_batch_with_nothing_waiting_is_one_multiple_ack() -> None:
    assert plan_acks([3, 1, 2], []) == (3, [])


def test_tags_above_a_waiting_delivery_are_acked_one_by_one() -> None:
    assert plan_acks([1, 2, 5, 7], [4, 9]) == (2, [5, 7])


def test_nothing_below_the_lowest_waiting_tag_means_only_singles() -> None:
    assert plan_acks([5, 6], [2]) == (None, [5, 6])


def test_a_single_done_tag_is_a_plain_ack() -> None:
    assert plan_acks([4], []) == (None, [4])


def test_no_done_tags_means_no_acks() -> None:
    assert plan_acks([], [1, 2]) == (None, [])
