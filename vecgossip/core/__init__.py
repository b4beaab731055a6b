"""The stacked state and the maths over it, node axis first: the flat ``(N, P)`` state and its
layout (:mod:`.state`), batched layers (:mod:`.layers`), optimisers (:mod:`.optim`), metrics
(:mod:`.metrics`), Algorithm 3's variance correction (:mod:`.correction`, :mod:`.kernels`), the
divergence guard (:mod:`.guard`), faults (:mod:`.faults`), atomic files (:mod:`.files`) and the
one error type of bad input (:mod:`.errors`). Nothing here knows a run, an engine or a config file."""
