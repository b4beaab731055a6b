"""The schedules: paper 1's tick clock (:mod:`.tick`) and paper 2's synchronous rounds
(:mod:`.rounds`), each a step (what happens at one tick / round, the services an algorithm gets)
and a run loop; :mod:`.group` holds what both loops share (a group of engines over one stacked
state: a plain run, a torchrun shard, replicas). No engine names an algorithm."""
