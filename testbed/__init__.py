"""What the tests and the benchmarks both stand on: real topologies and harnesses on loopback (Redis with
replicas and sentinels, Redis Cluster, an rsync daemon, the chaos harness) and the waits they share.

Both ``tests/`` and ``bench/`` import from here, and neither imports the other.
"""
