"""What a FITS file says about itself: the keywords an archive indexes, its extensions and when it was observed.

Plain FITS files carry everything in the primary header. Multi-extension files often carry part of it in their
first image extension (HST's STIS writes DATE-OBS there), and fpack-compressed files (``.fits.fz``) leave the
primary header almost empty: the image's header travels with the compressed image, which astropy gives back
decompressed (``CompImageHDU.header``) without decompressing any pixels. So each keyword is taken from the primary
header and, where the primary header lacks it, from the first image extension; a few have a second name old
headers use instead (:data:`KEYWORD_ALTERNATES`). The number of extensions is counted by walking every header.
Gzip-compressed files (``.fits.gz``) are read through astropy's own decompression.

Shipped by value to Spark executors (see :mod:`.job`): no dataq is needed there, only astropy.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import warnings
from typing import Any

from dataq.actions.archive.catalog import FITS_KEYWORDS
from dataq.actions.archive.obstime import observation_time

FITS_MAGIC = b"SIMPLE  ="
GZIP_MAGIC = b"\x1f\x8b"
FITS_BLOCK = 2880
FITS_SUFFIXES = (".fits", ".fit", ".fts", ".fz", ".fits.gz", ".fit.gz", ".fts.gz")
KEYWORD_ALTERNATES: dict[str, tuple[str, ...]] = {"TIME-OBS": ("UT",), "OBJECT": ("TARGNAME",)}
"""Where a header lacks a keyword under its name, the name older or other observatories' headers give it."""
TIME_SCALE_KEYWORD = "TIMESYS"

Facts = tuple[bool, str | None, int | None, dt.datetime | None, tuple[Any, ...]]
"""(is_fits, fits_error, extensions, obs_time, the :data:`FITS_KEYWORDS` values in order)."""
NO_VALUES: tuple[None, ...] = (None,) * len(FITS_KEYWORDS)
_COLUMNS = tuple(column for _, column, _ in FITS_KEYWORDS)


def looks_like_fits(path: str, head: bytes) -> bool:
    return head.startswith(FITS_MAGIC) or path.lower().endswith(FITS_SUFFIXES)


def read_header(path: str, head: bytes, size: int, *, stored: str | None = None) -> Facts:
    """The facts of a file of ``size`` bytes whose first bytes are ``head``, named ``path``; a header beyond
    ``head`` is read from ``stored`` (the verified copy) when given, else from ``path``.

    A file that starts like FITS or is named like FITS but whose primary header cannot be read is archived as a
    plain file (``is_fits`` false) with ``fits_error`` saying why: its bytes are verified, and an archive that
    refused them would leave the data nowhere. A readable header with a malformed indexed value (or a date that
    is none) keeps ``is_fits`` true, that value None and the problem in ``fits_error``.
    """
    if not looks_like_fits(path, head):
        return False, None, None, None, NO_VALUES
    try:
        from astropy.io import fits  # only FITS files pay for the import
    except ImportError as exc:
        return False, f"astropy is not installed where this file was ingested: {exc}", None, None, NO_VALUES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # astropy warns about every non-standard card; the archive keeps them
        try:
            primary = _primary_only(fits, head, size)
            if primary is not None:
                image, extensions = None, 0
            else:
                # astropy recognises gzip only in files it opens itself, not in a buffer.
                in_memory = size <= len(head) and not head.startswith(GZIP_MAGIC)
                primary, image, extensions = _headers(fits, io.BytesIO(head) if in_memory else stored or path)
        except Exception as exc:
            return False, f"unreadable FITS header: {exc}", None, None, NO_VALUES
        try:
            return _facts(fits, primary, image, extensions)
        except Exception as exc:  # a value no check foresaw must not fail the record on every retry
            return True, f"header values not read: {type(exc).__name__}: {exc}", extensions, None, NO_VALUES


def _primary_only(fits: Any, head: bytes, size: int) -> Any:
    """The primary header when ``head`` holds it and nothing follows its data, else None (the file is walked).

    Most files are a single image: their header is parsed from the bytes already read, without opening the file
    again and looking for an extension past its end (8 times the work).
    """
    if head.startswith(GZIP_MAGIC):
        return None
    buffer = io.BytesIO(head)
    try:
        header = fits.Header.fromfile(buffer)
        end = buffer.tell() + _padded(_data_bytes(header))
    except Exception:  # a header longer than ``head``, or damaged: the full reader decides
        return None
    return header if end >= size else None


def _data_bytes(header: Any) -> int:
    """The size of an HDU's data as its header declares it (FITS 4.0, section 4.4.1)."""
    axes = [int(header[f"NAXIS{n}"]) for n in range(1, int(header["NAXIS"]) + 1)]
    if header.get("GROUPS") and axes and axes[0] == 0:
        axes = axes[1:]  # random groups: NAXIS1 = 0 is a marker, not an axis
    pixels = 1
    for length in axes:
        pixels *= length
    if not axes:
        pixels = 0
    return abs(int(header["BITPIX"])) // 8 * int(header.get("GCOUNT", 1)) * (int(header.get("PCOUNT", 0)) + pixels)


def _padded(length: int) -> int:
    return -(-length // FITS_BLOCK) * FITS_BLOCK


def _headers(fits: Any, source: Any) -> tuple[Any, Any, int]:
    """(primary header, first image extension's header or None, number of extensions)."""
    # lazy_load_hdus: headers are read one by one and data is skipped over, never read.
    with fits.open(source, memmap=False, lazy_load_hdus=True) as hdus:
        primary = hdus[0].header
        count = len(hdus)  # walks every header; a damaged tail ends the walk (astropy warns) instead of failing
        image = next((hdu.header for hdu in hdus[1:] if isinstance(hdu, (fits.ImageHDU, fits.CompImageHDU))),
                     None)
    return primary, image, count - 1


def _facts(fits: Any, primary: Any, image: Any, extensions: int) -> Facts:
    values: list[Any] = []
    problems: list[str] = []
    for keyword, _, kind in FITS_KEYWORDS:
        try:
            values.append(_header_value(_lookup(keyword, primary, image, fits.card.Undefined), kind,
                                        fits.card.Undefined))
        except Exception as exc:
            values.append(None)
            problems.append(f"{keyword}: {exc}")
    found = dict(zip(_COLUMNS, values, strict=True))
    try:
        timesys = _header_value(_lookup(TIME_SCALE_KEYWORD, primary, image, fits.card.Undefined), "string",
                                fits.card.Undefined)
    except Exception as exc:
        timesys = None
        problems.append(f"{TIME_SCALE_KEYWORD}: {exc}")
    obs_time, mjd_obs, time_problems = observation_time(found["date_obs"], found["time_obs"], found["mjd_obs"],
                                                        timesys)
    problems += time_problems
    values[_COLUMNS.index("mjd_obs")] = mjd_obs
    return True, "; ".join(problems) or None, extensions, obs_time, tuple(values)


def _lookup(keyword: str, primary: Any, image: Any, undefined: type) -> Any:
    """The first value that says something: a blank or undefined card in the primary header does not hide the
    extension's."""
    for name in (keyword, *KEYWORD_ALTERNATES.get(keyword, ())):
        for header in (primary, image):
            if header is not None and name in header:
                value = header[name]
                blank = isinstance(value, str) and not value.strip()
                if not (value is None or isinstance(value, undefined) or blank):
                    return value
    return None


def _header_value(value: Any, kind: str, undefined: type) -> Any:
    if value is None or isinstance(value, undefined):
        return None
    if kind == "double":
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a number")
        number = float(value if isinstance(value, (int, float)) else str(value).strip())
        if not math.isfinite(number):
            raise ValueError(f"{value!r} is not a finite number")
        return number
    return str(value).strip() or None
