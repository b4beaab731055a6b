"""The errors a run reports: bad input, and a run that diverged."""
from __future__ import annotations


class ConfigError(ValueError):
    """An option has a value the simulator cannot run with; the message names it (one line: the
    command line prints it and exits with code 2)."""


class DivergedRun(RuntimeError):
    """``on_divergence=stop`` ended the run: its outputs are written (``summary.json``'s
    ``diverged`` says where and which nodes) and the last checkpoint, written while every node was
    finite, is kept; the command line exits with code 3."""
