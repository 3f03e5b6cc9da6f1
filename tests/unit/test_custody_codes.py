"""The codes the custody scripts share with the store come from one place, and a custody entry keeps the last
answer as fields."""

from __future__ import annotations

import json
import re

from dataq.custody.receipts import ReceiptKind, parse_answer
from dataq.record import Record
from dataq.store.connection import script_source
from dataq.store.custody import CustodyEntry, LastAnswer
from dataq.store.custody_codes import SHARED, Step, lua_constants

RECORD = Record("/data/a.fits", "0" * 32, 12, pushed_at=1_700_000_000.0, source="feeder")


def test_every_code_reaches_the_scripts_as_a_named_constant() -> None:
    constants = lua_constants()
    for prefix, codes in SHARED.items():
        for code in codes:
            assert re.search(rf"\b{prefix}_{code.name}\b", constants), code
    assert "local STEP_DONE, STEP_PENDING, STEP_ASK_LATER, STEP_RESEND = 'd', 'p', 'w', 'r'" in constants


def test_the_scripts_name_every_step_and_spell_no_code_themselves() -> None:
    step = script_source("custody_step")
    script = step[step.index("-- custody_step.lua"):]
    for code in Step:
        assert f"STEP_{code.name}" in script, f"custody_step.lua does not take {code.name}"
    assert not re.search(r"kind == '\w'", script), "a step spelled as a letter"
    receipts = script_source("receipts")
    assert not re.search(r"'[tcdu]\\0'|'queued'|'delayed'|'inactive'", receipts[receipts.index("-- receipts.lua"):])


def test_a_custody_entry_keeps_the_last_answer_as_fields() -> None:
    last = LastAnswer("pending", "archive", "inactive", "disk full", note="valley2:9988 not answering")
    entry = CustodyEntry(RECORD, "valley:9988", 1_700_000_010.0, last=last, identity=(1, 2, 12, 3, 4), resends=2)
    decoded = CustodyEntry.decode(RECORD.checksum, entry.encode())
    assert decoded.last == last and decoded.resends == 2 and decoded.identity == (1, 2, 12, 3, 4)
    assert last.describe() == "pending at archive: inactive (disk full); valley2:9988 not answering"


def test_an_entry_kept_by_dataq_0_1_keeps_its_words_as_a_note() -> None:
    value = json.loads(CustodyEntry(RECORD, "valley:9988", 1_700_000_010.0).encode())
    value["a"] = '{"id":"x","receipt":"pending","site":"archive","state":"queued"}'
    decoded = CustodyEntry.decode(RECORD.checksum, json.dumps(value))
    assert decoded.last == LastAnswer("note", note=value["a"]), "kept as it was: no guess from its text"


def test_a_receipt_becomes_the_last_answer_an_entry_keeps() -> None:
    receipt = parse_answer('{"id":"x","receipt":"pending","site":"far","state":"delayed","error":"timeout"}')
    assert receipt.kind is ReceiptKind.PENDING
    assert receipt.last_answer("resent") == LastAnswer("pending", "far", "delayed", "timeout", "resent")
    assert parse_answer('{"id":"x","receipt":"unknown","site":"far"}').describe() == "unknown at far"


def test_an_entry_keeps_its_last_answer_in_words_too_for_a_push_daemon_of_0_1_on_the_same_redis() -> None:
    last = LastAnswer("pending", "archive", "queued")
    value = json.loads(CustodyEntry(RECORD, "valley:9988", 1_700_000_010.0, last=last).encode())
    assert value["a"] == "pending at archive: queued" and not value["a"].startswith("{")
    assert CustodyEntry.decode(RECORD.checksum, json.dumps(value)).last == last, "the fields win"
