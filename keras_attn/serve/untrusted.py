"""An uploaded document read as a hostile one (``POST /translate_file``): its kind checked by
its first bytes, a zip archive's members read within limits while they are read, XML parsed
with no DTD, entity, network or file access, and every limit refused with :class:`Refused`
(a 4xx answer naming it) before memory or time is spent on it.

The limits (docs/serving.md, "Files"): :data:`MAX_MEMBERS` members, :data:`MAX_MEMBER_BYTES`
per member and :data:`MAX_ARCHIVE_BYTES` in all (declared or read, uncompressed),
:data:`MAX_XML_NODES` tags and attributes in the document's XML, :data:`MAX_TEXTS` texts
(lines, paragraphs, HTML segments) to translate. Nothing is written to disk here.

Example:
    >>> with open_archive(data, ".docx") as archive:
    ...     root = parse_xml(read_member(archive, "word/document.xml"), "word/document.xml")
"""
import contextlib
import io
import re
import zipfile
import zlib

MAX_MEMBERS = 1000
MAX_MEMBER_BYTES = 16 * 2**20
MAX_ARCHIVE_BYTES = 64 * 2**20
MAX_XML_NODES = 400_000
MAX_TEXTS = 10_000
CHUNK_BYTES = 64 * 2**10

# The first bytes of formats that are not text, and what each is.
MAGIC = ((b"PK\x03\x04", "a zip archive"), (b"PK\x05\x06", "an empty zip archive"),
         (b"%PDF", "a PDF document"), (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff",
         "a JPEG image"), (b"GIF8", "a GIF image"), (b"\x1f\x8b", "gzip data"),
         (b"\xd0\xcf\x11\xe0", "an old Office file (.doc, .xls, .ppt)"),
         (b"\x7fELF", "a program"), (b"Rar!", "a RAR archive"), (b"7z\xbc\xaf", "a 7-Zip "
         "archive"), (b"{\\rtf", "an RTF document"))
# What each archive format must hold: the document's member, and a member whose content
# names the format (None: only present).
ARCHIVES = {".docx": ("word/document.xml", "[Content_Types].xml", None),
            ".odt": ("content.xml", "mimetype", b"application/vnd.oasis.opendocument.text")}


class Refused(ValueError):
    """A document refused: ``status`` 400 (it is not what its extension says, or malformed)
    or 413 (past a limit), and the message naming why."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def _size(n):
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def kind_of(data):
    """What ``data``'s first bytes say it is (:data:`MAGIC`), or None."""
    return next((what for magic, what in MAGIC if data.startswith(magic)), None)


def text_of(data, ext):
    """The text of a ``.txt`` / ``.html`` upload: UTF-8 (a BOM dropped), no NUL byte, not
    a binary format by its first bytes."""
    kind = kind_of(data)
    if kind is not None:
        raise Refused(f"the file is {kind}, not {ext} text")
    if b"\x00" in data:
        raise Refused(f"the file holds NUL bytes (the first at byte {data.index(0)}): "
                      f"binary data, not {ext} text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Refused(f"the file is not UTF-8 text (byte {e.start}: {e.reason})") from None


def check_texts(count, what):
    """Refuse a document of more than :data:`MAX_TEXTS` texts to translate (413)."""
    if count > MAX_TEXTS:
        raise Refused(f"the file holds {count} {what} to translate; the limit is "
                      f"{MAX_TEXTS}", 413)


def _unsafe_name(name):
    return (name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) is not None
            or ".." in re.split(r"[/\\]", name) or "\x00" in name)


@contextlib.contextmanager
def open_archive(data, ext):
    """The ``zipfile.ZipFile`` of a ``.docx`` / ``.odt`` upload, once its first bytes, its
    member count, names, encryption and declared sizes pass, and it holds its format's
    members (:data:`ARCHIVES`).

    Raises:
        Refused: 400 for what is not a readable archive of the format, 413 past a limit.
    """
    kind = kind_of(data)
    if not data.startswith(b"PK\x03\x04"):
        raise Refused(f"the file is {kind + ', not' if kind else 'not'} a {ext} document "
                      f"(a {ext} is a zip archive)")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as e:
        raise Refused(f"the file is not a readable {ext} (zip: {e})") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise Refused(f"the archive holds {len(members)} members; the limit is "
                          f"{MAX_MEMBERS}", 413)
        names = set()
        for info in members:
            if _unsafe_name(info.filename):
                raise Refused(f"the archive's member {info.filename!r} names a path outside "
                              "the archive")
            if info.filename in names:
                raise Refused(f"the archive holds {info.filename!r} twice")
            names.add(info.filename)
            if info.flag_bits & 0x1:
                raise Refused(f"the archive's member {info.filename!r} is encrypted")
            if info.file_size > MAX_MEMBER_BYTES:
                raise Refused(f"the archive's member {info.filename!r} declares "
                              f"{_size(info.file_size)}; the limit is "
                              f"{_size(MAX_MEMBER_BYTES)} a member", 413)
        declared = sum(info.file_size for info in members)
        if declared > MAX_ARCHIVE_BYTES:
            raise Refused(f"the archive's members declare {_size(declared)} in all; the "
                          f"limit is {_size(MAX_ARCHIVE_BYTES)}", 413)
        document, marker, content = ARCHIVES[ext]
        for name in (document, marker):
            if name not in names:
                raise Refused(f"the archive has no {name}: not a {ext} document")
        if content is not None and read_member(archive, marker).strip() != content:
            raise Refused(f"the archive's {marker} does not say {content.decode()}: not a "
                          f"{ext} document")
        yield archive


def read_member(archive, name, budget=None):
    """The bytes of the member ``name``, read in chunks and refused (413) as soon as they
    pass :data:`MAX_MEMBER_BYTES` or ``budget`` (bytes left of :data:`MAX_ARCHIVE_BYTES`);
    a member that cannot be inflated or fails its CRC is refused (400)."""
    limit = MAX_MEMBER_BYTES if budget is None else min(budget, MAX_MEMBER_BYTES)
    chunks, size = [], 0
    try:
        with archive.open(name) as member:
            while True:
                chunk = member.read(CHUNK_BYTES)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise Refused(f"the archive's member {name!r} inflates past "
                                  f"{_size(limit)} (the limit a member is "
                                  f"{_size(MAX_MEMBER_BYTES)}, {_size(MAX_ARCHIVE_BYTES)} "
                                  "in all)", 413)
                chunks.append(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            OSError) as e:
        raise Refused(f"the archive's member {name!r} cannot be read ({e})") from None
    return b"".join(chunks)


def members(archive, document, replacement):
    """``(ZipInfo, bytes)`` of every member in order, ``document``'s bytes replaced by
    ``replacement``; the members read in all stay within :data:`MAX_ARCHIVE_BYTES`."""
    budget = MAX_ARCHIVE_BYTES
    for info in archive.infolist():
        content = read_member(archive, info.filename, budget)
        budget -= len(content)
        yield info, (replacement if info.filename == document else content)


def parse_xml(data, name):
    """The root element of a member's XML, parsed by lxml with no DTD loaded, no entity
    resolved, no network and libxml2's default depth and size limits; a document that
    declares a DTD (``<!DOCTYPE``: entities live there) is refused, as is one of more than
    :data:`MAX_XML_NODES` tags and attributes (413)."""
    from lxml import etree

    nodes = data.count(b"<") + data.count(b"=")
    if nodes > MAX_XML_NODES:
        raise Refused(f"{name} holds about {nodes} tags and attributes; the limit is "
                      f"{MAX_XML_NODES}", 413)
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             huge_tree=False, dtd_validation=False, attribute_defaults=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as e:
        raise Refused(f"{name} is not well-formed XML ({e})") from None
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:
        raise Refused(f"{name} declares a DTD ({docinfo.doctype or '<!DOCTYPE>'}): entities "
                      "and DTDs are never read")
    return root
