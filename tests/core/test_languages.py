"""A run knows its languages: the codes checked, the corpus read in the chosen direction
(Tatoeba's columns, a TSV, two aligned files), the config's fields (and an old config's
task languages), every artefact's metadata, and what the server and the CLI read back."""
import argparse
import dataclasses
import json
import os
import shutil

import pytest

from keras_attn.core import languages
from keras_attn.core.config import TrainConfig
from keras_attn.serve.locate import artefact_languages, languages_of, locate

from tests.support import ROOT

# Tatoeba's deu.txt: English<TAB>German<TAB>attribution.
DEU = ["Go.\tGeh.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM)",
       "Hi.\tHallo!\tCC-BY 2.0 (France) Attribution: tatoeba.org #538123 (CM)",
       "Run!\tLauf!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328 (papabear)",
       "I'm home.\tIch bin zu Hause.\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (x)"]


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --- codes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("code, expected", [
    ("en", "en"), ("de", "de"), ("EN", "en"), ("pt-BR", "pt-BR"), ("pt-br", "pt-BR"),
    ("zh-Hant", "zh-Hant"), ("zh-hant-tw", "zh-Hant-TW"), ("es-419", "es-419"),
    ("sr-Latn", "sr-Latn"), ("cmn", "cmn"), (" fr ", "fr"), ("de-CH-1901", "de-CH-1901"),
    ("en_US", "en-US")])
def test_good_tags_are_kept_with_their_case_normalised(code, expected):
    assert languages.check_language_code(code) == expected


@pytest.mark.parametrize("code, why", [
    ("", "it is empty"), ("english", "2-letter ISO 639-1"), ("e", "2-letter ISO 639-1"),
    ("en-", "a subtag after the language"), ("en--US", "a subtag after the language"),
    ("fr-toolongvariant", "a subtag after the language"), ("12", "2-letter ISO 639-1"),
    ("dates", "2-letter ISO 639-1"), (None, "it is not text")])
def test_bad_tags_are_refused_saying_what_is_wrong(code, why):
    with pytest.raises(ValueError) as info:
        languages.check_language_code(code, "--source-lang")
    message = str(info.value)
    assert "`--source-lang` must be a BCP 47 language tag such as en, de, pt-BR" in message
    assert why in message and f"Received: --source-lang={code!r}" in message


@pytest.mark.parametrize("code, expected", [
    ("fra", "fr"), ("fre", "fr"), ("eng", "en"), ("deu", "de"), ("FRA-ca", "fr-CA"),
    ("cmn", "cmn"), ("yue", "yue"), ("iw", "he")])
def test_a_language_with_a_two_letter_code_is_written_with_it(code, expected):
    """ISO 639-3 (and 639-2/B, deprecated) codes of a language that ISO 639-1 names become
    its 639-1 code (the IANA registry's preferred value); the others are kept."""
    assert languages.check_language_code(code) == expected


def test_names_of_codes():
    """CLDR's English names, region and script included, for any code (not only a table's);
    a task's own codes keep their names; a code with no name is shown as itself."""
    assert languages.language_name("de") == "German"
    assert languages.language_name("pt-BR") == "Portuguese (Brazil)"
    assert languages.language_name("zh-Hant") == "Chinese (Traditional)"
    for code, name in (("fra", "French"), ("eng", "English"), ("gsw", "Swiss German"),
                       ("kab", "Kabyle"), ("tok", "Toki Pona"), ("cmn", "Mandarin Chinese")):
        assert languages.language_name(code) == name
    assert languages.language_name("qaa") == "qaa"  # reserved for local use: no name
    assert languages.language_name("dates") == "Dates as people write them"


@pytest.mark.parametrize("source, target", [("fra", "eng"), ("fr", "eng"), ("fre", "en")])
def test_three_letter_codes_read_the_same_columns_as_two_letter_ones(tmp_path, source,
                                                                     target):
    """``fra -> eng`` on Tatoeba's English<TAB>French file reads French as the source, as
    ``fr -> en`` does; before, English was read as the source and the run labelled fra."""
    from keras_attn import data

    path = write(tmp_path / "fra.txt", ["Go.\tVa !\tCC-BY", "Hi.\tSalut !\tCC-BY"])
    config = TrainConfig(task="tatoeba", data=str(path), source_lang=source,
                         target_lang=target)
    assert (config.source_lang, config.target_lang, config.columns) == ("fr", "en", "en,fr")
    assert config.languages() == (("fr", "French"), ("en", "English"))
    pairs, _ = data.load_tatoeba(path, normalize=False, source=source, target=target)
    assert pairs == [("Va !", "Go."), ("Salut !", "Hi.")]


def test_an_old_config_with_codes_as_names_gets_the_names():
    """A run written when the table lacked a code stored the code as its name; it reads
    back named, with its columns in the same standard form."""
    old = {"task": "tatoeba", "source_lang": "deu", "target_lang": "fra",
           "source_name": "deu", "target_name": "fra", "columns": "deu,fra"}
    config = TrainConfig.from_dict(old)
    assert config.languages() == (("de", "German"), ("fr", "French"))
    assert config.columns == "de,fr"
    assert languages.config_languages(old) == (("deu", "German"), ("fra", "French"))
    meta = {"source": {"code": "fra", "name": "fra"}, "target": {"code": "en", "name": ""}}
    assert languages.languages_from_metadata(meta) == (("fra", "French"), ("en", "English"))


def test_default_columns_follow_tatoeba_english_first():
    assert languages.data_columns("en", "fr") == "en,fr"
    assert languages.data_columns("fr", "en") == "en,fr"
    assert languages.data_columns("de", "en-GB") == "en-GB,de"
    assert languages.data_columns("de", "fr") == "de,fr"
    assert languages.column_indices("en,de", "de", "en") == (1, 0, 2)
    with pytest.raises(ValueError, match="'fr' is none of the file's columns en,de"):
        languages.column_indices("en,de", "fr", "en")
    with pytest.raises(ValueError, match="each once"):
        languages.column_indices("en,en", "en", "de")


# --- the config -------------------------------------------------------------------------------
def test_config_defaults_keep_each_tasks_languages():
    dates = TrainConfig()
    assert dates.languages() == (("dates", "Dates as people write them"),
                                 ("iso", "ISO 8601 dates"))
    assert dates.columns == "" and dates.check_languages() is dates
    tatoeba = TrainConfig(task="tatoeba")
    assert tatoeba.languages() == (("en", "English"), ("fr", "French"))
    assert tatoeba.columns == "en,fr"


def test_config_round_trips_its_languages():
    config = TrainConfig(task="tatoeba", data="deu.txt", source_lang="de", target_lang="en",
                         target_name="English (UK)")
    assert config.columns == "en,de" and config.source_name == "German"
    values = json.loads(json.dumps(dataclasses.asdict(config)))
    assert values["source_lang"] == "de" and values["target_name"] == "English (UK)"
    again = TrainConfig.from_dict(values)
    assert again == config and again.languages() == (("de", "German"), ("en", "English (UK)"))


@pytest.mark.parametrize("task, expected", [
    ("tatoeba", (("en", "English"), ("fr", "French"))),
    ("dates", (("dates", "Dates as people write them"), ("iso", "ISO 8601 dates")))])
def test_an_old_config_without_the_fields_gets_its_tasks_languages(task, expected):
    old = {"task": task, "data": "", "model": "transformer", "max_len": 48}
    assert TrainConfig.from_dict(old).languages() == expected
    assert languages.config_languages(old) == expected


@pytest.mark.parametrize("values, words", [
    (dict(task="tatoeba", source_lang="german", target_lang="en"),
     ["`source_lang` must be a BCP 47 language tag", "source_lang='german'"]),
    (dict(task="tatoeba", source_lang="fr", target_lang="FR"), ["must differ"]),
    (dict(task="tatoeba", source_lang="de", target_lang="en", columns="en,fr"),
     ["'de' is none of the file's columns en,fr", "--columns"]),
    (dict(task="tatoeba", data="a.txt", target_data="b.txt", columns="en,de"),
     ["`columns` chooses the columns of one tab-separated file"]),
    (dict(task="tatoeba", target_data="b.txt", source_lang="de", target_lang="en"),
     ["`target_data`", "needs `data`"]),
    (dict(task="dates", source_lang="de"), ["the dates task", "{'source_lang': 'de'}"])])
def test_bad_language_options_are_refused(values, words):
    with pytest.raises(ValueError) as info:
        TrainConfig(**values).check_languages()
    assert all(w in str(info.value) for w in words), str(info.value)


# --- reading the corpus ------------------------------------------------------------------------
def test_a_tatoeba_file_reads_in_either_direction(tmp_path):
    from keras_attn import data

    path = write(tmp_path / "deu.txt", DEU)
    en_de, report = data.load_tatoeba(path, normalize=False, source="en", target="de")
    assert en_de[:2] == [("Go.", "Geh."), ("Hi.", "Hallo!")] and report.num_kept == 4
    de_en, _ = data.load_tatoeba(path, normalize=False, source="de", target="en")
    assert de_en == [(t, s) for s, t in en_de]
    # Named explicitly, the same.
    assert data.load_tatoeba(path, normalize=False, source="de", target="en",
                             columns="en,de")[0] == de_en


def test_the_direction_reaches_the_splits(tmp_path):
    from keras_attn import data

    path = write(tmp_path / "deu.txt", DEU)
    config = TrainConfig(task="tatoeba", data=str(path), source_lang="de", target_lang="en",
                         tokenizer="sentencepiece", num_train=0, num_valid=1, num_test=0)
    splits, refs = data.load_splits(config, log=lambda *a: None)
    pairs = sorted(p for split in splits.values() for p in split)
    assert ("Geh.", "Go.") in pairs and ("Ich bin zu Hause.", "I'm home.") in pairs
    assert len(splits["valid"]) == 1 and refs is None


def test_a_tsv_of_more_columns_names_them(tmp_path):
    from keras_attn import data

    path = write(tmp_path / "three.tsv", ["Hello\tHallo\tBonjour", "Yes\tJa\tOui",
                                          "No\tNein", "Cat\tKatze\tChat\tsource: me"])
    pairs, report = data.load_tatoeba(path, normalize=False, source="fr", target="de",
                                      columns="en,de,fr")
    assert pairs == [("Bonjour", "Hallo"), ("Oui", "Ja"), ("Chat", "Katze")]
    assert dict(report.bad_lines) == {
        3: "expected 3 or 4 tab-separated fields (English, German, French[, attribution]), "
           "found 2"}
    # A two-column TSV of another pair: the source first unless English is in it.
    write(tmp_path / "two.tsv", ["Hallo\tBonjour", "Ja\t"])
    pairs, report = data.load_tatoeba(tmp_path / "two.tsv", normalize=False, source="de",
                                      target="fr")
    assert pairs == [("Hallo", "Bonjour")] and report.bad_lines == [(2, "empty French field")]


def test_two_aligned_files(tmp_path):
    from keras_attn import data

    src = write(tmp_path / "train.de", ["Geh.", "Hallo!", "", "Lauf!"])
    tgt = write(tmp_path / "train.en", ["Go.", "Hi.", "", "Run!"])
    pairs, report = data.load_aligned(src, tgt, normalize=False, source="de", target="en")
    assert pairs == [("Geh.", "Go."), ("Hallo!", "Hi."), ("Lauf!", "Run!")]
    assert report.bad_lines == [(3, "empty line")]
    splits, _ = data.tatoeba_splits(str(src), num_valid=1, target_data=str(tgt),
                                    source="de", target="en", log=lambda *a: None)
    assert sorted(p for s in splits.values() for p in s) == sorted(pairs)
    write(tmp_path / "half.en", ["Go.", ""])
    _, report = data.load_aligned(write(tmp_path / "half.de", ["Geh.", "Hallo!"]),
                                  tmp_path / "half.en", normalize=False, source="de",
                                  target="en")
    assert report.bad_lines == [(2, "empty English field")]


def test_two_files_of_different_lengths_are_refused(tmp_path):
    from keras_attn import data

    src = write(tmp_path / "a.de", ["Geh.", "Hallo!", "Lauf!"])
    tgt = write(tmp_path / "a.en", ["Go.", "Hi."])
    with pytest.raises(ValueError, match=r"not aligned: .*a\.de has 3 lines and .*a\.en has "
                                         r"2; line i of one must translate line i"):
        data.load_aligned(src, tgt)
    with pytest.raises(FileNotFoundError, match="target text not found"):
        data.load_aligned(src, tmp_path / "missing.en")


# --- the command line ----------------------------------------------------------------------------
def _train_args(*argv):
    from keras_attn.cli import train

    parser = argparse.ArgumentParser(prog="keras-attn")
    p = train.add_parser(parser.add_subparsers())
    args = p.parse_args(list(argv))
    train.check_args(p, args)
    return train.config_from_args(args)


def test_train_flags_make_the_config():
    config = _train_args("--task", "tatoeba", "--data", "deu.txt", "--source-lang", "DE",
                         "--target-lang", "en")
    assert (config.source_lang, config.target_lang, config.columns) == ("de", "en", "en,de")
    config = _train_args("--task", "tatoeba", "--data", "a.de", "--target-data", "a.en",
                         "--source-lang", "de", "--target-lang", "en", "--source-name",
                         "Deutsch")
    assert config.target_data == "a.en" and config.columns == ""
    assert config.languages() == (("de", "Deutsch"), ("en", "English"))
    assert _train_args().languages() == TrainConfig().languages()  # dates: as ever


@pytest.mark.parametrize("argv, words", [
    (["--task", "tatoeba", "--source-lang", "german", "--target-lang", "en"],
     ["argument --source-lang", "must be a BCP 47 language tag", "'german'"]),
    (["--task", "tatoeba", "--source-lang", "fr"], ["--source-lang needs --target-lang"]),
    (["--source-lang", "fr", "--target-lang", "en"], ["apply to --task tatoeba only"]),
    (["--task", "tatoeba", "--source-lang", "fr", "--target-lang", "en", "--columns",
      "en,de"], ["'fr' is none of the file's columns en,de"]),
    (["--task", "tatoeba", "--columns", "en,de", "--target-data", "x.txt"],
     ["--columns names the columns of one tab-separated file"])])
def test_train_flags_are_checked(argv, words, capsys):
    with pytest.raises(SystemExit) as info:
        _train_args(*argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err


def test_translate_names_the_pair():
    from keras_attn.cli.decode import languages_line

    meta = languages.languages_metadata("fr", "en")
    assert languages_line(meta, "runs/fr-en") == "French (fr) -> English (en): runs/fr-en"


# --- what the server reads ---------------------------------------------------------------------
def _fake_export(folder, report_languages=None, asset_languages=None, config=None):
    """A SavedModel layout the locator accepts (no graph: nothing loads it here)."""
    version = folder / "saved_model" / "translator" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    report = {"decoding": {"max_len": 24}}
    if report_languages:
        report["languages"] = report_languages
    (folder / "saved_model" / "translator" / "1.report.json").write_text(json.dumps(report))
    if asset_languages:
        (version / "assets.extra").mkdir()
        (version / "assets.extra" / "keras_attn.json").write_text(
            json.dumps({"languages": asset_languages}))
    if config is not None:
        (folder / "run").mkdir()
        (folder / "run" / "config.json").write_text(json.dumps(config))
    return folder


def test_the_locator_reads_the_artefact_then_the_run_then_the_task(tmp_path):
    de_en = languages.languages_metadata("de", "en", "Deutsch")
    old_tatoeba = {"task": "tatoeba", "max_len": 24}
    # The SavedModel's own metadata wins over its run's config (an old one here).
    found = locate(_fake_export(tmp_path / "a", asset_languages=de_en, config=old_tatoeba))
    assert (found.source, found.target) == (("de", "Deutsch"), ("en", "English"))
    # The report beside the version folder, when the folder has none.
    found = locate(_fake_export(tmp_path / "b", report_languages=de_en))
    assert found.source == ("de", "Deutsch") and found.run_dir is None
    # An old export: the run's config.json fields, else its task's languages.
    new_run = dict(old_tatoeba, source_lang="fr", target_lang="en", source_name="French",
                   target_name="English")
    assert locate(_fake_export(tmp_path / "c", config=new_run)).source == ("fr", "French")
    assert locate(_fake_export(tmp_path / "d", config=old_tatoeba)).target == ("fr", "French")
    assert languages_of(None) == languages.UNKNOWN_LANGUAGES


def test_the_committed_export_keeps_the_dates_codes():
    found = locate(os.path.join(ROOT, "exported"))
    assert (found.source[0], found.target[0]) == ("dates", "iso")


def test_languages_route_reads_the_artefacts_languages(tmp_path):
    from starlette.testclient import TestClient

    from keras_attn.serve.app import Settings, create_app
    from keras_attn.serve.replicas import InProcessReplicas

    folder = _fake_export(tmp_path / "x",
                          asset_languages=languages.languages_metadata("fr", "en"))
    app = create_app(locate(folder), InProcessReplicas(None), Settings())
    with TestClient(app) as client:
        assert client.get("/languages").json() == [
            {"code": "fr", "name": "French", "targets": ["en"]},
            {"code": "en", "name": "English", "targets": []}]
        settings = client.get("/frontend/settings").json()["language"]
        assert settings["target"] == {"code": "en", "name": "English"}
        refused = client.post("/translate", json={"q": "Bonjour", "source": "en",
                                                  "target": "fr"})
        assert refused.status_code == 400, refused.text


# --- every artefact's metadata -----------------------------------------------------------------
@pytest.mark.slow  # exports the committed tiny run: SavedModel, TFLite and CTranslate2 (~1 min)
def test_every_artefact_of_a_run_holds_its_languages(tmp_path):
    from tests.support import run_fixtures
    from keras_attn import export
    from keras_attn.core import runs

    run_dir = str(tmp_path / "run")
    run_fixtures.copy_tiny_dates_run(run_dir)
    # Labelled as a German->English run: the export copies what the config says.
    config = runs.read_json(os.path.join(run_dir, "config.json"))
    config.update(task="tatoeba", source_lang="de", target_lang="en", source_name="Deutsch",
                  target_name="English", columns="en,de")
    runs.write_json(os.path.join(run_dir, "config.json"), config)
    expected = {"source": {"code": "de", "name": "Deutsch"},
                "target": {"code": "en", "name": "English"}}
    export_dir = tmp_path / "export"
    report = export.export_run(run_dir, export_dir=str(export_dir), log=lambda *a: None,
                               quantizations=("float32",), request_signature=False)
    assert report["languages"] == expected
    version = export_dir / "saved_model" / "translator" / "1"
    assert json.loads((version / "assets.extra" / "keras_attn.json").read_text()) == {
        "languages": expected}
    assert report["saved_model"]["languages"] == expected
    assert runs.read_json(str(version) + ".report.json")["languages"] == expected
    for key, rep in report["tflite"].items():
        assert rep["languages"] == expected, key
    builtin = runs.read_json(str(export_dir / "tflite" / "builtin_float32" / "metadata.json"))
    assert builtin["languages"] == expected
    found = locate(str(export_dir))
    assert (found.source, found.target) == (("de", "Deutsch"), ("en", "English"))
    # A SavedModel version copied away from its run and report keeps them.
    alone = tmp_path / "alone" / "1"
    shutil.copytree(version, alone)
    assert artefact_languages(str(alone)) == (("de", "Deutsch"), ("en", "English"))

    pytest.importorskip("ctranslate2")
    from keras_attn.export import ctranslate2 as ct2_export

    ct2_dir = str(tmp_path / "ct2")
    ct2_export.export_ctranslate2(run_dir, ct2_dir, log=lambda *a: None)
    assert runs.read_json(os.path.join(ct2_dir, "keras_attn.json"))["languages"] == expected
    shutil.copytree(ct2_dir, tmp_path / "ct2_alone")
    found = locate(str(tmp_path / "ct2_alone"), engine="ctranslate2")
    assert (found.source, found.target) == (("de", "Deutsch"), ("en", "English"))
