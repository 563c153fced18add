"""Renamed keyword arguments: the old name keeps working for a while, with a warning."""
import functools
import inspect
import warnings


def renamed(**old_to_new):
    """Decorate a function one of whose keyword arguments has a new name (``old="new"``).

    A call with ``old=`` warns (``DeprecationWarning`` naming the new name) and passes the
    value on as ``new``; ``old`` and ``new`` together with different values raise
    ``TypeError``. Calls by position or by the new name cost nothing more.

    Example:
        >>> @renamed(alpha="length_penalty")
        ... def rank(scores, length_penalty=0.6):
        ...     return length_penalty
        >>> rank([], alpha=1.0)  # DeprecationWarning: `alpha` is now `length_penalty`
        1.0
    """
    def decorate(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for old, new in old_to_new.items():
                if old not in kwargs:
                    continue
                value = kwargs.pop(old)
                warnings.warn(f"`{old}` is deprecated: it is now `{new}` (the same value). "
                              f"Received: {old}={value!r}", DeprecationWarning, stacklevel=2)
                given = signature.bind_partial(*args, **kwargs).arguments
                if new not in given:
                    kwargs[new] = value
                elif given[new] is not value and given[new] != value:
                    raise TypeError(f"`{old}` is the deprecated name of `{new}`: give one. "
                                    f"Received: {old}={value!r}, {new}={given[new]!r}")
            return fn(*args, **kwargs)
        return wrapper
    return decorate
