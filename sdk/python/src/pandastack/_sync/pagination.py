# Generated from _async/pagination.py by scripts/gen-sync-client.py: do not edit by hand.
# Change _async/pagination.py, then run `python3 scripts/gen-sync-client.py` (CI runs it with --check).
"""Cursor pagination: :class:`Paginator`, what every ``list`` of the client returns."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, List, Optional, TypeVar

from ..types import Page

T = TypeVar("T")


class Paginator(Generic[T]):
    """Iterates over every item of a cursor-paginated list, fetching pages as needed.

    ``for x in paginator`` yields items; ``paginator.pages()`` yields :class:`~pandastack.Page`
    objects; ``paginator.to_list()`` collects everything. Each iteration starts over from the
    first page.
    """

    def __init__(
        self, fetch: Callable[[Optional[str]], Page[T]], cursor: Optional[str] = None
    ):
        self._fetch = fetch
        self._cursor = cursor

    def pages(self) -> Iterator[Page[T]]:
        cursor = self._cursor
        while True:
            page = self._fetch(cursor)
            yield page
            if not page.next_cursor or page.next_cursor == cursor:
                return
            cursor = page.next_cursor

    def _items(self) -> Iterator[T]:
        for page in self.pages():
            for x in page.data:
                yield x

    def __iter__(self) -> Iterator[T]:
        return self._items()

    def first_page(self) -> Page[T]:
        return self._fetch(self._cursor)

    def to_list(self) -> List[T]:
        return [x for x in self]
