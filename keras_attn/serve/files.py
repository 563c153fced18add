"""``POST /translate_file``: a document translated with its formatting kept. ``.txt``: each
non-blank line; ``.html``: as ``format=html`` (:mod:`keras_attn.serve.markup`); ``.docx`` /
``.odt``: per paragraph, its runs as an HTML fragment (all but the paragraph's own
formatting as spans), written back as runs. Every upload is read as a hostile file, within
limits (:mod:`keras_attn.serve.untrusted`). :class:`FileStore` keeps the results for
``GET /download_file/{name}``.

Example:
    >>> translated = await translate_file("letter.docx", data, as_text, as_html)
"""
import asyncio
import contextlib
import copy
import html
import io
import os
import re
import time
import uuid
import zipfile

from keras_attn.serve import markup, untrusted

EXTENSIONS = (".txt", ".html", ".htm", ".docx", ".odt")
FILE_SLOTS = 2  # documents read or written at once (the others wait): bounds their memory

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
_SPAN = re.compile(r'<span data-r="(\d+)">(.*?)</span>', re.S)


def extension(filename):
    """The lower-cased extension of ``filename`` if in :data:`EXTENSIONS`, else None."""
    ext = os.path.splitext(filename or "")[1].lower()
    return ext if ext in EXTENSIONS else None


def to_fragment(pieces):
    """``[(text, format)]`` -> an HTML fragment, formats but 0 (the paragraph's own) as
    ``<span data-r="k">``; adjacent pieces of one format merged."""
    merged = []
    for text, fmt in pieces:
        if merged and merged[-1][1] == fmt:
            merged[-1] = (merged[-1][0] + text, fmt)
        elif text:
            merged.append((text, fmt))
    return "".join(html.escape(t, quote=False) if not f
                   else f'<span data-r="{f}">{html.escape(t, quote=False)}</span>'
                   for t, f in merged)


def from_fragment(fragment):
    """The inverse of :func:`to_fragment` on a translation: ``[(text, format)]``."""
    pieces, at = [], 0
    for m in _SPAN.finditer(fragment):
        if m.start() > at:
            pieces.append((html.unescape(fragment[at: m.start()]), 0))
        pieces.append((html.unescape(m.group(2)), int(m.group(1))))
        at = m.end()
    if at < len(fragment):
        pieces.append((html.unescape(fragment[at:]), 0))
    return [(t, f) for t, f in pieces if t]


def _formats(runs):
    """Per run of ``[(text, key)]`` (empty key: no formatting of its own) its format
    number, 0 for the paragraph's own (unformatted, else the most characters'); the keys."""
    chars = {}
    for text, key in runs:
        chars[key] = chars.get(key, 0) + len(text)
    plain = next((k for k in chars if not k), None)
    keys = sorted(chars, key=lambda k: (k != plain, -chars[k]))
    number = {k: i for i, k in enumerate(keys)}
    return [number[key] for _, key in runs], keys


# --- .docx -----------------------------------------------------------------------------------
_DOCX_SPACING = {f"{{{W}}}tab": "\t", f"{{{W}}}br": "\n", f"{{{W}}}cr": "\n"}


def _run_format(run):
    """``(key, rPr)``: a run's ``<w:rPr>`` (or None) and its bytes (b"" for none)."""
    from lxml import etree

    rpr = run.find(f"{{{W}}}rPr")
    return b"" if rpr is None else etree.tostring(rpr), rpr


def _docx_paragraphs(root):
    """Per ``<w:p>`` with text: ``(paragraph, runs, [(text, rPr key)])`` of its direct runs."""
    out = []
    for p in root.iter(f"{{{W}}}p"):
        runs, texts = [], []
        for r in p.findall(f"{{{W}}}r"):
            text = "".join((child.text or "") if child.tag == f"{{{W}}}t"
                           else _DOCX_SPACING.get(child.tag, "") for child in r)
            if text:
                runs.append(r)
                texts.append((text, _run_format(r)[0]))
        if any(t.strip() for t, _ in texts):
            out.append((p, runs, texts))
    return out


def _docx_write(p, runs, keys, pieces):
    from lxml import etree

    templates = dict(map(_run_format, runs))
    at = p.index(runs[0])
    for r in runs:
        p.remove(r)
    for k, (text, fmt) in enumerate(pieces):
        r = etree.Element(f"{{{W}}}r")
        rpr = templates[keys[fmt]]
        if rpr is not None:
            r.append(copy.deepcopy(rpr))
        t = etree.SubElement(r, f"{{{W}}}t")
        t.text = text
        t.set(XML_SPACE, "preserve")
        p.insert(at + k, r)


# --- .odt ------------------------------------------------------------------------------------
_ODT_PLAIN = {f"{{{TEXT}}}s", f"{{{TEXT}}}tab", f"{{{TEXT}}}line-break"}


def _spacing(element):
    """The text a spacing element of :data:`_ODT_PLAIN` stands for; "" for any other."""
    if element.tag == f"{{{TEXT}}}s":
        return " " * int(element.get(f"{{{TEXT}}}c", "1"))
    return {f"{{{TEXT}}}tab": "\t", f"{{{TEXT}}}line-break": "\n"}.get(element.tag, "")


def _odt_text(element):
    """The text of a ``<text:span>``'s content (spaces, tabs and line breaks included)."""
    return (element.text or "") + "".join(_spacing(c) + (c.tail or "") for c in element)


def _odt_paragraphs(root):
    """Per ``<text:p>`` / ``<text:h>`` whose children are spans and spacing only:
    ``(paragraph, [(text, style or "")])``."""
    out = []
    for p in root.iter(f"{{{TEXT}}}p", f"{{{TEXT}}}h"):
        if any(c.tag not in _ODT_PLAIN | {f"{{{TEXT}}}span"} for c in p) or any(
                g.tag not in _ODT_PLAIN for c in p if c.tag == f"{{{TEXT}}}span" for g in c):
            continue
        texts = [(p.text or "", "")]
        for child in p:
            if child.tag == f"{{{TEXT}}}span":
                texts.append((_odt_text(child), child.get(f"{{{TEXT}}}style-name", "")))
            else:
                texts.append((_spacing(child), ""))
            texts.append((child.tail or "", ""))
        texts = [(t, s) for t, s in texts if t]
        if any(t.strip() for t, _ in texts):
            out.append((p, texts))
    return out


def _odt_write(p, keys, pieces):
    from lxml import etree

    for child in list(p):
        p.remove(child)
    p.text = ""
    last = None
    for text, fmt in pieces:
        style = keys[fmt]
        if style:
            last = etree.SubElement(p, f"{{{TEXT}}}span")
            last.set(f"{{{TEXT}}}style-name", style)
            last.text = text
        elif last is None:
            p.text += text
        else:
            last.tail = (last.tail or "") + text


# --- the archive formats ---------------------------------------------------------------------
FORMATS = {".docx": (_docx_paragraphs, _docx_write), ".odt": (_odt_paragraphs, _odt_write)}


def _read_document(data, ext):
    """``(root, paragraphs, formats, fragments)`` of a .docx / .odt's document member, read
    within :mod:`~keras_attn.serve.untrusted`'s limits."""
    member = untrusted.ARCHIVES[ext][0]
    with untrusted.open_archive(data, ext) as source:
        root = untrusted.parse_xml(untrusted.read_member(source, member), member)
    found = FORMATS[ext][0](root)
    untrusted.check_texts(len(found), "paragraphs")
    fragments, formats = [], []
    for item in found:
        numbers, keys = _formats(item[-1])
        formats.append(keys)
        fragments.append(to_fragment([(t, n) for (t, _), n in zip(item[-1], numbers)]))
    return root, found, formats, fragments


def _write_document(data, ext, root, found, formats, translated):
    """The archive again, its document member written with the translated paragraphs and
    every other member copied (each with its own compression)."""
    from lxml import etree

    write = FORMATS[ext][1]
    for item, keys, fragment in zip(found, formats, translated):
        write(*item[:-1], keys, from_fragment(fragment))
    member = untrusted.ARCHIVES[ext][0]
    document = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    out = io.BytesIO()
    with untrusted.open_archive(data, ext) as source, zipfile.ZipFile(out, "w") as target:
        for info, content in untrusted.members(source, member, document):
            target.writestr(info, content)
    return out.getvalue()


def _segments(text):
    """The HTML segments :func:`~keras_attn.serve.markup.translate_html` would translate."""
    return sum(isinstance(item, markup.Segment) and bool(item.text.strip())
               for item in markup.parse(text))


async def translate_file(filename, data, translate_text, translate_html, slots=None):
    """The translated bytes of the file ``filename`` holding ``data``, read as a hostile
    file (:mod:`~keras_attn.serve.untrusted`): an archive is read and written in a worker
    thread, so the server answers other requests meanwhile.

    Args:
        translate_text: ``async (list of str) -> list of str`` (plain text).
        translate_html: ``async (list of HTML fragments) -> list of HTML``.
        slots: an ``asyncio.Semaphore`` held while a document is read or written (bounds
            the memory of documents read at once), or None.

    Raises:
        untrusted.Refused: not what its extension says, malformed, or past a limit.
        ValueError: not one of :data:`EXTENSIONS`.
    """
    ext = extension(filename)
    if ext is None:
        raise ValueError("file format not supported")
    slots = slots or contextlib.nullcontext()
    if ext == ".txt":
        lines = untrusted.text_of(data, ext).split("\n")
        todo = [i for i, line in enumerate(lines) if line.strip()]
        untrusted.check_texts(len(todo), "lines")
        done = await translate_text([lines[i].strip() for i in todo]) if todo else []
        for i, translation in zip(todo, done):  # each line's own spaces kept around it
            lead, _, trail = re.fullmatch(r"(\s*)(.*?)(\s*)", lines[i], re.S).groups()
            lines[i] = lead + translation + trail
        return "\n".join(lines).encode("utf-8")
    if ext in (".html", ".htm"):
        text = untrusted.text_of(data, ext)
        untrusted.check_texts(await asyncio.to_thread(_segments, text), "HTML segments")
        return (await translate_html([text]))[0].encode("utf-8")
    async with slots:
        read = await asyncio.to_thread(_read_document, data, ext)
    translated = await translate_html(read[-1]) if read[-1] else []
    async with slots:
        return await asyncio.to_thread(_write_document, data, ext, *read[:-1], translated)


class FileStore:
    """Translated files waiting for their download.

    Args:
        directory: where they are kept (made when missing).
        max_age_s: a file older than this is removed (when the next one is stored).
    """

    def __init__(self, directory, max_age_s=3600):
        self.directory = str(directory)
        self.max_age_s = max_age_s
        os.makedirs(self.directory, exist_ok=True)

    def put(self, filename, data):
        """Keep ``data``; its download name (``uuid.original-name``)."""
        self._expire()
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(filename)).lstrip(".")
        name = f"{uuid.uuid4()}.{base or 'file'}"
        path = os.path.join(self.directory, name)
        with open(path + ".part", "wb") as f:
            f.write(data)
        os.replace(path + ".part", path)
        return name

    def path(self, name):
        """The file of a download name, or None (unknown, expired or not one of ours)."""
        if not re.fullmatch(r"[0-9a-f-]{36}\.[A-Za-z0-9._-]+", name or ""):
            return None
        path = os.path.join(self.directory, name)
        return path if os.path.isfile(path) else None

    def _expire(self):
        limit = time.time() - self.max_age_s
        for entry in os.scandir(self.directory):
            with contextlib.suppress(FileNotFoundError):  # another server removed it
                if entry.is_file() and entry.stat().st_mtime < limit:
                    os.remove(entry.path)
