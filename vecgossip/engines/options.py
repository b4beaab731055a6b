"""Options both engines read, declared once."""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

Chunk = Union[Literal["auto"], Annotated[int, Field(ge=1)]]   # nodes per chunk: auto (measured per model/device) or a count
Divergence = Literal["stop", "isolate"]   # a node's parameters turn NaN/inf: stop the run | isolate the node (core/guard.py)
Malloc = Literal["tuned", "default"]      # CPU runs: tuned keeps freed workspace in glibc's heap (runtime/allocator.py)
