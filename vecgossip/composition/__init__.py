"""Building a run from its config: :mod:`.root` (validate, build the engine the method selects,
run it, write its outputs: what ``python -m vecgossip`` and :func:`vecgossip.run` call), one
module per engine (:mod:`.tick`, :mod:`.rounds`: build, summarize, write outputs) and the default
job (:mod:`.demo`)."""
