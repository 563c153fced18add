"""A small trained dates run directory, shared by the export and CTranslate2 tests."""
import dataclasses
import os

import keras

from keras_attn import data, runs, text, training


def train_tiny_dates_run(run_dir):
    """A dates run directory (config, vocabularies, model.keras, metrics samples)."""
    config = training.TrainConfig(
        task="dates", num_hiddens=64, ffn_num_hiddens=128, num_heads=4, num_layers=2,
        dropout=0.0, batch_size=64, epochs=3, warmup=200, max_len=32, num_train=3000,
        num_valid=100, num_test=200, label_smoothing=0.0)
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
    model.save(p["model"])
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


def train_tiny_sentencepiece_run(root):
    """A SentencePiece English->French run on :data:`PAIRS`, exported into RUN/export
    (SavedModel, TFLite text files); returns the run directory."""
    from keras_attn import export
    from keras_attn.config import TrainConfig

    data_file = os.path.join(root, "pairs.txt")
    with open(data_file, "w", encoding="utf-8") as f:
        f.write("".join(f"{en}\t{fr}\n" for en, fr in PAIRS * 4))
    config = TrainConfig(task="tatoeba", data=data_file, tokenizer="sentencepiece",
                         vocab_size=90, num_hiddens=32, ffn_num_hiddens=64, num_heads=2,
                         num_layers=1, dropout=0.0, batch_size=16, steps=150, warmup=30,
                         max_len=24, num_train=0, num_valid=1, num_test=0, seed=0)
    run_dir = os.path.join(root, "run")
    training.train(config, run_dir, log=lambda *a: None)
    export.export_run(run_dir, log=lambda *a: None)
    return run_dir
