"""format=html on segments of several sentences: the engine splits and joins each segment
(keras_attn.translation.pipeline, the one rule), markup renumbers the document's
alignment (each sentence's words from 0, joined by " | ") over the segment's words, so an
inline tag in a later sentence wraps the right target word."""
import asyncio
import types

from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve import markup
from keras_attn.translation import pipeline


def _upper(sentences):
    """A stand-in engine's sentences: each word upper-cased, aligned with itself."""
    return [[{"translation": s.upper(), "score": -1.0, "truncated": False,
              "alignment": " ".join(f"{i}-{i}" for i in range(len(s.split())))}]
            for s in sentences]


class Batcher:
    def __init__(self):
        self.texts = []

    async def submit(self, texts, options, timeout, confidence=False):
        self.texts.append(list(texts))
        assert options.return_alignments
        return pipeline.answers(pipeline.split_and_join(texts, _upper))


def test_a_tag_in_a_later_sentence_wraps_its_own_word():
    batcher = Batcher()
    request = types.SimpleNamespace(texts=["<p>One two. Three <b>four</b> five.</p>"],
                                    options=DecodingOptions(), hypotheses=False)
    (hyps,) = asyncio.run(markup.translate_html(batcher, request, timeout=1))
    assert hyps[0]["translation"] == "<p>ONE TWO. THREE <b>FOUR</b> FIVE.</p>"
    assert hyps[0]["score"] == -2.0  # the segment's two sentences
    assert batcher.texts == [["One two. Three four five."]]  # segments, not sentences
    # A text's fields (pipeline.join_documents); the alignment asked for the tags left out
    assert set(hyps[0]) == {"translation", "score", "truncated", "sentences"}
    assert all("alignment" not in s for s in hyps[0]["sentences"])
    request.options = DecodingOptions(return_alignments=True)
    (hyps,) = asyncio.run(markup.translate_html(batcher, request, timeout=1))
    (plain,) = pipeline.answers(pipeline.split_and_join(["One two. Three four five."], _upper))
    assert hyps[0] == {**plain[0], "translation": "<p>ONE TWO. THREE <b>FOUR</b> FIVE.</p>"}


def test_segment_alignment_renumbers_each_sentence():
    (doc,) = pipeline.split_and_join(["A b. Cc dd ee"], _upper)
    assert doc[0]["alignment"] == "0-0 1-1 | 0-0 1-1 2-2"
    assert markup.segment_alignment(doc[0]["sentences"]) == "0-0 1-1 2-2 3-3 4-4"
