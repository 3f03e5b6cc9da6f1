"""The push daemon: feeders' TCP connections (:mod:`.listener`), group commit into Redis (:mod:`.committer`),
and the daemon that ties them to the queue's flags (:mod:`.daemon`)."""
