"""Turn a text file's bytes into str: BOMs, UTF-16/32 without BOM, UTF-8, then detection.

Order of evidence, strongest first:

1. A byte-order mark (UTF-32 before UTF-16, whose BOM is a prefix of UTF-32-LE's).
2. The NUL pattern of UTF-16/32 text without a BOM (bytes ``68 00 69 00`` are "hi" in
   UTF-16-LE); UTF-32 must also decode to plausible text (valid, assigned, non-control code
   points; without any Latin-1 character, at least ``MIN_SCRIPT_LETTERS`` letters of one
   script). Other NUL bytes mean binary content, unless the bytes are UTF-16 text without
   a BOM by the script check of step 4.
3. UTF-8 (a sequence cut off at the very end, or a few stray bytes among many valid
   multi-byte sequences, are replaced by U+FFFD and counted in ``decode_errors``).
4. charset-normalizer, when its guess has evidence: a detected language, at least
   ``MIN_EVIDENCE_BYTES`` non-ASCII bytes and, for a single-byte code page, a language
   coherence of at least ``MIN_COHERENCE``. Otherwise cp1252, the WHATWG default for
   undeclared legacy text; where cp1252 cannot decode the bytes, a guess with a language
   is still used, and with none the file fails. Before falling back on weak evidence, three
   checks that need no language model, each on the whole sample:

   - a multi-byte guess (Shift-JIS, GBK, Big5...) whose text is letters of one script
     (:func:`one_script`: no control, unassigned or private-use characters, at least
     ``MIN_SCRIPT_LETTERS`` letters, ``MIN_SCRIPT_SHARE`` of them of one script) is used;
   - UTF-16 without a BOM or NUL bytes (CJK text): exactly one of UTF-16-LE/BE decodes
     strictly to one-script text, and the legacy guess does not;
   - when most letters of the cp1252 reading are non-ASCII (implausible for a Latin-script
     language), the first of cp1251, KOI8-R, cp1253 whose words are each of one script,
     properly cased (``слово``, ``Слово``, ``СЛОВО``) and, from three letters on, hold a
     vowel, is used (short Russian/Bulgarian/Greek text).
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from tasks.common.errors import LoadError

#: Byte-order marks, longest first where one is a prefix of another.
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
"""BOM bytes and the codec that reads what follows them."""

SAMPLE_BYTES = 1 << 16
"""How much of a file the NUL-pattern and control-character checks look at."""

FALLBACK_ENCODING = "cp1252"
"""The legacy encoding used when the detector has too little evidence."""

MIN_COHERENCE = 0.4
"""Below this language coherence a single-byte guess counts as weak evidence."""

MIN_EVIDENCE_BYTES = 16
"""With fewer non-ASCII bytes than this, any guess counts as weak evidence."""

MAX_CONTROL_RATIO = 0.05
"""More control characters than this (share of the sample) means binary content."""

MIN_SCRIPT_LETTERS = 4
"""Fewest letters for the one-script check (UTF-16 without BOM, short multi-byte text)."""

MIN_SCRIPT_SHARE = 0.9
"""Share of the letters that must be of one script in the one-script check."""

SINGLE_BYTE_SCRIPTS = ("cp1251", "koi8_r", "cp1253")
"""Non-Latin single-byte code pages tried, in order of use, when cp1252 reads nonsense."""

MAX_ASCII_SHARE = 0.95
"""Bytes (NULs aside) with at least this share of printable ASCII are not BOM-less UTF-16."""

_ASCII_TEXT = bytes(range(0x20, 0x7F)) + b"\t\n\r"
_VOWELS = frozenset("аеёиоуыэюяіїєαεηιουωάέήίόύώϊϋΐΰ")
_BAD_CATEGORIES = frozenset({"Cn", "Co", "Cs"})
_TEXT_CONTROLS = frozenset("\t\n\r\x0b\x0c\x1b")
_WORD = re.compile(r"[^\W\d_]+")

_NOT_DETECTED = (
    "utf_16",
    "utf_16_be",
    "utf_16_le",
    "utf_32",
    "utf_32_be",
    "utf_32_le",
    "utf_7",
)
"""Encodings the detector may not pick: UTF-16/32 are found by BOM or NUL pattern only."""

UTF8_MULTIBYTE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}"
)
_HIGH_BYTES = bytes(range(0x80, 0x100))
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
"""Control characters that text does not contain (tab, newlines, form feed, ESC are fine)."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """Text decoded from bytes, with the encoding that decoded it."""

    text: str
    encoding: str
    decode_errors: int = 0


def _script(ch: str) -> str:
    """Return the script of a letter, from its Unicode name (Han and kana are one: "CJK")."""
    word = unicodedata.name(ch, "?").split(" ", 1)[0]
    return "CJK" if word.startswith(("CJK", "HIRAGANA", "KATAKANA")) else word


def one_script(text: str, min_letters: int = MIN_SCRIPT_LETTERS) -> bool:
    """Return whether ``text`` reads as text of one script (see the module docstring)."""
    scripts: Counter[str] = Counter()
    for ch in text:
        category = unicodedata.category(ch)
        if category in _BAD_CATEGORIES or (category == "Cc" and ch not in _TEXT_CONTROLS):
            return False
        if category[0] == "L":
            scripts[_script(ch)] += 1
    letters = sum(scripts.values())
    return letters >= min_letters and scripts.most_common(1)[0][1] >= MIN_SCRIPT_SHARE * letters


def _sample_decode(data: bytes, codec: str) -> str | None:
    """Decode the sample strictly (a sequence cut off at its end is left out), or None."""
    try:
        return codecs.getincrementaldecoder(codec)().decode(data[:SAMPLE_BYTES])
    except UnicodeDecodeError:
        return None


def _utf16_without_bom(data: bytes) -> str | None:
    """Return "utf-16-le"/"-be" when exactly one of them reads as text of one script.

    Bytes that read as ASCII text (``MAX_ASCII_SHARE`` of the bytes that are not NUL are
    printable ASCII) are never UTF-16: pairs
    of ASCII letters are CJK ideographs in UTF-16 ("Bush hid the facts"). When both orders
    fit, NUL bytes decide: they are the high bytes of ASCII characters among the text.
    """
    if len(data) % 2 or len(data) < 2 * MIN_SCRIPT_LETTERS:
        return None
    sample = data[:SAMPLE_BYTES]
    printable = len(sample) - len(sample.translate(None, _ASCII_TEXT))
    if printable >= MAX_ASCII_SHARE * (len(sample) - sample.count(0)):  # NULs aside
        return None
    fits = []
    for codec in ("utf-16-le", "utf-16-be"):
        text = _sample_decode(data, codec)
        if text is not None and one_script(text):
            fits.append(codec)
    if len(fits) == 2:
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        fits = ["utf-16-le"] if odd > even else ["utf-16-be"] if even > odd else []
    return fits[0] if len(fits) == 1 else None


def _plausible_utf32(data: bytes, codec: str) -> bool:
    """Return whether UTF-32 NUL-pattern bytes decode to plausible text."""
    text = _sample_decode(data, codec)
    if not text or any(
        unicodedata.category(ch) in _BAD_CATEGORIES
        or (unicodedata.category(ch) == "Cc" and ch not in _TEXT_CONTROLS)
        for ch in text
    ):
        return False
    return any(ch <= "\xff" for ch in text) or one_script(text)


def _well_formed_word(word: str) -> bool:
    if not (word.islower() or word.isupper() or (word[0].isupper() and word[1:].islower())):
        return False
    return len(word) < 3 or not _VOWELS.isdisjoint(word.lower())


def _single_byte_script(data: bytes, latin: str) -> str | None:
    """Return the non-Latin code page of short legacy text that cp1252 reads as nonsense."""
    letters = [c for c in latin if c.isalpha()]
    if len(letters) < MIN_SCRIPT_LETTERS or sum(c > "\x7f" for c in letters) * 2 < len(letters):
        return None
    for codec in SINGLE_BYTE_SCRIPTS:
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        words = [w for w in _WORD.findall(text) if not w.isascii()]
        scripts = {_script(c) for w in words for c in w if not c.isascii()}
        if len(scripts) == 1 and all(_well_formed_word(w) for w in words):
            return codec
    return None


def _nul_pattern_encoding(data: bytes) -> str | None:
    """Return "utf-16-le"/"-be" or "utf-32-le"/"-be" when the NULs fit that pattern."""
    sample = data[:SAMPLE_BYTES]
    if len(sample) < 2 or b"\0" not in sample:
        return None
    if len(sample) >= 4 and len(data) % 4 == 0:
        quads = len(sample) // 4
        le = sum(1 for i in range(0, quads * 4, 4) if sample[i + 2 : i + 4] == b"\0\0")
        be = sum(1 for i in range(0, quads * 4, 4) if sample[i : i + 2] == b"\0\0")
        if le >= 0.9 * quads and sample[0] != 0 and _plausible_utf32(data, "utf-32-le"):
            return "utf-32-le"
        if be >= 0.9 * quads and sample[3] != 0 and _plausible_utf32(data, "utf-32-be"):
            return "utf-32-be"
    if len(data) % 2:
        return None
    pairs = len(sample) // 2
    odd = sample[1 : pairs * 2 : 2].count(0) / pairs
    even = sample[0 : pairs * 2 : 2].count(0) / pairs
    if odd >= 0.3 and even <= 0.02:
        return "utf-16-le"
    if even >= 0.3 and odd <= 0.02:
        return "utf-16-be"
    return None


def _strict(data: bytes, encoding: str, what: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise LoadError(
            f"not valid {what}: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        ) from exc
    except LookupError as exc:
        raise LoadError(f"unknown encoding {encoding!r}") from exc


def _utf8(data: bytes) -> Decoded | None:
    """Decode UTF-8, tolerating a cut-off last sequence and rare stray bytes."""
    try:
        return Decoded(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError as exc:
        cut_off = exc.reason == "unexpected end of data" and exc.end == len(data)
    valid = len(UTF8_MULTIBYTE.findall(data))
    if not valid:
        return None  # no UTF-8 evidence at all: a legacy encoding
    text = data.decode("utf-8", errors="replace")
    errors = text.count("\ufffd") - data.count(b"\xef\xbf\xbd")
    if cut_off or valid >= 10 * errors:
        return Decoded(text, "utf-8", errors)
    return None


def _without_evidence(data: bytes, guess: str | None) -> Decoded | None:
    """Decode text the detector has little evidence on by the script checks, or None."""
    from charset_normalizer.utils import is_multi_byte_encoding

    legacy = None
    if guess is not None and is_multi_byte_encoding(guess):
        legacy = _sample_decode(data, guess)
        if legacy is not None and one_script(legacy):
            try:
                return Decoded(data.decode(guess), guess)
            except UnicodeDecodeError:
                legacy = None
    if wide := _utf16_without_bom(data):
        try:
            return Decoded(data.decode(wide), wide)
        except UnicodeDecodeError:
            pass
    try:
        latin = data.decode(FALLBACK_ENCODING)
    except UnicodeDecodeError:
        return None
    if codec := _single_byte_script(data, latin):
        return Decoded(data.decode(codec), codec)
    return None


def _detect(data: bytes) -> Decoded:
    """Guess a legacy encoding with charset-normalizer (see the module docstring)."""
    from charset_normalizer import from_bytes
    from charset_normalizer.utils import is_multi_byte_encoding

    best = from_bytes(data, cp_exclusion=list(_NOT_DETECTED)).best()
    weak = (
        best is None
        or not best.languages
        or len(data) - len(data.translate(None, _HIGH_BYTES)) < MIN_EVIDENCE_BYTES
        or (not is_multi_byte_encoding(best.encoding) and best.coherence < MIN_COHERENCE)
    )
    if weak:
        if plain := _without_evidence(data, best.encoding if best else None):
            return plain
        try:
            return Decoded(data.decode(FALLBACK_ENCODING), FALLBACK_ENCODING)
        except UnicodeDecodeError:
            pass
    if best is None or not best.languages:  # no guess, or one without any evidence
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LoadError(
                f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}) "
                "and no other encoding fits"
            ) from exc
    assert best is not None  # valid UTF-8 never gets here
    return Decoded(_strict(data, best.encoding, best.encoding), best.encoding)


def check_controls(text: str, extension: str) -> None:
    """Raise a LoadError when the start of ``text`` has too many control characters."""
    sample = text[:SAMPLE_BYTES]
    if sample and len(_CONTROLS.findall(sample)) > MAX_CONTROL_RATIO * len(sample):
        raise LoadError(f"binary content in {extension or 'file'}: control characters")


def _forced(data: bytes, encoding: str, extension: str) -> Decoded:
    """Decode with the configured encoding only; a leading BOM is dropped."""
    try:
        codec = codecs.lookup(encoding).name
    except LookupError as exc:
        raise LoadError(f"unknown encoding {encoding!r}") from exc
    if b"\0" in data and not codec.startswith(("utf-16", "utf-32")):
        raise LoadError(f"binary content in {extension or 'file'}: NUL bytes")
    text = _strict(data, codec, codec)
    return Decoded(text[1:] if text.startswith("\ufeff") else text, codec)


def decode_text(data: bytes, extension: str = "", encoding: str | None = None) -> Decoded:
    """Decode a text file's bytes; binary or undecodable bytes are a LoadError.

    Args:
        data: The file's bytes.
        extension: The file's extension, for the failure reason (".txt").
        encoding: Decode with this codec only, no detection (a leading BOM is dropped).

    Raises:
        LoadError: ``binary content in .txt: NUL bytes`` (or control characters),
            ``not valid UTF-16-LE: byte ... at offset ...``, ``not valid UTF-8 (...) and no
            other encoding fits``, ``unknown encoding ...``.

    """
    if encoding is not None:
        decoded = _forced(data, encoding, extension)
    elif bom := next(((b, c) for b, c in BOMS if data.startswith(b)), None):
        decoded = Decoded(_strict(data[len(bom[0]) :], bom[1], bom[1].upper()), bom[1])
    elif wide := _nul_pattern_encoding(data):
        decoded = Decoded(_strict(data, wide, wide.upper()), wide)
    elif b"\0" in data:
        if not (wide := _utf16_without_bom(data)):
            raise LoadError(f"binary content in {extension or 'file'}: NUL bytes")
        decoded = Decoded(_strict(data, wide, wide.upper()), wide)
    else:
        decoded = _utf8(data) or _detect(data)
    check_controls(decoded.text, extension)
    return decoded
