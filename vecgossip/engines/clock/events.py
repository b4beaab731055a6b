"""The event heap of the wall clock (issue 48): events keyed by (time, sequence), so that events at
one time pop in the order they were pushed, whatever their kind; :meth:`Heap.wave` pops every event
due within ``resolution`` seconds of the earliest one, to run as one batched step (the engine's
stated approximation: those events run at the earliest one's time; ``resolution=0`` pops exactly
the events at that time)."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any


@dataclass(order=True)
class Event:
    time: float
    seq: int
    kind: str = field(compare=False)
    node: int = field(compare=False)
    data: Any = field(default=None, compare=False)


@dataclass
class Heap:
    items: list = field(default_factory=list)
    counter: int = 0

    def push(self, time: float, kind: str, node: int, data: Any = None) -> Event:
        event = Event(float(time), self.counter, kind, int(node), data)
        self.counter += 1
        heapq.heappush(self.items, event)
        return event

    def peek(self) -> float:
        """The earliest event's time (inf: none)."""
        return self.items[0].time if self.items else float("inf")

    def wave(self, resolution: float = 0.0) -> list[Event]:
        """Every event due at most ``resolution`` seconds after the earliest, in (time, seq) order."""
        if not self.items:
            return []
        until = self.items[0].time + resolution
        out = []
        while self.items and self.items[0].time <= until:
            out.append(heapq.heappop(self.items))
        return out

    def __len__(self) -> int:
        return len(self.items)

    def state(self) -> dict:
        """For a checkpoint: the pending events and the sequence counter."""
        return {"items": [(e.time, e.seq, e.kind, e.node, e.data) for e in sorted(self.items)],
                "counter": self.counter}

    @staticmethod
    def load(d: dict) -> "Heap":
        h = Heap([Event(*e) for e in d["items"]], d["counter"])
        heapq.heapify(h.items)
        return h
