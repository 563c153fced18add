"""Scores of a translator on test pairs: exact match, and sacrebleu's BLEU and chrF."""
import time

from keras_attn.text import tokenizers as text
from keras_attn.decoding.options import LENGTH_PENALTY


def evaluate(translator, pairs, task, references=None, beam_size=1, batch_size=256,
             length_penalty=LENGTH_PENALTY, deadline=None, min_sentences=0,
             clock=time.monotonic):
    """Exact match, and on text corpus BLEU/chrF (:func:`corpus_scores`), on ``pairs``.

    ``translator``: anything with ``translate(sources, beam_size=, batch_size=)`` (a
    ``Translator``, a SavedModel wrapper); ``length_penalty`` (GNMT's alpha) goes to a beam
    search only. ``deadline`` (a ``clock()`` value): the pairs are decoded a batch at a
    time, and decoding stops before a batch that would end past it (never before
    ``min_sentences``); the scores are on the pairs decoded (``num_sentences``).
    """
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    beam = {"length_penalty": length_penalty} if beam_size > 1 else {}
    t0 = clock()
    if deadline is None:
        hyps = translator.translate(sources, beam_size=beam_size, batch_size=batch_size, **beam)
    else:
        hyps, batch_seconds = [], 0.0
        while len(hyps) < len(sources) and (len(hyps) < min_sentences
                                            or clock() + batch_seconds <= deadline):
            began = clock()
            hyps += translator.translate(sources[len(hyps): len(hyps) + batch_size],
                                         beam_size=beam_size, batch_size=batch_size, **beam)
            batch_seconds = clock() - began  # the first holds the trace: the next is faster
        sources, targets = sources[:len(hyps)], targets[:len(hyps)]
        references = references[:len(hyps)] if references else references
    result = {"num_sentences": len(hyps), "decode_seconds": round(clock() - t0, 2),
              "beam_size": beam_size, **beam,
              "exact_match": sum(h == t for h, t in zip(hyps, targets)) / max(len(hyps), 1)}
    if task != "dates":
        result.update(corpus_scores(hyps, references or [[t] for t in targets]))
    result["samples"] = [{"source": s, "target": t, "output": h}
                         for s, t, h in list(zip(sources, targets, hyps))[:10]]
    return result


def corpus_scores(hyps, references):
    """sacrebleu's corpus BLEU and chrF (default settings) of ``hyps`` against every
    reference of each sentence (``references[i]`` a list of strings), on the text as written
    (``bleu``, ``chrf``) and on D2L-normalised text on both sides (``bleu_d2l``,
    ``chrf_d2l``: lower case, a space before , . ! ?; the protocol of D2L and of the
    WordPiece runs, kept for comparison)."""
    import sacrebleu

    max_refs = max(len(r) for r in references)
    ref_streams = [[r[i] if i < len(r) else r[0] for r in references] for i in range(max_refs)]
    lowered = [text.normalize_text(h) for h in hyps]
    lowered_refs = [[text.normalize_text(r) for r in stream] for stream in ref_streams]
    return {
        "bleu": round(sacrebleu.corpus_bleu(hyps, ref_streams).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hyps, ref_streams).score, 2),
        # force: the spaced punctuation is D2L's normalisation, not untokenized output.
        "bleu_d2l": round(sacrebleu.corpus_bleu(lowered, lowered_refs, force=True).score, 2),
        "chrf_d2l": round(sacrebleu.corpus_chrf(lowered, lowered_refs).score, 2),
    }
