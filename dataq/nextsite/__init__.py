"""The links from a site to its next sites: kept, pipelined connections that carry hand-ons and receipts
queries (:mod:`.link`, one connection; :mod:`.pool`, the next sites in order)."""

from .link import LinkLost, SiteLink
from .pool import NextSites

__all__ = ["LinkLost", "NextSites", "SiteLink"]
