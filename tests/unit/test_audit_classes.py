"""How an audit classifies a file from its record's hops along the chain: one case per class, and the order in
which they win."""

from __future__ import annotations

import pytest

from dataq.audit.chain import MAX_HOPS, Ends, Hop, Silent, walk
from dataq.audit.classify import classify
from dataq.audit.findings import FileClass
from dataq.audit.questions import Answer, CopyState, SiteState, parse_answers
from dataq.errors import DataqError

ID = "0" * 32
VALLEY, ARCHIVE = ("127.0.0.1:9002",), ("127.0.0.1:9003",)


def mountain(state: SiteState, error: str | None = None) -> Answer:
    return Answer(ID, state, "mountain", VALLEY, 1_800_000_000.0, error)


def valley(state: SiteState, error: str | None = None) -> Answer:
    return Answer(ID, state, "valley", ARCHIVE, 1_800_000_100.0, error)


def archive(state: SiteState, copy: CopyState | None = None, error: str | None = None) -> Answer:
    return Answer(ID, state, "archive", (), 1_800_000_200.0, error, copy, "/archive/a.fits" if copy else None)


DONE, UNKNOWN = SiteState.DONE, SiteState.UNKNOWN


@pytest.mark.parametrize(("hops", "expected", "site", "detail"), [
    ([mountain(DONE), valley(DONE), archive(DONE, CopyState.PRESENT)], FileClass.ARRIVED, "archive", ""),
    # The archive forgot the record (remember_done passed), its manifest still names the copy: arrived.
    ([mountain(UNKNOWN), valley(UNKNOWN), archive(UNKNOWN, CopyState.PRESENT)], FileClass.ARRIVED, "archive", ""),
    ([mountain(DONE), valley(DONE), archive(DONE)], FileClass.ARRIVED, "archive", "keeps no manifest"),
    ([mountain(DONE), valley(SiteState.INACTIVE, "rsync failed"), archive(UNKNOWN)], FileClass.FAILED, "valley",
     "inactive: rsync failed"),
    ([mountain(SiteState.CUSTODY), valley(SiteState.QUEUED), archive(UNKNOWN)], FileClass.IN_FLIGHT, "valley",
     "queued since 2027-01-15T08:01:40Z"),
    ([mountain(SiteState.QUEUED), valley(UNKNOWN), archive(UNKNOWN)], FileClass.IN_FLIGHT, "mountain", "queued"),
    ([mountain(DONE), valley(DONE), archive(DONE, CopyState.MISSING)], FileClass.LOST, "archive",
     "its copy /archive/a.fits is missing"),
    ([mountain(DONE), valley(DONE), archive(UNKNOWN, CopyState.CORRUPT)], FileClass.LOST, "archive", "corrupt"),
    ([mountain(DONE), valley(DONE), archive(SiteState.LOST, error="missing_copy: gone")], FileClass.LOST, "archive",
     "marked lost there: missing_copy: gone"),
    ([mountain(DONE), valley(UNKNOWN), archive(UNKNOWN)], FileClass.LOST, "valley",
     "mountain had it done; valley does not know it"),
    ([mountain(DONE), Silent("127.0.0.1:9002", "cannot connect")], FileClass.UNKNOWN, "127.0.0.1:9002",
     "did not answer: cannot connect"),
    ([mountain(UNKNOWN), valley(UNKNOWN), archive(UNKNOWN)], FileClass.NEVER_FED, "mountain", "no site knows it"),
    # The archive could not read its manifests: done there, but not proven held.
    ([mountain(DONE), valley(DONE), archive(DONE, CopyState.UNKNOWN)], FileClass.UNKNOWN, "archive",
     "could not read its manifests"),
    ([mountain(UNKNOWN)], FileClass.NEVER_FED, "mountain", ""),
])
def test_each_class_from_the_hops_that_make_it(hops: list[Hop], expected: FileClass, site: str, detail: str) -> None:
    found = classify("/night/a.fits", ID, hops)
    assert (found.file_class, found.site) == (expected, site)
    assert detail in found.detail
    assert (found.path, found.record_id) == ("/night/a.fits", ID)


def test_a_copy_present_at_the_end_wins_over_a_failure_on_the_way() -> None:
    hops: list[Hop] = [mountain(SiteState.INACTIVE, "old"), valley(DONE), archive(DONE, CopyState.PRESENT)]
    assert classify("/a", ID, hops).file_class is FileClass.ARRIVED


def test_a_silent_site_is_unknown_not_lost_even_after_a_site_that_had_it() -> None:
    hops: list[Hop] = [mountain(DONE), valley(DONE), Silent("127.0.0.1:9003", "no answer within 5 s")]
    assert classify("/a", ID, hops).file_class is FileClass.UNKNOWN


def test_an_id_a_site_refuses_is_unknown_with_its_words() -> None:
    hops: list[Hop] = [mountain(DONE), Answer(ID, UNKNOWN, "valley", refused="audit: checksum ... does not match")]
    found = classify("/a", ID, hops)
    assert (found.file_class, found.detail) == (FileClass.UNKNOWN, "refused: audit: checksum ... does not match")


async def test_an_id_the_first_next_site_does_not_know_is_asked_of_the_other_as_the_hand_on_fails_over() -> None:
    primary, backup = "127.0.0.1:9002", "127.0.0.1:9012"
    other = "1" * 32
    asked: list[tuple[str, list[str]]] = []

    async def ask(address: str, ids: list[str]) -> list[Answer]:
        asked.append((address, ids))
        # The record ID went to the backup while the primary was down; the primary holds the other one.
        held = {primary: {other}, backup: {ID}}[address]
        return [Answer(i, DONE if i in held else UNKNOWN, address, ()) for i in ids]

    first = {i: Answer(i, DONE, "mountain", (primary, backup)) for i in (ID, other)}
    journeys = await walk(first, ask)
    assert [hop.site for hop in journeys[ID] if isinstance(hop, Answer)] == ["mountain", backup]
    assert [hop.site for hop in journeys[other] if isinstance(hop, Answer)] == ["mountain", primary]
    assert asked == [(primary, [ID, other]), (backup, [ID])], "only what the first did not know"


async def test_once_the_end_is_known_a_file_it_holds_is_asked_of_it_alone() -> None:
    valley_at, archive_at = "127.0.0.1:9002", "127.0.0.1:9003"
    lost = "2" * 32
    asked: list[tuple[str, list[str]]] = []

    async def ask(address: str, ids: list[str]) -> list[Answer]:
        asked.append((address, ids))
        if address == valley_at:
            return [Answer(i, DONE, "valley", (archive_at,)) for i in ids]
        return [Answer(i, DONE, "archive", (), copy=CopyState.MISSING if i == lost else CopyState.PRESENT,
                       path="/archive/x") for i in ids]

    ends = Ends()
    await walk({ID: Answer(ID, DONE, "mountain", (valley_at,))}, ask, ends)
    assert ends.addresses == (archive_at,)
    asked.clear()
    held = await ends.arrived([ID, lost], ask)
    assert list(held) == [ID] and asked == [(archive_at, [ID, lost])], "one question, to the end alone"
    assert classify("/a", ID, [held[ID]]).file_class is FileClass.ARRIVED


def test_an_answer_passed_on_carries_the_answers_after_it_through_the_wire() -> None:
    silent = Silent("127.0.0.1:9004", "cannot connect: refused")
    refused = Answer(ID, UNKNOWN, "lake", refused="audit: checksum ... does not match")
    answer = Answer(ID, DONE, "valley", ARCHIVE, 1_800_000_100.0,
                    further=(archive(DONE, CopyState.PRESENT), refused, silent))
    (read,) = parse_answers([answer.line().encode()], [ID])
    assert read == answer


async def test_a_next_site_that_passes_the_question_on_is_the_only_one_asked() -> None:
    asked: list[str] = []

    async def ask(address: str, ids: list[str]) -> list[Answer]:
        asked.append(address)
        return [Answer(i, DONE, "valley", ARCHIVE, further=(archive(DONE, CopyState.PRESENT),)) for i in ids]

    journeys = await walk({ID: mountain(DONE)}, ask)
    assert [hop.site for hop in journeys[ID] if isinstance(hop, Answer)] == ["mountain", "valley", "archive"]
    assert asked == list(VALLEY)


async def test_past_a_site_that_did_not_pass_the_question_on_the_asker_goes_on_itself() -> None:
    asked: list[str] = []

    async def ask(address: str, ids: list[str]) -> list[Answer]:
        asked.append(address)
        return [valley(DONE) if address in VALLEY else archive(DONE, CopyState.PRESENT) for _ in ids]

    journeys = await walk({ID: mountain(DONE)}, ask)
    assert classify("/a", ID, journeys[ID]).file_class is FileClass.ARRIVED
    assert asked == [*VALLEY, *ARCHIVE]


async def test_a_chain_that_loops_back_on_itself_ends_after_max_hops() -> None:
    async def ask(address: str, ids: list[str]) -> list[Answer]:
        return [Answer(i, DONE, "loop", VALLEY) for i in ids]

    journeys = await walk({ID: mountain(DONE)}, ask)
    assert len(journeys[ID]) == MAX_HOPS


async def test_an_end_that_cannot_be_reached_from_here_is_not_asked_again() -> None:
    asked: list[str] = []

    async def ask(address: str, ids: list[str]) -> list[Answer]:
        asked.append(address)
        if address in ARCHIVE:
            raise DataqError("cannot connect: no route to host")
        return [Answer(i, DONE, "valley", ARCHIVE, further=(archive(DONE, CopyState.PRESENT),)) for i in ids]

    ends = Ends()
    await walk({ID: mountain(DONE)}, ask, ends)
    assert ends.addresses == ARCHIVE
    assert await ends.arrived([ID], ask) == {}
    assert await ends.arrived([ID], ask) == {}
    assert asked == [*VALLEY, *ARCHIVE], "the end was tried once"
