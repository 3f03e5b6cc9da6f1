"""The pop daemon: claiming and running records (:mod:`.worker`) within time limits (:mod:`.deadlines`), writing
their outcomes (:mod:`.outcomes`), taking back dead workers' records (:mod:`.sweeper`), and the daemon that runs
them (:mod:`.daemon`)."""
