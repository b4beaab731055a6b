"""Rounds with a per-node barrier, one event at a time in plain Python (issue 48's twin of
vecgossip/engines/clock/barrier.py): every phase known from the start; a node computes, sends
its phase's messages, waits for every message addressed to it in that phase, then starts the
next phase; the messages are dicts sharing the links by reference.clock.water_fill. Nothing is
shared with vecgossip.engines.clock."""
from __future__ import annotations

import math

from reference.clock import water_fill


def simulate(phases: list[dict], up: list[float], down: list[float], latency, policy: str = "fair") -> list[list[float]]:
    """``phases``: each {"compute": [n seconds], "edges": [(sender, receiver), ...] in send
    order, "size": bytes a message}. Returns ``finish[p][i]``: when node i finished phase p."""
    n, P = len(up), len(phases)
    indeg = [[sum(1 for _, r in ph["edges"] if r == i) for i in range(n)] for ph in phases]
    phase, status = [0] * n, ["compute"] * n
    until = [float(phases[0]["compute"][i]) for i in range(n)]
    got: dict = {}
    finish = [[math.nan] * n for _ in range(P)]
    live: list[dict] = []
    now, order = 0.0, 0
    while any(s != "done" for s in status):
        changed = True
        while changed:                                    # everything due now, to a fixed point
            changed = False
            for x in sorted(live, key=lambda x: x["order"]):
                if x["sent"] is not None and x["sent"] + x["latency"] <= now + 1e-12 * max(1.0, now):
                    got[(x["phase"], x["receiver"])] = got.get((x["phase"], x["receiver"]), 0) + 1
                    live.remove(x)
                    changed = True
            for i in range(n):
                if status[i] == "wait" and got.get((phase[i], i), 0) >= indeg[phase[i]][i]:
                    finish[phase[i]][i] = now
                    phase[i] += 1
                    if phase[i] == P:
                        status[i] = "done"
                    else:
                        status[i], until[i] = "compute", now + float(phases[phase[i]]["compute"][i])
                    changed = True
            for i in range(n):
                if status[i] == "compute" and until[i] <= now:
                    ph = phases[phase[i]]
                    for s, r in ph["edges"]:
                        if s == i:
                            live.append({"sender": s, "receiver": r, "phase": phase[i], "size": float(ph["size"]),
                                         "left": float(ph["size"]), "latency": float(latency[s][r]),
                                         "sent": now if ph["size"] == 0 else None, "order": order, "rate": 0.0})
                            order += 1
                    status[i] = "wait"
                    changed = True
        if all(s == "done" for s in status):
            break
        sending = [x for x in live if x["sent"] is None]
        carried = sending
        if policy == "fifo":
            carried = [min((x for x in sending if x["sender"] == s), key=lambda x: x["order"])
                       for s in sorted({x["sender"] for x in sending})]
        for x in sending:
            x["rate"] = 0.0
        for x, rate in zip(carried, water_fill([(x["sender"], x["receiver"]) for x in carried], up, down)):
            x["rate"] = rate
        times = [until[i] for i in range(n) if status[i] == "compute"]
        times += [now + (0.0 if math.isinf(x["rate"]) else x["left"] / x["rate"]) for x in sending if x["rate"] > 0]
        times += [x["sent"] + x["latency"] for x in live if x["sent"] is not None]
        t = min(times)
        for x in sending:                                 # bytes flow until t
            if x["rate"] > 0:
                x["left"] = 0.0 if math.isinf(x["rate"]) else x["left"] - x["rate"] * (t - now)
                if x["left"] <= 1e-12 * x["size"] or now + (x["left"] + x["rate"] * (t - now)) / x["rate"] <= t:
                    x["left"], x["sent"] = 0.0, t
        now = t
    return finish
