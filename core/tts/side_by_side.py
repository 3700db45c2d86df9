"""Sentences side by side: the first on every thread (the first audio soonest), the rest one a
thread, yielded in order. A sentence's own work splits over threads poorly (short serial
stretches, barriers), whole sentences do not."""
from collections import deque


def side_by_side(items, first, one, pool, n_threads):
    """first(items[0]) on the calling thread, then one(item) for each later item on `pool`
    (n_threads workers), 2 n_threads in flight so a thread done before the oldest one never
    waits for the caller to take it; results in order. pool None: all in turn on the caller."""
    items = iter(items)
    for item in items:
        head = first(item)
        break
    else:
        return
    if pool is None:
        yield head
        for item in items:
            yield one(item)
        return
    pending = deque()
    try:
        for item in items:
            pending.append(pool.submit(one, item))
            if len(pending) >= 2 * n_threads:
                yield head
                head = pending.popleft().result()
        yield head
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
