"""Published digests of known bytes for every checksum algorithm a queue may use, and a helper for other bytes.

The vectors are independent of dataq's code: md5 and sha256 of "" and "abc" from RFC 1321 and FIPS 180-2, XXH3-128
of "" from xxHash's sanity tests (of "abc" as rsync 3.2's own xxh128 reports it).
"""

from __future__ import annotations

from dataq.checksum import new_hasher

VECTORS: dict[str, dict[bytes, str]] = {
    "md5": {b"": "d41d8cd98f00b204e9800998ecf8427e", b"abc": "900150983cd24fb0d6963f7d28e17f72"},
    "sha256": {b"": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
               b"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    "xxh128": {b"": "99aa06d3014798d86001c324468d497f", b"abc": "06b05ab6733a618578af5f94892f3950"},
}
ALGORITHMS = tuple(VECTORS)


def hash_of(algorithm: str, data: bytes) -> str:
    hasher = new_hasher(algorithm)
    hasher.update(data)
    return hasher.hexdigest()
