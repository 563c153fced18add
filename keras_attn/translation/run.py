"""Loading what a Keras engine needs from a run directory (``keras_attn.core.runs``)."""
import os

import keras

from keras_attn import models
from keras_attn.core import languages as languages_, runs
from keras_attn.core.config import TrainConfig
from keras_attn.decoding.confidence import Calibrator
from keras_attn.text import subword


def languages(run_dir):
    """A run's languages as every artefact's metadata writes them.

    Example:
        >>> languages("runs/fr-en")
        {'source': {'code': 'fr', 'name': 'French'}, 'target': {'code': 'en', 'name': 'English'}}
    """
    config = runs.read_json(runs.paths(run_dir)["config"])
    (source, source_name), (target, target_name) = languages_.config_languages(config)
    return languages_.languages_metadata(source, target, source_name, target_name)


def load(run_dir, calibrated=True):
    """A run's ``(model, src_tokenizer, tgt_tokenizer, max_len, normalize, calibrator)``,
    ``Translator``'s arguments (the best checkpoint of an interrupted run; ``calibrated=False``
    or no ``calibration.json``: no calibrator). The model computes in float32.

    Raises:
        FileNotFoundError: not a run directory, or no trained weights yet.

    Example:
        >>> model, src_tok, tgt_tok, max_len, normalize, calibrator = load("runs/dates")
    """
    p = runs.paths(run_dir)
    if not os.path.exists(p["config"]):
        raise FileNotFoundError(f"{run_dir!r} is not a run directory (no config.json)")
    config = runs.read_json(p["config"])
    if os.path.exists(p["model"]):
        model = keras.models.load_model(p["model"], compile=False)
    elif os.path.exists(p["best"]):  # interrupted before the end: the best checkpoint so far
        model = models.build_model(config)
        model.load_weights(p["best"])
    else:
        raise FileNotFoundError(
            f"{run_dir!r} has no trained weights yet (neither model.keras nor "
            "checkpoints/best.weights.h5): finish or resume the training first")
    model = models.float32_model(model, config)  # a mixed-precision run decodes in float32
    calibrator = (Calibrator.load(p["calibration"])
                  if calibrated and os.path.exists(p["calibration"]) else None)
    return (model, *subword.run_tokenizers(run_dir), config["max_len"],
            TrainConfig.from_dict(config).tokenizer == "wordpiece", calibrator)
