"""How the notifier's attempts are shared between apps."""

from __future__ import annotations

from services.notifier.shares import AppShares, default_share


def test_an_app_alone_uses_all_but_a_share_of_the_slots() -> None:
    shares = AppShares(slots=16, share=4)
    assert [shares.take(1) for _ in range(13)] == [True] * 12 + [False]
    assert all(shares.take(2) for _ in range(4)), "the last share is kept for the others"


def test_an_app_under_its_share_gets_the_slot_left_for_it() -> None:
    shares = AppShares(slots=4, share=1)
    assert [shares.take(1) for _ in range(4)] == [True, True, True, False]
    assert shares.take(2)
    shares.give_back(2)
    assert not shares.take(1), "app 1 still holds all but one slot"


def test_a_share_given_back_is_taken_again() -> None:
    shares = AppShares(slots=4, share=1)
    assert shares.take(1) and shares.take(1) and shares.take(1)
    assert not shares.take(1)
    shares.give_back(1)
    assert shares.take(1)


def test_the_default_share_is_a_quarter_and_at_least_one() -> None:
    assert [default_share(n) for n in (1, 4, 16, 64)] == [1, 1, 4, 16]
