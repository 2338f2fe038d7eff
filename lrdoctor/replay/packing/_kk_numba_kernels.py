"""The numba kernels of :mod:`.kk_numba`.

Top-level functions, so ``cache=True`` keeps the compiled code on disk between
processes (closures are compiled again in every process). Without numba the same
functions run as plain Python (slowly): the replay never calls them then
(``kk_numba.available``), but the tests check the algorithm against the scalar code
on every machine, numba or not.
"""

from typing import Any

import numpy as np


def _as_python(*args: Any, **kwargs: Any) -> Any:
    if args and callable(args[0]):
        return args[0]
    return lambda f: f


try:
    from numba import njit
except ImportError:
    njit = _as_python

_NO_CAP = np.iinfo(np.int64).max


@njit(cache=True, inline="always")
def less(h, a, b):
    for c in range(4):
        if h[a, c] != h[b, c]:
            return h[a, c] < h[b, c]
    return False


@njit(cache=True)
def push(h, pay, size, k0, k1, k2, k3, p):
    i = size
    h[i, 0] = k0
    h[i, 1] = k1
    h[i, 2] = k2
    h[i, 3] = k3
    pay[i] = p
    while i > 0:
        par = (i - 1) >> 1
        if less(h, i, par):
            for c in range(4):
                h[i, c], h[par, c] = h[par, c], h[i, c]
            pay[i], pay[par] = pay[par], pay[i]
            i = par
        else:
            break
    return size + 1


@njit(cache=True)
def pop(h, pay, size):
    top = pay[0]
    size -= 1
    for c in range(4):
        h[0, c] = h[size, c]
    pay[0] = pay[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        m = left
        if left + 1 < size and less(h, left + 1, left):
            m = left + 1
        if less(h, m, i):
            for c in range(4):
                h[i, c], h[m, c] = h[m, c], h[i, c]
            pay[i], pay[m] = pay[m], pay[i]
            i = m
        else:
            break
    return top, size


@njit(cache=True, inline="always")
def set_less(s, t, ssum, scnt):
    if ssum[s] != ssum[t]:
        return ssum[s] < ssum[t]
    if scnt[s] != scnt[t]:
        return scnt[s] < scnt[t]
    return s < t


@njit(cache=True)
def insort(rows, rlen, r, x, ssum, scnt):
    n = rlen[r]
    lo, hi = 0, n
    while lo < hi:  # bisect.insort_right: after equal keys (none are equal)
        mid = (lo + hi) >> 1
        if set_less(x, rows[r, mid], ssum, scnt):
            hi = mid
        else:
            lo = mid + 1
    for j in range(n, lo, -1):
        rows[r, j] = rows[r, j - 1]
    rows[r, lo] = x
    rlen[r] = n + 1


@njit(cache=True)
def replace_lightest(rows, rlen, r, x, ssum, scnt):
    """A full row's lightest set leaves and ``x`` (it grown, or the set that absorbed
    it) goes where ``insort`` would put it among the others: a binary search, then the
    sets it passes move down one place."""
    n = rlen[r]
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if set_less(x, rows[r, mid], ssum, scnt):
            hi = mid
        else:
            lo = mid + 1
    for j in range(1, lo):
        rows[r, j - 1] = rows[r, j]
    rows[r, lo - 1] = x


@njit(cache=True)
def sort_row(rows, rlen, r, ssum, scnt, tmp):
    """Bottom-up merge sort of one row by (sum, count, first): a merge of two states
    leaves its row in pieces (a's untouched heaviest sets, the grown ones, b's
    appended), O(k log k) where insertion would be O(k^2)."""
    n = rlen[r]
    width = 1
    src_is_row = True
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if src_is_row:
                    a, b = rows[r, i], rows[r, j]
                else:
                    a, b = tmp[i], tmp[j]
                if set_less(b, a, ssum, scnt):
                    if src_is_row:
                        tmp[o] = b
                    else:
                        rows[r, o] = b
                    j += 1
                else:
                    if src_is_row:
                        tmp[o] = a
                    else:
                        rows[r, o] = a
                    i += 1
                o += 1
            while i < mid:
                if src_is_row:
                    tmp[o] = rows[r, i]
                else:
                    rows[r, o] = tmp[i]
                i += 1
                o += 1
            while j < hi:
                if src_is_row:
                    tmp[o] = rows[r, j]
                else:
                    rows[r, o] = tmp[j]
                j += 1
                o += 1
        src_is_row = not src_is_row
        width *= 2
    if not src_is_row:
        for i in range(n):
            rows[r, i] = tmp[i]


@njit(cache=True)
def state_key(h, pay, size, rows, rlen, r, k, ssum, scnt):
    n = rlen[r]
    top = rows[r, n - 1]
    low = ssum[rows[r, 0]] if n == k else 0
    return push(h, pay, size, low - ssum[top], -ssum[top], -scnt[top], -top, r)


@njit(cache=True)
def take(h, pay, size, order, sptr, vals):
    """The entry with the smallest key: the heap's top (the states) or the next
    singleton. A singleton's key ``(-v, -v, -1, -i)`` falls as ``order`` (ascending by
    value, then item) is read backwards, so the singletons need no heap: the scalar
    code's pop sequence, with heap work only for the few states."""
    if sptr >= 0:
        i = order[sptr]
        if size == 0:
            return -(i + 1), size, sptr - 1
        v = vals[i]
        if -v != h[0, 0]:
            single_first = -v < h[0, 0]
        elif -v != h[0, 1]:
            single_first = -v < h[0, 1]
        elif h[0, 2] != -1:
            single_first = -1 < h[0, 2]
        else:
            single_first = -i < h[0, 3]
        if single_first:
            return -(i + 1), size, sptr - 1
    top, size = pop(h, pay, size)
    return top, size, sptr


@njit(cache=True)
def one(vals, toks, k, eq, lim, out, ssum, scnt, stok, parent, rows, rlen, h, pay, pos):
    """0: ``out`` holds each item's set position (0 = heaviest); 1: a set passed
    ``lim`` (the scalar code's None); 2: an empty partition (its ValueError)."""
    n = len(vals)
    if k == 1:
        if toks.sum() > lim:
            return 1
        out[:] = 0
        return 0
    order = np.argsort(vals, kind="mergesort")  # sorted(zip(vals, range(n)))
    for i in range(n):
        ssum[i] = vals[i]
        scnt[i] = 1
        stok[i] = toks[i]
        parent[i] = i
    used = 0
    size = 0
    sptr = -1
    if not eq:
        for j in range(n - k, n):
            if toks[order[j]] > lim:
                return 1
        if n == k:
            for j in range(k):
                out[order[k - 1 - j]] = j
            return 0
        for j in range(k):
            rows[0, j] = order[n - k + j]
        rlen[0] = k
        used = 1
        top = order[n - 1]
        size = push(h, pay, size, vals[order[n - k]] - vals[top], -vals[top], -1, -top, 0)
        sptr = n - k - 1  # the singletons stay in ``order``: the next is the heaviest
    else:
        for off in range(0, n, k):
            for j in range(k):
                i = order[off + j]
                if toks[i] > lim:
                    return 1
                rows[used, j] = i
            rlen[used] = k
            top = order[off + k - 1]
            size = push(h, pay, size, vals[order[off]] - vals[top], -vals[top], -1, -top,
                        used)
            used += 1
    while size + sptr + 1 > 1:
        ea, size, sptr = take(h, pay, size, order, sptr, vals)
        eb, size, sptr = take(h, pay, size, order, sptr, vals)
        if ea < 0:
            ia = -ea - 1
            if eb < 0:  # two singletons: a's item sorts first
                ib = -eb - 1
                if toks[ia] > lim or toks[ib] > lim:
                    return 1
                r = used
                used += 1
                rows[r, 0] = ib
                rows[r, 1] = ia
                rlen[r] = 2
                k0 = -vals[ia] if k > 2 else vals[ib] - vals[ia]
                size = push(h, pay, size, k0, -vals[ia], -1, -ia, r)
                continue
            r = eb  # a's item meets b's lightest set (empty while b has fewer than k)
            t = toks[ia]
            if rlen[r] == k:
                y = rows[r, 0]
                t += stok[y]
                ssum[ia] = vals[ia] + ssum[y]
                scnt[ia] = 1 + scnt[y]
                stok[ia] = t
                parent[y] = ia
                replace_lightest(rows, rlen, r, ia, ssum, scnt)
            else:
                insort(rows, rlen, r, ia, ssum, scnt)
            if t > lim:
                return 1
        else:
            r = ea
            if eb < 0:  # b's item meets a's lightest set
                ib = -eb - 1
                if rlen[r] == k:
                    x = rows[r, 0]
                    ssum[x] += vals[ib]
                    scnt[x] += 1
                    stok[x] += toks[ib]
                    parent[ib] = x
                    if stok[x] > lim:
                        return 1
                    replace_lightest(rows, rlen, r, x, ssum, scnt)
                else:
                    if toks[ib] > lim:
                        return 1
                    insort(rows, rlen, r, ib, ssum, scnt)
            else:
                rb = eb
                p = rlen[r]
                q = rlen[rb]
                lo = k - q  # a's i-th heaviest set meets b's (k-1-i)-th from here on
                if lo < p:
                    for i in range(lo, p):
                        x = rows[r, p - 1 - i]
                        y = rows[rb, q - k + i]
                        ssum[x] += ssum[y]
                        scnt[x] += scnt[y]
                        stok[x] += stok[y]
                        parent[y] = x
                        if stok[x] > lim:
                            return 1
                    m = p
                    for j in range(q - k + p, q):  # b's sets that meet a's empty ones
                        rows[r, m] = rows[rb, j]
                        m += 1
                    rlen[r] = m
                else:
                    for j in range(q):
                        rows[r, p + j] = rows[rb, j]
                    rlen[r] = p + q
                sort_row(rows, rlen, r, ssum, scnt, pos)
        size = state_key(h, pay, size, rows, rlen, r, k, ssum, scnt)
    r = pay[0]
    if r < 0 or rlen[r] < k or scnt[rows[r, 0]] == 0:
        return 2
    for j in range(k):
        pos[rows[r, j]] = k - 1 - j
    for i in range(n):
        s = i
        while parent[s] != s:
            s = parent[s]
        out[i] = pos[s]
    return 0


@njit(cache=True)
def group(vals, toks, starts, idx, k, eq, caps, out, status):
    """Every instance of one group (one size n, one k): the buffers are shared."""
    n = starts[idx[0] + 1] - starts[idx[0]]
    ssum = np.empty(n, dtype=np.int64)
    scnt = np.empty(n, dtype=np.int64)
    stok = np.empty(n, dtype=np.int64)
    parent = np.empty(n, dtype=np.int64)
    # States: the equal-size start (n / k), or the opening one plus one per merge of
    # two singletons (each takes two of the n - k)
    n_rows = max(n // k, (n - k) // 2 + 1) + 1
    rows = np.empty((n_rows, k), dtype=np.int64)
    rlen = np.zeros(n_rows, dtype=np.int64)
    h = np.empty((n + 1, 4), dtype=np.int64)
    pay = np.empty(n + 1, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    for m in range(len(idx)):
        i = idx[m]
        a = starts[i]
        b = starts[i + 1]
        lim = caps[i] if caps[i] >= 0 else _NO_CAP
        status[m] = one(vals[a:b], toks[a:b], k, eq, lim, out[a:b], ssum, scnt, stok, parent,
                        rows, rlen, h, pay, pos)
