"""``format=html``: the text of an HTML fragment translated, its markup kept.

The fragment is cut into segments at every tag that is not inline, all segments of a
request translated in one batch; an inline tag then wraps the target words aligned with
the source words it wrapped (one aligned with nothing stays, empty, at its segment's end).
Without alignments the text between any two tags is translated on its own.

Example:
    >>> segments = parse("<p>Le <b>4 juillet</b> 1999</p>")
    >>> [s.text for s in segments if isinstance(s, Segment)]
    ['Le 4 juillet 1999']
"""
import dataclasses
import html
import html.parser
import re

from keras_attn.translation.pipeline import answers, join_documents

# Most inline elements in one segment: placing them is quadratic in their number, so a
# fragment of thousands (a hostile one) would hold the server for minutes.
MAX_INLINE_TAGS = 200
INLINE = frozenset({"a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em",
                    "i", "kbd", "mark", "q", "s", "samp", "small", "span", "strong", "sub",
                    "sup", "time", "u", "var", "font"})


@dataclasses.dataclass
class Span:
    """An inline element over the segment's text: characters ``[start, end)``."""

    start_tag: str
    name: str
    start: int
    end: int = -1
    depth: int = 0


@dataclasses.dataclass
class Segment:
    """Text between two non-inline tags, with its inline elements."""

    text: str = ""
    spans: list = dataclasses.field(default_factory=list)


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.items = []  # raw markup strings and Segments, in order
        self.segment = Segment()
        self.open = []

    def _flush(self):
        for span in self.open:  # an inline element left open across a block tag
            span.end = len(self.segment.text)
        if self.segment.text or self.segment.spans:
            self.items.append(self.segment)
        self.segment, self.open = Segment(), []

    def _markup(self, raw):
        self._flush()
        self.items.append(raw)

    def handle_starttag(self, tag, attrs):
        raw = self.get_starttag_text()
        if tag in INLINE:
            if len(self.segment.spans) >= MAX_INLINE_TAGS:
                raise ValueError(f"the HTML holds more than {MAX_INLINE_TAGS} inline tags "
                                 "(b, i, span, a, ...) between two block tags; split it")
            span = Span(raw, tag, len(self.segment.text), depth=len(self.open))
            self.segment.spans.append(span)
            self.open.append(span)
        else:
            self._markup(raw)

    def handle_startendtag(self, tag, attrs):
        self._markup(self.get_starttag_text())

    def handle_endtag(self, tag):
        if tag in INLINE and any(s.name == tag for s in self.open):
            while self.open:
                span = self.open.pop()
                span.end = len(self.segment.text)
                if span.name == tag:
                    break
        else:
            self._markup(f"</{tag}>")

    def handle_data(self, data):
        self.segment.text += data

    def handle_comment(self, data):
        self._markup(f"<!--{data}-->")

    def handle_decl(self, decl):
        self._markup(f"<!{decl}>")

    def close(self):
        super().close()
        self._flush()


def parse(fragment):
    """The fragment as a list of raw markup strings and :class:`Segment` s.

    Raises:
        ValueError: a segment of more than :data:`MAX_INLINE_TAGS` inline elements.
    """
    parser = _Parser()
    parser.feed(fragment)
    parser.close()
    return parser.items


def _words(text):
    """``(start, end)`` of each whitespace-separated word (the alignment's source words)."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def _target_words(text):
    r"""``(start, end)`` of each word of a translation as its alignment numbers them: cut
    at ASCII whitespace only (a SentencePiece piece such as ``"\u202f!"`` continues the
    word before it)."""
    return [(m.start(), m.end()) for m in re.finditer(r"[^ \t\n\r\f\v]+", text)]


def _pairs(alignment):
    """The ``(i, j)`` pairs of a Pharaoh string (the `` | `` between sentences skipped)."""
    return [tuple(int(x) for x in p.split("-")) for p in (alignment or "").split()
            if re.fullmatch(r"\d+-\d+", p)]


def segment_alignment(sentences):
    """A segment's alignment numbered over its whole text, from its sentences' (each
    numbers its own words from 0)."""
    pairs, src, tgt = [], 0, 0
    for sentence in sentences:
        pairs += [f"{i + src}-{j + tgt}" for i, j in _pairs(sentence.get("alignment", ""))]
        src += len(_words(sentence["source"]))
        tgt += len(_target_words(sentence["translation"]))
    return " ".join(pairs)


def rebuild(segment, translation, alignment):
    """The translated segment with its inline elements around the aligned target words."""
    text = segment.text
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()):]
    if not text.strip():
        return "".join(s.start_tag for s in segment.spans) + html.escape(text, quote=False) \
            + "".join(f"</{s.name}>" for s in reversed(segment.spans))
    source_words = _words(text)
    spans = _target_words(translation)
    target_words = [translation[a:b] for a, b in spans]
    pairs = _pairs(alignment)
    ranges = []  # per span: [lo, hi] target word indices, or None
    for span in segment.spans:
        covered = {i for i, (a, b) in enumerate(source_words) if a < span.end and b > span.start}
        targets = sorted(j for i, j in pairs if i in covered and j < len(target_words))
        ranges.append([targets[0], targets[-1]] if targets else None)
    # Nest: a child inside its parent's range; a later sibling after the earlier one.
    for k, span in enumerate(segment.spans):
        if ranges[k] is None:
            continue
        parent = next((p for p in range(k - 1, -1, -1) if segment.spans[p].depth < span.depth
                       and segment.spans[p].start <= span.start), None)
        if parent is not None:
            if ranges[parent] is None:
                ranges[k] = None
                continue
            lo, hi = ranges[parent]
            ranges[k] = [max(ranges[k][0], lo), min(ranges[k][1], hi)]
        for p in range(k):  # an earlier sibling at the same depth that overlaps
            if segment.spans[p].depth == span.depth and ranges[p] is not None \
                    and ranges[k][0] <= ranges[p][1] and ranges[k][1] >= ranges[p][0]:
                ranges[k][0] = ranges[p][1] + 1
        if ranges[k][0] > ranges[k][1]:
            ranges[k] = None
    out = []
    for j, word in enumerate(target_words):
        if j:  # the translation's own whitespace between two words
            out.append(html.escape(translation[spans[j - 1][1]: spans[j][0]], quote=False))
        opens = [k for k, r in enumerate(ranges) if r and r[0] == j]
        closes = [k for k, r in enumerate(ranges) if r and r[1] == j]
        for k in sorted(opens, key=lambda k: (-ranges[k][1], segment.spans[k].depth)):
            out.append(segment.spans[k].start_tag)
        out.append(html.escape(word, quote=False))
        for k in sorted(closes, key=lambda k: (ranges[k][0], -segment.spans[k].depth),
                        reverse=True):
            out.append(f"</{segment.spans[k].name}>")
    # aligned with nothing: kept, empty, where the segment ends
    out += [segment.spans[k].start_tag + f"</{segment.spans[k].name}>"
            for k, r in enumerate(ranges) if r is None]
    return lead + "".join(out) + trail


def split_inline(items):
    """For an engine without alignments: every inline tag becomes a cut, so each text
    between two tags is translated on its own."""
    out = []
    for item in items:
        if not isinstance(item, Segment) or not item.spans:
            out.append(item)
            continue
        cuts = sorted({0, len(item.text)} | {s.start for s in item.spans}
                      | {s.end for s in item.spans})
        deepest_first = sorted(item.spans, key=lambda s: -s.depth)
        for k, at in enumerate(cuts):
            out.extend(f"</{s.name}>" for s in deepest_first if s.end == at and s.start < at)
            out.extend(s.start_tag for s in item.spans if s.start == at)
            out.extend(f"</{s.name}>" for s in deepest_first if s.end == at and s.start == at)
            if k + 1 < len(cuts):
                out.append(Segment(item.text[at: cuts[k + 1]]))
    return out


async def translate_html(batcher, request, timeout, alignments=True):
    """Per HTML text of ``request``, its hypotheses: a plain text's fields (the pipeline's
    ``join_documents`` over its segments' sentences), the markup back in ``"translation"``.

    Args:
        batcher: the server's :class:`~keras_attn.serve.batcher.Batcher`.
        request: a checked ``TranslateRequest`` with ``format == "html"``.
        timeout: seconds, as ``Batcher.submit``'s.
        alignments: the engine gives alignments (inline tags follow the words).
    """
    options = dataclasses.replace(request.options, return_alignments=alignments
                                  or request.options.return_alignments)  # for the tags
    documents = [parse(t) for t in request.texts]
    if not alignments:
        documents = [split_inline(d) for d in documents]
    segments = [s for d in documents for s in d if isinstance(s, Segment) and s.text.strip()]
    results = await batcher.submit([s.text.strip() for s in segments], options, timeout,
                                   confidence=request.hypotheses) if segments else []
    n = options.num_hypotheses
    translated = _translated_segments(documents, segments, results, n)
    per_sentence, counts = [], []  # per sentence (every document's), its n hypotheses
    for document in documents:
        rows = [row for s in document if isinstance(s, Segment)
                for row in zip(*(sentences for _, _, sentences in translated[id(s)]))]
        per_sentence += rows
        counts.append(len(rows))
    if not request.options.return_alignments:  # asked only to place the inline tags
        per_sentence = [[{k: v for k, v in hyp.items() if k != "alignment"} for hyp in row]
                        for row in per_sentence]
    docs = join_documents(per_sentence, counts, [[""] * (c + 1) for c in counts], n)
    return answers([[dict(hyp, translation=_rebuild_document(document, translated, h))
                     for h, hyp in enumerate(doc)]
                    for doc, document in zip(docs, documents)])


def _translated_segments(documents, segments, results, n):
    """Per segment (by ``id``), per hypothesis: ``(translation, alignment, sentences)``; a
    segment that was not sent (only whitespace) stays as it is."""
    translated = {id(s): [(s.text, "", [])] * n
                  for d in documents for s in d if isinstance(s, Segment)}
    for s, hyps in zip(segments, results):
        rows = []
        for hyp in hyps:  # a one-sentence answer back to its sentence
            sentences = hyp.get("sentences") or [dict(hyp, source=s.text.strip())]
            rows.append((hyp["translation"], segment_alignment(sentences), sentences))
        translated[id(s)] = rows
    return translated


def _rebuild_document(document, translated, h):
    """The document's markup around the ``h``-th translation of each of its segments."""
    return "".join(item if isinstance(item, str)
                   else rebuild(item, *translated[id(item)][h][:2]) for item in document)
