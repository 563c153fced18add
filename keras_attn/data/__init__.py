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
import dataclasses

from keras_attn.data.download import absolute_location, resolve_data, run_location
from keras_attn.data.pipeline import make_dataset, prepare_source, prepare_target
from keras_attn.data.tatoeba import (D2L_FRA_ENG_URL, DATA_ENV, LoadReport, corpus_location,
                                     load_aligned, load_tatoeba, load_tatoeba_references,
                                     tatoeba_splits)

__all__ = ["DATE_FORMATS", "D2L_FRA_ENG_URL", "DATA_ENV", "LoadReport", "absolute_location",
           "corpus_location", "stored_corpus",
           "dates_splits", "generate_dates", "load_aligned", "load_splits", "load_tatoeba",
           "load_tatoeba_references", "make_dataset", "prepare_source", "prepare_target",
           "resolve_data", "tatoeba_splits"]


def stored_corpus(config):
    """``config`` with its corpus as a run stores it: ``data`` (or ``KERAS_ATTN_DATA``) and
    ``target_data`` absolute paths, URLs as given (:func:`absolute_location`); the dates task
    (no corpus) as it is.

    Example:
        >>> stored_corpus(TrainConfig(task="tatoeba", data="fra-eng")).data
        '/home/me/fra-eng'
    """
    if config.task == "dates":
        return config
    return dataclasses.replace(config, data=absolute_location(corpus_location(config.data)),
                               target_data=absolute_location(config.target_data))


def load_splits(config, log=print, run_dir=None):
    """A run's ``{"train", "valid", "test"}`` lists of (source, target) pairs and the test
    split's references (Tatoeba with dev.txt: every translation of each source; else None),
    from its :class:`keras_attn.core.config.TrainConfig` (a text task reads its data in
    the config's direction: ``source_lang``, ``target_lang``, ``columns``, ``target_data``).
    ``run_dir``: the run the config is read from; a relative corpus path it stored is found
    from there (:func:`run_location`).

    Example:
        >>> splits, refs = load_splits(TrainConfig(task="dates", num_train=100))
    """
    if config.task == "dates":
        return dates_splits(config.num_train, config.num_valid, config.num_test,
                            seed=config.seed), None
    if config.task != "tatoeba":
        raise ValueError(f"`task` must be 'dates' or 'tatoeba'. Received: task={config.task!r}")
    if run_dir is not None:
        config = dataclasses.replace(
            config, data=run_location(config.data, run_dir, "--data"),
            target_data=run_location(config.target_data, run_dir, "--target-data"))
    return tatoeba_splits(config.data, num_valid=config.num_valid,
                          max_pairs=config.num_train or None, seed=config.seed,
                          normalize=config.tokenizer == "wordpiece", log=log,
                          source=config.source_lang, target=config.target_lang,
                          columns=config.columns or None, target_data=config.target_data)
