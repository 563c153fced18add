"""Decoding choices per request, as one validated object (API.md, "Decoding options per
request").

Each option is declared once, as a field of :class:`DecodingOptions` made by :func:`option`;
the ``Translator`` keywords, the CLI flags, the serving signatures' inputs and their checks
and the docs table are derived from :data:`OPTIONS`. Names, meanings and defaults follow
CTranslate2's ``translate_batch``. What an artefact fixes at export (the largest beam, the
buffers' length) is passed to :meth:`DecodingOptions.validate`. Imports neither Keras nor
TensorFlow.

Example:
    >>> opts = DecodingOptions(beam_size=4, num_hypotheses=2)
    >>> opts.validate(max_beam_size=8, max_length_limit=64).resolve(64).max_length
    64
"""
import dataclasses
import math
import numbers
from typing import Any, Callable, Optional

from keras_attn.core.deprecation import renamed

LENGTH_PENALTY = 0.6  # GNMT alpha (Wu et al. 2016) when a request or export names none
# The repetition controls' defaults by the kind of target vocabulary
# (docs/benchmarks/repetition.md); on characters a repeated n-gram is normal ("2010-10-10").
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


def option(default, dtype, rule, help, valid=None, unset=None, ct2=None):
    """Declare one decoding option: a ``dataclasses.field`` whose metadata is an :class:`Option`.

    Args:
        default: the Python default (None: the artefact's, sent as ``unset``).
        dtype: ``"int32"``, ``"float32"``, ``"string"`` or ``"bool"``.
        rule: what a valid value is, in words (the error message). help: one line.
        valid: ``value -> bool`` with comparisons and ``&`` only (it runs on tensors too).
        unset: the value a signature input takes for "the artefact's default".
        ct2: CTranslate2 ``translate_batch``'s name for the same meaning, or None.
    """
    return dataclasses.field(default=default, metadata={"option": Option(
        "", dtype, default, rule, help, valid, unset, ct2)})


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

    def check(self, value):
        """``ValueError`` naming the option unless ``value`` is of its type and rule."""
        if value is None and self.default is None:
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
class DecodingOptions:
    """The decoding options of one request (one field per option, declared once).

    Example:
        >>> DecodingOptions(beam_size=4, num_hypotheses=2).sampling
        False
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

    def __post_init__(self):
        for opt in OPTIONS.values():
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
        from the dict ``values``. ``sampling``: a Python bool the trace fixes, or None
        (:attr:`sampling` is then ``sampling_topk > 1``).

        Example:
            >>> DecodingOptions.holding({**vars(opts), "seed": seed_tensor}, opts.sampling)
        """
        opts = object.__new__(cls)
        for name in NAMES:
            object.__setattr__(opts, name, values[name])
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
        return DecodingOptions.holding({**{n: getattr(self, n) for n in NAMES}, **values},
                                       sampling)

    @classmethod
    def from_kwargs(cls, **kwargs):
        """``DecodingOptions(**kwargs)`` with an unknown keyword named clearly."""
        unknown = sorted(set(kwargs) - set(NAMES))
        if unknown:
            raise ValueError(
                f"Unknown decoding option(s) {unknown}; the options are {list(NAMES)}")
        return cls(**kwargs)

    def resolve(self, max_length_limit, length_penalty=LENGTH_PENALTY, controls=None):
        """These options with what they leave to the artefact filled in: ``max_length``
        (``max_length_limit``), ``length_penalty`` and the repetition controls
        (``controls``: a dict of :data:`CONTROLS`; default: all off). Unset is None, or for
        a tensor its :attr:`Option.unset` value."""
        controls = CONTROL_DEFAULTS["character"] if controls is None else controls
        defaults = {"max_length": max_length_limit, "length_penalty": length_penalty,
                    **{name: controls[name] for name in CONTROLS}}
        values = {name: _resolved(getattr(self, name), OPTIONS[name], default)
                  for name, default in defaults.items()}
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


OPTIONS = {f.name: dataclasses.replace(f.metadata["option"], name=f.name)
           for f in dataclasses.fields(DecodingOptions)}  # name -> Option, declaration order
NAMES = tuple(OPTIONS)


def docs_table():
    """The Markdown table of every option (docs/decoding.md), from the declarations."""
    rows = ["| option | type, default | meaning | CTranslate2 `translate_batch` |",
            "| --- | --- | --- | --- |"]
    for opt in OPTIONS.values():
        default = "the artefact's" if opt.default is None else repr(opt.default)
        rows.append(f"| `{opt.name}` | {opt.dtype}, {default} | {opt.help} | "
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
