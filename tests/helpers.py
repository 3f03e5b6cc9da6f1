"""Small builders shared by tests."""

from __future__ import annotations

import hashlib

from dataq.record import Record


def checksum_of(n: int) -> str:
    return hashlib.md5(str(n).encode()).hexdigest()


def make_records(count: int, start: int = 0) -> list[Record]:
    """Records shaped like the seed's test data, with distinct ids."""
    return [
        Record(
            path=f"/noao-tuc-z1/mtn/20140708/ct15m/smarts/c15e_140708_{n:06d}_ori.hdr",
            checksum=checksum_of(n),
            size=9922 + n,
        )
        for n in range(start, start + count)
    ]
