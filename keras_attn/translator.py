"""Text in, text out: a trained model with its tokenizers and a decoder (the jobs are
modules of :mod:`keras_attn.translation`).

Example:
    >>> tr = Translator.from_run_dir("runs/dates")
    >>> tr.translate(["3 March 2021", "le 4 juillet 1999"])
    ['2021-03-03', '1999-07-04']
    >>> tr.score(["3 March 2021"], ["2021-03-03"])[0]["log_prob"]
    -0.83
"""
from keras_attn.core.deprecation import renamed
from keras_attn.translation import pipeline, run
from keras_attn.translation.engine import KerasEngine


def _engine_member(name):
    """A :class:`Translator` attribute that is its engine's."""
    return property(lambda self: getattr(self.engine, name),
                    lambda self, value: setattr(self.engine, name, value),
                    doc=getattr(KerasEngine, name).__doc__ if hasattr(KerasEngine, name) else None)


class Translator:
    """Tokenize, decode (greedy, beam or sampling) and detokenize with a trained model.

    A request runs through :mod:`keras_attn.translation.pipeline` on :attr:`engine`, a
    :class:`~keras_attn.translation.engine.KerasEngine` whose members are this object's too.

    Args:
        model, src_tokenizer, tgt_tokenizer, max_len, normalize, calibrator: the engine's.

    Example:
        >>> tr = Translator(model, src_tok, tgt_tok, max_len=48)
        >>> tr.translate(["3 March 2021"])
        ['2021-03-03']
    """

    def __init__(self, model, src_tokenizer, tgt_tokenizer, max_len=64, normalize=False,
                 calibrator=None):
        self.engine = KerasEngine(model, src_tokenizer, tgt_tokenizer, max_len, normalize,
                                  calibrator)

    @classmethod
    def from_run_dir(cls, run_dir, calibrated=True):
        """A run's translator (:func:`keras_attn.translation.run.load`)."""
        return cls(*run.load(run_dir, calibrated))

    @renamed(alpha="length_penalty")
    def translate_ids(self, source, beam_size=1, length_penalty=None):
        """Best output ids ``(B, T)`` (numpy int32) for source ids ``(B, S)``
        (``length_penalty``: GNMT's alpha; ``alpha=``: its deprecated name)."""
        out = self.engine.decode_ids(
            source, self.engine.options(beam_size=beam_size, length_penalty=length_penalty),
            confidence=False)
        tokens, lengths = out["tokens"][:, 0], out["lengths"][:, 0]
        return tokens[:, : max(int(lengths.max(initial=0)), 1)]

    def source_lengths(self, sentences):
        """Source tokens of each sentence (before ``[END]`` and truncation)."""
        return pipeline.source_lengths(self.engine, sentences)

    def too_long(self, sentences):
        """Per sentence whether it has more source tokens than the model reads."""
        return [n > self.max_len - 1 for n in self.source_lengths(sentences)]

    def cut_long(self, sentences):
        """:func:`keras_attn.translation.pipeline.cut_long`."""
        return pipeline.cut_long(self.engine, sentences)

    def translate_nbest(self, texts, batch_size=128, confidence=True, **options):
        """Translate with per-call decoding options (API.md, "Decoding options per request").

        Each text is split into sentences, decoded as one batch and joined back; a sentence too
        long for the model is read in part (``"truncated": True``) or, with ``split_long``, cut
        at clause boundaries first (``"cut": True``).

        Args:
            texts: list of str. batch_size: sentences per decoder call.
            confidence: False skips the confidence's teacher-forced pass.
            **options: the options of ``keras_attn.decoding.TranslationOptions``: the
                decoding options (``beam_size``, ``num_hypotheses``, ``target_prefix``,
                ``return_alignments`` ...), ``passthrough`` (URLs, code, numbers ... pass
                through byte-identical; None: :attr:`passthrough`) and ``glossary``
                (``{source term: target term}``: each term found comes out as its target).

        Returns:
            Per text ``num_hypotheses`` dicts ``{"translation", "score", "confidence"}``, best
            first for beam search; several sentences: scores summed, the lowest confidence, each
            sentence's dict under ``"sentences"``; with a glossary, ``"applied_terms"``
            (``{source term: target term}`` of the terms found).

        Example:
            >>> tr.translate_nbest(["3 March 2021"], beam_size=4, num_hypotheses=2)
            [[{'translation': '2021-03-03', 'score': -0.01}, {...}]]
            >>> tr.translate_nbest(["3 March 2021"], glossary={"March": "MARS"})[0][0]["applied_terms"]
            {'March': 'MARS'}
        """
        return pipeline.translate_nbest(self.engine, texts, batch_size, confidence=confidence,
                                        **options)

    @renamed(alpha="length_penalty")
    def translate(self, texts, beam_size=1, length_penalty=None, batch_size=128, progress=None,
                  **options):
        """Translate a list of texts (:meth:`translate_nbest`'s best, without the confidence).

        Args:
            texts: list of str. beam_size: 1 is greedy decoding.
            length_penalty: GNMT's alpha (``alpha=``: its deprecated name).
            batch_size: sentences per decoder call. progress: optional ``progress(done, total)``.
            **options: any other option of :meth:`translate_nbest`.

        Returns:
            list of str.

        Example:
            >>> tr.translate(["3 March 2021"], beam_size=4)
            ['2021-03-03']
        """
        return pipeline.translate(self.engine, texts, beam_size, length_penalty, batch_size,
                                  progress, **options)

    def score(self, sources, targets, batch_size=128, length_penalty=None):
        """Score given translations (forced decoding; CTranslate2's ``score_batch``).

        Each target is tokenized, cut to ``max_len - 1`` tokens, ended with ``[END]`` and read in
        one teacher-forced pass (:func:`keras_attn.decoding.score`).

        Args:
            sources, targets: lists of strings of the same length.
            batch_size: pairs per decoder call.
            length_penalty: GNMT alpha of ``score`` (default 0.6).

        Returns:
            Per pair a dict: ``tokens`` (strings, ``[END]`` last), ``token_ids``,
            ``token_log_probs``, ``log_prob`` (their sum), ``score`` (``log_prob / ((5 + n) /
            6) ** length_penalty``), ``truncated``, ``confidence`` and ``words`` (per target word
            ``(word, mean log-probability of its tokens)``).

        Example:
            >>> tr.score(["3 March 2021"], ["2021-03-03"])[0]["log_prob"]
            -0.83
        """
        return self.engine.score(sources, targets, batch_size, length_penalty)


for _name in ("model", "src_tokenizer", "tgt_tokenizer", "max_len", "normalize", "controls",
              "split_long", "passthrough", "calibrator", "word_tables", "tokenize",
              "tokenize_target", "detokenize", "encode", "encode_targets", "options",
              "defaults", "decode_ids", "decode", "search"):
    setattr(Translator, _name, _engine_member(_name))
del _name
