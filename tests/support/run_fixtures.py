"""The small trained runs the export, CTranslate2 and request tests share.

- The tiny dates run is committed (``tests/fixtures/tiny_dates_run``): training it in every
  session proves nothing that the training tests do not, and cost a fifth of the README
  command's time. Rebuild it after a change to the model or its saving format with
  ``python -m tests.support.run_fixtures`` from the repository root (the weights differ from
  CPU to CPU; the tests only compare our artefacts with each other on whatever weights it holds).
- The tiny SentencePiece run is trained per session (the slow pass): it is the test of
  the SentencePiece training path end to end. A copy of one is committed too
  (``tests/fixtures/tiny_sentencepiece_run``, without its optimizer's state): the browser pass
  exports it without training (``python -m tests.support.run_fixtures sentencepiece``
  rebuilds it).
"""
import dataclasses
import os
import shutil
import sys

import keras

from keras_attn import data
from keras_attn.core import runs
from keras_attn.text import tokenizers as text
from keras_attn.training import recipes as training
from tests.support import FIXTURES

TINY_DATES_RUN = os.path.join(FIXTURES, "tiny_dates_run")
TINY_DATES_SPLITS = dict(num_train=3000, num_valid=100, num_test=200)
TINY_SENTENCEPIECE_RUN = os.path.join(FIXTURES, "tiny_sentencepiece_run")
# What a run directory needs to load, translate and export (no checkpoints or logs).
RUN_FILES = ("config.json", "model.keras", "src.model", "tgt.model", "calibration.json",
             "metrics.json")


def tiny_dates_inputs():
    """The tiny dates run's held-out source dates (its test split)."""
    n = TINY_DATES_SPLITS
    return [s for s, _ in data.dates_splits(n["num_train"], n["num_valid"], n["num_test"],
                                            seed=0)["test"]]


def copy_tiny_dates_run(run_dir):
    """A writable copy of the committed tiny dates run in ``run_dir``; its held-out inputs."""
    if not os.path.isfile(os.path.join(TINY_DATES_RUN, "model.keras")):
        raise FileNotFoundError(f"{TINY_DATES_RUN} is missing: rebuild it with "
                                "`python -m tests.support.run_fixtures`")
    shutil.copytree(TINY_DATES_RUN, run_dir)
    return tiny_dates_inputs()


def train_tiny_dates_run(run_dir):
    """A dates run directory (config, vocabularies, model.keras without the optimizer's
    state, metrics samples); returns its held-out sources."""
    config = training.TrainConfig(
        task="dates", num_hiddens=64, ffn_num_hiddens=128, num_heads=4, num_layers=2,
        dropout=0.0, batch_size=64, epochs=3, warmup=200, max_len=32,
        label_smoothing=0.0, **TINY_DATES_SPLITS)
    keras.utils.set_random_seed(0)
    splits = data.dates_splits(config.num_train, config.num_valid, config.num_test, seed=0)
    p = runs.paths(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    src = text.char_vocab([s for s, _ in splits["train"]])
    tgt = text.char_vocab([t for _, t in splits["train"]])
    text.save_vocab(src, p["src_vocab"])
    text.save_vocab(tgt, p["tgt_vocab"])
    config.src_vocab_size, config.tgt_vocab_size = len(src), len(tgt)
    runs.write_json(p["config"], dataclasses.asdict(config))
    ds = data.make_dataset(splits["train"], text.Tokenizer(src), text.Tokenizer(tgt),
                           config.batch_size, max_len=config.max_len)
    model = training.compile_model(training.build_model(config), config, 50)
    model.fit(ds, epochs=config.epochs, verbose=0, shuffle=False)  # make_dataset shuffles
    plain = training.build_model(config)  # uncompiled: the file keeps no optimizer state
    plain.set_weights(model.get_weights())
    plain.save(p["model"])
    runs.write_json(p["metrics"], {"samples": [{"source": s, "target": t, "output": ""}
                                               for s, t in splits["test"][:8]]})
    return [s for s, _ in splits["test"]]


# English -> French pairs written as users write them (capitals, attached punctuation, the
# corpus's U+202F / U+00A0 before French ! ? :).
PAIRS = [
    ("Hello!", "Bonjour\u202f!"), ("Thank you!", "Merci\u202f!"), ("How are you?", "Comment ça va\u202f?"),
    ("I'm fine, thanks.", "Je vais bien, merci."), ("I'm hungry.", "J'ai faim."),
    ("Who is it?", "Qui est-ce\u00a0?"), ("Do you speak French?", "Parlez-vous français\u202f?"),
    ("Where is the station?", "Où est la gare\u202f?"), ("It's raining.", "Il pleut."),
    ("We are in Paris.", "Nous sommes à Paris."), ("Call me tomorrow.", "Appelle-moi demain."),
    ("The cat is sleeping.", "Le chat dort."), ("Tom isn't here.", "Tom n'est pas là."),
    ("It's 2:30.", "Il est 2:30."), ("Go ahead!", "Vas-y\u202f!"), ("I'm cold.", "J'ai froid."),
]


def train_tiny_sentencepiece_run(root, export=True):
    """A SentencePiece English->French run on :data:`PAIRS`, exported into RUN/export
    (SavedModel, TFLite text files; ``export=False``: not); returns the run directory."""
    from keras_attn import export
    from keras_attn.core.config import TrainConfig

    data_file = os.path.join(root, "pairs.txt")
    with open(data_file, "w", encoding="utf-8") as f:
        f.write("".join(f"{en}\t{fr}\n" for en, fr in PAIRS * 4))
    config = TrainConfig(task="tatoeba", data=data_file, tokenizer="sentencepiece",
                         vocab_size=90, num_hiddens=32, ffn_num_hiddens=64, num_heads=2,
                         num_layers=1, dropout=0.0, batch_size=16, steps=150, warmup=30,
                         max_len=24, num_train=0, num_valid=1, num_test=0, seed=0)
    run_dir = os.path.join(root, "run")
    training.train(config, run_dir, log=lambda *a: None)
    if export:
        export.export_run(run_dir, log=lambda *a: None)
    return run_dir


def keep_run(run_dir, out):
    """The files of :data:`RUN_FILES` of ``run_dir`` in ``out``, ``model.keras`` without
    the optimizer's state."""
    from keras_attn.core.config import TrainConfig

    os.makedirs(out)
    for name in RUN_FILES:
        if name != "model.keras":
            shutil.copy(os.path.join(run_dir, name), os.path.join(out, name))
    config = TrainConfig.from_dict(runs.read_json(os.path.join(run_dir, "config.json")))
    plain = training.build_model(config)  # uncompiled: the file keeps no optimizer state
    plain.set_weights(keras.models.load_model(os.path.join(run_dir, "model.keras"),
                                              compile=False).get_weights())
    plain.save(os.path.join(out, "model.keras"))


if __name__ == "__main__":
    # python -m tests.support.run_fixtures [RUN_DIR]: rebuild the committed tiny dates run;
    # python -m tests.support.run_fixtures sentencepiece: the committed tiny SentencePiece run.
    if sys.argv[1:] == ["sentencepiece"]:
        import tempfile

        shutil.rmtree(TINY_SENTENCEPIECE_RUN, ignore_errors=True)
        with tempfile.TemporaryDirectory() as root:
            keep_run(train_tiny_sentencepiece_run(root, export=False), TINY_SENTENCEPIECE_RUN)
        print(f"wrote {TINY_SENTENCEPIECE_RUN}")
        sys.exit(0)
    out = sys.argv[1] if len(sys.argv) > 1 else TINY_DATES_RUN
    shutil.rmtree(out, ignore_errors=True)
    train_tiny_dates_run(out)
    print(f"wrote {out}")
