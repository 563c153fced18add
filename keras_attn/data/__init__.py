"""Datasets: a generated dates corpus, the Tatoeba English-French corpus, tf.data pipelines.

:mod:`~keras_attn.data.dates` (dates as people write them, paired with ISO 8601),
:mod:`~keras_attn.data.tatoeba` (tab-separated or aligned parallel text, bad lines
reported), :mod:`~keras_attn.data.download` (a path or URL as a local corpus file) and
:mod:`~keras_attn.data.pipeline` (TensorFlow: batches for ``model.fit`` and the sequence
conventions the serving graph shares).

Example:
    >>> from keras_attn import data
    >>> splits = data.dates_splits(num_train=1000, num_valid=100, num_test=100)
    >>> ds = data.make_dataset(splits["train"], src_tok, tgt_tok, batch_size=64)

References: D2L 10.5 (machine translation data).

May import: :mod:`keras_attn.text`, :mod:`keras_attn.core`; never decoding, models
or anything above them.
"""
from keras_attn.data.dates import DATE_FORMATS, dates_splits, generate_dates
from keras_attn.data.download import resolve_data
from keras_attn.data.pipeline import make_dataset, prepare_source, prepare_target
from keras_attn.data.tatoeba import (D2L_FRA_ENG_URL, DATA_ENV, LoadReport, corpus_location,
                                     load_aligned, load_tatoeba, load_tatoeba_references,
                                     tatoeba_splits)

__all__ = ["DATE_FORMATS", "D2L_FRA_ENG_URL", "DATA_ENV", "LoadReport", "corpus_location",
           "dates_splits", "generate_dates", "load_aligned", "load_splits", "load_tatoeba",
           "load_tatoeba_references", "make_dataset", "prepare_source", "prepare_target",
           "resolve_data", "tatoeba_splits"]


def load_splits(config, log=print):
    """A run's ``{"train", "valid", "test"}`` lists of (source, target) pairs and the test
    split's references (Tatoeba with dev.txt: every translation of each source; else None),
    from its :class:`keras_attn.core.config.TrainConfig` (a text task reads its data in
    the config's direction: ``source_lang``, ``target_lang``, ``columns``, ``target_data``).

    Example:
        >>> splits, refs = load_splits(TrainConfig(task="dates", num_train=100))
    """
    if config.task == "dates":
        return dates_splits(config.num_train, config.num_valid, config.num_test,
                            seed=config.seed), None
    if config.task != "tatoeba":
        raise ValueError(f"`task` must be 'dates' or 'tatoeba'. Received: task={config.task!r}")
    return tatoeba_splits(config.data, num_valid=config.num_valid,
                          max_pairs=config.num_train or None, seed=config.seed,
                          normalize=config.tokenizer == "wordpiece", log=log,
                          source=config.source_lang, target=config.target_lang,
                          columns=config.columns or None, target_data=config.target_data)
