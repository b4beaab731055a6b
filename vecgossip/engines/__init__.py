"""Simulation engines: ``tick`` (asynchronous gossip learning on a tick clock, paper 1)."""
