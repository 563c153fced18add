"""What every other part of keras_attn reads: the run directory (``runs``), a run's options
(``config``), its languages (``languages``), the reserved ids (``special_tokens``), lazy
package names (``lazy``) and renamed keyword arguments (``deprecation``).

May import: the standard library and langcodes (a language tag's standard form and name);
nothing else of keras_attn.

Example:
    >>> from keras_attn.core.config import TrainConfig
    >>> TrainConfig(task="dates").task
    'dates'
"""
