"""keras_attn.translator: ``Translator`` on the committed dates run (``exported/run``):
loading a run directory (``model.keras``, or the best checkpoint of an unfinished run),
encoding, greedy and beam translation, and the errors a bad run directory gives."""
import pathlib
import shutil

import keras
import numpy as np
import pytest

from keras_attn.text import tokenizers as text
from keras_attn.translator import Translator

RUN = pathlib.Path(__file__).resolve().parents[2] / "exported" / "run"
DATES = ["3 March 2021", "le 4 juillet 1999", "03/03/2021", "Wed, 3 Mar 2021",
         "14 juillet 1989", "December 31, 1999"]
EXPECTED = ["2021-03-03", "1999-07-04", "2021-03-03", "2021-03-03", "1989-07-14",
            "1999-12-31"]


@pytest.fixture(scope="module")
def translator():
    return Translator.from_run_dir(str(RUN))


@pytest.mark.heavy  # decodes held-out dates with the committed run
def test_from_run_dir_translates_dates(translator):
    assert translator.translate(["3 March 2021"]) == ["2021-03-03"]
    assert translator.translate(DATES) == EXPECTED
    assert translator.max_len == 48 and not translator.normalize  # from config.json


def test_translate_batches_and_reports_progress(translator):
    calls = []
    got = translator.translate(DATES, batch_size=4, progress=lambda *a: calls.append(a))
    assert got == EXPECTED
    assert calls == [(4, len(DATES)), (len(DATES), len(DATES))]


def test_translate_of_nothing_is_an_empty_list(translator):
    assert translator.translate([]) == []


def test_beam_search_gives_greedy_output_on_dates(translator):
    assert translator.translate(DATES, beam_size=4) == translator.translate(DATES)


def test_encode_appends_end_and_truncates_to_max_len(translator):
    ids = np.asarray(translator.encode(["3 March 2021", "2021"]))
    assert ids.dtype == np.int32 and ids.shape == (2, len("3 March 2021") + 1)
    assert ids[0, -1] == text.END_ID == 3 and (ids[0] == text.END_ID).sum() == 1
    assert ids[1, :4].tolist() == ids[0, -5:-1].tolist()  # one id a character: "2021"
    assert ids[1, 4] == text.END_ID and not ids[1, 5:].any()  # then padding (0)
    long = np.asarray(translator.encode(["1" * 200]))
    assert long.shape == (1, translator.max_len)  # 47 characters + [END]
    assert long[0, -1] == text.END_ID and (long[0, :-1] == long[0, 0]).all()


def _copy_run_without_model(tmp_path):
    """A run directory as an interrupted training leaves it: config, vocabularies and
    checkpoints/best.weights.h5 (the committed model's weights), no model.keras."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.json", "src_vocab.txt", "tgt_vocab.txt"):
        shutil.copy(RUN / name, run / name)
    (run / "checkpoints").mkdir()
    model = keras.models.load_model(RUN / "model.keras", compile=False)
    model.save_weights(run / "checkpoints" / "best.weights.h5")
    return run


@pytest.mark.heavy  # rebuilds and decodes the committed run
def test_run_with_only_the_best_checkpoint_loads_through_build_model(tmp_path, translator):
    run = _copy_run_without_model(tmp_path)
    from_checkpoint = Translator.from_run_dir(str(run))
    assert not (run / "model.keras").exists()
    for a, b in zip(from_checkpoint.model.get_weights(), translator.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert from_checkpoint.translate(DATES) == EXPECTED


def test_missing_run_dir_raises_file_not_found_naming_it(tmp_path):
    missing = str(tmp_path / "no_such_run")
    with pytest.raises(FileNotFoundError, match="no_such_run"):
        Translator.from_run_dir(missing)


def test_run_without_weights_says_to_finish_training(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(RUN / "config.json", run / "config.json")
    with pytest.raises(FileNotFoundError, match="no trained weights") as info:
        Translator.from_run_dir(str(run))
    assert str(run) in str(info.value)


def test_length_penalty_reaches_the_engine_by_its_own_name(translator, monkeypatch):
    """The pipeline decodes with the engine (not the Translator) and gets
    ``length_penalty`` under that name, whether ``translate`` was given it, its deprecated
    name ``alpha`` (with a warning) or neither (the default, 0.6); both names with different
    values are refused."""
    seen, decode = [], translator.engine.decode
    monkeypatch.setattr(translator.engine, "decode", lambda source, opts, *rest: (
        seen.append(opts.length_penalty), decode(source, opts, *rest))[1])
    with pytest.warns(DeprecationWarning, match="length_penalty"):
        assert translator.translate(DATES[:2], beam_size=2, alpha=1.5) == EXPECTED[:2]
    for kwargs in ({"length_penalty": 0.3}, {}):
        assert translator.translate(DATES[:2], beam_size=2, **kwargs) == EXPECTED[:2]
    assert seen == [1.5, 0.3, 0.6]
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="alpha"):
        translator.translate(DATES[:2], beam_size=2, alpha=1.5, length_penalty=0.3)


def test_translate_ids_takes_alpha_as_length_penalty_s_deprecated_name(translator):
    source = translator.encode(DATES[:2])
    expected = translator.translate_ids(source, beam_size=2, length_penalty=1.5)
    with pytest.warns(DeprecationWarning, match="`alpha` is deprecated: it is now "
                                                "`length_penalty`"):
        np.testing.assert_array_equal(translator.translate_ids(source, 2, alpha=1.5), expected)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="alpha"):
        translator.translate_ids(source, 2, 0.6, alpha=1.5)


@pytest.mark.heavy  # decodes the committed run twice
def test_a_calibrator_set_on_the_translator_is_the_one_its_engine_decodes_with(translator):
    """Settings are the engine's: a calibrator set on the Translator gives the confidences
    that a translator loaded with that calibrator gives."""
    uncalibrated = Translator.from_run_dir(str(RUN), calibrated=False)
    expected = [h[0]["confidence"] for h in uncalibrated.translate_nbest(DATES)]
    before, calibrator = [h[0]["confidence"] for h in translator.translate_nbest(DATES)], \
        translator.calibrator
    assert before != expected  # the premise: the run's calibrator changes them
    translator.calibrator = uncalibrated.calibrator
    try:
        assert translator.engine.calibrator is uncalibrated.calibrator
        assert [h[0]["confidence"] for h in translator.translate_nbest(DATES)] == expected
    finally:
        translator.calibrator = calibrator
