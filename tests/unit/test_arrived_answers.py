"""Arrived questions' answer lines, as the asker reads them: one mark per id asked, or a clear ProtocolError."""

from __future__ import annotations

import pytest

from dataq.audit.arrived import answer_line, parse_answer, question_line
from dataq.errors import ProtocolError


def test_an_answer_line_is_read_back_as_its_marks_and_site() -> None:
    assert parse_answer(answer_line("10-", "archive").encode(), 3) == ("10-", "archive")


def test_a_question_names_its_ids_and_asking_site() -> None:
    assert question_line(["a" * 32, "b" * 32], "mountain") == \
        b'{"arrived":["' + b"a" * 32 + b'","' + b"b" * 32 + b'"],"site":"mountain"}\n'


@pytest.mark.parametrize(("line", "count", "why"), [
    (b'{"arrived":"10","site":"archive"}\n', 3, "2 marks, not 3"),
    (b'{"arrived":"1x0","site":"archive"}\n', 3, "not 3 of 1, 0 and -"),
    (b'{"arrived":7,"site":"archive"}\n', 1, "must be strings"),
    (b'{"site":"archive"}\n', 1, "unexpected arrived answer"),
    (b"Pushed ID=abc\n", 1, "unexpected arrived answer"),
    (b"Error: arrived: 'arrived' must be a list of ids\n", 1, "was refused"),
])
def test_anything_but_one_mark_per_id_is_a_protocol_error(line: bytes, count: int, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        parse_answer(line, count)
