"""keras_attn.training.evaluation: the scores, and the translators it accepts."""
import pytest

from keras_attn.training import evaluation


class EchoTranslator:
    """A translator with the smallest interface evaluate needs (as the SavedModel wrapper
    of scripts/score_savedmodel.py): it upper-cases, and knows no length penalty."""

    def __init__(self):
        self.calls = []

    def translate(self, sources, beam_size=1, batch_size=64):
        self.calls.append((beam_size, batch_size))
        return [s.upper() for s in sources]


class BeamTranslator(EchoTranslator):
    def translate(self, sources, beam_size=1, batch_size=64, length_penalty=0.6):
        self.calls.append((beam_size, batch_size, length_penalty))
        return [s.upper() for s in sources]


def test_greedy_evaluation_asks_only_for_beam_size_and_batch():
    translator = EchoTranslator()
    pairs = [("2021-03-03", "2021-03-03"), ("abc", "ABC"), ("x", "y")]
    result = evaluation.evaluate(translator, pairs, "dates", batch_size=7)
    assert translator.calls == [(1, 7)]
    assert result["exact_match"] == pytest.approx(2 / 3)
    assert "length_penalty" not in result and result["num_sentences"] == 3


def test_beam_evaluation_passes_the_length_penalty():
    translator = BeamTranslator()
    result = evaluation.evaluate(translator, [("the cat sat on the mat .", "THE CAT SAT ON THE MAT .")], "tatoeba",
                                 beam_size=4, length_penalty=1.0)
    assert translator.calls == [(4, 256, 1.0)]
    assert result["length_penalty"] == 1.0 and result["bleu"] == pytest.approx(100.0)
