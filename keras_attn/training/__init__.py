"""Training: the ``keras-attn train`` recipes and everything a run needs beside the model.

================  ===========================================================================
module            holds
================  ===========================================================================
``recipes``       :func:`train`: data, model, optimiser, callbacks, evaluation, export of a
                  run (:class:`BestWeightsCheckpoint`, the tasks' defaults)
``budget``        training for a time budget: the plan, the clock, resuming
``distribute``    tf.distribute strategies and the replica-mean loss
``losses``        masked, label-smoothed cross-entropy (its fast kernel beside it)
``evaluation``    exact match, BLEU and chrF of a run's translations (sacrebleu)
``calibration``   fitting the confidence's calibrator on the validation split
================  ===========================================================================

The learning-rate schedules are :mod:`keras_attn.schedules` (the API contract's home); the
datasets are :mod:`keras_attn.data`; a run's options are :mod:`keras_attn.core.config`.

May import: :mod:`keras_attn.translator` and everything below it (translation, decoding,
data, models, layers, ops, kernels, text, core); never export, serve or cli. The names
below load on first use (PEP 562).

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
