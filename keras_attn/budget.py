"""Training for a time budget: the clock that drives :class:`BudgetSchedule`, a progress
line for logs, and the average of the last checkpoints.

``keras-attn train --time-budget 60m`` (see :func:`keras_attn.training.train`): the budget
counts from the start of the command. Training gets the budget less a reserve for choosing
the weights, evaluating and exporting (:func:`reserve_seconds`); :class:`BudgetClock` sets
the schedule's progress from the time spent before every step and stops training when the
next step would not end inside the training time. The time spent is saved in the run
directory (``budget.json``) whenever the backup is saved, so a resumed run continues the
same schedule from the time of its backup.
"""
import collections
import os
import sys
import time

import keras
import numpy as np

from keras_attn import runs
from keras_attn.config import format_duration

# Steps per "epoch" of a budgeted run: how often the backup, the budget state, a
# training_log.csv row and a snapshot for averaging are written.
EPOCH_STEPS = 250


def reserve_seconds(budget, export=True):
    """Seconds kept back from training for choosing the weights, evaluation and export.

    Measured on a loaded 2-core CPU (Tatoeba, 10 M parameters, 2,000 test sentences,
    docs/budget.md): two validation passes, model.keras, greedy decoding and the
    SavedModel + TFLite export took 107 s after training, and fitting the confidence's
    calibrator (2,000 validation and 1,000 random sources decoded) 39 s more. They take
    about the same time whatever the budget, so a floor with a small share of the budget for
    slower machines; the 5 % the whole command may overrun absorbs a loaded machine.
    """
    if export:
        return min(0.5 * budget, max(200.0, 0.05 * budget))
    return min(0.5 * budget, max(130.0, 0.03 * budget))


class BudgetClock(keras.callbacks.Callback):
    """Sets ``schedule.progress`` to the fraction of ``train_seconds`` spent, before every
    step, and stops training when the next step would end past it.

    Args:
        schedule: a :class:`keras_attn.schedules.BudgetSchedule`.
        train_seconds: the training part of the budget (the budget less the reserve).
        start: ``clock()`` when the command started. elapsed_before: seconds spent by
            earlier processes of a resumed run (read from ``state_path``).
        state_path: where ``{"elapsed", "train_seconds", ...}`` is written at every epoch
            end (after ``BackupAndRestore`` has saved the same epoch).
        clock: a monotonic clock in seconds (a fake one in tests).
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
        """The clock of a budgeted run in ``run_dir``, continuing a resumed one.

        A new run trains until ``time_budget`` less ``reserve`` seconds have passed since
        ``start``. A resumed run (``run_dir/budget.json`` and the ``BackupAndRestore``
        folder ``run_dir/backup`` both there) continues from the training time saved with
        its backup, under the training time it was given; ``budget.json`` without a backup
        means training starts over, and so does the schedule.

        Args:
            run_dir: the run directory (:mod:`keras_attn.runs` layout); the clock writes
                its state to ``run_dir/budget.json`` at every epoch end.
            schedule: the :class:`keras_attn.schedules.BudgetSchedule` of the optimizer.
            time_budget: seconds for the whole command.
            start: ``time.monotonic()`` when the command started.
            reserve: seconds kept back for choosing the weights, evaluation and export
                (default: :func:`reserve_seconds` of ``time_budget``).
            log: called with one line saying how long training runs.
        Example:
            >>> schedule = BudgetSchedule(1e-3)
            >>> model.compile(keras.optimizers.Adam(schedule), loss="mse")
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
    """The optimizer's step count as an int. ``int(optimizer.iterations)`` fails under a
    ``tf.distribute`` strategy, where the variable is a ``MirroredVariable``."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


class ProgressLine(keras.callbacks.Callback):
    """A line every ``every`` seconds: step, loss, learning rate, and with ``budget`` the
    elapsed and remaining time of the budget. For logs, where Keras's bar writes nothing
    until the epoch ends.

    Args:
        every: seconds between lines. budget: a :class:`BudgetClock` (or None).
        total_seconds: the whole budget (the remaining time is counted to its end).
        stream: where to write (default stdout). clock: monotonic seconds.
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
        if now - self._last < self.every:
            return
        self._last = now
        self.write(logs)

    def line(self, logs):
        optimizer = self.model.optimizer
        parts = [f"step {optimizer_step(optimizer)}"]
        if logs and "loss" in logs:
            parts.append(f"loss {float(logs['loss']):.4f}")
        parts.append(f"lr {float(optimizer.learning_rate):.3g}")
        if self.budget is not None:
            elapsed = self.budget.elapsed()
            parts.append(f"elapsed {format_duration(elapsed)}")
            parts.append(f"remaining {format_duration(max(self.total_seconds - elapsed, 0))}")
        return "  ".join(parts)

    def write(self, logs=None):
        stream = self.stream or sys.stdout
        stream.write(self.line(logs) + "\n")
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
