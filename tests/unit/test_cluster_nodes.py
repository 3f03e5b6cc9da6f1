"""How ``dataq-cli --info`` reads a Redis Cluster's ``CLUSTER NODES``: every node, masters by their first slot each
followed by its replicas, failing ones marked, and the master whose slot ranges hold the queue's slot named."""

from __future__ import annotations

from dataq.store import ClusterMember
from dataq.store.topology import parse_cluster_nodes

# As Redis 7.0 answers on the master of slots 5461-10922: a master failed, its replica promoted, one replica
# with a hostname, and a slot being migrated (in brackets). Node ids shortened from Redis's 40 characters.
NODES = """\
07c37dfe 127.0.0.1:30004@40004,replica-b slave e7d1eecc 0 1426238317239 4 connected
67ed2db8 127.0.0.1:30002@40002 myself,master - 0 1426238316232 2 connected 5461-10922 [5461->-e7d1eecc]
292f8b36 127.0.0.1:30003@40003 master - 0 1426238318243 3 connected 10923-16383
6ec23923 127.0.0.1:30005@40005 slave 67ed2db8 0 1426238316232 5 connected
824fe116 127.0.0.1:30006@40006 master,fail - 1426238317741 1426238316232 6 disconnected
e7d1eecc 127.0.0.1:30001@40001 master - 0 1426238316232 7 connected 0-5460
"""


def test_masters_come_by_their_first_slot_each_with_its_replicas_and_the_queue_s_master_is_marked() -> None:
    assert parse_cluster_nodes(NODES, queue_slot=5470) == (
        ClusterMember("127.0.0.1:30001", "master", None, "0-5460", True, False),
        ClusterMember("127.0.0.1:30004", "replica", "127.0.0.1:30001", "", True, False),
        ClusterMember("127.0.0.1:30002", "master", None, "5461-10922", True, True),
        ClusterMember("127.0.0.1:30005", "replica", "127.0.0.1:30002", "", True, False),
        ClusterMember("127.0.0.1:30003", "master", None, "10923-16383", True, False),
        ClusterMember("127.0.0.1:30006", "master", None, "", False, False),
    )


def test_a_node_suspected_of_failing_or_with_its_link_down_is_not_up() -> None:
    suspected = "a 10.0.0.1:7000@17000 master,fail? - 0 0 1 connected 0-16383\n"
    unlinked = "b 10.0.0.2:7000@17000 slave a 0 0 1 disconnected\n"
    assert [member.up for member in parse_cluster_nodes(suspected + unlinked, 0)] == [False, False]
