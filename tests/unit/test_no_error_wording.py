"""Nothing decides from the words of a peer's refusal: what a peer speaks comes from its handshake
(:mod:`dataq.handshake`), so rewording one of the parser's messages can never change how another site is treated.

The check reads the source: outside ``dataq/protocol.py`` (whose two fixed tokens, the connection refusal and the
replication refusal, are the protocol's own), no code looks into the text of a reply's ``detail`` or an answer's
``error`` (``startswith``, ``endswith``, ``in``, or ``==`` against a fixed text), and no code but the parser that
writes them quotes the parser's refusals. The behaviour is checked too, with reworded refusals
(``tests/integration/test_network_move.py``, ``tests/unit/test_handshake.py``).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "dataq", ROOT / "cli", ROOT / "actions"]
PROTOCOL = ROOT / "dataq" / "protocol.py"
PARSER = ROOT / "dataq" / "record.py"
REFUSAL_TEXTS = ("unknown JSON key", "expected 3 fields", "is not a site name")
"""Words of refusals a peer's parser writes: an older dataq's, or this one's."""
READ_FIELDS = {"detail", "error"}
"""What a reply (:class:`~dataq.protocol.Reply`) or a receipt (:class:`~dataq.custody.receipts.Receipt`) says in
words."""


def sources() -> list[Path]:
    return sorted(path for folder in SOURCES for path in folder.rglob("*.py"))


@functools.cache
def tree_of(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def is_words(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in READ_FIELDS) or (
        isinstance(node, ast.Name) and node.id in READ_FIELDS)


def is_fixed_text(node: ast.expr) -> bool:
    """A string literal, or a constant's name (UPPER_CASE)."""
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or (
        isinstance(node, ast.Name) and node.id.isupper())


def readings(path: Path) -> list[str]:
    """Where ``path`` looks into a refusal's words."""
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for node in ast.walk(tree_of(path)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith") and is_words(node.func.value):
            found.append(f"{shown}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            membership = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            if any(is_words(side) for side in sides) and (membership or any(is_fixed_text(side) for side in sides)):
                found.append(f"{shown}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_the_words_of_a_peers_refusal() -> None:
    found = [line for path in sources() if path != PROTOCOL for line in readings(path)]
    assert not found, "decided from a refusal's words (use the handshake):\n" + "\n".join(found)


def test_no_module_but_the_parser_quotes_a_parsers_refusal() -> None:
    quoted = []
    for path in sources():
        if path == PARSER:
            continue
        for node in ast.walk(tree_of(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and any(text in node.value for text in REFUSAL_TEXTS):
                quoted.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:80]!r}")
    assert not quoted, "a parser's refusal quoted outside the parser:\n" + "\n".join(quoted)


def test_the_check_finds_a_decision_from_words(tmp_path: Path) -> None:
    # The check itself must be able to fail: this is how the code read an older site before the handshake.
    sample = tmp_path / "wording_sample.py"
    sample.write_text("def older(reply):\n    return reply.detail.startswith(OLDER_REFUSALS)\n"
                      "def refused_as_older(detail):\n    return detail.startswith(OLDER_REFUSALS)\n"
                      "def full(answer):\n    return answer.error == TOO_MANY\n"
                      "def fine(reply, expected):\n    return reply.detail != expected\n")
    assert [line.split(": ", 1)[1] for line in readings(sample)] == [
        "reply.detail.startswith(OLDER_REFUSALS)", "detail.startswith(OLDER_REFUSALS)", "answer.error == TOO_MANY"]
