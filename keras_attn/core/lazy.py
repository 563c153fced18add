"""PEP 562 lazy names: a package reads each public name from its submodule the first time
it is asked for, so importing it imports neither Keras nor TensorFlow.

Example:
    >>> __getattr__, __dir__, __all__ = attach(__name__, {"options": ("DecodingOptions",)})
"""
import importlib
import sys


def attach(package, names):
    """``(__getattr__, __dir__, __all__)`` for ``package`` (its ``__name__``), whose
    ``names`` maps each submodule to the public names it defines."""
    module_of = {name: module for module, defined in names.items() for name in defined}

    def __getattr__(name):
        """Import the submodule that defines ``name`` the first time it is read."""
        if name in module_of:
            value = getattr(importlib.import_module(f"{package}.{module_of[name]}"), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(module_of))

    return __getattr__, __dir__, sorted(module_of)
