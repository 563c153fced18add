"""Our decoder beside a CTranslate2 export (TensorFlow and CTranslate2): the check that
:class:`keras_attn.export.ctranslate2.CTranslate2Exporter` runs before it publishes, and
what tests and benchmarks compare.
"""
import numpy as np

from keras_attn.core.deprecation import renamed
from keras_attn.text import tokenizers as text
from keras_attn.decoding.options import LENGTH_PENALTY
from keras_attn.export.ct2_converter import ct2_vocab


@renamed(alpha="length_penalty")
def compare(translator, ct2, sources, beam_size=1, length_penalty=LENGTH_PENALTY):
    """Both engines on ``sources``: output ids and text, the share of sentences whose ids
    agree, and the largest difference between the two engines' log-probabilities of our
    output tokens (teacher-forced: ``score_batch`` against our decoder).

    Args:
        translator: ``keras_attn.translator.Translator``.
        ct2: :class:`~keras_attn.export.ctranslate2_runtime.CTranslate2Translator`.
        sources: source strings. beam_size, length_penalty: the decoding of both
            (``alpha=``: ``length_penalty``'s deprecated name; the report has both names).
    """
    import tensorflow as tf

    source = translator.encode(sources)
    ours = np.asarray(translator.translate_ids(source, beam_size, length_penalty))
    theirs = ct2.translate_ids(source.numpy(), beam_size, length_penalty)
    rows = {"ours": _rows(ours), "theirs": _rows(theirs)}
    texts = {k: [t.decode("utf-8", "replace") for t in translator.tgt_tokenizer.detokenize(
        tf.constant(v)).numpy().tolist()] for k, v in (("ours", ours), ("theirs", theirs))}
    ours_lp = per_token_log_probs(translator.model, source, ours)
    tgt_tokens = ct2_vocab(translator.tgt_tokenizer.vocab)
    scored = ct2.translator.score_batch(
        ct2.tokens_from_ids(source.numpy()),
        [[tgt_tokens[t] for t in row if t != text.END_ID] for row in rows["ours"]],
        max_input_length=0)
    diff = 0.0
    for b, result in enumerate(scored):  # each token's log-probability, then </s>'s
        theirs_lp = np.asarray(result.log_probs[: len(rows["ours"][b])])
        diff = max(diff, float(np.abs(theirs_lp - ours_lp[b, : len(theirs_lp)]).max(initial=0)))
    same = [a == b for a, b in zip(rows["ours"], rows["theirs"])]
    return {"sources": list(sources), "keras_attn": texts["ours"],
            "ctranslate2": texts["theirs"], "beam_size": beam_size,
            "length_penalty": length_penalty, "alpha": length_penalty,
            "agreement": sum(same) / max(len(same), 1),
            "disagreeing": [i for i, ok in enumerate(same) if not ok],
            "max_logprob_diff": diff}


def _rows(ids):
    return [[t for t in row if t != text.PAD_ID] for row in np.asarray(ids).tolist()]


def per_token_log_probs(model, source, tokens):
    """Teacher-forced log-probabilities ``(B, T)`` of ``tokens`` (0 after ``[END]``), with
    ``[PAD]`` and ``[START]`` banned as ``keras_attn.decoding`` bans them: the
    ``token_log_probs`` of :func:`keras_attn.decoding.score` (numpy)."""
    from keras_attn import decoding

    out = decoding.score(model, np.asarray(source, "int32"), np.asarray(tokens, "int32"),
                         text.START_ID, text.END_ID)
    return np.asarray(out["token_log_probs"])
