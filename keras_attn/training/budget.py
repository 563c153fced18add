"""Training for a time budget (``keras-attn train --time-budget 60m``, counted from the
command's start): training gets the budget less a reserve (:func:`reserve_seconds`) for
choosing the weights, evaluating, calibrating and exporting, and that work is sized to the
time left (:class:`AfterTraining`). :class:`BudgetClock` drives :class:`BudgetSchedule`'s
progress and stops training in time; the time spent is saved with every backup
(``budget.json``), so a resumed run continues the same schedule.
"""
import collections
import dataclasses
import os
import sys
import time

import keras
import numpy as np

from keras_attn.core import runs
from keras_attn.core.config import format_duration

# Steps per "epoch" of a budgeted run (backup, budget state, CSV row, snapshot).
EPOCH_STEPS = 250


# The work after training in seconds (docs/budget.md, "The work after training"): "fixed"
# (choosing the weights, model.keras, the first trace), per test sentence, per validation
# sentence of the calibrator, the SavedModel, one quantization's TFLite files.
COSTS = {"fixed": 25.0, "test": 0.008, "valid": 0.01, "saved_model": 70.0,
         "float32": 140.0, "int8": 140.0}
QUANTIZATIONS = ("float32", "int8")
SAFETY = 1.1  # the reserve is the estimate times this (the work runs slower beside other)
# The reserve's largest share of the budget: training (startup included) keeps >= 70 %,
# unless the least work after it (the SavedModel, 200 + 200 sentences) needs more.
MAX_RESERVE_SHARE = 0.3
MIN_SENTENCES = 200  # the fewest test and validation sentences a short budget keeps


@dataclasses.dataclass(frozen=True)
class Work:
    """What a budgeted run does after training (or what is left of it).

    Args:
        test: test sentences decoded for the metrics. valid: validation sentences the
            calibrator is fitted on. quantizations: the TFLite variants exported beside the
            SavedModel. fixed: choosing the weights, model.keras and the first trace still to
            do. saved_model: the SavedModel is exported (implied by any quantization).
    """

    test: int
    valid: int
    quantizations: tuple = ()
    fixed: bool = True
    saved_model: bool = False

    def seconds(self, costs=None):
        """The estimated seconds (:data:`COSTS`)."""
        costs = costs or COSTS
        export = ((costs["saved_model"] if self.quantizations or self.saved_model else 0.0)
                  + sum(costs[q] for q in self.quantizations))
        return (costs["fixed"] * self.fixed + costs["test"] * self.test
                + costs["valid"] * self.valid + export)


def plan(seconds, num_test, num_valid, export=True, fixed=True, costs=None):
    """The most :class:`Work` whose estimated cost fits ``seconds``.

    Everything when it fits; else the int8 files go first, then the test and validation
    sentences are cut in the same proportion down to :data:`MIN_SENTENCES`, then the float32
    files. A run with export always gets its SavedModel.

    Example:
        >>> plan(300.0, 2000, 2000)   # an hour's reserve, less its margin: no int8 files
        Work(test=2000, valid=2000, quantizations=('float32',), fixed=True, saved_model=True)
        >>> plan(95.0, 2000, 2000)    # under a 5-minute budget's: the SavedModel alone
        Work(test=200, valid=200, quantizations=(), fixed=True, saved_model=True)
    """
    quantizations = QUANTIZATIONS if export else ()
    everything = Work(num_test, num_valid, quantizations, fixed, export)
    if everything.seconds(costs) <= seconds:
        return everything
    floor = Work(min(num_test, MIN_SENTENCES), min(num_valid, MIN_SENTENCES),
                 quantizations[:1], fixed, export)
    if floor.seconds(costs) > seconds:  # not even the float32 files: the SavedModel alone
        floor = dataclasses.replace(floor, quantizations=())
    kept = floor.quantizations
    extra = Work(num_test, num_valid, kept, fixed, export).seconds(costs) - floor.seconds(costs)
    share = min(max((seconds - floor.seconds(costs)) / extra, 0.0), 1.0) if extra > 0 else 0.0
    return Work(floor.test + int(share * (num_test - floor.test)),
                floor.valid + int(share * (num_valid - floor.valid)), kept, fixed, export)


def reserve_seconds(budget, export=True, num_test=2000, num_valid=2000):
    """Seconds kept back from training for the work after it: :data:`SAFETY` times the estimate
    with the float32 files, at least 5 % of ``budget`` and at most :data:`MAX_RESERVE_SHARE`,
    but never less than the estimate of the least work :func:`plan` keeps.
    """
    everything = Work(num_test, num_valid, QUANTIZATIONS[:1] if export else (), True, export)
    least = Work(min(num_test, MIN_SENTENCES), min(num_valid, MIN_SENTENCES), (), True, export)
    return max(min(MAX_RESERVE_SHARE * budget, max(SAFETY * everything.seconds(),
                                                   0.05 * budget)), least.seconds())


class AfterTraining:
    """Sizes each step after training to the time left before ``deadline``.

    Before each step the rest is planned again (:func:`plan`) for the time left divided by how
    much slower the steps so far ran than their estimate (at least 1).

    Args:
        deadline: ``clock()`` value when the command should end.
        num_test, num_valid: sentences of the test and validation splits.
        export: whether the run is exported after. clock: monotonic seconds.

    Example:
        >>> after = AfterTraining(start + budget, 2000, 2000)  # as training ends
        >>> n = after.test_sentences()        # once the weights are chosen and saved
        >>> m = after.valid_sentences()       # after the evaluation
        >>> q = after.quantizations()         # after the calibration
    """

    def __init__(self, deadline, num_test, num_valid, export=True, clock=time.monotonic):
        self.deadline = deadline
        self.num_test, self.num_valid, self.export = num_test, num_valid, export
        self.clock = clock
        self.began = clock()
        self.estimated = COSTS["fixed"]  # the estimate of the steps done so far
        self.chosen = {}

    def slowness(self):
        """Measured over estimated seconds of the steps so far (at least 1)."""
        return max((self.clock() - self.began) / self.estimated, 1.0)

    def _plan(self, test, valid):
        self.chosen["slowness"] = round(self.slowness(), 2)
        left = (self.deadline - self.clock()) / self.slowness()
        return plan(left, test, valid, self.export, fixed=False)

    def _sentences(self, split, work):
        n = getattr(work, split)
        self.estimated += COSTS[split] * n
        self.chosen[f"{split}_sentences"] = n
        return n

    def test_sentences(self):
        return self._sentences("test", self._plan(self.num_test, self.num_valid))

    def valid_sentences(self):
        return self._sentences("valid", self._plan(0, self.num_valid))

    def quantizations(self):
        q = self._plan(0, 0).quantizations
        self.chosen["quantizations"] = list(q)
        return q


class BudgetClock(keras.callbacks.Callback):
    """Sets ``schedule.progress`` to the fraction of ``train_seconds`` spent before every step,
    and stops training when the next step would end past it.

    Args:
        schedule: a :class:`keras_attn.schedules.BudgetSchedule`.
        train_seconds: the training part of the budget.
        start: ``clock()`` when the command started. elapsed_before: seconds spent by
            earlier processes of a resumed run.
        state_path: where ``{"elapsed", "train_seconds", ...}`` is written at every epoch end.
        clock: a monotonic clock in seconds.
    """

    def __init__(self, schedule, train_seconds, start, elapsed_before=0.0, state_path=None,
                 clock=time.monotonic):
        super().__init__()
        self.schedule = schedule
        self.train_seconds = float(train_seconds)
        self.start = start
        self.elapsed_before = float(elapsed_before)
        self.state_path = state_path
        self.clock = clock
        self.step_seconds = None  # a running mean of the time between steps
        self._last_end = None

    @classmethod
    def from_run_dir(cls, run_dir, schedule, time_budget, start, reserve=None, log=print):
        """The clock of a budgeted run in ``run_dir`` (it writes ``budget.json`` there).

        A resumed run (``budget.json`` and the backup both there) continues from the training
        time saved with its backup; otherwise training runs until ``time_budget`` (seconds for
        the whole command) less ``reserve`` (default: :func:`reserve_seconds`) has passed since
        ``start`` (``time.monotonic()``). ``log`` gets one line saying how long training runs.

        Example:
            >>> clock = BudgetClock.from_run_dir("runs/x", schedule, 3600, time.monotonic())
            >>> model.fit(ds.repeat(), epochs=10**4, steps_per_epoch=EPOCH_STEPS, callbacks=[
            ...     keras.callbacks.BackupAndRestore("runs/x/backup"), clock])
        """
        p = runs.paths(run_dir)
        if os.path.exists(p["budget"]) and os.path.exists(p["backup"]):
            state = runs.read_json(p["budget"])
            elapsed_before, train_seconds = state["elapsed"], state["train_seconds"]
            log(f"time budget: resuming at {format_duration(elapsed_before)} of "
                f"{format_duration(train_seconds)} training time")
        else:
            if reserve is None:
                reserve = reserve_seconds(time_budget)
            elapsed_before, train_seconds = 0.0, time_budget - reserve
            log(f"time budget: {format_duration(time_budget)}, training until "
                f"{format_duration(train_seconds)} (reserve {format_duration(reserve)} for "
                "choosing weights, evaluation and export)")
        return cls(schedule, train_seconds, start, elapsed_before, state_path=p["budget"])

    def elapsed(self):
        return self.elapsed_before + self.clock() - self.start

    def progress(self):
        return min(max(self.elapsed() / self.train_seconds, 0.0), 1.0)

    def on_train_begin(self, logs=None):
        self._last_end = None
        self.schedule.progress.assign(self.progress())

    def on_train_batch_begin(self, batch, logs=None):
        self.schedule.progress.assign(self.progress())

    def on_train_batch_end(self, batch, logs=None):
        now = self.clock()
        if self._last_end is not None:
            dt = now - self._last_end
            self.step_seconds = dt if self.step_seconds is None else (
                0.9 * self.step_seconds + 0.1 * dt)
        self._last_end = now
        if self.elapsed() + (self.step_seconds or 0.0) > self.train_seconds:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self._last_end = None  # validation and saving between epochs are not a step
        elapsed = self.elapsed()
        if elapsed + (self.step_seconds or 0.0) > self.train_seconds:
            self.model.stop_training = True
        if logs is not None:
            logs["learning_rate"] = float(self.schedule.rate(self.progress()))
            logs["step"] = optimizer_step(self.model.optimizer)
            logs["elapsed_seconds"] = round(elapsed, 1)
        if self.state_path:
            runs.write_json(self.state_path, {"elapsed": elapsed, "epoch": epoch + 1,
                                              "train_seconds": self.train_seconds})


def optimizer_step(optimizer):
    """The optimizer's step count as an int (also under ``tf.distribute``)."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


class ProgressLine(keras.callbacks.Callback):
    """A line every ``every`` seconds for logs: step, loss, learning rate, and with ``budget``
    the elapsed and remaining time.

    Args:
        every: seconds between lines. budget: a :class:`BudgetClock` (or None).
        total_seconds: the whole budget. stream: where to write (default stdout).
        clock: monotonic seconds.
    """

    def __init__(self, every=60.0, budget=None, total_seconds=None, stream=None,
                 clock=time.monotonic):
        super().__init__()
        self.every = every
        self.budget = budget
        self.total_seconds = total_seconds
        self.stream = stream
        self.clock = clock
        self._last = None

    def on_train_begin(self, logs=None):
        self._last = self.clock()

    def on_train_batch_end(self, batch, logs=None):
        now = self.clock()
        if now - self._last >= self.every:
            self._last = now
            self.write(logs)

    def write(self, logs=None):
        """Write one line now."""
        optimizer = self.model.optimizer
        parts = [f"step {optimizer_step(optimizer)}"]
        if logs and "loss" in logs:
            parts.append(f"loss {float(logs['loss']):.4f}")
        parts.append(f"lr {float(optimizer.learning_rate):.3g}")
        if self.budget is not None:
            elapsed = self.budget.elapsed()
            parts += [f"elapsed {format_duration(elapsed)}",
                      f"remaining {format_duration(max(self.total_seconds - elapsed, 0))}"]
        stream = self.stream or sys.stdout
        stream.write("  ".join(parts) + "\n")
        stream.flush()


class Snapshots(keras.callbacks.Callback):
    """The model's weights at the last ``keep`` epoch ends (numpy copies, in memory)."""

    def __init__(self, keep=3):
        super().__init__()
        self.weights = collections.deque(maxlen=keep)

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append([np.array(w) for w in self.model.get_weights()])

    def average(self):
        """The element-wise mean of the kept snapshots (Vaswani et al. 2017, section 6.1)."""
        return [np.mean(ws, axis=0) for ws in zip(*self.weights)]
