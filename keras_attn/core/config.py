"""Every option of a training run, and the defaults of each task (no TensorFlow, Keras or
numpy: ``keras-attn train --help`` answers at once).
"""
import dataclasses
import math
import re

from keras_attn.core import languages
from keras_attn.core.special_tokens import END_ID, START_ID


@dataclasses.dataclass
class TrainConfig:
    """Every option of a run (written to ``config.json``). Empty languages, names and
    ``columns`` are filled from the task (:data:`keras_attn.core.languages.TASK_LANGUAGES`)
    and the codes when the config is made; ``target_data``: the target side's plain-text
    file, ``data`` then the source side's.

    Example:
        >>> c = TrainConfig(task="tatoeba", source_lang="fr", target_lang="en")
        >>> c.columns, c.source_name, c.target_name
        ('en,fr', 'French', 'English')
    """
    task: str = "dates"
    data: str = ""
    target_data: str = ""
    source_lang: str = ""
    target_lang: str = ""
    source_name: str = ""
    target_name: str = ""
    columns: str = ""
    model: str = "transformer"
    tokenizer: str = "char"
    num_hiddens: int = 128
    ffn_num_hiddens: int = 256
    num_heads: int = 4
    num_layers: int = 2
    num_decoder_layers: int = 0  # 0: num_layers
    tie_embeddings: bool = False
    norm_first: bool = False  # pre-norm blocks and a final LayerNorm per stack
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
    mixed_precision: str = ""  # float32; "auto": keras_attn.training.precision picks
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

    def __post_init__(self):
        # The task's languages for what was not given, names from the codes, the columns.
        defaults = languages.task_languages(self.task)
        for side, (code, name) in zip(("source", "target"), defaults):
            given = getattr(self, f"{side}_lang")
            if not given:
                setattr(self, f"{side}_lang", code)
            elif given != code:  # "pt-br" is "pt-BR", "fra" "fr"; a bad tag: check_languages
                setattr(self, f"{side}_lang", languages.standard_code(given))
            # No name, or the code as a name (an old run's, for a code its table lacked).
            if getattr(self, f"{side}_name") in ("", given):
                given = getattr(self, f"{side}_lang")
                setattr(self, f"{side}_name", name if given == code
                        else languages.language_name(given))
        if self.columns:
            self.columns = ",".join(map(languages.standard_code, self.columns.split(",")))
        elif self.task != "dates" and not self.target_data:
            self.columns = languages.data_columns(self.source_lang, self.target_lang)

    def languages(self):
        """``((code, name), (code, name))`` of the source and the target."""
        return ((self.source_lang, self.source_name), (self.target_lang, self.target_name))

    def check_languages(self):
        """Raise ValueError (naming the option) for codes that are not BCP 47 tags, a pair
        of one language, columns that do not hold both, or language options on the dates
        task (its codes are fixed); returns the config with the codes' case normalised."""
        defaults = languages.task_languages(self.task)
        if self.task == "dates":
            given = {k: getattr(self, k) for k in ("source_lang", "target_lang", "columns",
                                                   "target_data")
                     if getattr(self, k) not in ("", defaults[0][0], defaults[1][0])}
            if given:
                raise ValueError("the dates task translates dates to ISO 8601: its languages, "
                                 "columns and files are fixed (use --task tatoeba for a "
                                 f"language pair). Received: {given}")
            return self
        self.source_lang = languages.check_language_code(self.source_lang, "source_lang")
        self.target_lang = languages.check_language_code(self.target_lang, "target_lang")
        if self.source_lang.lower() == self.target_lang.lower():
            raise ValueError(f"`source_lang` and `target_lang` must differ. Received: "
                             f"source_lang={self.source_lang!r}, "
                             f"target_lang={self.target_lang!r}")
        if self.target_data and self.columns:
            raise ValueError("`columns` chooses the columns of one tab-separated file; with "
                             "`target_data` the two files are the columns (data: the source, "
                             f"target_data: the target). Received: columns={self.columns!r}")
        if self.target_data and not self.data:
            raise ValueError("`target_data` (the target side's plain-text file) needs `data` "
                             f"(the source side's). Received: target_data={self.target_data!r}")
        if self.columns:
            languages.column_indices(self.columns, self.source_lang, self.target_lang)
        return self


# TrainConfig's defaults are the dates task's; English-French differs where listed
# (4,000 pieces a language, no dropout, the precision the machine computes fastest:
# docs/budget.md).
_TASK_OVERRIDES = {
    "dates": {},
    "tatoeba": dict(tokenizer="sentencepiece", num_hiddens=256, ffn_num_hiddens=1024,
                    dropout=0.0, batch_size=64, epochs=8, warmup=4000, max_len=64,
                    vocab_size=4000, num_train=0, num_valid=2000, num_test=0,
                    mixed_precision="auto"),
}
# The options whose default depends on the task.
_SIZES = ("model", "tokenizer", "num_hiddens", "ffn_num_hiddens", "num_heads", "num_layers",
          "num_decoder_layers", "dropout", "batch_size", "epochs", "warmup", "lr_scale", "label_smoothing",
          "max_len", "vocab_size", "num_train", "num_valid", "num_test", "mixed_precision")
TASK_DEFAULTS = {
    task: {**{k: getattr(TrainConfig, k) for k in _SIZES}, **overrides}
    for task, overrides in _TASK_OVERRIDES.items()
}


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|sec|m|min|h)\s*$")
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(text):
    """Seconds in ``"90s"``, ``"45m"``, ``"1h"`` or ``"1.5h"``; ValueError for anything
    else, a bare number included."""
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
