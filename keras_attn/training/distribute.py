"""Training on several devices or machines with ``tf.distribute`` (``keras-attn train
--distribute mirrored|multiworker``, docs/distributed.md).
"""
import os

import keras
import tensorflow as tf

from keras_attn.training import losses


@keras.saving.register_keras_serializable(package="keras_attn")
class ReplicaMeanMaskedCrossentropy(losses.MaskedSparseCategoricalCrossentropy):
    """The masked loss divided by the number of replicas: Keras scales only the losses it
    reduces itself, so without this a distributed step's gradients would be too large.
    """

    def call(self, y_true, y_pred):
        loss = super().call(y_true, y_pred)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync  # 1 outside a strategy
        return loss / replicas if replicas > 1 else loss


def make_strategy(distribute="", cpu_devices=0):
    """The ``tf.distribute`` strategy for ``distribute`` (call before TF touches devices).

    ``""``: the default; ``"mirrored"``: all local GPUs, or the logical CPU devices;
    ``"multiworker"``: from ``TF_CONFIG``. ``cpu_devices`` > 1 splits the CPU into that many
    logical devices (tests without GPUs).
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
    if not task_type or task_type == "chief":
        return True, 0
    task_id = resolver.task_id or 0
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    # Index among all workers, the chief counted first, for the non-chief temp dir.
    return (task_type == "worker" and task_id == 0 and not has_chief,
            task_id + (1 if has_chief else 0))


class DistributedFitModel(keras.Model):
    """The model ``fit`` trains under a ``tf.distribute`` strategy (same layers and weights).

    A functional model over the ``input`` and ``output`` of a model built inside
    ``strategy.scope()``. Create it outside the scope, compile it (and build its optimizer)
    inside, and call ``fit`` outside. It works around keras-team/keras#20329 and #20585: a
    model made outside any scope skips the first-batch build that fails for dict or odd-sized
    batches, and under ``MultiWorkerMirroredStrategy`` every step log is returned as shape
    ``(1,)``, which Keras's reduction can average.

    Args:
        strategy: the ``tf.distribute.Strategy`` (default: the current scope's).
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
