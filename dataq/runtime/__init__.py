"""What every dataq process is made of: backoff, stop signals, supervised tasks, its identity, and systemd's
notification protocol. Nothing here knows about queues or Redis."""
