/**
 * Cursor pagination over `{"data":[…],"next_cursor":…}` lists. A {@link Paginator} is an async
 * iterable of items that fetches further pages as it goes:
 *
 * ```ts
 * for await (const sb of client.sandboxes.list({ state: "running" })) console.log(sb.id);
 * const all = await client.snapshots.list().toArray();
 * for await (const page of client.sandboxes.list({ limit: 10 }).pages()) …
 * ```
 */

/** One page of a list. */
export interface Page<T> {
  data: T[];
  /** Pass as `cursor` to get the next page; `null` on the last page. */
  nextCursor: string | null;
}

/** Fetches the page after `cursor` (undefined for the first). */
export type PageFetcher<T> = (cursor: string | undefined) => Promise<Page<T>>;

export class Paginator<T> implements AsyncIterable<T> {
  constructor(private readonly fetchPage: PageFetcher<T>, private readonly startCursor?: string) {}

  /** Iterates page by page. */
  async *pages(): AsyncGenerator<Page<T>> {
    let cursor = this.startCursor;
    const seen = new Set<string>();
    for (;;) {
      const page = await this.fetchPage(cursor);
      yield page;
      if (!page.nextCursor || seen.has(page.nextCursor)) return;
      seen.add(page.nextCursor);
      cursor = page.nextCursor;
    }
  }

  /** The first page only. */
  firstPage(): Promise<Page<T>> {
    return this.fetchPage(this.startCursor);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for await (const page of this.pages()) yield* page.data;
  }

  /** Every item of every page (stopping after `max` items if given). */
  async toArray(max = Infinity): Promise<T[]> {
    const out: T[] = [];
    if (max <= 0) return out;
    for await (const item of this) {
      out.push(item);
      if (out.length >= max) break;
    }
    return out;
  }
}
