"""The wall clock's transfers, one event at a time in plain Python (issue 48's reference twin):
a list of transfer dicts; at each event the max-min fair rates by water-filling written with
loops over links and transfers; time jumps to the earliest of (a new transfer's start, a last
byte leaving, a delivery); deliveries are recorded in (time, start order). Nothing is shared with
vecgossip.engines.clock."""
from __future__ import annotations

import math


def water_fill(flows: list[tuple[int, int]], up: list[float], down: list[float]) -> list[float]:
    """Max-min fair rates: raise every unfrozen flow's rate equally until some link is full;
    freeze the flows through full links; repeat."""
    rate = [0.0] * len(flows)
    frozen = [False] * len(flows)
    cap = {("u", i): up[i] for i in range(len(up))}
    cap.update({("d", i): down[i] for i in range(len(down))})
    while not all(frozen):
        users: dict = {}
        for f, (s, r) in enumerate(flows):
            if not frozen[f]:
                users.setdefault(("u", s), []).append(f)
                users.setdefault(("d", r), []).append(f)
        best = math.inf
        for link, fs in users.items():
            best = min(best, cap[link] / len(fs))
        if math.isinf(best):
            for f in range(len(flows)):
                if not frozen[f]:
                    rate[f] = math.inf
            break
        full = []
        for link, fs in users.items():
            cap[link] -= best * len(fs)
            if cap[link] <= 1e-12 * max(1.0, best * len(fs)):
                full.append(link)
        for f, (s, r) in enumerate(flows):
            if not frozen[f]:
                rate[f] += best
                if ("u", s) in full or ("d", r) in full:
                    frozen[f] = True
    return rate


def simulate(starts: list[dict], up: list[float], down: list[float], policy: str = "fair",
             dropped: list | None = None) -> list[tuple[float, int]]:
    """``starts``: {time, sender, receiver, size, latency, tag}, in start order; or {time, flush:
    node}: under fifo, that node's transfers waiting behind the one it is sending are dropped
    (their tags appended to ``dropped``); or {time, abort: nodes}: every transfer from or to one of
    ``nodes`` not yet delivered is dropped (churn). Returns the deliveries as (time, tag), in the
    order they happen (ties: start order)."""
    pending = sorted(enumerate(starts), key=lambda p: (p[1]["time"], p[0]))
    live: list[dict] = []
    out: list[tuple[float, int]] = []
    now = 0.0
    order = 0
    while pending or live:
        sending = [x for x in live if x["sent"] is None]
        carried = sending
        if policy == "fifo":
            carried = []
            for s in sorted({x["sender"] for x in sending}):
                carried.append(min((x for x in sending if x["sender"] == s), key=lambda x: x["order"]))
        rates = water_fill([(x["sender"], x["receiver"]) for x in carried], up, down)
        for x in sending:
            x["rate"] = 0.0
        for x, r in zip(carried, rates):
            x["rate"] = r
        times = []
        if pending:
            times.append(pending[0][1]["time"])
        for x in sending:
            if x["rate"] > 0:
                times.append(now + (0.0 if math.isinf(x["rate"]) else x["left"] / x["rate"]))
        for x in live:
            if x["sent"] is not None:
                times.append(x["sent"] + x["latency"])
        t = min(times)
        for x in sending:                        # bytes flow until t
            if x["rate"] > 0:
                x["left"] = 0.0 if math.isinf(x["rate"]) else x["left"] - x["rate"] * (t - now)
                if x["left"] <= 1e-12 * x["size"] or now + (x["left"] + x["rate"] * (t - now)) / x["rate"] <= t:
                    x["left"] = 0.0
                    x["sent"] = t
        now = t
        for x in sorted([x for x in live if x["sent"] is not None and x["sent"] + x["latency"] <= now + 1e-12 * max(1, now)],
                        key=lambda x: x["order"]):
            out.append((now, x["tag"]))
            live.remove(x)
        while pending and pending[0][1]["time"] <= now:
            _, s = pending.pop(0)
            if "abort" in s:
                for x in [x for x in live if x["sender"] in s["abort"] or x["receiver"] in s["abort"]]:
                    live.remove(x)
                    if dropped is not None:
                        dropped.append(x["tag"])
                continue
            if "flush" in s:
                waiting = sorted((x for x in live if x["sent"] is None and x["sender"] == s["flush"]),
                                 key=lambda x: x["order"])
                for x in waiting[1:] if policy == "fifo" else []:
                    live.remove(x)
                    if dropped is not None:
                        dropped.append(x["tag"])
                continue
            live.append({**s, "left": float(s["size"]), "sent": None, "order": order, "rate": 0.0})
            order += 1
            if live[-1]["size"] == 0:
                live[-1]["sent"] = now
    return out
