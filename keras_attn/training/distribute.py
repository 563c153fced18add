"""Training on several devices or machines with ``tf.distribute`` (TensorFlow backend).

``keras-attn train --distribute mirrored|multiworker`` (see docs/distributed.md):
:func:`make_strategy` picks the strategy, :func:`worker_info` says which process this is,
:class:`DistributedFitModel` is the model ``fit`` trains under it and
:class:`ReplicaMeanMaskedCrossentropy` the loss scaled for it.
"""
import os

import keras
import tensorflow as tf

from keras_attn.training import losses


@keras.saving.register_keras_serializable(package="keras_attn")
class ReplicaMeanMaskedCrossentropy(losses.MaskedSparseCategoricalCrossentropy):
    """The masked loss, divided by the number of replicas under a distribution strategy.

    Keras divides a loss by ``num_replicas_in_sync`` only when it reduces a per-sample
    loss itself; a loss that already returns a scalar (like the masked mean) is left as
    is, so under ``MirroredStrategy`` the summed gradients and the reported loss (Keras
    multiplies it back) would be ``num_replicas`` times too large. Dividing here makes a
    distributed step the mean of the per-replica token means, as on one device.
    """

    def call(self, y_true, y_pred):
        loss = super().call(y_true, y_pred)
        if tf.distribute.has_strategy():
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            if replicas > 1:
                loss = loss / replicas
        return loss


def make_strategy(distribute="", cpu_devices=0):
    """The ``tf.distribute`` strategy for ``--distribute`` (call before TF touches devices).

    ``""``: the default (one device). ``"mirrored"``: ``MirroredStrategy`` over all local
    GPUs, or over the logical CPU devices when there is no GPU. ``"multiworker"``:
    ``MultiWorkerMirroredStrategy`` configured from ``TF_CONFIG``. ``cpu_devices`` > 1 splits
    the CPU into that many logical devices (for testing without GPUs).
    """
    if cpu_devices and cpu_devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        # Skip when already split (e.g. by the caller, before TensorFlow started).
        if len(tf.config.get_logical_device_configuration(cpu) or []) != cpu_devices:
            try:
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_devices)
            except RuntimeError as e:
                raise ValueError("--cpu-devices must be set before TensorFlow starts: "
                                 f"{e}") from None
    if not distribute:
        return tf.distribute.get_strategy()
    if distribute == "mirrored":
        if tf.config.list_physical_devices("GPU"):
            return tf.distribute.MirroredStrategy()
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        # NCCL needs GPUs; on CPU devices reduce through host memory.
        return tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if distribute == "multiworker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("--distribute multiworker needs TF_CONFIG (see docs/distributed.md)")
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError("`distribute` must be '', 'mirrored' or 'multiworker'. "
                     f"Received: distribute={distribute!r}")


def worker_info(strategy):
    """``(is_chief, task_index)`` of this process (``(True, 0)`` outside multi-worker)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    if resolver is None or not task_type:
        return True, 0
    task_id = resolver.task_id or 0
    if task_type == "chief":
        return True, 0
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    # Index among all workers, the chief counted first, for the non-chief temp dir.
    return (task_type == "worker" and task_id == 0 and not has_chief,
            task_id + (1 if has_chief else 0))


class DistributedFitModel(keras.Model):
    """The model ``fit`` trains under a ``tf.distribute`` strategy (same layers and weights).

    A functional model over the ``input`` and ``output`` of a model whose layers were
    built inside ``strategy.scope()``: it shares every variable, and its config equals the
    original's. Create it **outside** the scope, compile it (and build its optimizer)
    inside, and call ``fit`` outside. It works around two Keras 3.15 problems with
    ``tf.distribute`` (keras-team/keras#20329, #20585), with public API only:

    * A model created inside a scope remembers that strategy, and its ``fit``/``evaluate``
      then build it from the first batch reduced with ``strategy.reduce("MEAN", batch)``,
      which fails for a dict batch under ``MultiWorkerMirroredStrategy`` ("Attempt to
      convert a value ({'source': PerReplica...}) with an unsupported type") and for a
      bucketed batch of odd size under ``MirroredStrategy`` (parts of different shapes).
      Keras skips that build for a model created outside any scope and builds what is
      left (the compiled loss and metrics) when it traces the step, as on one device;
      this model's layers are built already, and it takes the strategy as an argument
      (its ``distribute_strategy``). ``fit`` must run outside the scope: only the chief
      saves checkpoints, and Keras creates a variable while saving, which inside a
      ``MultiWorkerMirroredStrategy`` scope is a collective op the other workers never join.
    * Under ``MultiWorkerMirroredStrategy`` Keras averages each value the step returns
      with ``strategy.reduce("MEAN", value, axis=0)``, which fails for a scalar ("Invalid
      reduction dimension 0 for input with 0 dimensions"). ``train_step``/``test_step``
      return every log as shape ``(1,)``, which that reduction turns into the scalar
      mean over replicas. Only the per-batch logs take this path: the epoch logs (what
      the callbacks and ``training_log.csv`` see) are the metrics' ``result()``, read
      outside the step, where the strategy sums each metric's state over all replicas.

    Args:
        strategy: the ``tf.distribute.Strategy`` to train with (default: the strategy of
            the current scope, as for any Keras model).

    Example:
        >>> with strategy.scope():
        ...     net = build_model(config)
        >>> fit_model = DistributedFitModel(net.input, net.output, name=net.name,
        ...                                 strategy=strategy)
        >>> with strategy.scope():
        ...     compile_model(fit_model, config, steps_per_epoch)
        ...     fit_model.optimizer.build(fit_model.trainable_variables)
        >>> fit_model.fit(train_ds, epochs=2)
    """

    def __init__(self, *args, strategy=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.strategy = strategy

    @property
    def distribute_strategy(self):
        return self.strategy or tf.distribute.get_strategy()

    def train_step(self, data):
        return self._reducible(super().train_step(data))

    def test_step(self, data):
        return self._reducible(super().test_step(data))

    def _reducible(self, logs):
        if not isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            return logs
        return tf.nest.map_structure(lambda v: keras.ops.reshape(v, (1,)), logs)
