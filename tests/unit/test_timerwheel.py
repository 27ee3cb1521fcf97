"""The ack-timeout timer wheel, against a heapq model with a fake clock."""

from __future__ import annotations

import heapq
import math
import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from liftbridge_sync._runtime.timerwheel import TimerHandle, TimerWheel


def test_empty_wheel() -> None:
    wheel: TimerWheel[str] = TimerWheel(now=100.0)
    assert len(wheel) == 0
    assert wheel.next_deadline() is None
    assert wheel.advance(1000.0) == []
    assert wheel.now == 1000.0
    assert "pending=0" in repr(wheel)


def test_expires_at_deadline_not_before() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=8, now=0.0)
    wheel.schedule(0.055, "a")
    assert wheel.advance(0.05) == []
    assert wheel.advance(0.0549) == []
    assert len(wheel) == 1
    assert wheel.advance(0.055) == ["a"]
    assert len(wheel) == 0
    assert wheel.advance(1.0) == []


def test_deadline_order_and_ties_in_scheduling_order() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=4, now=0.0)
    wheel.schedule(0.30, "late")
    wheel.schedule(0.10, "tie-1")
    wheel.schedule(0.005, "first")
    wheel.schedule(0.10, "tie-2")
    wheel.schedule(0.10, "tie-3")
    wheel.schedule(0.011, "second")
    assert wheel.advance(5.0) == ["first", "second", "tie-1", "tie-2", "tie-3", "late"]


def test_same_bucket_splits_on_exact_deadline() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=1.0, slots=4, now=0.0)
    wheel.schedule(2.1, "a")
    wheel.schedule(2.9, "b")
    assert wheel.advance(2.5) == ["a"]
    assert wheel.next_deadline() == 2.9
    assert wheel.advance(2.9) == ["b"]


def test_cancel_is_idempotent() -> None:
    wheel: TimerWheel[str] = TimerWheel(now=0.0)
    handle = wheel.schedule(1.0, "a")
    keep = wheel.schedule(1.0, "b")
    assert handle.pending
    assert wheel.cancel(handle) is True
    assert not handle.pending
    assert wheel.cancel(handle) is False
    assert len(wheel) == 1
    assert wheel.advance(2.0) == ["b"]
    assert not keep.pending
    assert wheel.cancel(keep) is False
    assert len(wheel) == 0


def test_cancel_foreign_handle() -> None:
    one: TimerWheel[str] = TimerWheel(now=0.0)
    two: TimerWheel[str] = TimerWheel(now=0.0)
    handle = one.schedule(1.0, "a")
    assert two.cancel(handle) is False
    assert handle.pending
    assert one.advance(1.0) == ["a"]


def test_past_deadline_expires_at_next_advance() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=8, now=50.0)
    wheel.advance(60.0)
    wheel.schedule(10.0, "ancient")
    wheel.schedule(60.0, "now")
    wheel.schedule(59.999, "just-past")
    assert wheel.next_deadline() == 10.0
    assert wheel.advance(60.0) == ["ancient", "just-past", "now"]


def test_far_future_deadline_survives_revolutions() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=8, now=0.0)  # revolution 0.08 s
    wheel.schedule(1.0, "far")
    wheel.schedule(0.02, "near")
    t = 0.0
    expired: list[tuple[float, str]] = []
    while t < 2.0:
        t = round(t + 0.005, 6)
        expired += [(t, item) for item in wheel.advance(t)]
    assert expired == [(0.02, "near"), (1.0, "far")]


def test_large_jump_expires_everything_once() -> None:
    wheel: TimerWheel[int] = TimerWheel(tick=0.01, slots=16, now=0.0)
    deadlines = [0.5, 3.0, 1e3, 0.01, 7.77, 123.456, 1e6]
    for i, d in enumerate(deadlines):
        wheel.schedule(d, i)
    assert wheel.advance(1e7) == sorted(range(len(deadlines)), key=lambda i: deadlines[i])
    assert len(wheel) == 0
    assert wheel.advance(2e7) == []


def test_next_deadline_exact_within_a_revolution() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=512, now=0.0)
    wheel.schedule(3.0, "b")
    early = wheel.schedule(1.234, "a")
    assert wheel.next_deadline() == 1.234
    wheel.cancel(early)
    assert wheel.next_deadline() == 3.0


def test_next_deadline_lower_bound_beyond_a_revolution() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=8, now=0.0)
    wheel.schedule(10.0, "far")
    bound = wheel.next_deadline()
    assert bound is not None and 0.0 < bound <= 10.0
    # An owner that sleeps until the bound and advances reaches the deadline exactly.
    now = 0.0
    for _ in range(1000):
        now = max(now, bound)
        assert wheel.advance(now) == []
        bound = wheel.next_deadline()
        assert bound is not None and bound <= 10.0
        if bound == 10.0:
            break
    assert bound == 10.0
    assert wheel.advance(10.0) == ["far"]
    # Scheduling something nearer after a far-ahead scan is still seen.
    wheel.schedule(10.05, "near")
    wheel.schedule(50.0, "far2")
    assert wheel.next_deadline() == 10.05


def test_clock_going_backwards_is_clamped() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=8, now=0.0)
    wheel.advance(5.0)
    wheel.schedule(4.0, "due")
    wheel.schedule(5.5, "later")
    assert wheel.advance(3.0) == ["due"]
    assert wheel.now == 5.0
    assert wheel.advance(5.5) == ["later"]


def test_pop_all() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=0.01, slots=4, now=0.0)
    handles = [wheel.schedule(d, name) for d, name in [(9.0, "c"), (0.1, "a"), (1.0, "b")]]
    wheel.cancel(handles[2])
    assert wheel.pop_all() == ["a", "c"]
    assert len(wheel) == 0
    assert not any(h.pending for h in handles)
    assert wheel.next_deadline() is None
    assert wheel.advance(100.0) == []


def test_single_slot_wheel() -> None:
    wheel: TimerWheel[str] = TimerWheel(tick=1.0, slots=1, now=0.0)
    wheel.schedule(2.5, "b")
    wheel.schedule(0.5, "a")
    wheel.schedule(7.0, "c")
    assert wheel.advance(1.0) == ["a"]
    assert wheel.advance(6.9) == ["b"]
    assert wheel.advance(7.0) == ["c"]


def test_handle_repr_and_item() -> None:
    wheel: TimerWheel[str] = TimerWheel(now=0.0)
    handle = wheel.schedule(1.5, "x")
    assert isinstance(handle, TimerHandle)
    assert (handle.deadline, handle.item) == (1.5, "x")
    assert "pending" in repr(handle)
    wheel.advance(2.0)
    assert "done" in repr(handle)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tick": 0.0},
        {"tick": -1.0},
        {"tick": float("nan")},
        {"tick": float("inf")},
        {"slots": 0},
        {"slots": 2.0},
        {"slots": True},
        {"now": float("nan")},
    ],
)
def test_constructor_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        TimerWheel(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("deadline", [float("nan"), float("inf"), float("-inf")])
def test_schedule_rejects_non_finite(deadline: float) -> None:
    wheel: TimerWheel[str] = TimerWheel(now=0.0)
    with pytest.raises(ValueError, match="deadline must be finite"):
        wheel.schedule(deadline, "x")
    assert len(wheel) == 0


# --- model-based ----------------------------------------------------------------------


class _Model:
    """Reference: a heap of (deadline, seq, item) with lazy cancellation."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.heap: list[tuple[float, int, int]] = []
        self.pending: dict[int, float] = {}

    def schedule(self, deadline: float, item: int) -> None:
        heapq.heappush(self.heap, (deadline, item, item))
        self.pending[item] = deadline

    def cancel(self, item: int) -> bool:
        return self.pending.pop(item, None) is not None

    def advance(self, now: float) -> list[int]:
        self.now = max(self.now, now)
        out = []
        while self.heap and self.heap[0][0] <= self.now:
            _, _, item = heapq.heappop(self.heap)
            if self.pending.pop(item, None) is not None:
                out.append(item)
        return out

    def earliest(self) -> float | None:
        return min(self.pending.values(), default=None)


class TimerWheelMachine(RuleBasedStateMachine):
    wheel: TimerWheel[int]
    model: _Model

    def __init__(self) -> None:
        super().__init__()
        self.handles: dict[int, TimerHandle[int]] = {}
        self.next_item = 0

    @initialize(
        tick=st.sampled_from([0.001, 0.01, 0.1, 1.0, 0.3]),
        slots=st.sampled_from([1, 2, 3, 8, 64]),
        start=st.floats(-1e4, 1e6, allow_nan=False),
    )
    def setup(self, tick: float, slots: int, start: float) -> None:
        self.wheel = TimerWheel(tick=tick, slots=slots, now=start)
        self.model = _Model(start)
        self.revolution = tick * slots
        self.start = start

    def _schedule(self, deadline: float) -> None:
        item = self.next_item
        self.next_item += 1
        self.handles[item] = self.wheel.schedule(deadline, item)
        self.model.schedule(deadline, item)

    @rule(offset=st.floats(-3.0, 3.0))
    def schedule_near(self, offset: float) -> None:
        self._schedule(self.model.now + offset * self.revolution)

    @rule(revolutions=st.floats(1.0, 200.0))
    def schedule_far(self, revolutions: float) -> None:
        self._schedule(self.model.now + revolutions * self.revolution)

    @rule(ticks=st.integers(-5, 3000))
    def schedule_on_tick_boundary(self, ticks: int) -> None:
        tick = self.wheel.tick
        base = self.start + math.floor((self.model.now - self.start) / tick) * tick
        self._schedule(base + ticks * tick)

    @precondition(lambda self: bool(self.model.pending))
    @rule(data=st.data())
    def schedule_equal_deadline(self, data: st.DataObject) -> None:
        deadline = data.draw(st.sampled_from(sorted(self.model.pending.values())))
        self._schedule(deadline)

    @precondition(lambda self: bool(self.handles))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        item = data.draw(st.sampled_from(sorted(self.handles)))
        assert self.wheel.cancel(self.handles[item]) == self.model.cancel(item)
        assert self.wheel.cancel(self.handles[item]) is False

    def _advance(self, now: float) -> None:
        got = self.wheel.advance(now)
        want = self.model.advance(now)
        assert got == want
        for item in got:
            assert self.handles[item].deadline <= self.model.now  # never early
            assert not self.handles[item].pending

    @rule(fraction=st.floats(0.0, 2.5))
    def advance_small(self, fraction: float) -> None:
        self._advance(self.model.now + fraction * self.wheel.tick)

    @rule(revolutions=st.floats(0.0, 5.0))
    def advance_revolutions(self, revolutions: float) -> None:
        self._advance(self.model.now + revolutions * self.revolution)

    @rule(revolutions=st.floats(5.0, 1e5))
    def advance_jump(self, revolutions: float) -> None:
        self._advance(self.model.now + revolutions * self.revolution)

    @precondition(lambda self: bool(self.model.pending))
    @rule(data=st.data(), nudge=st.sampled_from([-1e-9, 0.0]))
    def advance_to_a_deadline(self, data: st.DataObject, nudge: float) -> None:
        deadline = data.draw(st.sampled_from(sorted(self.model.pending.values())))
        self._advance(deadline + nudge)

    @rule()
    def advance_to_next_deadline(self) -> None:
        bound = self.wheel.next_deadline()
        if bound is not None:
            self._advance(bound)

    @rule(back=st.floats(0.0, 10.0))
    def advance_backwards(self, back: float) -> None:
        self._advance(self.model.now - back)

    @invariant()
    def same_pending(self) -> None:
        assert len(self.wheel) == len(self.model.pending)
        for item, handle in self.handles.items():
            assert handle.pending == (item in self.model.pending)

    @invariant()
    def next_deadline_is_a_lower_bound(self) -> None:
        bound = self.wheel.next_deadline()
        earliest = self.model.earliest()
        if earliest is None:
            assert bound is None
            return
        assert bound is not None
        assert bound <= earliest
        slots = self.wheel.slots
        if slots >= 3 and earliest - self.model.now < (slots - 2) * self.wheel.tick:
            assert bound == earliest


TimerWheelMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,  # a loaded machine must not fail a model check
    suppress_health_check=[HealthCheck.too_slow],
)
test_timer_wheel_matches_heapq_model = TimerWheelMachine.TestCase


@pytest.mark.parametrize("seed", range(5))
def test_randomized_long_run_against_model(seed: int) -> None:
    rng = random.Random(seed)
    wheel: TimerWheel[int] = TimerWheel(tick=0.01, slots=32, now=0.0)
    model = _Model(0.0)
    handles: list[TimerHandle[int]] = []
    now = 0.0
    for item in range(5000):
        op = rng.random()
        if op < 0.5:
            deadline = now + rng.choice([rng.uniform(-0.1, 0.5), rng.uniform(0, 30), 1.0])
            handles.append(wheel.schedule(deadline, item))
            model.schedule(deadline, item)
        elif op < 0.7 and handles:
            handle = rng.choice(handles)
            assert wheel.cancel(handle) == model.cancel(handle.item)
        else:
            now += rng.choice([0.0, rng.uniform(0, 0.05), rng.uniform(0, 3)])
            assert wheel.advance(now) == model.advance(now)
        assert len(wheel) == len(model.pending)
    assert wheel.advance(now + 1e3) == model.advance(now + 1e3)
    assert len(wheel) == 0
