"""The pop daemon: claiming and running records (:mod:`.worker`) within time limits (:mod:`.deadlines`), settling
their results (:mod:`.settler`), taking back dead workers' records (:mod:`.sweeper`), and the daemon that runs
them (:mod:`.daemon`)."""
