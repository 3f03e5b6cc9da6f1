"""What an audit says of one file from its record's hops along the chain (:mod:`dataq.audit.chain`).

In this order, the first that holds:

* ``arrived``: the end of the chain (a site that hands nothing on) holds the file: its manifest names a copy that is
  there with its size, or (a site that keeps no manifest) it has the record done;
* ``failed``: some site holds the record inactive (which, with its last error);
* ``in_flight``: some site holds it queued, delayed or in its custody (which, in which state, since when);
* ``unknown``: a site could not be asked (which, and why), or refused the question: the file may be there, so it
  is not called lost;
* ``lost``: some site had it done or handed it on, or marked it lost, or names a copy that is missing or damaged,
  and the end of the chain does not hold it (where it was lost);
* ``never_fed``: no site knows it.
"""

from __future__ import annotations

import itertools
import time

from dataq.audit.chain import Hop, Silent
from dataq.audit.findings import FileClass, Finding
from dataq.audit.questions import Answer, CopyState, SiteState

WAITING = frozenset({SiteState.QUEUED, SiteState.DELAYED, SiteState.CUSTODY})
HAD_IT = frozenset({SiteState.DONE, SiteState.LOST, SiteState.CUSTODY})


def classify(path: str, record_id: str, hops: list[Hop]) -> Finding:
    """The class of the file at ``path`` (its record ``record_id``), from its hops, this site's first."""
    last = hops[-1] if hops else None
    if isinstance(last, Answer) and last.copy is CopyState.PRESENT and not last.next_sites and all(
            isinstance(hop, Answer) and hop.refused is None for hop in hops):
        # The common case first (the end of the chain holds the file): an audit classifies 100,000 files.
        return Finding(path, record_id, FileClass.ARRIVED, last.site, "")
    answers = [hop for hop in hops if isinstance(hop, Answer) and hop.refused is None]
    silent = next((hop for hop in hops if isinstance(hop, Silent)), None)
    refused = next((hop for hop in hops if isinstance(hop, Answer) and hop.refused is not None), None)
    end = answers[-1] if answers and silent is None and refused is None and not answers[-1].next_sites else None

    def finding(file_class: FileClass, site: str, detail: str = "") -> Finding:
        return Finding(path, record_id, file_class, site, detail)

    if end is not None and end.copy is CopyState.UNKNOWN:
        return finding(FileClass.UNKNOWN, end.site, f"{end.site} could not read its manifests to say")
    if end is not None and _holds(end):
        return finding(FileClass.ARRIVED, end.site, "" if end.copy else "done there (it keeps no manifest)")
    for answer in answers:
        if answer.state is SiteState.INACTIVE:
            return finding(FileClass.FAILED, answer.site, f"inactive: {answer.error or 'no error recorded'}")
    for answer in reversed(answers):  # the furthest along the chain: where it is now
        if answer.state in WAITING:
            return finding(FileClass.IN_FLIGHT, answer.site, f"{answer.state.value} since {_when(answer.at)}"
                           + (f" ({answer.error})" if answer.error else ""))
    if silent is not None:
        return finding(FileClass.UNKNOWN, silent.site, f"site {silent.site} did not answer: {silent.reason}")
    if refused is not None:
        return finding(FileClass.UNKNOWN, refused.site, f"refused: {refused.refused}")
    if any(answer.state in HAD_IT or answer.copy not in (None, CopyState.UNKNOWN) for answer in answers):
        return finding(FileClass.LOST, *_where_lost(answers, end))
    return finding(FileClass.NEVER_FED, answers[0].site if answers else "", "no site knows it")


def _holds(end: Answer) -> bool:
    if end.copy is not None:
        return end.copy is CopyState.PRESENT
    return end.state is SiteState.DONE


def _where_lost(answers: list[Answer], end: Answer | None) -> tuple[str, str]:
    """The site where the file was lost, and how it shows."""
    for answer in answers:
        if answer.copy in (CopyState.MISSING, CopyState.CORRUPT):
            return answer.site, f"its copy {answer.path} is {answer.copy.value}"
        if answer.copy is CopyState.UNKNOWN:
            continue
        if answer.state is SiteState.LOST:
            return answer.site, f"marked lost there: {answer.error}"
    for before, after in itertools.pairwise(answers):
        if before.state in HAD_IT and after.state is SiteState.UNKNOWN and after.copy is None:
            return after.site, f"{before.site} had it {before.state.value}; {after.site} does not know it"
    where = end.site if end is not None else answers[-1].site
    return where, "the end of the chain does not hold it"


def _when(at: float | None) -> str:
    return "an unknown time" if at is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
