"""Custody across sites: a site keeps every record it hands on until the end of its chain holds the file, and
only then may its source go (``remove_source = "after_receipt"``; ``docs/custody.md``).

Custody is one feature in one package; only its Redis access lives apart, in the store (``store/custody.py`` and
the scripts ``custody_keep.lua``, ``custody_step.lua`` and ``receipts.lua``), as the layering rules require.

* :mod:`.receipts`: the wire form: a receipts query and its answers (``done``, ``pending``, ``unknown``);
* :mod:`.desk`: the answering side: what a push daemon answers about an id from what its site knows;
* :mod:`.client`: the asking side: a receipts query over a connection whose handshake names receipts;
* :mod:`.keeper`: the custody keeper beside a pop daemon: asks the next sites about the records due, and acts
  on the answers (done: the source may go; unknown too long: resend; no answer: an outage);
* :mod:`.journey`: ``dataq-cli --trace``: a record's way site by site, asked afresh;
* :mod:`.report` and :mod:`.metrics`: what ``--summary``, the web console and Prometheus show of it.

``network_move``'s own part (keeping each hand-on, bounding custody) is ``dataq.actions.move_custody``.
"""
