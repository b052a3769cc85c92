"""Prints the public names of the installed official Python SDK, one per line.

Read by tests/integration/parity.rs, which checks that docs/python-parity.md maps or explains each
one. A name is an entry of `rebuno.__all__` (a function, class or error), a public method,
property or attribute of an exported class or of the handler's `ExecutionContext`, or a record of
`rebuno.types`. Pydantic's and Python's own machinery (`model_dump`, `args`, ...) is left out.
"""

import inspect
import re

import rebuno
import rebuno.types as types
from pydantic import BaseModel
from rebuno.execution import ExecutionContext

MACHINERY = set(dir(BaseModel)) | set(dir(Exception)) | set(dir(object))


def attributes(cls):
    """Public attributes an instance gets in `__init__` (`self.name = ...`)."""
    try:
        source = inspect.getsource(cls.__init__)
    except (OSError, TypeError):
        return []
    return re.findall(r"self\.([a-z][a-z0-9_]*)\s*[:=]", source)


def members(cls):
    names = {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}
    names |= set(attributes(cls))
    names -= MACHINERY
    if issubclass(cls, BaseModel):
        names -= set(cls.model_fields)  # data fields: mapped with their record
    return sorted(names)


def public_names():
    names = []
    for name in rebuno.__all__:
        value = getattr(rebuno, name)
        if inspect.ismodule(value):
            continue
        names.append(name)
        if inspect.isclass(value) and not issubclass(value, BaseException):
            names += [f"{name}.{member}" for member in members(value)]
    names += [f"ExecutionContext.{member}" for member in members(ExecutionContext)]
    for name, value in sorted(vars(types).items()):
        if inspect.isclass(value) and value.__module__ == types.__name__:
            names.append(f"types.{name}")
    return names


if __name__ == "__main__":
    print("\n".join(public_names()))
