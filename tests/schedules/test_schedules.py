"""NoamSchedule and WarmupCosineDecay against their formulas, written here from the paper /
the API contract, at the steps where the pieces meet."""
import math

import keras
import numpy as np
import pytest

from tests.support import layer_checks as lc
from keras_attn.schedules import NoamSchedule, WarmupCosineDecay

# float32 roundings of one rate (``terms`` of lc.tolerance). Noam: t**-0.5, warmup**-1.5,
# their product with t, d_model**-0.5 and two products (powers a few eps each, counted 2).
NOAM_TERMS = 8
# Warmup-cosine: t - warmup, / decay, times pi, cos (its argument's absolute error passes
# on), 1 + cos, the products with 0.5, (1 - alpha) and peak, + alpha * peak. Judged at the
# peak's scale: near the end 1 + cos(pi * progress) cancels to almost 0, and its error is
# relative to the terms, not to the small rate.
COSINE_TERMS = 10


def noam(step, d_model, warmup, scale):
    """Vaswani et al. 2017, eq. 3, with t = max(step, 1)."""
    t = max(step, 1)
    return scale * d_model ** -0.5 * min(t ** -0.5, t * warmup ** -1.5)


def warmup_cosine(step, peak, warmup, decay, alpha):
    t = max(step, 1)
    if t <= warmup:
        return peak * t / warmup
    progress = min((t - warmup) / decay, 1.0)
    return alpha * peak + (1 - alpha) * peak * 0.5 * (1 + math.cos(math.pi * progress))


def value(schedule, step):
    return float(keras.ops.convert_to_numpy(schedule(step)))


@pytest.mark.parametrize("d_model, warmup, scale", [(512, 4000, 1.0), (64, 200, 2.0),
                                                    (256, 1, 0.5)])
def test_noam_matches_formula(d_model, warmup, scale):
    schedule = NoamSchedule(d_model, warmup, scale)
    for step in [0, 1, 2, warmup // 2, warmup, warmup + 1, 10 * warmup]:
        lc.assert_close(value(schedule, step), noam(step, d_model, warmup, scale),
                        terms=NOAM_TERMS, err_msg=str(step))
    # Peak at the end of warmup; step 0 gets the same (positive) rate as step 1.
    assert value(schedule, 0) == value(schedule, 1) > 0
    peak = scale * d_model ** -0.5 * warmup ** -0.5
    lc.assert_close(value(schedule, warmup), peak, terms=NOAM_TERMS)
    lc.assert_close(value(schedule, 10 * warmup), peak / math.sqrt(10), terms=NOAM_TERMS)


def test_noam_known_values():
    """The paper's setting (d 512, warmup 4000): 7e-4 at the peak."""
    schedule = NoamSchedule(512, 4000)
    # 6.9877e-4 has 5 significant figures: it is exact to half a unit in the last one
    peak = value(schedule, 4000)
    assert abs(peak - 6.9877e-4) <= 0.5e-8 + lc.tolerance(6.9877e-4, terms=NOAM_TERMS)
    lc.assert_close(value(schedule, 1), 512 ** -0.5 * 4000 ** -1.5, terms=NOAM_TERMS)


@pytest.mark.parametrize("alpha", [0.0, 0.1])
def test_warmup_cosine_matches_formula(alpha):
    peak, warmup, decay = 1e-3, 100, 1000
    schedule = WarmupCosineDecay(peak, warmup, decay, alpha)
    checkpoints = {0: peak / warmup, 1: peak / warmup, warmup // 2: peak / 2, warmup: peak,
                   warmup + decay // 2: peak * (alpha + (1 - alpha) / 2),
                   warmup + decay: alpha * peak, warmup + 3 * decay: alpha * peak}
    tol = {"terms": COSINE_TERMS, "scale": peak}
    for step, expected in checkpoints.items():
        lc.assert_close(value(schedule, step), expected, err_msg=str(step), **tol)
        lc.assert_close(value(schedule, step), warmup_cosine(step, peak, warmup, decay, alpha),
                        err_msg=str(step), **tol)
    for step in [warmup + 1, warmup + 250, warmup + 999]:
        lc.assert_close(value(schedule, step), warmup_cosine(step, peak, warmup, decay, alpha),
                        err_msg=str(step), **tol)


@pytest.mark.parametrize("schedule", [NoamSchedule(64, 10, 2.0),
                                      WarmupCosineDecay(1e-3, 10, 50, 0.1)],
                         ids=["noam", "cosine"])
def test_schedule_in_an_optimizer(schedule):
    """Keras hands the schedule the optimizer's iteration count (an int64 variable)."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(schedule), "mse")
    x, y = np.ones((4, 3), "float32"), np.zeros((4, 1), "float32")
    for _ in range(3):
        model.train_on_batch(x, y)
    assert int(model.optimizer.iterations) == 3
    terms = max(NOAM_TERMS, COSINE_TERMS)  # the same float32 formula, evaluated twice
    lc.assert_close(float(model.optimizer.learning_rate), value(schedule, 3), terms=terms)
    lc.assert_close(value(schedule, np.int64(7)), value(schedule, 7.0), terms=terms)


@pytest.mark.parametrize("schedule", [NoamSchedule(64, 200, 2.0),
                                      WarmupCosineDecay(3e-4, 50, 500, 0.05)],
                         ids=["noam", "cosine"])
def test_config_round_trip(schedule):
    config = schedule.get_config()
    clone = type(schedule).from_config(config)
    assert clone.get_config() == config
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule))
    assert type(restored) is type(schedule) and restored.get_config() == config
    assert keras.saving.get_registered_name(type(schedule)) == (
        f"keras_attn>{type(schedule).__name__}")
    for step in [1, 50, 200, 5000]:
        assert value(restored, step) == value(schedule, step)


@pytest.mark.parametrize("kwargs, arg", [
    ({"d_model": 0}, "d_model"), ({"d_model": -64}, "d_model"),
    ({"d_model": float("nan")}, "d_model"), ({"d_model": "512"}, "d_model"),
    ({"d_model": 64, "warmup_steps": 0}, "warmup_steps"),
    ({"d_model": 64, "scale": 0.0}, "scale"), ({"d_model": 64, "scale": -1.0}, "scale"),
])
def test_noam_bad_arguments(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        NoamSchedule(**kwargs)


@pytest.mark.parametrize("kwargs, arg", [
    ({"peak_lr": 0.0}, "peak_lr"), ({"peak_lr": float("nan")}, "peak_lr"),
    ({"warmup_steps": 0}, "warmup_steps"), ({"decay_steps": -5}, "decay_steps"),
    ({"alpha": -0.1}, "alpha"), ({"alpha": 1.5}, "alpha"), ({"alpha": "0.1"}, "alpha"),
    ({"alpha": float("nan")}, "alpha"),
])
def test_warmup_cosine_bad_arguments(kwargs, arg):
    args = {"peak_lr": 1e-3, "warmup_steps": 10, "decay_steps": 100, **kwargs}
    with pytest.raises(ValueError, match=arg):
        WarmupCosineDecay(**args)


def test_rates_are_finite_and_positive_everywhere():
    steps = np.array([0, 1, 3, 10, 99, 100, 101, 1000, 10 ** 6])
    for schedule in [NoamSchedule(8, 100), WarmupCosineDecay(1e-3, 100, 500, 0.0)]:
        rates = np.array([value(schedule, int(s)) for s in steps])
        assert np.all(np.isfinite(rates)) and np.all(rates >= 0)
    assert np.all(np.array([value(NoamSchedule(8, 100), int(s)) for s in steps]) > 0)
