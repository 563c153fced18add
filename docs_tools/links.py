"""Every internal link of the built site resolves: the page it names exists in the site and,
when it names an anchor, that page has an element with that id.

``mkdocs build --strict`` checks the links of the Markdown it reads, but not a link to a
file it left out of the site (``exclude_docs``), a link written as HTML, or a link to an
anchor of a page that mkdocstrings renders; this reads the HTML that ships.

Usage: ``python docs_tools/links.py SITE_DIR`` prints one line per broken link and exits 1
when there is one (tests/integration/test_docs.py runs it on a fresh build).
"""
import html.parser
import pathlib
import posixpath
import sys
import urllib.parse


class _Page(html.parser.HTMLParser):
    """The ids and the link targets (``href``/``src``) of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("id", "name"):
            if attrs.get(name):
                self.ids.add(attrs[name])
        for name in ("href", "src"):
            if attrs.get(name) is not None and not (tag == "link" and name == "href"
                                                    and attrs.get("rel") == ["canonical"]):
                self.links.append(attrs[name])


def _target(site, page, link):
    """The file and anchor a relative ``link`` of ``page`` names, or None for external."""
    parts = urllib.parse.urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:", "javascript:")):
        return None
    path = urllib.parse.unquote(parts.path)
    if path.startswith("/"):
        return None  # absolute: the site's root is the server's, unknown here
    base = page.parent.relative_to(site).as_posix()
    rel = posixpath.normpath(posixpath.join(base, path)) if path else \
        page.relative_to(site).as_posix()
    file = site / rel
    if file.is_dir() or path.endswith("/"):
        file = file / "index.html"
    return file, urllib.parse.unquote(parts.fragment)


def broken_links(site):
    """``(page, link, why)`` for every internal link of the site at ``site`` that does not
    resolve (file or anchor)."""
    site = pathlib.Path(site)
    pages, broken = {}, []

    def parsed(path):
        if path not in pages:
            parser = _Page()
            parser.feed(path.read_text(encoding="utf-8", errors="replace"))
            pages[path] = parser
        return pages[path]

    for page in sorted(site.rglob("*.html")):
        for link in parsed(page).links:
            target = _target(site, page, link)
            if target is None:
                continue
            file, anchor = target
            where = page.relative_to(site).as_posix()
            if not file.exists():
                broken.append((where, link, "no such file in the site"))
            elif anchor and file.suffix == ".html" and anchor not in parsed(file).ids:
                broken.append((where, link, f"no id {anchor!r} on that page"))
    return broken


if __name__ == "__main__":
    found = broken_links(sys.argv[1])
    for page, link, why in found:
        print(f"{page}: {link}: {why}")
    sys.exit(1 if found else 0)
