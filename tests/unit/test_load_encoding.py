"""Unit tests for tasks/load/encoding.py: BOMs, UTF-16/32 without BOM, UTF-8, legacy codecs."""

from __future__ import annotations

import codecs

import pytest

from tasks.common.errors import LoadError
from tasks.load.encoding import Decoded, decode_text

# A few hundred characters per language, so the detector has the evidence it needs.
SAMPLES = {
    "russian": "Москва — столица России, город федерального значения, административный центр "
    "Центрального федерального округа и центр Московской области. Крупнейший по численности "
    "населения город России и её субъект, один из крупнейших городов мира.",
    "greek": "Η Αθήνα είναι η πρωτεύουσα και μεγαλύτερη πόλη της Ελλάδας. Είναι μια από τις "
    "αρχαιότερες πόλεις του κόσμου, με ιστορία που εκτείνεται πάνω από 3.400 χρόνια. Η πόλη "
    "είναι γνωστή για την Ακρόπολη και τον Παρθενώνα.",
    "japanese": "東京都は日本の首都であり、世界有数の大都市です。人口は約千四百万人で、政治、経済、"
    "文化の中心地となっています。多くの企業の本社が集まり、交通網も非常に発達しています。",
    "chinese": "北京是中华人民共和国的首都，也是全国的政治中心和文化中心。"
    "北京有着三千多年的建城史和八百多年的建都史，是世界著名的古都。",
    "taiwanese": "臺北市是中華民國的首都，位於臺灣北部的臺北盆地。臺北市是臺灣的政治、經濟、文化與"
    "媒體中心，擁有許多重要的歷史建築與博物館。",
    "french": "Le château de Versailles est un château et un monument historique français qui "
    "se situe à Versailles. Il fut la résidence des rois de France Louis XIV, Louis XV et "
    "Louis XVI. Le roi et la cour y résidèrent de façon permanente.",
    "polish": "Kraków jest jednym z najstarszych i największych miast w Polsce. Przez wieki był "
    "stolicą kraju i siedzibą królów. Zabytkowe centrum miasta zostało wpisane na listę "
    "światowego dziedzictwa UNESCO. Żółć gęślą jaźń.",
    "turkish": "İstanbul, Türkiye'nin en kalabalık şehri ve ülkenin ekonomik, kültürel ve "
    "tarihi merkezidir. Şehir, Boğaziçi'nin iki yakasında kurulmuştur ve Avrupa ile Asya "
    "kıtalarını birbirine bağlar.",
    "german": "Müller’s „Straße“ – Grüße aus München. Die Bayerische Staatsbibliothek ist "
    "eine der bedeutendsten Universalbibliotheken der Welt; sie enthält über zehn Millionen "
    "Bände und zahlreiche Handschriften.",
}


@pytest.mark.parametrize(
    ("language", "codec"),
    [
        ("russian", "cp1251"),
        ("greek", "cp1253"),
        ("japanese", "shift_jis"),
        ("chinese", "gbk"),
        ("taiwanese", "big5"),
        ("french", "latin-1"),
        ("polish", "cp1250"),
        ("turkish", "cp1254"),
        ("german", "cp1252"),
    ],
)
def test_legacy_encodings_are_detected(language: str, codec: str) -> None:
    text = SAMPLES[language] + "\n"
    decoded = decode_text(text.encode(codec), ".txt")
    assert decoded.text == text
    # the detector may name an equivalent superset (cp932 for Shift-JIS, gb18030 for GBK)
    assert text.encode(decoded.encoding) == text.encode(codec)


@pytest.mark.parametrize(
    ("codec", "bom", "expected"),
    [
        ("utf-8", codecs.BOM_UTF8, "utf-8"),
        ("utf-16-le", codecs.BOM_UTF16_LE, "utf-16-le"),
        ("utf-16-be", codecs.BOM_UTF16_BE, "utf-16-be"),
        ("utf-32-le", codecs.BOM_UTF32_LE, "utf-32-le"),
        ("utf-32-be", codecs.BOM_UTF32_BE, "utf-32-be"),
        ("utf-16-le", b"", "utf-16-le"),
        ("utf-16-be", b"", "utf-16-be"),
        ("utf-32-le", b"", "utf-32-le"),
        ("utf-32-be", b"", "utf-32-be"),
    ],
)
def test_unicode_with_and_without_bom(codec: str, bom: bytes, expected: str) -> None:
    text = "Lighthouse log — 灯台 — Ελλάδα\nfog at dawn, horn every 30 s\n" * 3
    decoded = decode_text(bom + text.encode(codec), ".txt")
    assert (decoded.text, decoded.encoding) == (text, expected)


def test_utf16_with_few_ascii_characters_is_still_text() -> None:
    text = "a" + "灯台守" * 20
    assert decode_text(codecs.BOM_UTF16_LE + text.encode("utf-16-le")).text == text


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"plain text\x00more text", id="one-nul"),
        pytest.param(b"\x00\x00binary", id="leading-nuls"),
        pytest.param(b"a\x00\x00b\x00c", id="nuls-in-no-utf16-pattern"),
        pytest.param(bytes(range(256)) * 8, id="all-bytes"),
        pytest.param(b"text " * 20_000 + b"\x00" + b"more", id="nul-after-64k"),
    ],
)
def test_nul_bytes_mean_binary(data: bytes) -> None:
    with pytest.raises(LoadError, match=r"^binary content in \.txt: NUL bytes$"):
        decode_text(data, ".txt")


def test_control_characters_mean_binary() -> None:
    data = bytes(b for b in range(1, 32) if b not in b"\t\n\r\x0b\x0c\x1b") * 40
    with pytest.raises(LoadError, match="^binary content in .log: control characters$"):
        decode_text(data, ".log")


def test_tabs_form_feeds_and_escapes_are_text() -> None:
    text = "col\tcol\n\x0cnext page\n\x1b[1mbold\x1b[0m\r\n"
    assert decode_text(text.encode()).text == text


@pytest.mark.parametrize(
    ("data", "text", "encoding"),
    [
        pytest.param("café".encode("latin-1"), "café", "cp1252", id="short-latin1"),
        pytest.param(b"abcd\xff", "abcdÿ", "cp1252", id="one-high-byte"),
        pytest.param(b"4,5,\xa9\n", "4,5,©\n", "cp1252", id="csv-copyright"),
    ],
)
def test_little_evidence_falls_back_to_cp1252(data: bytes, text: str, encoding: str) -> None:
    decoded = decode_text(data)
    assert (decoded.text, decoded.encoding) == (text, encoding)


def test_utf8_cut_off_mid_character_keeps_utf8() -> None:
    data = "héllo wörld — ".encode() * 3 + "—".encode()[:2]
    decoded = decode_text(data)
    assert decoded.encoding == "utf-8" and decoded.decode_errors == 1
    assert decoded.text == "héllo wörld — " * 3 + "\ufffd"


def test_rare_stray_bytes_in_utf8_are_replaced_not_redetected() -> None:
    data = "Grüße aus München. ".encode() * 20 + b"\xe9 " + "Käse ".encode() * 20
    decoded = decode_text(data)
    assert decoded.encoding == "utf-8" and decoded.decode_errors == 1
    assert decoded.text.startswith("Grüße aus München.")


def test_undecodable_bytes_fail_with_offset() -> None:
    with pytest.raises(LoadError) as info:
        decode_text(b"abcd\x81\x8d\x8f\x90\x9d")
    assert str(info.value) == "not valid UTF-8 (byte 0x81 at offset 4) and no other encoding fits"


def test_forced_encoding_skips_detection() -> None:
    data = "Grüße".encode("cp1252")
    assert decode_text(data, encoding="latin-1").encoding == "iso8859-1"
    assert decode_text(codecs.BOM_UTF8 + b"bom", encoding="utf-8").text == "bom"
    assert decode_text("hi".encode("utf-16"), encoding="utf-16").text == "hi"
    with pytest.raises(LoadError, match=r"^not valid utf-8: byte 0xfc at offset 2$"):
        decode_text(data, encoding="utf-8")
    with pytest.raises(LoadError, match="^unknown encoding 'klingon'$"):
        decode_text(data, encoding="klingon")


def test_empty_bytes_decode_to_empty_text() -> None:
    assert decode_text(b"").text == ""


# -- weak evidence: script checks -------------------------------------------------------------

JAPANESE = "東京の天気は晴れです。明日は雨が降るでしょう。"
CHINESE = "今天天气很好，我们去公园散步吧。"
KOREAN = "오늘은날씨가아주좋습니다"
RUSSIAN = "Маяк на скале светит каждую ночь."


@pytest.mark.parametrize(
    ("text", "codec"),
    [
        pytest.param(JAPANESE, "utf-16-le", id="japanese-le"),
        pytest.param(JAPANESE, "utf-16-be", id="japanese-be"),
        pytest.param(CHINESE, "utf-16-le", id="chinese-le"),
        pytest.param(KOREAN, "utf-16-le", id="korean-le-nul-low-byte"),
        pytest.param(RUSSIAN, "utf-16-le", id="russian-le-spaces"),
        pytest.param(RUSSIAN, "utf-16-be", id="russian-be-spaces"),
    ],
)
def test_utf16_without_bom_or_nul_pattern_by_script(text: str, codec: str) -> None:
    decoded = decode_text(text.encode(codec), ".txt")
    assert (decoded.text, decoded.encoding) == (text, codec)


@pytest.mark.parametrize(
    ("text", "codec"),
    [
        pytest.param(JAPANESE, "shift_jis", id="short-shift-jis"),
        pytest.param(CHINESE, "gbk", id="short-gbk"),
        pytest.param("Привет, мир", "cp1251", id="short-russian"),
        pytest.param("Здравей", "cp1251", id="short-bulgarian"),
        pytest.param("Привет, мир", "koi8_r", id="short-koi8"),
    ],
)
def test_short_legacy_text_is_not_read_as_cp1252(text: str, codec: str) -> None:
    decoded = decode_text(text.encode(codec), ".txt")
    assert decoded.text == text
    assert text.encode(decoded.encoding) == text.encode(codec)


@pytest.mark.parametrize(
    "text", ["Grüße aus Köln", "Café crème brûlée", "Smörgåsbord, tack", "naïve façade"]
)
def test_short_latin_text_stays_cp1252(text: str) -> None:
    assert decode_text(text.encode("cp1252")) == Decoded(text, "cp1252")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"ab\0\0", id="one-utf32-unit"),
        pytest.param(b"\x00\x00\x11\x00" * 4, id="utf32-beyond-unicode"),
        pytest.param(b"Bush hid the facts\0\0", id="ascii-pairs-as-cjk"),
    ],
)
def test_implausible_wide_text_is_binary(data: bytes) -> None:
    with pytest.raises(LoadError, match="^binary content in .txt: NUL bytes$"):
        decode_text(data, ".txt")
