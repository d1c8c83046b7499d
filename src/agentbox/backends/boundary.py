"""Where a backend's driver errors stop: every public method of a store translates them.

Nothing above the store catches a driver's exception: each backend wraps its
store class with :func:`translating`, naming its driver's error type and the
function that turns one into the agentbox error a user can act on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

C = TypeVar("C", bound=type)
Translate = Callable[[Any, str], Exception]


def translating(error: type[Exception], translate: Translate) -> Callable[[C], C]:
    """A class decorator: ``error`` escaping a public method leaves it translated.

    ``translate`` gets the error and the store's ``location``.
    """

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except error as exc:
                raise translate(exc, self.location) from None

        return call

    def decorate(cls: C) -> C:
        for name, method in list(vars(cls).items()):
            if not name.startswith("_") and callable(method):
                setattr(cls, name, wrap(method))
        return cls

    return decorate
