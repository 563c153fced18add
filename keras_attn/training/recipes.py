"""The main job: build data and tokenizers, train with a warmup schedule, evaluate.

``keras-attn train`` (:mod:`keras_attn.cli`) calls :func:`train`. Re-running the same
command after an interruption resumes from the last saved epoch (``BackupAndRestore``),
reusing the run directory's vocabularies and config, so it sees the same data.
"""
import dataclasses
import json
import os
import sys
import time

import keras
import tensorflow as tf

from keras_attn import data, schedules
from keras_attn.core import runs
from keras_attn.core.config import (  # noqa: F401 (training.TASK_DEFAULTS: a public name)
    TASK_DEFAULTS, TrainConfig, format_duration)
from keras_attn.data import load_splits  # training.load_splits: a public name
from keras_attn.models import build_model, float32_model
from keras_attn.text import subword
from keras_attn.text import tokenizers as text
from keras_attn.training import budget, losses, precision
from keras_attn.training.distribute import (DistributedFitModel, ReplicaMeanMaskedCrossentropy,
                                            make_strategy, worker_info)
from keras_attn.training.evaluation import evaluate


def _tokenizers(config, splits, run_paths, log=print):
    """The run's tokenizers, or new ones learned from the training split and saved.

    ``config.tokenizer``: ``"char"`` (dates), ``"sentencepiece"`` (raw text: case-folding
    source model, character-keeping target model) or ``"wordpiece"`` (D2L-normalised text).
    """
    try:
        return subword.run_tokenizers(os.path.dirname(run_paths["config"]))
    except FileNotFoundError:
        pass  # a new run: learn them
    sources = [s for s, _ in splits["train"]]
    targets = [t for _, t in splits["train"]]
    t0 = time.time()
    if config.tokenizer == "sentencepiece":
        protos = [subword.learn_sentencepiece(texts, config.vocab_size, normalization=norm)
                  for texts, norm in ((sources, "nmt_nfkc_cf"), (targets, "identity"))]
        for proto, key in zip(protos, ("src_model", "tgt_model")):
            subword.save_model(proto, run_paths[key])
        src_tok, tgt_tok = (subword.SentencePieceTokenizer(proto) for proto in protos)
    else:
        if config.tokenizer == "char":
            # Sources keep printable ASCII and French letters; targets need only theirs.
            vocabs = text.char_vocab(sources), text.char_vocab(targets, extra_chars="")
        else:
            vocabs = [text.learn_wordpiece_vocab(t, config.vocab_size) for t in (sources, targets)]
        for vocab, key in zip(vocabs, ("src_vocab", "tgt_vocab")):
            text.save_vocab(vocab, run_paths[key])
        src_tok, tgt_tok = (text.Tokenizer(vocab) for vocab in vocabs)
    log(f"{config.tokenizer} tokenizers: source {src_tok.vocab_size}, target "
        f"{tgt_tok.vocab_size} tokens ({time.time() - t0:.1f} s)")
    return src_tok, tgt_tok


# Budgeted runs: the share of the training time spent warming up, the snapshots averaged.
BUDGET_WARMUP = 0.1
BUDGET_AVERAGE = 3


def _schedule(config, steps_per_epoch):
    if config.time_budget:
        return schedules.BudgetSchedule(config.peak_lr, warmup=BUDGET_WARMUP)
    if config.schedule == "noam":
        return schedules.NoamSchedule(config.num_hiddens, config.warmup, config.lr_scale)
    if config.schedule == "cosine":
        total = config.steps or steps_per_epoch * config.epochs
        return schedules.WarmupCosineDecay(config.peak_lr, config.warmup,
                                           max(total - config.warmup, 1), alpha=0.05)
    raise ValueError(f"`schedule` must be 'noam' or 'cosine'. Received: {config.schedule!r}")


def _adam(schedule):
    return keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=1.0)


def compile_model(model, config, steps_per_epoch, optimizer=None):
    """Compile with the run's Adam, masked loss and accuracy (``optimizer``: reuse this one)."""
    if optimizer is None:
        optimizer = _adam(_schedule(config, steps_per_epoch))
    # Several replicas: the loss divided by their number (ReplicaMeanMaskedCrossentropy).
    loss_class = (ReplicaMeanMaskedCrossentropy
                  if tf.distribute.get_strategy().num_replicas_in_sync > 1
                  else losses.MaskedSparseCategoricalCrossentropy)
    model.compile(optimizer=optimizer, loss=loss_class(config.label_smoothing),
                  metrics=[losses.MaskedAccuracy()], jit_compile=config.jit_compile)
    return model


def _prepare_run_dir(config, run_dir):
    """Create the run directory, or check that a resumed run has the same options."""
    p = runs.paths(run_dir)
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot create the output directory {run_dir!r}: {e.strerror}") from None
    if not os.access(run_dir, os.W_OK):
        raise OSError(f"the output directory {run_dir!r} is not writable")
    if os.path.exists(p["config"]):
        old = TrainConfig.from_dict(runs.read_json(p["config"]))
        try:  # a run trained before its corpus path was stored absolute: read from here
            old = data.stored_corpus(old)
        except ValueError:  # it read KERAS_ATTN_DATA, unset now: the diff shows it
            pass
        old = dataclasses.asdict(old)
        diff = {k: (old.get(k), v) for k, v in dataclasses.asdict(config).items()
                if k not in TrainConfig.RESUMABLE and k not in ("src_vocab_size", "tgt_vocab_size")
                and old.get(k) != v}
        if diff:
            raise ValueError(
                f"{run_dir!r} holds a run with other options {diff}; use another --output "
                "or the same options to resume")
    return p


def _resolve_precision(config, run_dir, log):
    """Replace ``mixed_precision="auto"`` by the policy it picks here (a resumed run keeps the
    one its ``config.json`` holds) and log the choice."""
    given = config.mixed_precision
    stored = runs.paths(run_dir)["config"]
    if given == precision.AUTO and os.path.exists(stored):
        config.mixed_precision = runs.read_json(stored).get("mixed_precision", "")
        why = "auto: as the run being resumed"
    else:
        config.mixed_precision, why = precision.resolve(given)
    log(f"precision: {config.mixed_precision or 'float32'} ({why})")


def check_config(config):
    """Raise ValueError (naming the option and value) for options no run can use; called before
    anything is written, so a typo never leaves a run directory that refuses the fix.
    """
    def fail(name, rule):
        raise ValueError(f"`{name}` must be {rule}. Received: {name}={getattr(config, name)!r}")

    for name in ("num_hiddens", "ffn_num_hiddens", "num_heads", "num_layers", "batch_size",
                 "num_valid"):
        if getattr(config, name) < 1:
            fail(name, "a positive integer")
    if config.task == "dates":
        for name in ("num_train", "num_test"):
            if getattr(config, name) < 1:
                fail(name, "a positive integer for the dates task")
    if config.max_len < 2:
        fail("max_len", "at least 2 (a token and [END])")
    if config.steps < 0:
        fail("steps", ">= 0 (0: use epochs)")
    if not config.time_budget >= 0:
        fail("time_budget", ">= 0 seconds (0: use epochs or steps)")
    if config.time_budget and config.steps:
        fail("steps", "0 with a time budget (the budget decides when training ends)")
    if config.steps == 0 and config.epochs < 1:
        fail("epochs", "a positive integer (or give --steps)")
    for name in ("warmup", "num_train", "num_test", "vocab_size", "num_decoder_layers"):
        if getattr(config, name) < 0:
            fail(name, ">= 0")
    if not 0 <= config.label_smoothing < 1:
        fail("label_smoothing", "a float in [0, 1)")
    if config.schedule not in ("noam", "cosine"):
        fail("schedule", "'noam' or 'cosine'")
    if config.mixed_precision not in ("", "mixed_float16", "mixed_bfloat16", precision.AUTO):
        fail("mixed_precision", "'' (float32), 'mixed_float16', 'mixed_bfloat16' or 'auto'")
    config.check_languages()  # BCP 47 codes, a pair of two, columns holding both
    # The model's own checks (num_heads dividing num_hiddens, dropout, model name...).
    build_model({**dataclasses.asdict(config), "src_vocab_size": 8, "tgt_vocab_size": 8})


def train(config, run_dir, log=print, distribute="", cpu_devices=0, start=None,
          reserve=None, export=True, quantizations=budget.QUANTIZATIONS):
    """Train ``config`` into ``run_dir``; returns the metrics dict (also in metrics.json).

    With ``config.time_budget`` (seconds) training runs under
    :class:`schedules.BudgetSchedule` until the budget less a reserve has passed since
    ``start`` (``time.monotonic()``; default now): ``reserve`` seconds, or (default) the
    reserve :class:`budget.Estimator` sizes from a trace probe and the first steps' time. The
    last snapshots' average then replaces the final weights if its validation loss is lower,
    epochs are :data:`budget.EPOCH_STEPS` steps, and the work after training is sized to the
    time left (:class:`budget.AfterTraining`; ``export``: the caller exports after, the
    TFLite ``quantizations`` too).

    ``distribute``/``cpu_devices``: see :func:`make_strategy`; ``batch_size`` is global. In a
    multi-worker run only the chief writes ``run_dir``; the others back up to
    ``run_dir/.worker-<index>``, skip evaluation and return ``{"chief": False, "worker": i}``.
    """
    policy = keras.config.dtype_policy()
    try:
        return _train(config, run_dir, log, distribute, cpu_devices, start, reserve, export,
                      quantizations, policy)
    finally:  # the process's policy as it was, whether training ended or raised
        keras.config.set_dtype_policy(policy)


def _train(config, run_dir, log, distribute, cpu_devices, start, reserve, export,
           quantizations, policy):
    # First: the strategy must exist before TensorFlow creates any tensor or device.
    start = time.monotonic() if start is None else start
    strategy = make_strategy(distribute, cpu_devices)
    is_chief, worker_index = worker_info(strategy)
    _resolve_precision(config, run_dir, log)
    check_config(config)
    # The corpus's absolute path, so evaluate and calibrate read it from any folder.
    stored = data.stored_corpus(config)
    config.data, config.target_data = stored.data, stored.target_data
    keras.utils.set_random_seed(config.seed)
    if config.mixed_precision:
        keras.config.set_dtype_policy(config.mixed_precision)
    if not is_chief:
        run_dir = os.path.join(run_dir, f".worker-{worker_index}")
    p = _prepare_run_dir(config, run_dir)
    distributed = strategy.num_replicas_in_sync > 1 or bool(distribute)
    if distributed:
        log(f"distribute: {distribute or 'default'}, {strategy.num_replicas_in_sync} replicas"
            f" (global batch {config.batch_size}), "
            f"{'chief' if is_chief else f'worker {worker_index}'}")
    splits, refs = load_splits(config, log)
    read_as = (f"; {config.data} + {config.target_data}" if config.target_data else
               f"; columns {config.columns}" if config.columns else "")
    log(f"data: {len(splits['train'])} train, {len(splits['valid'])} valid, "
        f"{len(splits['test'])} test pairs, {config.source_name} ({config.source_lang}) -> "
        f"{config.target_name} ({config.target_lang}){read_as}")
    src_tok, tgt_tok = _tokenizers(config, splits, p, log)
    config.src_vocab_size, config.tgt_vocab_size = src_tok.vocab_size, tgt_tok.vocab_size
    runs.write_json(p["config"], dataclasses.asdict(config))

    # Batched with the global batch size; model.fit splits each batch across replicas.
    train_ds = data.make_dataset(splits["train"], src_tok, tgt_tok, config.batch_size,
                                 shuffle=True, seed=config.seed, max_len=config.max_len)
    valid_ds = data.make_dataset(splits["valid"], src_tok, tgt_tok, config.batch_size,
                                 shuffle=False, max_len=config.max_len)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        # Every worker builds the same batches and keeps its part of each (no FILE sharding).
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA)
        train_ds, valid_ds = train_ds.with_options(options), valid_ds.with_options(options)
    steps_per_epoch = int(train_ds.cardinality())  # make_dataset counted the batches
    epochs = config.epochs
    if config.time_budget:
        epochs = 10**4  # BudgetClock stops training (2.5 M steps)
        train_ds = train_ds.repeat()
        steps_per_epoch = min(steps_per_epoch, budget.EPOCH_STEPS)
    elif config.steps:
        epochs = max(1, -(-config.steps // steps_per_epoch))
        train_ds = train_ds.repeat()
        steps_per_epoch = min(steps_per_epoch, config.steps)
    compile_config = config
    if (config.jit_compile and distribute == "mirrored" and strategy.num_replicas_in_sync > 1
            and not tf.config.list_physical_devices("GPU")):
        # XLA on CPU cannot read a mirrored variable on another logical CPU device.
        log("jit_compile: off (XLA does not support MirroredStrategy over logical CPU devices)")
        compile_config = dataclasses.replace(config, jit_compile=False)
    # Kept here: the budget clock drives it (a LossScaleOptimizer's rate is not it).
    schedule = _schedule(config, steps_per_epoch)
    with strategy.scope():
        model = compile_model(build_model(config), compile_config, steps_per_epoch,
                              _adam(schedule))
    fit_model = model
    if distributed:
        # Made outside the scope, compiled in it (DistributedFitModel); the same optimizer,
        # so model.keras holds its state.
        fit_model = DistributedFitModel(model.input, model.output, name=model.name,
                                        strategy=strategy)
        with strategy.scope():
            compile_model(fit_model, compile_config, steps_per_epoch, model.optimizer)
            fit_model.optimizer.build(fit_model.trainable_variables)
    log(f"model: {config.model}, {model.count_params():,} parameters"
        + (f"; time budget {format_duration(config.time_budget)}" if config.time_budget
           else f"; {steps_per_epoch} steps x {epochs} epochs"))

    if is_chief:
        os.makedirs(os.path.dirname(p["best"]), exist_ok=True)
    # double_checkpoint: a kill mid-write falls back to the backup before.
    backup = keras.callbacks.BackupAndRestore(p["backup"], double_checkpoint=True,
                                              delete_checkpoint=False)
    logs = [keras.callbacks.TensorBoard(p["logs"]),
            keras.callbacks.CSVLogger(p["csv"], append=True)] if is_chief else []
    verbose = 1 if sys.stdout.isatty() else 2
    clock = snapshots = None
    if config.time_budget:
        estimator = budget.Estimator(
            budget.trace_probe(model), int(valid_ds.cardinality()), len(splits["test"]),
            len(splits["valid"]), config.time_budget, config.mixed_precision == "mixed_bfloat16",
            export, quantizations, log)
        clock = budget.BudgetClock.from_run_dir(
            run_dir, schedule, config.time_budget, start, reserve, log,
            replan=estimator.reserve_for if reserve is None else None)
        snapshots = budget.Snapshots(BUDGET_AVERAGE)
        # After the backup (saved with the same epoch), before the CSV row (the clock adds
        # to the logs); no best-by-validation checkpoint: the run ends at the rate's floor.
        first, verbose = [clock, snapshots], 0
    else:
        first = [BestWeightsCheckpoint(p["best"])] if is_chief else []
    callbacks = [backup, *first, *logs, keras.callbacks.TerminateOnNaN()]
    if clock is not None or not sys.stdout.isatty():
        callbacks.append(budget.ProgressLine(budget=clock, total_seconds=config.time_budget))
    t0 = time.time()
    phases = {"startup": round(time.monotonic() - start, 1)}
    fit_model.fit(train_ds, validation_data=valid_ds, epochs=epochs,
                  steps_per_epoch=(steps_per_epoch if config.steps or config.time_budget
                                   else None),
                  # budgeted: every 4th epoch from the first (its row names the columns)
                  validation_freq=list(range(1, 10**4, 4)) if config.time_budget else 1,
                  callbacks=callbacks, shuffle=False, verbose=verbose)
    train_seconds = time.time() - t0
    phases["training"] = round(train_seconds, 1)
    keras.config.set_dtype_policy(policy)  # what follows (evaluation, export) is float32
    if not is_chief:
        return {"chief": False, "worker": worker_index, "train_seconds": round(train_seconds, 1)}
    chosen, after, began = {}, None, time.monotonic()
    if config.time_budget:
        after = estimator.after_training(start + config.time_budget, clock.step_seconds)
        chosen = _keep_final_or_average(model, snapshots, valid_ds, log)
        chosen["steps"] = budget.optimizer_step(model.optimizer)
    elif os.path.exists(p["best"]):
        model.load_weights(p["best"])
    runs.atomic_save(p["model"], model.save)

    from keras_attn.translator import Translator

    # Evaluated as it ships: in float32 whatever precision it trained in.
    translator = Translator(float32_model(model, config), src_tok, tgt_tok, config.max_len,
                            normalize=config.tokenizer == "wordpiece")
    n = after.test_sentences() if after else None  # None: every test pair
    phases["weights"], began = round(time.monotonic() - began, 1), time.monotonic()
    metrics = evaluate(translator, splits["test"][:n], config.task, refs[:n] if refs else refs,
                       **({"deadline": after.evaluation_deadline(),
                           "min_sentences": budget.MIN_SENTENCES} if after else {}))
    if after:
        after.decoded(metrics["num_sentences"], metrics["decode_seconds"])
    metrics["train_seconds"] = round(train_seconds, 1)
    phases["evaluation"], began = round(time.monotonic() - began, 1), time.monotonic()
    if splits["valid"]:
        from keras_attn.training.calibration import calibrate

        valid = splits["valid"][: after.valid_sentences()] if after else splits["valid"]
        calibrator = calibrate(translator, valid, config.task, seed=config.seed, log=log)
        calibrator.save(p["calibration"])
        metrics["calibration"] = calibrator.report
    phases["calibration"] = round(time.monotonic() - began, 1)
    if config.time_budget:
        after.quantizations()
        metrics["budget"] = {**chosen, "time_budget": config.time_budget,
                             "train_until": round(clock.train_seconds, 1),
                             "evaluated_at": round(clock.elapsed(), 1),
                             "after_training": after.chosen}
    metrics["task"] = config.task
    metrics["phases"] = phases
    log("phases: " + ", ".join(f"{name} {sec:.1f} s" for name, sec in phases.items()))
    runs.write_json(p["metrics"], metrics)
    log(json.dumps({k: v for k, v in metrics.items() if k != "samples"}))
    for sample in metrics["samples"][:5]:
        log(f"  {sample['source']!r} -> {sample['output']!r} (reference {sample['target']!r})")
    return metrics


def _keep_final_or_average(model, snapshots, valid_ds, log):
    """Replace the final weights by the snapshots' average if its validation loss is lower."""
    final = model.get_weights()
    losses_ = {"final": model.evaluate(valid_ds, verbose=0, return_dict=True)["loss"]}
    if len(snapshots.weights) > 1:
        model.set_weights(snapshots.average())
        losses_["average"] = model.evaluate(valid_ds, verbose=0, return_dict=True)["loss"]
        if losses_["average"] >= losses_["final"]:
            model.set_weights(final)
    kept = min(losses_, key=losses_.get)
    log(f"weights: {kept} (validation loss " + ", ".join(
        f"{k} {v:.4f}" for k, v in losses_.items()) + f"; average of the last "
        f"{len(snapshots.weights)} snapshots)")
    return {"weights": kept, "val_loss": {k: round(float(v), 4) for k, v in losses_.items()},
            "averaged": len(snapshots.weights)}


class BestWeightsCheckpoint(keras.callbacks.Callback):
    """Keep the weights with the lowest ``monitor`` value (``path``), written atomically, with
    the best value in a JSON sidecar so a resumed run does not overwrite a better checkpoint.
    """

    def __init__(self, path, monitor="val_loss"):
        super().__init__()
        self.path, self.monitor, self.state_path = path, monitor, path + ".json"

    def _best(self):
        if os.path.exists(self.state_path) and os.path.exists(self.path):
            return runs.read_json(self.state_path)["best"]
        return float("inf")

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or not value < self._best():
            return
        runs.atomic_save(self.path, lambda tmp: self.model.save_weights(tmp, overwrite=True))
        runs.write_json(self.state_path, {"best": float(value), "epoch": epoch + 1,
                                          "monitor": self.monitor})
