"""A fake clock for the timed-rounds loop: time.perf_counter_ns (the timer's clock) and
time.perf_counter (the stop rule's budget) advanced only by the steps under test, so what a step
"takes" is exact and the tests assert the loop's bookkeeping, never how busy the machine was."""

from __future__ import annotations

import time

import pytest


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def seconds(self) -> float:
        return self.ns / 1e9

    def takes(self, ms: float) -> None:
        self.ns += round(ms * 1e6)


def install(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(time, "perf_counter_ns", c)
    monkeypatch.setattr(time, "perf_counter", c.seconds)
    return c
