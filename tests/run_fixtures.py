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
