"""The choices of one request, as one validated object (API.md, "Decoding options per
request"): the decoding options the search reads, and what the request pipeline reads
around the model (``passthrough``, ``glossary``).

Each option is declared once, as a field of :class:`TranslationOptions` made by
:func:`option`; the ``Translator`` keywords, the CLI flags, the HTTP fields, the serving
signatures' inputs and their checks and the docs table are derived from :data:`OPTIONS`.
Names, meanings and defaults follow CTranslate2's ``translate_batch``. What an artefact
fixes at export (the largest beam, the buffers' length) is passed to
:meth:`TranslationOptions.validate`; what it decides itself (``max_length``, the repetition
controls, ``passthrough``) is filled in by :meth:`TranslationOptions.resolve`. Imports
neither Keras nor TensorFlow. ``DecodingOptions`` is its earlier name.

Example:
    >>> opts = TranslationOptions(beam_size=4, num_hypotheses=2, glossary={"ticket": "billet"})
    >>> opts.validate(max_beam_size=8, max_length_limit=64).resolve(64).max_length
    64
    >>> opts.glossary
    (('ticket', 'billet'),)
"""
import dataclasses
import math
import numbers
from typing import Any, Callable, Optional

from keras_attn.core.deprecation import renamed
from keras_attn.text import glossary as glossaries

LENGTH_PENALTY = 0.6  # GNMT alpha (Wu et al. 2016) when a request or export names none
# The repetition controls' defaults by the kind of target vocabulary
# (research/repetition.md); on characters a repeated n-gram is normal ("2010-10-10").
CONTROLS = ("repetition_penalty", "no_repeat_ngram_size", "max_length_factor")
CONTROL_DEFAULTS = {
    "subword": {"repetition_penalty": 1.2, "no_repeat_ngram_size": 4, "max_length_factor": 3.0},
    "character": {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
                  "max_length_factor": 0.0},
}
INT32 = (-2 ** 31, 2 ** 31)


def control_defaults(tokenizer):
    """The repetition controls' defaults (:data:`CONTROL_DEFAULTS`) for a target tokenizer."""
    return CONTROL_DEFAULTS["character" if getattr(tokenizer, "char_level", False)
                            else "subword"]


DECODING, TEXT = "decoding", "text"  # Option.stage: read by the search / around the model
GLOSSARY_INPUTS = ("glossary_source", "glossary_target")  # a signature's glossary, (G,) each


def option(default, dtype, rule, help, valid=None, unset=None, ct2=None, stage=DECODING):
    """Declare one option: a ``dataclasses.field`` whose metadata is an :class:`Option`.

    Args:
        default: the Python default (None: the artefact's, sent as ``unset``).
        dtype: ``"int32"``, ``"float32"``, ``"string"``, ``"bool"`` or ``"glossary"`` (a
            mapping of strings: two string inputs of a signature, :data:`GLOSSARY_INPUTS`).
        rule: what a valid value is, in words (the error message). help: one line.
        valid: ``value -> bool`` with comparisons and ``&`` only (it runs on tensors too).
        unset: the value a signature input takes for "the artefact's default".
        ct2: CTranslate2 ``translate_batch``'s name for the same meaning, or None.
        stage: :data:`DECODING` (the search reads it) or :data:`TEXT` (the request
            pipeline reads it around the model: :data:`DECODING_NAMES` leave it out).
    """
    return dataclasses.field(default=default, metadata={"option": Option(
        "", dtype, default, rule, help, valid, unset, ct2, stage)})


@dataclasses.dataclass(frozen=True)
class Option:
    """One option's declaration (see :func:`option`)."""

    name: str
    dtype: str
    default: Any
    rule: str
    help: str
    valid: Optional[Callable] = None
    unset: Any = None
    ct2: Optional[str] = None
    stage: str = DECODING

    @property
    def inputs(self):
        """The names of its inputs in a serving signature (``glossary``: two)."""
        return GLOSSARY_INPUTS if self.dtype == "glossary" else (self.name,)

    def check(self, value):
        """``ValueError`` naming the option unless ``value`` is of its type and rule."""
        if value is None and self.default is None:
            return
        if self.dtype == "glossary":
            glossaries.entries(value)
            return
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        ok = {"int32": lambda: number and isinstance(value, numbers.Integral)
              and INT32[0] <= value < INT32[1],
              "float32": lambda: number and math.isfinite(value),
              "string": lambda: isinstance(value, str),
              "bool": lambda: isinstance(value, bool)}[self.dtype]()
        if not ok or (self.valid is not None and not self.valid(value)):
            raise ValueError(f"`{self.name}` must be {self.rule}. "
                             f"Received: {self.name}={value!r}")

    def signature_value(self, value):
        """``value`` as a serving signature takes it (``unset`` for None)."""
        return self.unset if value is None else value


@dataclasses.dataclass(frozen=True)
class TranslationOptions:
    """The options of one request (one field per option, declared once): the decoding
    options, then ``passthrough`` and ``glossary``, which the request pipeline reads.

    A ``glossary`` is kept as the ``(source, target)`` pairs of
    :func:`keras_attn.text.glossary.entries` (the object stays hashable: requests with
    equal options are batched together).

    Example:
        >>> TranslationOptions(beam_size=4, num_hypotheses=2).sampling
        False
        >>> TranslationOptions(glossary={"Tom": "Tom"}).glossary
        (('Tom', 'Tom'),)
    """

    beam_size: int = option(
        1, "int32", "an integer >= 1", "beams of the beam search; 1 is greedy decoding (or "
        "sampling); up to the artefact's maximum", lambda v: v >= 1, ct2="beam_size")
    num_hypotheses: int = option(
        1, "int32", "an integer >= 1", "n-best: hypotheses returned per sentence, at most "
        "beam_size (samples when sampling)", lambda v: v >= 1, ct2="num_hypotheses")
    length_penalty: Optional[float] = option(
        None, "float32", "a number >= 0", "GNMT length penalty alpha of the beam search's "
        f"ranking (default: the artefact's, {LENGTH_PENALTY})", lambda v: v >= 0, unset=-1.0)
    max_length: Optional[int] = option(
        None, "int32", "an integer >= 1", "most target tokens, the prefix and [END] included "
        "(default: the artefact's maximum)", lambda v: v >= 1, unset=0,
        ct2="max_decoding_length")
    target_prefix: str = option(
        "", "string", "a string", "text the translation starts with (forced, then continued)",
        ct2="target_prefix")
    sampling_topk: int = option(
        1, "int32", "an integer >= 1", "1 = argmax; K > 1 samples among the K most likely "
        "tokens", lambda v: v >= 1, ct2="sampling_topk")
    sampling_topp: float = option(
        1.0, "float32", "a number in (0, 1]", "nucleus sampling threshold",
        lambda v: (v > 0) & (v <= 1), ct2="sampling_topp")
    sampling_temperature: float = option(
        1.0, "float32", "a number > 0", "divides the logits before sampling", lambda v: v > 0,
        ct2="sampling_temperature")
    seed: int = option(
        0, "int32", "an int32 integer", "sampling seed: the same seed gives the same sample "
        "in every artefact")
    return_alignments: bool = option(
        False, "bool", "True or False", "also return word alignments (Pharaoh i-j pairs)")
    repetition_penalty: Optional[float] = option(
        None, "float32", "a number > 0", "> 1 penalises tokens already generated (a "
        "positive logit divided by it, a negative one multiplied); 1 = off (default: the "
        "artefact's, 1.2 on subwords, 1 on characters)", lambda v: v > 0, unset=-1.0,
        ct2="repetition_penalty")
    no_repeat_ngram_size: Optional[int] = option(
        None, "int32", "an integer in [0, 8]", "no n-gram of this size is generated twice; "
        "0 = off (default: the artefact's, 4 on subwords, 0 on characters)",
        lambda v: (v >= 0) & (v <= 8), unset=-1, ct2="no_repeat_ngram_size")
    max_length_factor: Optional[float] = option(
        None, "float32", "a number >= 0", "at most this many target tokens per source token "
        "(Marian's --max-length-factor), within max_length; 0 = off (default: the "
        "artefact's, 3 on subwords, 0 on characters)", lambda v: v >= 0, unset=-1.0)
    passthrough: Optional[bool] = option(
        None, "bool", "True or False", "URLs, e-mail addresses, code, tags, numbers and emoji "
        "pass through unchanged (default: the artefact's, on for subword and word models, "
        "off on characters)", stage=TEXT)
    glossary: tuple = option(
        (), "glossary", f"a mapping of source term -> target term strings (at most "
        f"{glossaries.MAX_TERMS} terms of at most {glossaries.MAX_TERM_CHARS} characters)",
        "terms that must come out as given: each source term found (whole words, any case, "
        "the longest first) becomes its target term exactly once; a term mapped to itself "
        "is not translated", stage=TEXT)

    def __post_init__(self):
        # A mapping becomes its checked pairs (ValueError naming the problem).
        object.__setattr__(self, "glossary", glossaries.entries(self.glossary))
        for opt in OPTIONS.values():
            if opt.dtype != "glossary":
                opt.check(getattr(self, opt.name))
        if self.num_hypotheses > self.beam_size:
            raise ValueError(
                "`num_hypotheses` must not exceed `beam_size` (n-best comes from the beam; "
                f"when sampling, at most beam_size samples). Received: num_hypotheses="
                f"{self.num_hypotheses}, beam_size={self.beam_size}")

    @property
    def sampling(self):
        """True when the next token is drawn at random (top-k > 1, or as :meth:`holding` fixed)."""
        fixed = self.__dict__.get("_sampling")
        return self.sampling_topk > 1 if fixed is None else fixed

    @classmethod
    def holding(cls, values, sampling=None):
        """Options whose values may be tensors (a traced decoder's inputs), taken unchecked
        from the dict ``values`` (every decoding option; the others default).
        ``sampling``: a Python bool the trace fixes, or None (:attr:`sampling` is then
        ``sampling_topk > 1``).

        Example:
            >>> DecodingOptions.holding({**vars(opts), "seed": seed_tensor}, opts.sampling)
        """
        opts = object.__new__(cls)
        for name in NAMES:
            object.__setattr__(opts, name, values[name] if name in DECODING_NAMES
                               else values.get(name, OPTIONS[name].default))
        object.__setattr__(opts, "_sampling", None if sampling is None else bool(sampling))
        return opts

    @property
    def _holds(self):
        """Made by :meth:`holding`."""
        return "_sampling" in self.__dict__

    def replaced(self, sampling=None, **values):
        """These options with ``values`` replaced, unchecked (:meth:`holding`)."""
        if sampling is None:
            sampling = self.__dict__["_sampling"] if self._holds else self.sampling
        return TranslationOptions.holding({**{n: getattr(self, n) for n in NAMES}, **values},
                                          sampling)

    @classmethod
    def from_kwargs(cls, **kwargs):
        """``TranslationOptions(**kwargs)`` with an unknown keyword named clearly."""
        unknown = sorted(set(kwargs) - set(NAMES))
        if unknown:
            raise ValueError(f"Unknown option(s) {unknown}; the options are {list(NAMES)}")
        return cls(**kwargs)

    @property
    def decoding(self):
        """The decoding options alone, by name (what the search and a signature read)."""
        return {name: getattr(self, name) for name in DECODING_NAMES}

    def resolve(self, max_length_limit, length_penalty=LENGTH_PENALTY, controls=None,
                passthrough=False):
        """These options with what they leave to the artefact filled in: ``max_length``
        (``max_length_limit``), ``length_penalty``, the repetition controls (``controls``:
        a dict of :data:`CONTROLS`; default: all off) and ``passthrough`` (the artefact's
        default, a bool). Unset is None, or for a tensor its :attr:`Option.unset` value."""
        controls = CONTROL_DEFAULTS["character"] if controls is None else controls
        defaults = {"max_length": max_length_limit, "length_penalty": length_penalty,
                    **{name: controls[name] for name in CONTROLS}}
        values = {name: _resolved(getattr(self, name), OPTIONS[name], default)
                  for name, default in defaults.items()}
        if self.passthrough is None:
            values["passthrough"] = bool(passthrough)
        if self._holds:
            return self.replaced(**values)
        return dataclasses.replace(self, **values)

    def validate(self, max_beam_size=None, max_length_limit=None, prefix_tokens=None):
        """Check against what the artefact fixed at export; returns ``self``.

        Args:
            max_beam_size: the largest beam the artefact was built for (None: no limit).
            max_length_limit: the buffers' length (None: no limit).
            prefix_tokens: the number of target tokens of ``target_prefix`` (None: unknown).
        """
        if max_beam_size is not None and self.beam_size > max_beam_size:
            raise ValueError(f"`beam_size` must be at most {max_beam_size} (the maximum fixed "
                             f"at export). Received: beam_size={self.beam_size!r}")
        if max_length_limit is not None and self.max_length is not None \
                and self.max_length > max_length_limit:
            raise ValueError(f"`max_length` must be at most {max_length_limit} (the maximum "
                             f"fixed at export). Received: max_length={self.max_length!r}")
        limit = self.max_length if self.max_length is not None else max_length_limit
        if prefix_tokens is not None and limit is not None and prefix_tokens >= limit:
            raise ValueError(
                f"`target_prefix` is {prefix_tokens} target tokens, which leaves no room "
                f"within max_length={limit}. Received: target_prefix={self.target_prefix!r}")
        return self


def _resolved(value, opt, default):
    """``value`` of option ``opt``, or ``default`` where it is unset."""
    if value is None:
        return default
    if isinstance(value, (numbers.Number, str)):
        return value
    from keras import ops

    return ops.where(ops.equal(value, opt.unset), ops.cast(default, value.dtype), value)


DecodingOptions = TranslationOptions  # its earlier name (public: kept for code that uses it)
OPTIONS = {f.name: dataclasses.replace(f.metadata["option"], name=f.name)
           for f in dataclasses.fields(TranslationOptions)}  # name -> Option, declared order
NAMES = tuple(OPTIONS)
DECODING_NAMES = tuple(name for name, opt in OPTIONS.items() if opt.stage == DECODING)
"""The decoding options: what the search reads (``translate_v2``'s inputs)."""


def docs_table():
    """The Markdown table of every option (docs/decoding.md), from the declarations."""
    rows = ["| option | type, default | meaning | CTranslate2 `translate_batch` |",
            "| --- | --- | --- | --- |"]
    for opt in OPTIONS.values():
        default = ("the artefact's" if opt.default is None else
                   "none" if opt.dtype == "glossary" else repr(opt.default))
        kind = "mapping of strings" if opt.dtype == "glossary" else opt.dtype
        rows.append(f"| `{opt.name}` | {kind}, {default} | {opt.help} | "
                    f"{'`' + opt.ct2 + '`' if opt.ct2 else '—'} |")
    return "\n".join(rows)


@renamed(alpha="length_penalty")
def length_penalty(lengths, length_penalty, ops=None):
    """GNMT length penalty ``((5 + n) / 6) ** length_penalty`` (Wu et al. 2016), float32.

    Args:
        lengths: int, ``(B,)`` or ``(B, N)`` output lengths (``[END]`` counted).
        length_penalty: float (``alpha=``: its deprecated name).
        ops: ``keras.ops`` (default) or ``keras_attn.decoding.confidence.NumpyOps``.

    Example:
        >>> float(length_penalty(1, 0.6))
        1.0
    """
    if ops is None:
        from keras import ops
    return ops.power((5.0 + ops.cast(lengths, "float32")) / 6.0, length_penalty)
