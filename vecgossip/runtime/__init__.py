"""What a run needs around its engine: checkpoints and resume (:mod:`.checkpoint`), torchrun
sharding (:mod:`.shard`), the memory estimate (:mod:`.memory`), the CPU allocator policy
(:mod:`.allocator`), metric loggers (:mod:`.tracking`), output files and plots (:mod:`.outputs`)
and replicas (:mod:`.replicas`)."""
