"""Every option of a training run, and the defaults of each task.

Imports neither TensorFlow, Keras nor numpy: ``keras-attn train --help`` reads the defaults
from here and answers at once.
"""
import dataclasses
import math
import re

from keras_attn.core.special_tokens import END_ID, START_ID


@dataclasses.dataclass
class TrainConfig:
    """Every option of a run (written to ``config.json``)."""
    task: str = "dates"
    data: str = ""
    model: str = "transformer"
    tokenizer: str = "char"
    num_hiddens: int = 128
    ffn_num_hiddens: int = 256
    num_heads: int = 4
    num_layers: int = 2
    dropout: float = 0.1
    ffn_dropout: float = 0.0
    batch_size: int = 128
    epochs: int = 10
    steps: int = 0
    time_budget: float = 0.0  # seconds for the whole command (0: --epochs/--steps)
    schedule: str = "noam"
    warmup: int = 800
    lr_scale: float = 1.0
    peak_lr: float = 1e-3
    label_smoothing: float = 0.1
    mixed_precision: str = ""
    jit_compile: bool = False
    seed: int = 0
    max_len: int = 48
    vocab_size: int = 0
    num_train: int = 30000
    num_valid: int = 1000
    num_test: int = 2000
    src_vocab_size: int = 0
    tgt_vocab_size: int = 0
    start_id: int = START_ID
    end_id: int = END_ID

    # Options that may change between the first run and a resumed one.
    RESUMABLE = ("epochs", "steps", "jit_compile")

    @classmethod
    def from_dict(cls, values):
        """The config a run's ``config.json`` holds. A Tatoeba run written before the
        ``tokenizer`` option existed used WordPiece on normalised text."""
        values = dict(values)
        if "tokenizer" not in values:
            values["tokenizer"] = "wordpiece" if values.get("task") == "tatoeba" else "char"
        return cls(**values)


# Defaults per task: TrainConfig's own defaults are the dates task's (a small char-level
# Transformer, minutes on 2 CPU cores); English-French differs only where listed (the
# D2L/paper-sized model, subword tokens; 4,000 pieces per language and no dropout won the
# measured comparisons at a time budget of up to an hour, docs/budget.md).
_TASK_OVERRIDES = {
    "dates": {},
    "tatoeba": dict(tokenizer="sentencepiece", num_hiddens=256, ffn_num_hiddens=1024,
                    dropout=0.0, batch_size=64, epochs=8, warmup=4000, max_len=64,
                    vocab_size=4000, num_train=0, num_valid=2000, num_test=0),
}
# The options whose default depends on the task.
_SIZES = ("model", "tokenizer", "num_hiddens", "ffn_num_hiddens", "num_heads", "num_layers",
          "dropout", "batch_size", "epochs", "warmup", "lr_scale", "label_smoothing",
          "max_len", "vocab_size", "num_train", "num_valid", "num_test")
TASK_DEFAULTS = {
    task: {**{k: getattr(TrainConfig, k) for k in _SIZES}, **overrides}
    for task, overrides in _TASK_OVERRIDES.items()
}


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h)\s*$")
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text):
    """Seconds in ``"90s"``, ``"45m"``, ``"1h"`` or ``"1.5h"`` (a number and a unit).

    Raises ValueError for anything else, a bare number included (minutes or hours?).
    """
    match = _DURATION.match(str(text))
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)] if match else 0.0
    if not 0 < seconds < math.inf:
        raise ValueError(f"a time budget must be a positive number followed by s, m or h "
                         f"(90s, 45m, 1h, 1.5h). Received: {text!r}")
    return seconds


def format_duration(seconds):
    """``"1:02:03"`` or ``"2:03"`` for a number of seconds."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
