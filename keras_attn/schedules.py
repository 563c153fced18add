"""Learning-rate schedules with warmup."""
import math

import keras
from keras import ops


def _check(name, value, rule, ok):
    # `not ok(value)` rejects NaN as well: every comparison with NaN is False.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise ValueError(f"`{name}` must be {rule}. Received: {name}={value!r}")


def _check_positive(**values):
    for name, value in values.items():
        _check(name, value, "positive", lambda v: 0 < v < math.inf)


@keras.saving.register_keras_serializable(package="keras_attn")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The paper's schedule: ``scale * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)``,
    ``t = max(step, 1)``: linear warmup, then inverse square-root decay.

    Args:
        d_model: model width. warmup_steps: steps of linear warmup. scale: multiplier.

    Example:
        >>> keras.optimizers.Adam(NoamSchedule(256, 4000), beta_1=0.9, beta_2=0.98, epsilon=1e-9)

    References: Vaswani et al. 2017, section 5.3.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        _check_positive(d_model=d_model, warmup_steps=warmup_steps, scale=scale)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        t = ops.maximum(ops.cast(step, "float32"), 1.0)
        return (self.scale * self.d_model ** -0.5
                * ops.minimum(ops.rsqrt(t), t * self.warmup_steps ** -1.5))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_attn")
class WarmupCosineDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to ``peak_lr``, then cosine decay to ``alpha * peak_lr``, then constant.

    Args:
        peak_lr: rate at the end of warmup. warmup_steps: steps of warmup (>= 1).
        decay_steps: length of the cosine. alpha: final fraction of ``peak_lr``.

    Example:
        >>> WarmupCosineDecay(1e-3, warmup_steps=500, decay_steps=10_000)
    """

    def __init__(self, peak_lr, warmup_steps, decay_steps, alpha=0.0):
        _check_positive(peak_lr=peak_lr, warmup_steps=warmup_steps, decay_steps=decay_steps)
        _check("alpha", alpha, "in [0, 1]", lambda v: 0 <= v <= 1)
        self.peak_lr = peak_lr
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        self.alpha = alpha

    def __call__(self, step):
        t = ops.maximum(ops.cast(step, "float32"), 1.0)
        warm = self.peak_lr * t / self.warmup_steps
        progress = ops.clip((t - self.warmup_steps) / self.decay_steps, 0.0, 1.0)
        cosine = 0.5 * (1.0 + ops.cos(math.pi * progress))
        decayed = self.peak_lr * (self.alpha + (1.0 - self.alpha) * cosine)
        return ops.where(t <= self.warmup_steps, warm, decayed)

    def get_config(self):
        return {"peak_lr": self.peak_lr, "warmup_steps": self.warmup_steps,
                "decay_steps": self.decay_steps, "alpha": self.alpha}


@keras.saving.register_keras_serializable(package="keras_attn")
class BudgetSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warmup, then linear decay to a floor, over a training budget measured in time.

    The clock is ``progress``, a non-trainable scalar variable holding the fraction of the
    training time spent, set before every step by
    :class:`keras_attn.training.budget.BudgetClock` (not in the config). With
    ``p = clip(progress, 0, 1)``: ``lr = peak_lr * max(p, 1e-3) / warmup`` while
    ``p < warmup``, then ``peak_lr * (alpha + (1 - alpha) * (1 - p) / (1 - warmup))``.

    Args:
        peak_lr: rate at the end of warmup. warmup: fraction of the budget spent warming
            up, in ``(0, 1)``. alpha: the floor, as a fraction of ``peak_lr``, in ``[0, 1]``.

    Example:
        >>> schedule = BudgetSchedule(1e-3, warmup=0.1)
        >>> schedule.progress.assign(0.5)  # half the budget spent

    References: Li, Yumer and Ramanan, "Budgeted Training", ICLR 2020.
    """

    def __init__(self, peak_lr, warmup=0.1, alpha=0.0):
        _check_positive(peak_lr=peak_lr)
        _check("warmup", warmup, "in (0, 1)", lambda v: 0 < v < 1)
        _check("alpha", alpha, "in [0, 1]", lambda v: 0 <= v <= 1)
        self.peak_lr = peak_lr
        self.warmup = warmup
        self.alpha = alpha
        self.progress = keras.Variable(0.0, dtype="float32", trainable=False,
                                       name="budget_progress")

    def rate(self, p):
        """The rate at progress ``p`` (a float or tensor); ``__call__`` reads ``progress``."""
        p = ops.clip(ops.cast(p, "float32"), 0.0, 1.0)
        warm = self.peak_lr * ops.maximum(p, 1e-3) / self.warmup
        decay = self.peak_lr * (self.alpha + (1.0 - self.alpha)
                                * (1.0 - p) / (1.0 - self.warmup))
        return ops.where(p < self.warmup, warm, decay)

    def __call__(self, step):
        del step  # the clock is the time spent, not the step count
        return self.rate(self.progress)

    def get_config(self):
        return {"peak_lr": self.peak_lr, "warmup": self.warmup, "alpha": self.alpha}
