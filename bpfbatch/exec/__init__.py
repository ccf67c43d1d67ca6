"""In-kernel map programs: the predicate language (:mod:`.predicate`), the walker that runs it
over a map in the kernel or in a user-space emulation (:mod:`.walker`), and the flow-table
pruner on top (:mod:`.prune`)."""
