"""Renaming a config dataclass's fields without breaking the code and checkpoints that use the old names.

The course's configs share one vocabulary (the README's notation: ``embed_dim`` E, ``num_heads`` h, ``ff_dim`` F,
``num_layers`` n_layers, ...). A config that once had other names keeps them as aliases: the decorator
:func:`accepting_old_names` lets ``__init__`` take the old keywords and lets instances answer to the old
attributes, each with a ``DeprecationWarning``; :func:`renamed_fields` does the same for a plain dict (a
checkpoint's saved config). The old names are never fields, so ``asdict``, equality and ``repr`` speak only the
new vocabulary.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["accepting_old_names", "renamed_fields"]

C = TypeVar("C")  # the decorated class, returned as itself


def renamed_fields(owner: str, renames: Mapping[str, str], values: Mapping[str, Any], stacklevel: int = 3) -> dict:
    """``values`` with each old name (a key of ``renames``) replaced by its new one, warning once per old name.

    ``owner`` names the config in the messages; ``stacklevel`` 3 points the warning at the caller of the function
    that called this one (the line that wrote the old name). Raises TypeError when a field is given under both
    names: which one was meant cannot be known.
    """
    renamed = dict(values)
    for old, new in renames.items():
        if old not in renamed:
            continue
        if new in renamed:
            raise TypeError(f"{owner} got both {new!r} and its old name {old!r}; give only {new!r}")
        warnings.warn(
            f"{owner} field {old!r} is now {new!r}; the old name will stop working in a later version",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        renamed[new] = renamed.pop(old)
    return renamed


def accepting_old_names(renames: Mapping[str, str]) -> Callable[[type[C]], type[C]]:
    """Class decorator (put it above ``@dataclass``): old keywords and attributes map to the new fields, warning.

    ``renames`` maps each old name to its new field name; the class keeps it as ``RENAMED_FIELDS``.
    """
    renames = dict(renames)

    def decorate(cls: type[C]) -> type[C]:
        unknown = sorted(set(renames.values()) - set(getattr(cls, "__dataclass_fields__", {})))
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields {unknown} to rename to")
        # The class is changed in place (a new __init__, a new attribute), which its static type cannot describe.
        patched: Any = cls
        init = patched.__init__

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **renamed_fields(cls.__name__, renames, kwargs))

        patched.__init__ = __init__
        patched.RENAMED_FIELDS = renames
        for old, new in renames.items():
            getter = functools.partial(_old_attribute, owner=cls.__name__, old=old, new=new)
            setattr(cls, old, property(getter, doc=f"Deprecated: {new}."))
        return cls

    return decorate


def _old_attribute(self: Any, owner: str, old: str, new: str) -> Any:
    warnings.warn(f"{owner}.{old} is now .{new}", DeprecationWarning, stacklevel=2)
    return getattr(self, new)
