"""core/lease.py: client-go's leader-election decisions and the write fence, as tables."""

from __future__ import annotations

import pytest

from specdeploy.core import lease as L

T = L.LeaseTiming(15, 10, 2)
ME, OTHER = "me_1", "other_2"


@pytest.mark.parametrize("timing, fragment", [
    (L.LeaseTiming(15, 10, 2), None),
    (L.LeaseTiming(10, 10, 2), "must be greater than --renew-deadline"),
    (L.LeaseTiming(15, 2.4, 2), "1.2 x --retry-period"),
    (L.LeaseTiming(15, 10, 0), "greater than zero"),
    (L.LeaseTiming(15.5, 10, 2), "whole seconds"),
])
def test_timing_checks_are_client_gos(timing, fragment):
    problems = timing.problems()
    assert (problems == []) if fragment is None else any(fragment in p for p in problems), problems


def test_no_lease_is_created_with_us_as_holder():
    rec = L.plan_acquire_or_renew(None, 0, 100, ME, T, "t0")
    assert rec == L.LeaseRecord(ME, 15, "t0", "t0", 0)
    assert rec.to_spec() == {"holderIdentity": ME, "leaseDurationSeconds": 15, "leaseTransitions": 0,
                             "acquireTime": "t0", "renewTime": "t0"}


@pytest.mark.parametrize("observed_at, now, takes", [
    (100.0, 100.0, False),   # just observed
    (100.0, 114.9, False),   # still valid on our clock
    (100.0, 115.0, True),    # observed + leaseDuration reached: expired
    (100.0, 200.0, True),
])
def test_someone_elses_lease_is_taken_only_after_it_expired_on_our_clock(observed_at, now, takes):
    theirs = L.LeaseRecord(OTHER, 15, "a", "r", 4)
    rec = L.plan_acquire_or_renew(theirs, observed_at, now, ME, T, "s")
    if not takes:
        assert rec is None
    else:  # a takeover: transitions + 1, acquireTime now
        assert rec == L.LeaseRecord(ME, 15, "s", "s", 5)


def test_renewing_keeps_acquire_time_and_transitions_even_when_our_own_record_looks_expired():
    mine = L.LeaseRecord(ME, 15, "acq", "old", 7)
    for now in (100.0, 1000.0):
        assert L.plan_acquire_or_renew(mine, 100.0, now, ME, T, "new") == L.LeaseRecord(ME, 15, "acq", "new", 7)


def test_a_released_lease_is_taken_at_once():
    rel = L.released(L.LeaseRecord(OTHER, 15, "a", "r", 3), "s")
    assert rel == L.LeaseRecord("", 1, "s", "s", 3)
    assert L.plan_acquire_or_renew(rel, 100.0, 100.0, ME, T, "s2") == L.LeaseRecord(ME, 15, "s2", "s2", 4)


def test_renew_time_from_another_clock_is_never_compared_with_ours():
    # a renewTime far in the past (skewed clock) does not make a freshly observed lease expired
    theirs = L.LeaseRecord(OTHER, 15, "1970-01-01T00:00:00.000000Z", "1970-01-01T00:00:00.000000Z", 0)
    assert L.plan_acquire_or_renew(theirs, 50.0, 51.0, ME, T, "s") is None


@pytest.mark.parametrize("leading, renewed, now, allowed", [
    (False, 100.0, 100.0, False),
    (True, None, 100.0, False),
    (True, 100.0, 100.0, True),
    (True, 100.0, 109.99, True),
    (True, 100.0, 110.0, False),  # renewDeadline since the start of the last good renewal
])
def test_fence(leading, renewed, now, allowed):
    assert L.may_write(leading, renewed, now, T) is allowed


def test_fence_ends_before_any_follower_may_take_over():
    """The renewal that started at r is observed by a follower at o >= r; it takes over at o + leaseDuration.
    The leader's last write starts before r + renewDeadline and its timeout ends by r + leaseDuration."""
    r = 100.0
    for o in (100.0, 100.5, 103.0):
        takeover = o + T.lease_duration
        last_start = r + T.renew_deadline
        assert last_start < takeover
        assert L.write_budget(r, last_start - 1e-6, T) + last_start - 1e-6 <= takeover
    assert L.write_budget(None, 0, T) == 0.0 and L.write_budget(r, 200.0, T) == 0.0


def test_lease_record_round_trip_and_micro_time():
    body = {"spec": {"holderIdentity": ME, "leaseDurationSeconds": 15, "acquireTime": "a", "renewTime": "r",
                     "leaseTransitions": 2}}
    rec = L.LeaseRecord.from_lease(body)
    assert rec == L.LeaseRecord(ME, 15, "a", "r", 2) and rec.to_spec() == body["spec"]
    assert L.LeaseRecord.from_lease(None) is None
    assert L.LeaseRecord.from_lease({"spec": {}}) == L.LeaseRecord()
    import re
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", L.micro_time())
