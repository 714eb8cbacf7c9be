"""Name -> function registries: algorithm variants are chosen by name, and a wrong name lists the valid ones."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """A named table of functions of one kind (``kind`` is used in error messages)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._fns: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorator(fn: F) -> F:
            if name in self._fns:
                raise ValueError(f"{self.kind} {name!r} is already registered; pick another name")
            self._fns[name] = fn
            return fn
        return decorator

    def get(self, name: str) -> F:
        if name not in self._fns:
            raise ValueError(f"unknown {self.kind} {name!r}; valid names: {', '.join(self.names)}")
        return self._fns[name]

    @property
    def names(self) -> list[str]:
        return sorted(self._fns)

    def __contains__(self, name: str) -> bool:
        return name in self._fns
