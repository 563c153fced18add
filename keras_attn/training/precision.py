"""The compute precision of a run: ``--mixed-precision auto`` picks it for the machine.

bfloat16 matrix products are faster than float32 ones only where the CPU computes them
natively (AVX512_BF16 or AMX-BF16) and oneDNN, which TensorFlow hands them to, may use those
instructions; elsewhere TensorFlow emulates them and float32 is the faster choice.
"""
import os

AUTO = "auto"
# The CPU flags (Linux's /proc/cpuinfo names) of native bfloat16 dot products.
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# oneDNN's ISA caps (ONEDNN_MAX_CPU_ISA) that still allow them.
BF16_ISAS = ("ALL", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
             "AVX512_CORE_AMX_FP16", "AVX10_1_512", "AVX10_1_512_AMX",
             "AVX10_1_512_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2")


def cpu_flags(path="/proc/cpuinfo"):
    """The first processor's feature flags (an empty set where ``path`` is not readable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def resolve(name, flags=None, environ=None, has_gpu=None, backend=None):
    """``(policy, reason)``: ``name`` itself unless it is ``"auto"``, which gives
    ``"mixed_bfloat16"`` on a CPU-only machine whose CPU has native bfloat16 dot products and
    whose oneDNN may use them, and ``""`` (float32) everywhere else: GPUs and the JAX and
    PyTorch backends included (name a policy there to use one).

    Args:
        name: ``""`` (float32), ``"mixed_float16"``, ``"mixed_bfloat16"`` or ``"auto"``.
        flags, environ, has_gpu, backend: the CPU's flags, the environment, whether
            TensorFlow sees a GPU, the Keras backend (default: this machine's).

    Example:
        >>> resolve("auto", flags={"avx2", "amx_bf16"}, environ={}, has_gpu=False,
        ...         backend="tensorflow")
        ('mixed_bfloat16', 'auto: the CPU has amx_bf16')
    """
    if name != AUTO:
        return name, "as given"
    environ = os.environ if environ is None else environ
    if backend is None:
        import keras

        backend = keras.backend.backend()
    if backend != "tensorflow":
        return "", f"auto: float32 on the {backend} backend (oneDNN's bfloat16 is TensorFlow's)"
    if has_gpu is None:
        import tensorflow as tf

        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if has_gpu:
        return "", "auto: float32 on a GPU (name a mixed policy to use one)"
    found = sorted(set(BF16_FLAGS) & (cpu_flags() if flags is None else set(flags)))
    if not found:
        return "", "auto: the CPU has no native bfloat16 (amx_bf16, avx512_bf16)"
    if environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip() in ("0", "false", "False"):
        return "", "auto: TF_ENABLE_ONEDNN_OPTS=0 turns oneDNN off"
    isa = environ.get("ONEDNN_MAX_CPU_ISA", "ALL").strip().upper() or "ALL"
    if isa not in BF16_ISAS:
        return "", f"auto: ONEDNN_MAX_CPU_ISA={isa} leaves oneDNN no bfloat16 instructions"
    return "mixed_bfloat16", f"auto: the CPU has {', '.join(found)}"
