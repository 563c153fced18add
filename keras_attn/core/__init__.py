"""What every other part of keras_attn reads, with neither Keras nor TensorFlow: the run
directory and its atomic writes (``runs``), a run's options (``config``), its languages
(``languages``: BCP 47 codes checked and named, the task defaults, the metadata every
artefact holds), the reserved token ids (``special_tokens``) and PEP 562 lazy names for
package ``__init__``s (``lazy``).

May import: the standard library only (nothing else of keras_attn).

Example:
    >>> from keras_attn.core.config import TrainConfig
    >>> TrainConfig(task="dates").task
    'dates'
"""
