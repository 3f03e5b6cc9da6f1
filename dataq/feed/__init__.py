"""Feeding records to a push daemon: the client (:mod:`.client`, also used by ``network_move``'s hand-on), where
records come from (:mod:`.sources`) and the ``dataq feed`` command (:mod:`.command`)."""
