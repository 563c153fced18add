"""Training: the ``keras-attn train`` recipes and everything a run needs beside the model.

Modules: ``recipes`` (:func:`train`), ``budget`` (training for a time budget),
``distribute`` (tf.distribute), ``precision`` (``--mixed-precision auto``), ``losses``
(masked cross-entropy), ``evaluation`` (exact match, BLEU, chrF), ``calibration`` (the
confidence's calibrator). The schedules are :mod:`keras_attn.schedules`, the datasets
:mod:`keras_attn.data`, a run's options :mod:`keras_attn.core.config`.

May import: :mod:`keras_attn.translator` and everything below it; never export, serve or
cli. The names below load on first use (PEP 562).

Example:
    >>> from keras_attn.core.config import TrainConfig
    >>> from keras_attn.training import train
    >>> train(TrainConfig(task="dates", epochs=1), "runs/dates")  # doctest: +SKIP
"""
from keras_attn.core import lazy

_NAMES = {
    "recipes": ("train", "compile_model", "check_config", "BestWeightsCheckpoint",
                "TASK_DEFAULTS", "BUDGET_WARMUP", "BUDGET_AVERAGE", "load_splits"),
}
__getattr__, __dir__, __all__ = lazy.attach(__name__, _NAMES)
