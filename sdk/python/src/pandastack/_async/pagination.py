"""Cursor pagination: :class:`AsyncPaginator`, what every ``list`` of the client returns."""

from __future__ import annotations

from typing import AsyncIterator, Awaitable, Callable, Generic, List, Optional, TypeVar

from ..types import Page

T = TypeVar("T")


class AsyncPaginator(Generic[T]):
    """Iterates over every item of a cursor-paginated list, fetching pages as needed.

    ``async for x in paginator`` yields items; ``paginator.pages()`` yields :class:`~pandastack.Page`
    objects; ``await paginator.to_list()`` collects everything. Each iteration starts over from the
    first page.
    """

    def __init__(
        self, fetch: Callable[[Optional[str]], Awaitable[Page[T]]], cursor: Optional[str] = None
    ):
        self._fetch = fetch
        self._cursor = cursor

    async def pages(self) -> AsyncIterator[Page[T]]:
        cursor = self._cursor
        while True:
            page = await self._fetch(cursor)
            yield page
            if not page.next_cursor or page.next_cursor == cursor:
                return
            cursor = page.next_cursor

    async def _items(self) -> AsyncIterator[T]:
        async for page in self.pages():
            for x in page.data:
                yield x

    def __aiter__(self) -> AsyncIterator[T]:
        return self._items()

    async def first_page(self) -> Page[T]:
        return await self._fetch(self._cursor)

    async def to_list(self) -> List[T]:
        return [x async for x in self]
