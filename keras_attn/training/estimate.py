"""The work after a budgeted run's training, estimated on the machine that runs it.

:func:`trace_probe` (before training) and the mean training step (after
:data:`REPLAN_STEP` steps) are the run's own measures of its machine; :class:`Costs` turns
them into seconds of each step after training (:data:`UNIT_COSTS`); :func:`reserve_seconds`
is what training leaves for them, :func:`plan` the most of them that fits a time, and
:class:`AfterTraining` plans each again from what the steps before it took.
"""
import dataclasses
import time

import keras

from keras_attn.core.config import format_duration

# The work after training in the units a run measures of itself, on its machine
# (docs/budget.md, "The work after training"): ``probe``, the seconds :func:`trace_probe`
# took to trace the model's forward pass (graph building, as the export's tracing, saving
# and converting: one core's speed); ``step``, a mean training step (matrix products, as
# validation passes in the training's precision); ``decode``, a float32 step (a bfloat16
# training step times BFLOAT16_STEP_SPEEDUP: decoding runs in float32). Each entry: (its
# unit, how many of it). Measured with the recipe's model on the 2-core AMD EPYC (see
# docs/budget.md); a machine's work is sized in its own units, not in another's seconds.
UNIT_COSTS = {
    # model.keras, the float32 model, the first traces of the evaluation and the calibrator
    "fixed": ("probe", 20.0),
    "valid_batch": ("step", 0.45),  # a validation batch (choosing the weights: two passes)
    "test": ("decode", 0.045),  # a test sentence decoded (greedy, batch 256)
    "valid": ("decode", 0.065),  # a validation sentence of the calibrator (and its noise)
    "saved_model": ("probe", 50.0),  # the SavedModel: traced, saved, loaded, checked
    "float32": ("probe", 35.0),  # the float32 TFLite files beside it (converted in a worker)
    "int8": ("probe", 15.0),    # the int8 ones
}
# How much faster a bfloat16 training step is than float32 on a CPU that has bfloat16 (a
# decoding step runs in float32): pair 11 of docs/budget.md measured 1.57.
BFLOAT16_STEP_SPEEDUP = 1.5
# trace_probe's seconds where it cannot run (another backend): the recipe's on the 2-core
# AMD EPYC took 0.6 s idle, 0.9 s loaded.
PROBE_DEFAULT = 1.0
QUANTIZATIONS = ("float32", "int8")
SAFETY = 1.1  # the reserve is the estimate times this (the work runs slower beside other)
# The reserve's largest share of the budget: training (startup included) keeps >= 75 %,
# unless the least work after it (the SavedModel, 200 + 200 sentences) needs more.
MAX_RESERVE_SHARE = 0.25
MIN_SENTENCES = 200  # the fewest test and validation sentences a short budget keeps
REPLAN_STEP = 20  # the training step after which the reserve is sized from the step time


@dataclasses.dataclass(frozen=True)
class Costs:
    """Seconds of the work after training on this machine (:data:`UNIT_COSTS` in the units
    the run measured).

    Args:
        fixed: choosing the weights (two validation passes), model.keras, the first trace.
        test, valid: per test sentence decoded, per validation sentence of the calibrator.
        saved_model: the SavedModel. float32, int8: each quantization's TFLite files.

    Example:
        >>> costs = Costs.measured(probe=1.5, step=0.2, valid_batches=45)
        >>> round(costs.saved_model)
        60
    """

    fixed: float
    test: float
    valid: float
    saved_model: float
    float32: float
    int8: float

    @classmethod
    def measured(cls, probe, step, valid_batches, bfloat16=False):
        """From :func:`trace_probe`'s ``probe`` seconds, a mean training ``step`` (in
        bfloat16: ``bfloat16``) and the validation split's ``valid_batches``."""
        units = {"probe": float(probe), "step": float(step),
                 "decode": float(step) * (BFLOAT16_STEP_SPEEDUP if bfloat16 else 1.0)}
        c = {name: units[unit] * n for name, (unit, n) in UNIT_COSTS.items()}
        return cls(fixed=c["fixed"] + 2 * valid_batches * c["valid_batch"], test=c["test"],
                   valid=c["valid"], saved_model=c["saved_model"], float32=c["float32"],
                   int8=c["int8"])

    def scaled(self, names, factor):
        """These costs, ``names`` times ``factor``."""
        return dataclasses.replace(self, **{n: getattr(self, n) * factor for n in names})


def trace_probe(model, repeats=3):
    """Seconds this process takes to trace ``model``'s forward pass into a graph (nothing
    runs), the median of ``repeats`` traces: the unit of the export's cost on this machine
    (TensorFlow; None elsewhere)."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    spec = {name: tf.TensorSpec([None, None], tf.int32) for name in ("source", "target_in")}
    seconds = []
    for _ in range(repeats):
        began = time.monotonic()
        tf.function(lambda x: model(x, training=False), autograph=False).get_concrete_function(
            spec)
        seconds.append(time.monotonic() - began)
    return sorted(seconds)[len(seconds) // 2]


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

    def seconds(self, costs):
        """The estimated seconds (a :class:`Costs`)."""
        export = ((costs.saved_model if self.quantizations or self.saved_model else 0.0)
                  + sum(getattr(costs, q) for q in self.quantizations))
        return (costs.fixed * self.fixed + costs.test * self.test
                + costs.valid * self.valid + export)


def plan(seconds, num_test, num_valid, costs, export=True, fixed=True,
         quantizations=QUANTIZATIONS):
    """The most :class:`Work` whose estimated cost (``costs``) fits ``seconds``.

    Everything when it fits; else the int8 files go first, then the test and validation
    sentences are cut in the same proportion down to :data:`MIN_SENTENCES`, then the float32
    files. A run with export always gets its SavedModel. ``quantizations``: those asked.

    Example:
        >>> costs = Costs(25.0, 0.008, 0.01, 70.0, 140.0, 140.0)
        >>> plan(300.0, 2000, 2000, costs)   # no time for the int8 files
        Work(test=2000, valid=2000, quantizations=('float32',), fixed=True, saved_model=True)
        >>> plan(95.0, 2000, 2000, costs)    # the SavedModel alone
        Work(test=200, valid=200, quantizations=(), fixed=True, saved_model=True)
    """
    quantizations = tuple(quantizations) if export else ()
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


def reserve_seconds(budget, costs, export=True, num_test=2000, num_valid=2000,
                    quantizations=QUANTIZATIONS):
    """Seconds kept back from training for the work after it: :data:`SAFETY` times the
    estimate (``costs``) with the float32 files, at least 5 % of ``budget`` and at most
    :data:`MAX_RESERVE_SHARE`, but never less than the estimate of the least work
    :func:`plan` keeps."""
    quantizations = tuple(quantizations)[:1] if export else ()
    everything = Work(num_test, num_valid, quantizations, True, export)
    least = Work(min(num_test, MIN_SENTENCES), min(num_valid, MIN_SENTENCES), (), True, export)
    return max(min(MAX_RESERVE_SHARE * budget, max(SAFETY * everything.seconds(costs),
                                                   0.05 * budget)),
               SAFETY * least.seconds(costs))


class AfterTraining:
    """Sizes each step after training to the time left before ``deadline``.

    Before each step the rest is planned again (:func:`plan`) for the time left divided by how
    much slower the steps so far ran than their estimate (at least 1) and by :data:`SAFETY`
    (the margin the reserve kept); the evaluation reports
    what its decoding took (:meth:`decoded`), which re-scales the decoding costs.

    Args:
        deadline: ``clock()`` value when the command should end.
        num_test, num_valid: sentences of the test and validation splits.
        costs: the :class:`Costs` measured during the run.
        export: whether the run is exported after. quantizations: the TFLite variants asked.
        clock: monotonic seconds.

    Example:
        >>> after = AfterTraining(start + budget, 2000, 2000, costs)  # as training ends
        >>> n = after.test_sentences()        # once the weights are chosen and saved
        >>> scores = evaluate(..., deadline=after.evaluation_deadline())
        >>> after.decoded(scores["num_sentences"], scores["decode_seconds"])
        >>> m = after.valid_sentences()       # after the evaluation
        >>> q = after.quantizations()         # after the calibration
    """

    def __init__(self, deadline, num_test, num_valid, costs, export=True,
                 quantizations=QUANTIZATIONS, clock=time.monotonic):
        self.deadline = deadline
        self.num_test, self.num_valid, self.export = num_test, num_valid, export
        self.costs, self.asked = costs, tuple(quantizations)
        self.clock = clock
        self.began = clock()
        self.estimated = costs.fixed  # the estimate of the steps done so far
        self.chosen = {}

    def slowness(self):
        """Measured over estimated seconds of the steps so far (at least 1)."""
        return max((self.clock() - self.began) / self.estimated, 1.0)

    def _plan(self, test, valid):
        self.chosen["slowness"] = round(self.slowness(), 2)
        # The margin the reserve has: what is planned is what fits with it.
        left = (self.deadline - self.clock()) / (self.slowness() * SAFETY)
        return plan(left, test, valid, self.costs, self.export, fixed=False,
                    quantizations=self.asked)

    def _sentences(self, split, work):
        n = getattr(work, split)
        self.estimated += getattr(self.costs, split) * n
        self.chosen[f"{split}_sentences"] = n
        return n

    def test_sentences(self):
        return self._sentences("test", self._plan(self.num_test, self.num_valid))

    def evaluation_deadline(self):
        """When the evaluation should stop decoding: the deadline less the estimate of the
        least work after it (200 validation sentences, the SavedModel), with its margin."""
        rest = Work(0, min(self.num_valid, MIN_SENTENCES), (), False, self.export)
        return self.deadline - SAFETY * self.slowness() * rest.seconds(self.costs)

    def decoded(self, sentences, seconds):
        """The evaluation decoded ``sentences`` (its deadline may have cut the plan) in
        ``seconds``: the decoding costs follow what it measured."""
        planned = self.costs.test * self.chosen.get("test_sentences", 0)
        if sentences and seconds > 0:
            self.costs = self.costs.scaled(("test", "valid"),
                                           seconds / (self.costs.test * sentences))
        self.estimated += self.costs.test * sentences - planned
        self.chosen["test_sentences"] = sentences

    def valid_sentences(self):
        return self._sentences("valid", self._plan(0, self.num_valid))

    def quantizations(self):
        q = self._plan(0, 0).quantizations
        self.chosen["quantizations"] = list(q)
        return q


class Estimator:
    """What a budgeted run measured of its machine, and the work after training it sizes.

    Args:
        probe: :func:`trace_probe`'s seconds (None: not measured, as on JAX or PyTorch; the
            export's costs are then those of :data:`PROBE_DEFAULT`).
        valid_batches: the validation split's batches. num_test, num_valid: its sentences.
        time_budget: the whole command's seconds. bfloat16: training steps run in bfloat16.
        export, quantizations: what is exported after training.
        log: gets a line when the reserve is sized.

    Example:
        >>> estimator = Estimator(trace_probe(model), 45, 2000, 2823, 300.0)
        >>> clock = BudgetClock.from_run_dir(run, schedule, 300.0, start,
        ...                                  replan=estimator.reserve_for)
        >>> after = estimator.after_training(start + 300.0, clock.step_seconds)
    """

    def __init__(self, probe, valid_batches, num_test, num_valid, time_budget, bfloat16=False,
                 export=True, quantizations=QUANTIZATIONS, log=print):
        self.probe = PROBE_DEFAULT if probe is None else probe
        self.valid_batches, self.num_test, self.num_valid = valid_batches, num_test, num_valid
        self.time_budget, self.bfloat16 = time_budget, bfloat16
        self.export, self.quantizations = export, tuple(quantizations)
        self.log = log

    def costs(self, step_seconds):
        return Costs.measured(self.probe, step_seconds or self.probe, self.valid_batches,
                              self.bfloat16)

    def reserve_for(self, step_seconds):
        """The reserve (seconds) for a mean training step of ``step_seconds``."""
        reserve = reserve_seconds(self.time_budget, self.costs(step_seconds), self.export,
                                  self.num_test, self.num_valid, self.quantizations)
        if reserve >= self.time_budget:
            self.log(f"time budget: {format_duration(self.time_budget)} is shorter than the work "
                     f"after training takes on this machine (about {format_duration(reserve)}, "
                     f"sized from a step of {step_seconds:.3f} s and a trace of {self.probe:.2f} s):"
                     f" training stops now; give a --time-budget of at least "
                     f"{format_duration(2 * reserve)}"
                     + (", or export less (--export saved_model, --no-export)"
                        if self.export else ""))
            return reserve
        self.log(f"time budget: training until {format_duration(self.time_budget - reserve)} (reserve "
                 f"{format_duration(reserve)} for choosing weights, evaluation and export, sized from "
                 f"a step of {step_seconds:.3f} s and a trace of {self.probe:.2f} s)")
        return reserve

    def after_training(self, deadline, step_seconds, clock=time.monotonic):
        """The :class:`AfterTraining` of the run's end, from its last mean step."""
        return AfterTraining(deadline, self.num_test, self.num_valid,
                             self.costs(step_seconds), self.export, self.quantizations, clock)
