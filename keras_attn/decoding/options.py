"""Decoding choices per request, as one validated object (docs: API.md, "Decoding options
per request"; STYLE.md, "One decoder, options as one object").

Names, meanings and defaults follow CTranslate2's ``translate_batch`` where they overlap:
``sampling_topk=1`` is the argmax, ``max_length`` counts target tokens. What an artefact
fixes when it is exported (the largest beam, the buffers' length) is passed to
:meth:`DecodingOptions.validate` as ``max_beam_size`` / ``max_length_limit``; everything
else is a per-request value.

Example:
    >>> opts = DecodingOptions(beam_size=4, num_hypotheses=2)
    >>> opts.validate(max_beam_size=8, max_length_limit=64).resolve(64, 0.6).max_length
    64
"""
import dataclasses
import numbers
from typing import Optional

NAMES = ("beam_size", "num_hypotheses", "length_penalty", "max_length", "target_prefix",
         "sampling_topk", "sampling_topp", "sampling_temperature", "seed", "return_alignments")


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_float(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _bad(name, value, what):
    return ValueError(f"`{name}` must be {what}. Received: {name}={value!r}")


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """The decoding options of one request.

    Args:
        beam_size: 1 = greedy (or sampling); up to the artefact's maximum.
        num_hypotheses: n-best returned, at most ``beam_size`` (samples when sampling).
        length_penalty: GNMT alpha of the final ranking; None = the artefact's.
        max_length: most target tokens; None = the artefact's maximum.
        target_prefix: text the translation starts with (forced, then continued).
        sampling_topk: 1 = argmax; K > 1 samples among the K most likely tokens
            (0 is refused: "the whole vocabulary" is ``sampling_topk=vocab``).
        sampling_topp: nucleus threshold in (0, 1].
        sampling_temperature: > 0; divides the logits before sampling.
        seed: the same seed gives the same sample in every artefact (int32).
        return_alignments: also return word-level Pharaoh ``i-j`` pairs per hypothesis.
    """

    beam_size: int = 1
    num_hypotheses: int = 1
    length_penalty: Optional[float] = None
    max_length: Optional[int] = None
    target_prefix: str = ""
    sampling_topk: int = 1
    sampling_topp: float = 1.0
    sampling_temperature: float = 1.0
    seed: int = 0
    return_alignments: bool = False

    def __post_init__(self):
        for name in ("beam_size", "num_hypotheses", "sampling_topk"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise _bad(name, value, "an integer >= 1")
        if self.max_length is not None and (not _is_int(self.max_length) or self.max_length < 1):
            raise _bad("max_length", self.max_length, "an integer >= 1")
        if not _is_int(self.seed) or not -2**31 <= self.seed < 2**31:
            raise _bad("seed", self.seed, "an int32 integer")
        if self.length_penalty is not None and (not _is_float(self.length_penalty)
                                                or not 0.0 <= self.length_penalty < float("inf")):
            raise _bad("length_penalty", self.length_penalty, "a number >= 0")
        if not _is_float(self.sampling_topp) or not 0.0 < self.sampling_topp <= 1.0:
            raise _bad("sampling_topp", self.sampling_topp, "a number in (0, 1]")
        if not _is_float(self.sampling_temperature) or not self.sampling_temperature > 0.0:
            raise _bad("sampling_temperature", self.sampling_temperature, "a number > 0")
        if not isinstance(self.target_prefix, str):
            raise _bad("target_prefix", self.target_prefix, "a string")
        if not isinstance(self.return_alignments, bool):
            raise _bad("return_alignments", self.return_alignments, "True or False")
        if self.num_hypotheses > self.beam_size:
            raise ValueError(
                "`num_hypotheses` must not exceed `beam_size` (n-best comes from the beam; "
                f"when sampling, at most beam_size samples). Received: num_hypotheses="
                f"{self.num_hypotheses}, beam_size={self.beam_size}")

    @property
    def sampling(self):
        """True when the next token is drawn at random (top-k > 1 or, with K = 1, never)."""
        return self.sampling_topk > 1

    @classmethod
    def from_kwargs(cls, **kwargs):
        """``DecodingOptions(**kwargs)`` with an unknown keyword named clearly."""
        unknown = sorted(set(kwargs) - set(NAMES))
        if unknown:
            raise ValueError(f"Unknown decoding option(s) {unknown}; the options are {list(NAMES)}")
        return cls(**kwargs)

    def resolve(self, max_length_limit, length_penalty):
        """These options with ``max_length`` and ``length_penalty`` filled from the artefact's
        defaults (``max_length_limit``, ``length_penalty``)."""
        return dataclasses.replace(
            self,
            max_length=max_length_limit if self.max_length is None else self.max_length,
            length_penalty=length_penalty if self.length_penalty is None else self.length_penalty)

    def validate(self, max_beam_size=None, max_length_limit=None, prefix_tokens=None):
        """Check against what the artefact fixed at export; returns ``self``.

        Args:
            max_beam_size: the largest beam the artefact was built for (None: no limit).
            max_length_limit: the buffers' length (None: no limit).
            prefix_tokens: the number of target tokens of ``target_prefix`` (None: unknown).
        """
        if max_beam_size is not None and self.beam_size > max_beam_size:
            raise _bad("beam_size", self.beam_size,
                       f"at most {max_beam_size} (the maximum fixed at export)")
        if max_length_limit is not None and self.max_length is not None \
                and self.max_length > max_length_limit:
            raise _bad("max_length", self.max_length,
                       f"at most {max_length_limit} (the maximum fixed at export)")
        limit = self.max_length if self.max_length is not None else max_length_limit
        if prefix_tokens is not None and limit is not None and prefix_tokens >= limit:
            raise ValueError(
                f"`target_prefix` is {prefix_tokens} target tokens, which leaves no room "
                f"within max_length={limit}. Received: target_prefix={self.target_prefix!r}")
        return self
