"""A corpus of malformed and hostile uploads for ``POST /translate_file``, made at test time
in a few KB each (a zip member DECLARING 2 GiB is a patched header; one that inflates past
the limit is deflated zeros): :func:`corpus` gives each as a :class:`Case` with the answer
the server owes it.

Example:
    >>> cases = corpus(secret_path, url_of_a_listener)
    >>> cases["docx-member-declares-2GiB"].status
    413
"""
import dataclasses
import functools
import io
import warnings
import struct
import zipfile

from keras_attn.serve import untrusted

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
PARAGRAPH = "3 March 2021"
DOCX_BODY = f'<w:p><w:r><w:t>{PARAGRAPH}</w:t></w:r></w:p>'
ODT_BODY = f"<text:p>{PARAGRAPH}</text:p>"
LAUGHS = ('<!DOCTYPE lolz [<!ENTITY lol "lol">'
          + "".join(f'<!ENTITY lol{i} "{(f"&lol{i - 1};" if i > 1 else "&lol;") * 10}">'
                    for i in range(1, 10)) + "]>")


@dataclasses.dataclass
class Case:
    """An upload (``filename``, its bytes made by ``make`` when first read as ``data``)
    and what it gets: ``status`` (200: translated) and, for a refusal, ``words`` the error
    names."""

    filename: str
    make: object
    status: int
    words: str = ""

    @functools.cached_property
    def data(self):
        return self.make()


# --- the formats, well made -----------------------------------------------------------------
def zip_of(members, compression=zipfile.ZIP_DEFLATED):
    """A zip of ``[(name, bytes)]`` in order (a name twice is written twice)."""
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression) as archive:
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name": one case wants it
        for name, content in members:
            info = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
            info.compress_type = (zipfile.ZIP_STORED if name == "mimetype" else compression)
            archive.writestr(info, content)
    return out.getvalue()


def docx_xml(body=DOCX_BODY, prolog=""):
    return (f'<?xml version="1.0" encoding="UTF-8"?>{prolog}<w:document xmlns:w="{W}">'
            f"<w:body>{body}</w:body></w:document>").encode("utf-8")


def docx(document=None, extra=()):
    return zip_of([("[Content_Types].xml", b'<?xml version="1.0"?><Types/>'),
                   ("_rels/.rels", b'<?xml version="1.0"?><Relationships/>'),
                   ("word/document.xml", docx_xml() if document is None else document),
                   *extra])


def odt_xml(body=ODT_BODY, prolog=""):
    return (f'<?xml version="1.0" encoding="UTF-8"?>{prolog}<office:document-content '
            f'xmlns:office="{OFFICE}" xmlns:text="{TEXT}"><office:body><office:text>{body}'
            "</office:text></office:body></office:document-content>").encode("utf-8")


def odt(content=None, mimetype=b"application/vnd.oasis.opendocument.text", extra=()):
    return zip_of([("mimetype", mimetype), ("content.xml", odt_xml() if content is None
                                            else content),
                   ("META-INF/manifest.xml", b'<?xml version="1.0"?><manifest/>'), *extra])


# --- zip headers rewritten ------------------------------------------------------------------
def _entries(data):
    """``(central offset, local offset, name)`` of every central directory entry."""
    found, at = [], 0
    while (at := data.find(b"PK\x01\x02", at)) >= 0:
        length = struct.unpack_from("<H", data, at + 28)[0]
        found.append((at, struct.unpack_from("<I", data, at + 42)[0],
                      bytes(data[at + 46: at + 46 + length]).decode()))
        at += 4
    return found


def patched(data, name, central, local, value, fmt="<I", combine=None):
    """``data`` with the field at ``central`` / ``local`` (offsets in the member's central
    and local headers) of member ``name`` set to ``value`` (``combine``: old, value -> new)."""
    data = bytearray(data)
    for at, local_at, found in _entries(data):
        if found == name:
            for where in (at + central, local_at + local):
                old = struct.unpack_from(fmt, data, where)[0]
                struct.pack_into(fmt, data, where, combine(old, value) if combine else value)
    return bytes(data)


def declaring(data, name, size):
    """A member that declares ``size`` bytes uncompressed (its data unchanged)."""
    return patched(data, name, 24, 22, size)


def overlapping(data, name, copies):
    """Fifield's overlapping zip: ``copies`` more central entries pointing at the member
    ``name``'s one local header (each declares its whole size)."""
    data = bytearray(data)
    end = data.rfind(b"PK\x05\x06")
    count, size, start = struct.unpack_from("<HII", data, end + 10)
    entry_at = next(at for at, _, found in _entries(data) if found == name)
    length = 46 + sum(struct.unpack_from("<HHH", data, entry_at + 28))
    entry = bytes(data[entry_at: entry_at + length])
    extra = b"".join(entry[:46] + name[:-4].encode() + f"{k:04d}".encode()
                     + entry[46 + len(name):] for k in range(copies))
    tail = bytearray(data[end:])
    struct.pack_into("<HHII", tail, 8, count + copies, count + copies, size + len(extra),
                     start)
    return bytes(data[:end]) + extra + bytes(tail)


def in_all(count, size):
    """A .docx whose ``count`` media members each declare ``size`` bytes (1 KB each)."""
    data = docx(extra=[(f"word/media/m{k}.bin", b"x" * 1000) for k in range(count)])
    for k in range(count):
        data = declaring(data, f"word/media/m{k}.bin", size)
    return data


# --- the corpus -----------------------------------------------------------------------------
def corpus(secret, listener):
    """``{name: Case}``: at least 40 uploads across .txt, .html/.htm, .docx and .odt (and
    formats the route does not take). ``secret``: a local file an external entity points
    at (its text must never come back); ``listener``: an ``http://`` URL whose requests the
    caller counts (none may arrive)."""
    limit = untrusted.MAX_MEMBER_BYTES
    zeros = b"\0" * (limit + 2**20)  # deflates to ~17 KB
    xxe_file = f'<!DOCTYPE d [<!ENTITY x SYSTEM "file://{secret}">]>'
    xxe_http = f'<!DOCTYPE d [<!ENTITY x SYSTEM "{listener}/entity">]>'
    external_dtd = f'<!DOCTYPE d SYSTEM "{listener}/doctype.dtd">'
    parameter = f'<!DOCTYPE d [<!ENTITY % p SYSTEM "{listener}/parameter"> %p;]>'
    quadratic = '<!DOCTYPE d [<!ENTITY a "' + "x" * 50_000 + '">]>'
    good_docx, good_odt = docx(), odt()
    many = untrusted.MAX_TEXTS + 1
    cases = {
        # .txt
        "txt-png-magic": Case("a.txt", lambda: b"\x89PNG\r\n\x1a\n" + b"\0" * 64, 400, "a PNG image"),
        "txt-is-a-zip": Case("a.txt", lambda: good_docx, 400, "a zip archive"),
        "txt-nul-bytes": Case("a.txt", lambda: b"3 March\x002021", 400, "NUL bytes"),
        "txt-not-utf8": Case("a.txt", lambda: b"le 4 juillet 1999 \xe9t\xe9", 400, "not UTF-8"),
        "txt-utf16": Case("a.txt", lambda: "3 March 2021".encode("utf-16"), 400, "NUL bytes"),
        "txt-pdf": Case("a.txt", lambda: b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", 400, "a PDF document"),
        "txt-program": Case("a.txt", lambda: b"\x7fELF\x02\x01\x01" + b"\0" * 32, 400, "a program"),
        "txt-line-flood": Case("a.txt", lambda: b"1\n" * many, 413, f"limit is {many - 1}"),
        "txt-blank-lines-only": Case("a.txt", lambda: b"\n" * 400_000, 200),
        "txt-name-escapes": Case("../../escape.txt", lambda: PARAGRAPH.encode(), 200),
        # .html / .htm
        "html-billion-laughs": Case("a.html", lambda: (LAUGHS + "<p>&lol9;</p>").encode(), 200),
        "html-external-entity": Case("a.html", lambda: (xxe_file + "<p>&x;</p>").encode(), 200),
        "html-inline-tag-flood": Case("a.html", lambda: b"<p>" + b"<b>3</b> " * 5000 + b"</p>", 400,
                                      "inline tags"),
        "html-segment-flood": Case("a.html", lambda: b"<p>1</p>" * many, 413, "HTML segments"),
        "html-nul-bytes": Case("a.html", lambda: b"<p>3 March\x00</p>", 400, "NUL bytes"),
        "html-gzip": Case("a.html", lambda: b"\x1f\x8b\x08\x00" + b"\0" * 32, 400, "gzip data"),
        "html-not-utf8": Case("a.html", lambda: b"<p>\xff\xfe</p>", 400, "not UTF-8"),
        "html-unclosed-tags": Case("a.html", lambda: f"<p><b>{PARAGRAPH}<i>".encode(), 200),
        "html-broken-markup": Case("a.html", lambda: f"<<p>>{PARAGRAPH}</p <a href='x>".encode(),
                                   200),
        "html-deep-nesting": Case("a.html", lambda: b"<div>" * 100_000, 200),
        "htm-jpeg": Case("a.htm", lambda: b"\xff\xd8\xff\xe0" + b"\0" * 64, 400, "a JPEG image"),
        # .docx: the archive
        "docx-member-declares-2GiB": Case("a.docx", lambda: declaring(
            docx(extra=[("word/media/big.bin", b"x" * 1000)]), "word/media/big.bin", 2**31),
            413, "declares 2048.0 MiB"),
        "docx-document-declares-2GiB": Case("a.docx", lambda: declaring(
            good_docx, "word/document.xml", 2**31), 413, "declares 2048.0 MiB"),
        "docx-member-inflates-past-limit": Case("a.docx", lambda: docx(
            extra=[("word/media/zeros.bin", zeros)]), 413, "the limit is 16.0 MiB"),
        "docx-member-lies-about-its-size": Case("a.docx", lambda: declaring(
            docx(extra=[("word/media/zeros.bin", zeros)]), "word/media/zeros.bin", 1000),
            400, "cannot be read"),
        "docx-members-past-limit-in-all": Case("a.docx", lambda: in_all(5, limit - 1), 413,
                                               "in all"),
        "docx-overlapping-members": Case("a.docx", lambda: overlapping(
            docx(extra=[("word/media/zero.bin", zeros[:2**20])]), "word/media/zero.bin",
            200), 413, "in all"),
        "docx-too-many-members": Case("a.docx", lambda: docx(
            extra=[(f"m/{k}", b"") for k in range(untrusted.MAX_MEMBERS)]), 413,
            "members; the limit"),
        "docx-member-escapes": Case("a.docx", lambda: docx(extra=[("../../evil.txt", b"x")]), 400,
                                    "outside the archive"),
        "docx-member-absolute": Case("a.docx", lambda: docx(extra=[("/tmp/evil.txt", b"x")]), 400,
                                     "outside the archive"),
        "docx-member-encrypted": Case("a.docx", lambda: patched(good_docx, "word/document.xml", 8,
                                                        6, 1, "<H", lambda a, b: a | b),
                                      400, "encrypted"),
        "docx-member-twice": Case("a.docx", lambda: docx(extra=[("word/document.xml",
                                                         docx_xml())]), 400, "twice"),
        "docx-bad-crc": Case("a.docx", lambda: patched(good_docx, "word/document.xml", 16, 14,
                                               0xDEADBEEF), 400, "cannot be read"),
        "docx-unknown-compression": Case("a.docx", lambda: patched(good_docx, "word/document.xml",
                                                           10, 8, 97, "<H"), 400,
                                         "cannot be read"),
        "docx-is-a-pdf": Case("a.docx", lambda: b"%PDF-1.7\n" + b"\0" * 64, 400, "a PDF document"),
        "docx-empty-file": Case("a.docx", lambda: b"", 400, "not a .docx document"),
        "docx-truncated": Case("a.docx", lambda: good_docx[: len(good_docx) // 2], 400,
                               "not a readable .docx"),
        "docx-without-document": Case("a.docx", lambda: zip_of([("[Content_Types].xml", b"<T/>")]),
                                      400, "no word/document.xml"),
        "docx-is-an-odt": Case("a.docx", lambda: good_odt, 400, "no word/document.xml"),
        # .docx: the document's XML
        "docx-external-entity-file": Case("a.docx", lambda: docx(docx_xml(
            "<w:p><w:r><w:t>&x;</w:t></w:r></w:p>", xxe_file)), 400, "declares a DTD"),
        "docx-external-entity-http": Case("a.docx", lambda: docx(docx_xml(
            "<w:p><w:r><w:t>&x;</w:t></w:r></w:p>", xxe_http)), 400, "declares a DTD"),
        "docx-external-dtd": Case("a.docx", lambda: docx(docx_xml(prolog=external_dtd)), 400,
                                  "declares a DTD"),
        "docx-parameter-entity": Case("a.docx", lambda: docx(docx_xml(prolog=parameter)), 400,
                                      "word/document.xml"),
        "docx-billion-laughs": Case("a.docx", lambda: docx(docx_xml(
            "<w:p><w:r><w:t>&lol9;</w:t></w:r></w:p>", LAUGHS)), 400, "word/document.xml"),
        "docx-quadratic-blowup": Case("a.docx", lambda: docx(docx_xml(
            "<w:p><w:r><w:t>" + "&a;" * 20_000 + "</w:t></w:r></w:p>", quadratic)), 400,
            "word/document.xml"),
        "docx-malformed-xml": Case("a.docx", lambda: docx(docx_xml("<w:p><w:r><w:t>3 March</w:r>")),
                                   400, "not well-formed"),
        "docx-deep-nesting": Case("a.docx", lambda: docx(docx_xml("<w:p>" * 100_000)), 400,
                                  "not well-formed"),
        "docx-tag-flood": Case("a.docx", lambda: docx(docx_xml("<w:p/>" * (
            untrusted.MAX_XML_NODES + 1))), 413, "tags and attributes"),
        "docx-paragraph-flood": Case("a.docx", lambda: docx(docx_xml(
            "<w:p><w:r><w:t>1</w:t></w:r></w:p>" * many)), 413, "paragraphs"),
        "docx-xinclude": Case("a.docx", lambda: docx(docx_xml(
            f'<w:p><w:r><w:t>{PARAGRAPH}</w:t></w:r></w:p><xi:include '
            f'xmlns:xi="http://www.w3.org/2001/XInclude" href="file://{secret}" '
            'parse="text"/>')), 200),
        "docx-near-every-limit": Case("a.docx", lambda: docx(docx_xml(DOCX_BODY + (
            '<w:bookmarkStart w:id="1" w:name="' + "n" * 80 + '"/>') * (
            untrusted.MAX_XML_NODES // 3 - 100))), 200),
        "docx-utf16-document": Case("a.docx", lambda: docx(docx_xml().decode().replace(
            'encoding="UTF-8"', 'encoding="UTF-16"').encode("utf-16")), 200),
        # .odt
        "odt-billion-laughs": Case("a.odt", lambda: odt(odt_xml("<text:p>&lol9;</text:p>", LAUGHS)),
                                   400, "content.xml"),
        "odt-external-entity": Case("a.odt", lambda: odt(odt_xml("<text:p>&x;</text:p>", xxe_file)),
                                    400, "declares a DTD"),
        "odt-member-declares-2GiB": Case("a.odt", lambda: declaring(good_odt, "content.xml", 2**31),
                                         413, "declares 2048.0 MiB"),
        "odt-wrong-mimetype": Case("a.odt", lambda: odt(mimetype=b"application/zip"), 400,
                                   "mimetype"),
        "odt-is-a-docx": Case("a.odt", lambda: good_docx, 400, "no content.xml"),
        "odt-paragraph-flood": Case("a.odt", lambda: odt(odt_xml("<text:p>1</text:p>" * many)), 413,
                                    "paragraphs"),
        "odt-malformed-xml": Case("a.odt", lambda: odt(b"<office:document-content>"), 400,
                                  "not well-formed"),
        # what the route does not take
        "xlsx": Case("a.xlsx", lambda: zip_of([("xl/workbook.xml", b"<workbook/>")]), 400,
                     "not supported"),
        "pptx": Case("a.pptx", lambda: zip_of([("ppt/presentation.xml", b"<p/>")]), 400,
                     "not supported"),
        "pdf": Case("a.pdf", lambda: b"%PDF-1.7\n", 400, "not supported"),
        "no-extension": Case("document", lambda: PARAGRAPH.encode(), 400, "not supported"),
    }
    return cases
