"""What every other part of keras_attn reads, standard library only: the run directory
(``runs``), a run's options (``config``), its languages (``languages``), the reserved ids
(``special_tokens``) and lazy package names (``lazy``).

Example:
    >>> from keras_attn.core.config import TrainConfig
    >>> TrainConfig(task="dates").task
    'dates'
"""
