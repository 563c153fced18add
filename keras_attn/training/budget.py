"""Training for a time budget (``keras-attn train --time-budget 60m``, counted from the
command's start): training gets the budget less a reserve (:func:`reserve_seconds`) for
choosing the weights, evaluating, calibrating and exporting, and that work is sized to the
time left (:class:`AfterTraining`). :class:`BudgetClock` drives :class:`BudgetSchedule`'s
progress and stops training in time; the time spent is saved with every backup
(``budget.json``), so a resumed run continues the same schedule.
"""
import collections
import functools
import os
import sys
import time

import keras
import numpy as np

from keras_attn.core import runs
from keras_attn.core.config import format_duration
from keras_attn.training.estimate import (  # noqa: F401  (budget.X: the names docs use)
    BFLOAT16_STEP_SPEEDUP, MAX_RESERVE_SHARE, MIN_SENTENCES, QUANTIZATIONS, REPLAN_STEP,
    SAFETY, UNIT_COSTS, AfterTraining, Costs, Estimator, Work, plan, reserve_seconds,
    trace_probe)

# Steps per "epoch" of a budgeted run (backup, budget state, CSV row, snapshot).
EPOCH_STEPS = 250


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
        replan: ``step_seconds -> train_seconds``, called once after :data:`REPLAN_STEP`
            steps with their mean time (the reserve sized from it); None: ``train_seconds``
            holds.
    """

    def __init__(self, schedule, train_seconds, start, elapsed_before=0.0, state_path=None,
                 clock=time.monotonic, replan=None):
        super().__init__()
        self.schedule = schedule
        self.train_seconds = float(train_seconds)
        self.start = start
        self.elapsed_before = float(elapsed_before)
        self.state_path = state_path
        self.clock = clock
        self.replan = replan
        self.step_seconds = None  # a running mean of the time between steps
        self._last_end = None
        self._steps = 0  # steps of this process

    @classmethod
    def from_run_dir(cls, run_dir, schedule, time_budget, start, reserve=None, log=print,
                     replan=None):
        """The clock of a budgeted run in ``run_dir`` (it writes ``budget.json`` there).

        A resumed run (``budget.json`` and the backup both there) continues from the training
        time saved with its backup; otherwise training runs until ``time_budget`` (seconds for
        the whole command) less ``reserve`` (default: :data:`MAX_RESERVE_SHARE` of it) has
        passed since ``start`` (``time.monotonic()``), and ``replan`` (``step_seconds ->
        reserve``) sizes the reserve again after :data:`REPLAN_STEP` steps. ``log`` gets a
        line saying how long training runs.

        Example:
            >>> clock = BudgetClock.from_run_dir("runs/x", schedule, 3600, time.monotonic())
            >>> model.fit(ds.repeat(), epochs=10**4, steps_per_epoch=EPOCH_STEPS, callbacks=[
            ...     keras.callbacks.BackupAndRestore("runs/x/backup"), clock])
        """
        p = runs.paths(run_dir)
        if os.path.exists(p["budget"]) and os.path.exists(p["backup"]):
            state = runs.read_json(p["budget"])
            elapsed_before, train_seconds = state["elapsed"], state["train_seconds"]
            replan = None  # the process that started the run sized its reserve
            log(f"time budget: resuming at {format_duration(elapsed_before)} of "
                f"{format_duration(train_seconds)} training time")
        else:
            if reserve is None:
                reserve = MAX_RESERVE_SHARE * time_budget
            elapsed_before, train_seconds = 0.0, time_budget - reserve
            log(f"time budget: {format_duration(time_budget)}, training until "
                f"{format_duration(train_seconds)}" + (
                    f" for now (the reserve is sized after {REPLAN_STEP} steps)" if replan else
                    f" (reserve {format_duration(reserve)} for choosing weights, evaluation "
                    "and export)"))
            if replan is not None:
                replan = functools.partial(_train_seconds, time_budget, replan)
        return cls(schedule, train_seconds, start, elapsed_before, state_path=p["budget"],
                   replan=replan)

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
        self._steps += 1
        if self.replan is not None and self._steps >= REPLAN_STEP and self.step_seconds:
            self.train_seconds, self.replan = float(self.replan(self.step_seconds)), None
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


def _train_seconds(time_budget, reserve_for, step_seconds):
    return time_budget - reserve_for(step_seconds)


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
